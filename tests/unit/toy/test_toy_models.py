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


def test_the_demo_target_is_deep_next_to_its_draft() -> None:
    """The demo pair's point (docs/toy.md): a draft step costs a fraction of a target step. At toy widths a
    forward's cost on a CPU goes with its layer count, so the target has 8 layers to the draft's 1."""
    demo = SIZES["demo"]
    assert demo.target.num_hidden_layers == 8 and demo.draft.num_hidden_layers == 1
    assert demo.growth is not None and demo.target.num_hidden_layers % demo.growth.layers == 0
    assert not demo.gpu and SIZES["medium"].gpu and not SIZES["small"].gpu


@pytest.mark.parametrize("layers", [4, 6])
def test_grow_depth_keeps_the_function_and_zeroes_only_the_copies_branches(layers: int) -> None:
    torch = pytest.importorskip("torch")
    from transformers import Qwen3ForCausalLM

    from specq.pipeline.toy.models import grow_depth, qwen3_config

    def qwen3(depth: int) -> Qwen3ForCausalLM:
        spec = ModelSpec(hidden_size=128, num_hidden_layers=depth, num_attention_heads=2,
                         num_key_value_heads=2, intermediate_size=128)  # fmt: skip
        return Qwen3ForCausalLM(qwen3_config(spec, 256, eos_token_id=0, pad_token_id=0)).eval()

    torch.manual_seed(0)
    shallow = qwen3(2)
    for p in shallow.parameters():  # nonzero everywhere, so a copy that added anything would show
        p.data.normal_(0, 0.2)
    deep = grow_depth(shallow, qwen3(layers))
    ids = torch.randint(0, 256, (2, 17))
    with torch.no_grad():
        assert torch.allclose(shallow(input_ids=ids).logits, deep(input_ids=ids).logits, atol=1e-5)
    per = layers // 2
    first_copy = deep.model.layers[1]  # a copy of shallow layer 0: its inputs' weights, zeroed outputs
    assert torch.equal(first_copy.self_attn.q_proj.weight, shallow.model.layers[0].self_attn.q_proj.weight)
    assert not first_copy.self_attn.o_proj.weight.any() and not first_copy.mlp.down_proj.weight.any()
    second = deep.model.layers[per]  # shallow layer 1 itself, whole
    assert torch.equal(second.mlp.down_proj.weight, shallow.model.layers[1].mlp.down_proj.weight)
    with pytest.raises(ValueError, match="not a multiple"):
        grow_depth(shallow, qwen3(3))
