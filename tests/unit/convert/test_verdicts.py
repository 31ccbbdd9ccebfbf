"""Per-engine verdicts from headers and configs: TurboMind's mirrored rules, the PyTorch engine's quantized
formats (the table in docs/convert.md), broken checkpoints refused with the right reason, the manifest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specq.pipeline.checkpoint import Checkpoint
from specq.pipeline.convert import check_readiness, read_manifest
from specq.pipeline.engines.pytorch import pytorch_engine_refusal


def verdicts(path: Path, **kw):
    r = check_readiness(path, **kw)
    return r, {v.engine: v for v in r.verdicts}


def test_gptq_turbomind_accepted_pytorch_fixable(make_ckpt) -> None:
    src = make_ckpt("gptq", name="qwen-gptq")
    r, v = verdicts(src)
    assert v["turbomind"].status == "accepted"
    assert v["pytorch"].status == "fixable"
    assert "Unsupported quant method: gptq" in v["pytorch"].reasons[0]
    assert v["pytorch"].fixes == [f"specq convert {src} --to awq --out {src.parent / 'qwen-gptq-awq'}"]
    assert r.ready and r.engine == "lmdeploy/turbomind"
    msg = pytorch_engine_refusal(Checkpoint(src))
    assert msg is not None and "--to awq --out" in msg


def test_awq_accepted_everywhere(make_ckpt) -> None:
    r, v = verdicts(make_ckpt("awq"))
    assert [v[e].status for e in ("turbomind", "pytorch", "embedded")] == ["accepted"] * 3
    assert pytorch_engine_refusal(Checkpoint(r.model)) is None


# One 64-wide KV head, as in a Qwen3 with num_key_value_heads 1 and head_dim 64.
NARROW_KV = {"self_attn.k_proj": (128, 64), "self_attn.v_proj": (128, 64), "mlp.down_proj": (256, 128)}


def test_awq_with_narrow_kv_refused_by_pytorch_engine(make_ckpt) -> None:
    """LMDeploy 0.18 loads q/k/v (and gate/up) through chunk_aligned(..., max(32 // bits, group_size)):
    a 64-wide k_proj asserts at load (seen on the H200); TurboMind only needs multiples of 32."""
    _, v = verdicts(make_ckpt("awq", linears=NARROW_KV))
    assert v["turbomind"].status == "accepted"
    assert v["pytorch"].status == "refused"
    assert v["pytorch"].reasons == [
        "k_proj output 64 is not a multiple of 128 (2 layers): LMDeploy 0.18's fused AWQ q/k/v and gate/up "
        "linears need multiples of max(32 // bits, group_size)",
        "v_proj output 64 is not a multiple of 128 (2 layers): LMDeploy 0.18's fused AWQ q/k/v and gate/up "
        "linears need multiples of max(32 // bits, group_size)",
    ]


def test_awq_alignment_follows_group_size(make_ckpt) -> None:
    # align = max(32 // 4, 32) = 32 divides 64: group-32 AWQ with the same narrow KV head loads.
    _, v = verdicts(make_ckpt("awq", group=32, linears=NARROW_KV))
    assert v["pytorch"].status == "accepted"


def test_gptq_with_narrow_kv_not_offered_a_repack(make_ckpt) -> None:
    src = make_ckpt("gptq", linears=NARROW_KV)
    _, v = verdicts(src)
    assert v["pytorch"].status == "refused" and v["pytorch"].fixes == []
    assert v["pytorch"].reasons[1].startswith("even repacked to AWQ it would be refused: k_proj output 64")
    msg = pytorch_engine_refusal(Checkpoint(src))
    assert msg is not None and "--to awq" not in msg


def test_unquantized_accepted(make_ckpt) -> None:
    r, v = verdicts(make_ckpt("hf"))
    assert r.model_format == "hf" and v["turbomind"].status == "accepted"


@pytest.mark.parametrize(
    ("group", "pytorch"),
    [(128, "refused"), (32, "accepted")],
)
def test_compressed_tensors_group_sizes(make_ckpt, group: int, pytorch: str) -> None:
    _, v = verdicts(make_ckpt("ct", group=group))
    assert v["turbomind"].status == "accepted"
    assert v["pytorch"].status == pytorch
    if pytorch == "refused":
        assert "group_size 128" in v["pytorch"].reasons[0]


def test_missing_scales_refused(make_ckpt) -> None:
    r, v = verdicts(make_ckpt("gptq", drop=("scales",)))
    assert v["turbomind"].status == "refused"
    assert any("missing scales" in x for x in v["turbomind"].reasons)
    assert v["pytorch"].status == "refused"  # not repackable either
    assert not r.ready


def test_wrong_group_size_refused(make_ckpt) -> None:
    """Tensors quantized with group 128 but the config says 64: both rules fire."""
    _, v = verdicts(make_ckpt("gptq", qconfig={"group_size": 64}))
    reasons = " | ".join(v["turbomind"].reasons)
    assert v["turbomind"].status == "refused"
    assert "group_size 64" in reasons and "does not match the tensors" in reasons


def test_act_order_gptq_refused(make_ckpt) -> None:
    _, v = verdicts(make_ckpt("gptq", qconfig={"desc_act": True}))
    assert v["turbomind"].status == "refused"
    assert any("desc_act" in x for x in v["turbomind"].reasons)
    assert v["pytorch"].status == "refused" and not v["pytorch"].fixes
    assert "act-order" in v["pytorch"].reasons[1]


def test_unsupported_architecture_refused(make_ckpt) -> None:
    _, v = verdicts(make_ckpt("awq", config={"architectures": ["GemmaForCausalLM"]}))
    assert v["turbomind"].status == "refused"
    assert "GemmaForCausalLM is not in TurboMind's supported list" in v["turbomind"].reasons[0]


def test_awq_gemv_refused(make_ckpt) -> None:
    _, v = verdicts(make_ckpt("awq", qconfig={"version": "gemv"}))
    assert v["turbomind"].status == "refused" and v["pytorch"].status == "refused"


def test_awq_layout_with_gptq_label_refused(make_ckpt, tmp_path: Path) -> None:
    d = make_ckpt("awq")
    cfg = json.loads((d / "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": True}
    (d / "config.json").write_text(json.dumps(cfg))
    _, v = verdicts(d)
    assert any("this is the AWQ layout" in x for x in v["turbomind"].reasons)


def test_three_bit_refused(make_ckpt) -> None:
    _, v = verdicts(make_ckpt("gptq", qconfig={"bits": 3}))
    assert any("4-bit" in x for x in v["turbomind"].reasons)


def test_manifest_written_and_read(make_ckpt) -> None:
    d = make_ckpt("gptq")
    r = check_readiness(d)
    m = read_manifest(d)
    assert r.manifest == str(d / "specq-manifest.json")
    assert m is not None and m["model_format"] == "gptq" and m["engine"] == "lmdeploy/turbomind"
    assert m["verdicts"]["pytorch"]["status"] == "fixable"
    assert m["dtype"] == "float16"


def test_refused_with_a_draft_offers_no_fixes(make_ckpt, make_draft) -> None:
    """GPTQ alone is fixable by the repack; next to a plain draft model (which LMDeploy cannot use) the
    PyTorch engine is refused, and a repack command would not change that."""
    t, d = make_ckpt("gptq", name="t"), make_draft("model", name="plain")
    _, v = verdicts(t, draft_model=d)
    assert v["pytorch"].status == "refused" and v["pytorch"].fixes == []
    assert any("no 'draft' method" in r for r in v["pytorch"].reasons)
