"""Quantize a tiny random Qwen3.5 (hybrid Gated DeltaNet + gated full attention, vision tower, MTP tensors;
`tests/tinymodel.py build_tiny_qwen35`) with gptqmodel, GPTQ and AWQ, as `specq quantize` does (session
fixture `qwen35_quantized`), and check what is quantized and what stays as the source stored it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specq.pipeline.checkpoint import Checkpoint
from specq.pipeline.engines.qwen35 import linear_storage
from specq.pipeline.quantize import QuantizeResult

pytestmark = pytest.mark.integration

# What gptqmodel 7.6's qwen3_5 definition quantizes (models/definitions/qwen3_5.py module_tree):
QUANTIZED = {"in_proj_qkv", "in_proj_z", "out_proj", "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
             "up_proj", "down_proj"}  # fmt: skip


@pytest.mark.parametrize("method", ["gptq", "awq"])
def test_text_projections_quantized_rest_kept(
    qwen35_quantized: dict[str, Path], tiny_qwen35: Path, method: str
):
    out = Checkpoint(qwen35_quantized[method])
    src = Checkpoint(tiny_qwen35)
    assert out.architectures == ["Qwen3_5ForConditionalGeneration"] and out.config["model_type"] == "qwen3_5"
    q = out.quantization
    assert q is not None and q.method == method and q.bits == 4 and q.group_size == 128
    quantized, plain = linear_storage(out)
    lm = {p for p in quantized if p.startswith("model.language_model.layers.")}
    assert lm == quantized  # nothing outside the text decoder layers is quantized
    assert {p.rpartition(".")[2] for p in lm} == QUANTIZED
    # 3 linear-attention layers x 3 + 1 full-attention layer x 4 + 4 layers x 3 MLP projections
    assert len(lm) == 3 * 3 + 4 + 4 * 3
    # kept as the source stored them: the linear-attention gates, the vision tower, the MTP head, lm_head
    kept = {p.rpartition(".")[2] for p in plain if ".linear_attn." in p}
    assert kept == {"in_proj_a", "in_proj_b"}
    assert {p for p in plain if p.startswith("model.visual.")} == {
        p for p in linear_storage(src)[1] if p.startswith("model.visual.")
    }
    assert "lm_head" in plain and "mtp.fc" in plain
    mtp = {n: t for n, t in out.tensors.items() if n.startswith("mtp.")}
    assert mtp and {n: (t.dtype, t.shape) for n, t in mtp.items()} == {
        n: (t.dtype, t.shape) for n, t in src.tensors.items() if n.startswith("mtp.")
    }
    for name in ("conv1d.weight", "A_log", "dt_bias", "norm.weight"):
        key = f"model.language_model.layers.0.linear_attn.{name}"
        assert out.tensors[key].shape == src.tensors[key].shape


def test_awq_for_plain_and_quality(qwen35_quantized: dict[str, Path]) -> None:
    res = QuantizeResult.model_validate(
        json.loads((qwen35_quantized["awq"] / "quant_report.json").read_text())
    )
    assert res.target == "speculative" and res.format == "awq" and res.backend == "gptqmodel"
    assert res.layers == 4
    q = res.quality
    assert q is not None and q.perplexity_ratio is not None and q.perplexity_ratio < 1.5
    assert q.logits_cosine_mean is not None and q.logits_cosine_mean > 0.9


def test_for_speculative_writes_the_awq_lmdeploy_speculates_with(qwen35_quantized: dict[str, Path]) -> None:
    """`--for speculative` (the default) on a Qwen3.5: AWQ whose Gated DeltaNet gates, vision tower and MTP
    layer stay bf16 and are declared in modules_to_not_convert, accepted by convert for the PyTorch engine
    (engines/lmdeploy_compat runs it in bf16)."""
    from specq.pipeline.checkpoint import Checkpoint
    from specq.pipeline.convert import check_readiness
    from specq.pipeline.engines.qwen35 import linear_storage

    awq = Checkpoint(qwen35_quantized["awq"])
    assert awq.quantization is not None and awq.quantization.method == "awq"
    declared = set(awq.quantization.raw["modules_to_not_convert"])
    quantized, plain = linear_storage(awq)
    gates = {p for p in plain if ".linear_attn." in p}
    assert gates and {p.rpartition(".")[2] for p in gates} == {"in_proj_a", "in_proj_b"} and gates <= declared
    assert "model.visual" in declared and not any(".visual." in p for p in quantized)
    assert {"mtp.fc", "mtp.layers.0.self_attn.qkv_proj"} <= declared and not any(
        p.startswith("mtp.") for p in quantized
    )
    v = check_readiness(qwen35_quantized["awq"], write_manifest=False).verdict("pytorch")
    assert v.status == "accepted", v.reasons
