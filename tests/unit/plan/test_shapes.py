"""Config → memory shape: layer kinds of hybrid models, KV per token, recurrent state, and the analytic
weight estimate agreeing byte for byte with real checkpoints."""

from __future__ import annotations

from pathlib import Path

import pytest

from specq.pipeline.checkpoint import Checkpoint
from specq.pipeline.errors import InputError
from specq.pipeline.plan.planner import _analyse
from specq.pipeline.plan.shapes import FULL, LINEAR, shape_from_config

from .conftest import config_only_copy, write_quantized
from .reference import QWEN35_27B_DFLASH, QWEN35_27B_TEXT, write_reference


def test_layer_kinds_from_layer_types_and_interval() -> None:
    s = shape_from_config(QWEN35_27B_TEXT)
    assert (s.full_layers, s.linear_layers) == (16, 48)
    assert s.layer_kinds[:4] == [LINEAR, LINEAR, LINEAR, FULL]
    no_types = {k: v for k, v in QWEN35_27B_TEXT.items() if k != "layer_types"}
    assert shape_from_config(no_types).layer_kinds == s.layer_kinds  # full_attention_interval = 4
    plain = shape_from_config({"hidden_size": 64, "num_hidden_layers": 3, "num_attention_heads": 4})
    assert plain.layer_kinds == [FULL] * 3 and plain.head_dim == 16 and plain.num_kv_heads == 4


def test_layer_types_length_mismatch_and_missing_fields() -> None:
    with pytest.raises(InputError, match="layer_types"):
        shape_from_config({**QWEN35_27B_TEXT, "layer_types": ["full_attention"]})
    with pytest.raises(InputError, match="hidden_size"):
        shape_from_config({"num_hidden_layers": 2})


def test_qwen35_27b_kv_and_state_per_sequence() -> None:
    s = shape_from_config({"text_config": QWEN35_27B_TEXT})
    # only the 16 full-attention layers cache K/V: 2 * 4 heads * 256 * 2 bytes * 16
    assert s.kv_bytes_per_token(2) == 2 * 4 * 256 * 2 * 16 == 65536
    # LMDeploy's state: conv (48, 2*16*128 + 48*128, 4) + recurrent (48, 48, 128, 128), bf16
    assert s.conv_dim == 10240
    assert s.state_bytes_per_sequence(2, 2) == 48 * (10240 * 4 + 48 * 128 * 128) * 2 == 79_429_632
    # int8 KV: 1 byte per element + fp16 scale and zero per head and token, for K and V
    assert s.kv_bytes_per_token(1, scale_bytes=4) == 2 * 16 * 4 * (256 + 4)


def test_dflash_drafter_shape() -> None:
    s = shape_from_config(QWEN35_27B_DFLASH)
    assert s.is_dflash and s.dflash_context_layers == 5 and s.dflash_block_size == 16
    assert s.kv_bytes_per_token(2) == 2 * 8 * 128 * 2 * 5 == 20480


def test_dflash_weight_estimate_matches_published_size(tmp_path: Path) -> None:
    _, draft = write_reference(tmp_path)
    m = _analyse(Checkpoint(draft), "draft", None, False)
    # z-lab/Qwen3.5-27B-DFlash publishes 3.22 GiB of bf16 safetensors
    assert m.source == "config estimate"
    assert abs(m.weights / 2**30 - 3.22) < 0.01


@pytest.mark.parametrize("name", ["qwen3", "qwen3_5"])
def test_estimate_equals_real_transformers_checkpoint(
    hf_models: dict[str, Path], tmp_path: Path, name: str
) -> None:
    real = _analyse(Checkpoint(hf_models[name]), "target", None, False)
    est = _analyse(Checkpoint(config_only_copy(hf_models[name], tmp_path / name)), "target", None, False)
    assert real.source == "safetensors headers" and est.source == "config estimate"
    assert est.weights == real.weights
    assert est.breakdown["embeddings"] == real.breakdown["embeddings"]


def test_hybrid_real_checkpoint_shape(hf_models: dict[str, Path]) -> None:
    s = shape_from_config(Checkpoint(hf_models["qwen3_5"]).config)
    assert (s.full_layers, s.linear_layers) == (2, 6)
    assert s.attn_output_gate  # implicit in Qwen3.5 configs


@pytest.mark.parametrize("method", ["awq", "gptq"])
def test_quantized_layout_estimate_equals_headers(tmp_path: Path, method: str) -> None:
    d = write_quantized(tmp_path, method)
    real = _analyse(Checkpoint(d), "target", None, False)
    est = _analyse(Checkpoint(config_only_copy(d, tmp_path / f"{method}-cfg")), "target", None, False)
    assert real.breakdown["quantized_linear"] > 0
    assert est.breakdown["quantized_linear"] == real.breakdown["quantized_linear"]
    assert est.weights == real.weights


def test_reference_target_weight_estimate(tmp_path: Path) -> None:
    target, _ = write_reference(tmp_path)
    m = _analyse(Checkpoint(target), "target", 2, False)
    gib = {k: v / 2**30 for k, v in m.breakdown.items()}
    assert 11.7 < gib["quantized_linear"] < 11.9  # 24.35 B decoder linear params at 4.156 bits
    assert abs(gib["embeddings"] - 2.368) < 0.01 and abs(gib["lm_head"] - 2.368) < 0.01
    assert 0.8 < gib["vision"] < 0.9
    assert 17.2 < m.weights / 2**30 < 17.5


def test_bf16_estimate_matches_published_qwen35_27b_size() -> None:
    from specq.pipeline.plan.shapes import estimate_weights

    from .reference import QWEN35_27B_VISION

    s = shape_from_config({"text_config": QWEN35_27B_TEXT, "vision_config": QWEN35_27B_VISION})
    # Qwen/Qwen3.5-27B: 51.75 GiB of bf16 safetensors (text + vision + MTP layer)
    assert abs(estimate_weights(s, None, 2, include_mtp=True).total / 2**30 - 51.75) < 0.01


def test_moe_without_weights_is_refused(tmp_path: Path) -> None:
    d = tmp_path / "moe"
    d.mkdir()
    (d / "config.json").write_text(
        '{"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_experts": 8}'
    )
    with pytest.raises(InputError, match="mixture-of-experts"):
        _analyse(Checkpoint(d), "target", None, False)


def test_state_grows_with_draft_tokens_and_is_aligned() -> None:
    """LMDeploy 0.18 sizes the state for K draft tokens: conv window kernel + K, recurrent state (1 + K)
    times;
    every state tensor rounded up to 256 bytes."""
    s = shape_from_config(QWEN35_27B_TEXT)
    assert s.state_bytes_per_sequence(2, 2, spec_tokens=0) == 79_429_632
    assert s.state_bytes_per_sequence(2, 2, spec_tokens=15, align=256) == (
        48 * 10240 * (4 + 15) * 2 + 48 * 16 * 48 * 128 * 128 * 2
    )
    odd = shape_from_config({**QWEN35_27B_TEXT, "num_hidden_layers": 1, "layer_types": ["linear_attention"],
                             "linear_num_key_heads": 1, "linear_num_value_heads": 1, "linear_key_head_dim": 3,
                             "linear_value_head_dim": 3})  # fmt: skip
    # conv 1 x 9 channels x 4 x 2 B = 72 -> 256; recurrent 1 x 3 x 3 x 2 B = 18 -> 256
    assert odd.state_bytes_per_sequence(2, 2) == 72 + 18
    assert odd.state_bytes_per_sequence(2, 2, align=256) == 512


def test_tiny_qwen35_checkpoint_plan_by_hand(tiny_qwen35: Path) -> None:
    """The tiny random Qwen3.5 (tests/tinymodel.py): 3 linear layers (conv_dim 2*2*32 + 4*32 = 256, kernel 4,
    4 value heads of 32 x 32) and 1 full-attention layer (1 KV head x 256)."""
    from specq.pipeline.plan import PlanRequest, plan_memory

    ck = Checkpoint(tiny_qwen35)
    s = shape_from_config(ck.config)
    assert (s.linear_layers, s.full_layers, s.conv_dim, s.head_dim, s.mtp_layers) == (3, 1, 256, 256, 1)
    flags = {"model": {"num_draft_tokens": 3}, "speculative": {"method": "qwen3_5_mtp"},
             "plan": {"gpu_memory": "1GiB", "session_len": 256}}  # fmt: skip
    from specq.pipeline.config import resolve_config

    p = plan_memory(ck, None, PlanRequest.from_config(resolve_config(None, flags=flags)))
    # bf16 checkpoint: KV 2 x 1 head x 256 x 2 B per attention layer, target layer + MTP layer
    assert p.kv_bytes_per_token == 2 * 1 * 256 * 2 * (1 + 1) == 2048
    # state at K = 3: conv 3 x 256 x (4 + 3) x 2 = 10752, recurrent 3 x (1 + 3) x 4 x 32 x 32 x 2 = 98304
    assert p.state_bytes_per_sequence == 10752 + 98304 == 109056
    # weights: every stored tensor's bytes, mtp.* included with the MTP method
    assert p.target.weights_bytes == sum(t.nbytes for t in ck.tensors.values())


def test_fp16_qwen35_planned_in_bf16_on_the_pytorch_engine(hf_models: dict[str, Path]) -> None:
    """specq serve runs an unquantized Gated DeltaNet target with --dtype bfloat16 (engines/qwen35.py); the
    plan sizes the same dtype. TurboMind keeps LMDeploy's 'auto' (this fp16 checkpoint: fp16)."""
    from specq.pipeline.config import resolve_config
    from specq.pipeline.plan import PlanRequest, plan_memory

    ck = Checkpoint(hf_models["qwen3_5"])
    assert ck.torch_dtype == "float16"

    def planned(backend: str) -> str:
        flags = {"engine": {"engine": "lmdeploy", "backend": backend}, "plan": {"gpu_memory": "1GiB"}}
        plan = plan_memory(ck, None, PlanRequest.from_config(resolve_config(None, flags=flags)))
        return plan.target.compute_dtype

    assert planned("pytorch") == planned("auto") == "bfloat16"
    assert planned("turbomind") == "float16"
