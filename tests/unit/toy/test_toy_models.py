"""Toy presets suit 4-bit kernels; the cache key depends on size, seed, corpus and format version only."""

from __future__ import annotations

import pytest

from specq.pipeline.errors import UsageError
from specq.pipeline.toy import SIZES, ToyRequest, build_toy_pair, cache_key, cache_root
from specq.pipeline.toy.models import ModelSpec


@pytest.mark.parametrize("size", sorted(SIZES))
def test_presets_suit_4bit_kernels(size: str) -> None:
    preset = SIZES[size]
    assert preset.target.check(preset.vocab_size) == []
    assert preset.draft.check(preset.vocab_size) == []
    assert preset.draft.hidden_size * preset.draft.num_hidden_layers < (
        preset.target.hidden_size * preset.target.num_hidden_layers
    )


def test_check_names_bad_shapes() -> None:
    bad = ModelSpec(hidden_size=96, num_hidden_layers=1, num_attention_heads=3, num_key_value_heads=1,
                    intermediate_size=200, head_dim=32)  # fmt: skip
    problems = " ".join(bad.check(1000))
    for needle in ("q_proj input 96", "down_proj input 200", "head_dim 32", "vocab_size 1000"):
        assert needle in problems
    # one 64-wide KV head: fine for TurboMind (multiple of 32), refused by LMDeploy's fused AWQ q/k/v
    narrow = ModelSpec(hidden_size=128, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                       intermediate_size=256)  # fmt: skip
    assert narrow.check(2048) == [
        "k_proj output 64 is not a multiple of 128 (LMDeploy fused AWQ)",
        "v_proj output 64 is not a multiple of 128 (LMDeploy fused AWQ)",
    ]


def test_cache_key() -> None:
    key = cache_key("small", 0, "abc")
    assert key == cache_key("small", 0, "abc") and key.startswith("small-s0-")
    assert (
        len({key, cache_key("small", 1, "abc"), cache_key("small", 0, "abd"), cache_key("medium", 0, "abc")})
        == 4
    )


def test_cache_root(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("SPECQ_CACHE", str(tmp_path))
    assert cache_root() == tmp_path / "toy"
    assert cache_root(tmp_path / "x") == tmp_path / "x" / "toy"


def test_unknown_size_is_a_usage_error(tmp_path) -> None:
    with pytest.raises(UsageError, match="unknown toy size 'huge'"):
        build_toy_pair(ToyRequest(size="huge", cache_dir=str(tmp_path)))
