"""The DFlash checkpoint contract: field-by-field config checks, tensor names and shapes, target layers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from specq.pipeline.checkpoint import Checkpoint
from specq.pipeline.draft import contract
from specq.pipeline.errors import ConfigError, InputError


def _config(**over: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "hidden_size": 64,
        "num_hidden_layers": 1,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "intermediate_size": 128,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "max_position_embeddings": 512,
        "vocab_size": 300,
        "layer_types": ["full_attention"],
        "use_sliding_window": False,
        "num_target_layers": 4,
        "target_hidden_size": 64,
        "dflash_config": {"block_size": 8, "mask_token_id": 299, "target_layer_ids": [2]},
    }
    cfg.update(over)
    return cfg


def _write(tmp: Path, cfg: dict[str, Any], drop: str | None = None, extra: str | None = None) -> Checkpoint:
    from safetensors.numpy import save_file

    tensors = {n: np.zeros(s, dtype=np.float16) for n, s in contract.expected_tensors(cfg).items()}
    if drop:
        tensors.pop(drop)
    if extra:
        tensors[extra] = np.zeros([4], dtype=np.float16)
    tmp.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(tmp / "model.safetensors"))
    (tmp / "config.json").write_text(json.dumps(cfg))
    return Checkpoint(tmp)


def _target(tmp: Path, layers: int = 4, hidden: int = 64) -> Checkpoint:
    tmp.mkdir(parents=True, exist_ok=True)
    cfg = {"architectures": ["Qwen3ForCausalLM"], "num_hidden_layers": layers, "hidden_size": hidden,
           "vocab_size": 300}  # fmt: skip
    (tmp / "config.json").write_text(json.dumps(cfg))
    return Checkpoint(tmp)


def test_expected_tensors_are_the_lmdeploy_names(tmp_path: Path) -> None:
    names = contract.expected_tensors(_config(num_hidden_layers=2, layer_types=["full_attention"] * 2))
    assert names["fc.weight"] == [64, 64]
    assert names["layers.1.self_attn.k_proj.weight"] == [32, 64]
    assert names["layers.0.self_attn.q_norm.weight"] == [16]
    assert len(names) == 2 * len(contract.LAYER_TENSORS) + 3
    assert not any("embed" in n or "lm_head" in n for n in names)


def test_a_conforming_checkpoint_passes(tmp_path: Path) -> None:
    draft = _write(tmp_path / "d", _config())
    assert draft.draft_kind == "dflash"
    assert contract.check_drafter(draft, _target(tmp_path / "t")) == []


@pytest.mark.parametrize(
    ("over", "needle"),
    [
        ({"architectures": ["Qwen3ForCausalLM"]}, "architectures"),
        ({"layer_types": ["sliding_attention"]}, "layer_types"),
        ({"use_sliding_window": True}, "use_sliding_window"),
        ({"rope_theta": -1}, "rope_theta"),
        (
            {"dflash_config": {"block_size": 8, "mask_token_id": 300, "target_layer_ids": [2]}},
            "mask_token_id",
        ),
        ({"dflash_config": {"block_size": 8, "mask_token_id": 1, "target_layer_ids": [2, 1]}}, "increasing"),
        ({"dflash_config": {"block_size": 8, "mask_token_id": 1, "target_layer_ids": [3]}}, "last layer"),
        ({"dflash_config": {"block_size": 8, "mask_token_id": 1}}, "target_layer_ids"),
    ],
)
def test_field_problems_are_named(over: dict[str, Any], needle: str) -> None:
    problems = contract.config_problems(_config(**over))
    assert problems and needle in problems[0]


def test_missing_field_is_named() -> None:
    cfg = _config()
    del cfg["num_target_layers"]
    assert "num_target_layers" in contract.config_problems(cfg)[0]


def test_target_mismatch(tmp_path: Path) -> None:
    draft = _write(tmp_path / "d", _config())
    problems = contract.check_drafter(draft, _target(tmp_path / "t", layers=6))
    assert any("num_target_layers" in p for p in problems)


def test_unknown_and_missing_tensors(tmp_path: Path) -> None:
    assert (
        "unexpected"
        in contract.check_drafter(_write(tmp_path / "a", _config(), extra="embed_tokens.weight"))[0]
    )
    assert "missing" in contract.check_drafter(_write(tmp_path / "b", _config(), drop="norm.weight"))[0]


def test_draft_tokens_must_fit_the_block(tmp_path: Path) -> None:
    draft = _write(tmp_path / "d", _config())
    assert contract.check_drafter(draft, draft_tokens=7) == []
    assert "block_size" in contract.check_drafter(draft, draft_tokens=8)[0]
    with pytest.raises(InputError, match="block_size"):
        contract.validate_drafter(draft, draft_tokens=8)


def test_default_layers_follow_lmdeploy() -> None:
    assert contract.default_target_layer_ids(4, 1) == [2]
    assert contract.default_target_layer_ids(2, 1) == [0]  # L // 2 would be the last layer
    assert contract.default_target_layer_ids(36, 1) == [18]
    assert contract.default_target_layer_ids(36, 5) == [1, 9, 17, 25, 33]


def test_the_last_target_layer_is_refused() -> None:
    with pytest.raises(ConfigError, match="last layer"):
        contract.validate_target_layer_ids([3], 4)
    with pytest.raises(ConfigError, match="out of range"):
        contract.validate_target_layer_ids([4], 4)


def test_lmdeploy_parser_when_importable() -> None:
    pytest.importorskip("lmdeploy")
    assert contract.lmdeploy_parse(_config(), 7, 4) == ((2,), 299)
    with pytest.raises(InputError, match="parse_dflash_config"):
        contract.lmdeploy_parse(_config(), 8, 4)
