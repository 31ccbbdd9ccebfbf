"""`specq convert`'s verdicts on Qwen3.5 checkpoints as gptqmodel writes them through `specq quantize`
(session fixture `qwen35_quantized`, tiny random Qwen3.5), and on copies broken the ways LMDeploy 0.18 refuses
(engines/qwen35.py, its source named in each finding). The predictions are proved on a GPU separately."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.qwen35_load_probe import BREAKS, make_broken
from specq.pipeline.convert import check_readiness
from specq.pipeline.convert.verdict import ConvertReport

pytestmark = pytest.mark.integration


def findings(report: ConvertReport, engine: str) -> dict[str, dict]:
    return {f.rule: f.model_dump() for f in report.verdict(engine).findings}  # type: ignore[arg-type]


def test_awq_from_specq_quantize_is_accepted_with_mtp(qwen35_quantized: dict[str, Path], cli) -> None:
    code, out, _ = cli("convert", str(qwen35_quantized["awq"]), "--json")
    assert code == 0
    report = ConvertReport.model_validate(json.loads(out)["report"])
    assert report.ready and report.engine == "lmdeploy/pytorch"
    assert report.draft is not None and report.draft.kind == "mtp" and report.draft.problems == []
    pt = findings(report, "pytorch")
    assert set(pt) == {
        "qwen3_5.linear_attn_projections_quantized", "qwen3_5.linear_attn_gates_unquantized",
        "qwen3_5.vision_unquantized", "qwen3_5.mtp_weights_present",
        "qwen3_5.mtp_projections_stored_as_built", "qwen3_5.mtp_fc_unquantized",
    }  # fmt: skip
    assert all(f["passed"] and f["source"].startswith("lmdeploy/") for f in pt.values())
    # specq quantize named the unquantized MTP modules the way LMDeploy matches them
    raw = json.loads((qwen35_quantized["awq"] / "config.json").read_text())["quantization_config"]
    assert set(raw["modules_to_not_convert"]) == {
        "mtp.layers.0.self_attn.qkv_proj", "mtp.layers.0.self_attn.o_proj", "mtp.layers.0.mlp.gate_up_proj",
        "mtp.layers.0.mlp.down_proj", "mtp.fc",
    }  # fmt: skip
    # TurboMind: the toy-sized vision tower (head dim 16) is what it refuses, with LMDeploy's error
    tm = report.verdict("turbomind")
    assert tm.status == "refused"
    assert findings(report, "turbomind")["qwen3_5.turbomind_vit_head_dim"]["expect"] == (
        "NotImplementedError: Qwen3.5 ViT head_dim=16 not supported"
    )


def test_gptq_is_fixable_by_repack_and_repack_keeps_it_servable(
    qwen35_quantized: dict[str, Path], tmp_path: Path
) -> None:
    report = check_readiness(qwen35_quantized["gptq"], write_manifest=False)
    v = report.verdict("pytorch")
    assert v.status == "fixable" and "--to awq" in v.fixes[0]
    from specq.pipeline.convert import repack_gptq_to_awq

    repack_gptq_to_awq(qwen35_quantized["gptq"], tmp_path / "awq")
    again = check_readiness(tmp_path / "awq", write_manifest=False)
    assert again.verdict("pytorch").status == "accepted" and again.ready


L0 = "model.language_model.layers.0.linear_attn"


@pytest.mark.parametrize(
    ("case", "rule", "expect"),
    [
        ("gate_quantized", "qwen3_5.linear_attn_gates_unquantized",
         f"KeyError: '{L0}.in_proj_ba.qweight'"),
        ("qkv_unquantized", "qwen3_5.linear_attn_projections_quantized",
         f"KeyError: '{L0}.in_proj_qkv.weight'"),
        ("mtp_unmarked", "qwen3_5.mtp_projections_stored_as_built",
         "KeyError: 'model.layers.0.mlp.down_proj.weight'"),
        ("no_mtp", "qwen3_5.mtp_weights_present", "loads without error; the MTP head runs uninitialised"),
        ("compressed_tensors", "qwen3_5.compressed_tensors",
         "ValueError: compressed-tensors dispatch requires a non-empty canonical module prefix"),
    ],
)  # fmt: skip
def test_broken_copies_are_refused_as_lmdeploy_fails(
    qwen35_quantized: dict[str, Path], tmp_path: Path, case: str, rule: str, expect: str
) -> None:
    assert BREAKS[case][0] == rule  # the GPU probe (benchmarks/qwen35_load_probe.py) breaks the same rule
    broken = make_broken(qwen35_quantized["awq"], tmp_path / case, case)
    report = check_readiness(broken, write_manifest=False)
    pt = report.verdict("pytorch")
    assert pt.status == "refused" and not report.ready
    f = {x.rule: x for x in pt.findings}[rule]
    assert not f.passed and f.expect.startswith(expect) and f.source.startswith("lmdeploy/")
    assert any(expect.split(":")[0] in r for r in pt.reasons)
