"""`specq convert`'s verdicts on Qwen3.5 checkpoints as gptqmodel writes them through `specq quantize`
(session fixture `qwen35_quantized`, tiny random Qwen3.5), and on copies broken the ways LMDeploy 0.18 refuses
(engines/qwen35.py, its source named in each finding). The predictions are proved on a GPU separately."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.scenarios.qwen35_load_probe import BREAKS, make_broken
from specq.pipeline.checkpoint import Checkpoint
from specq.pipeline.convert import check_readiness
from specq.pipeline.convert.verdict import ConvertReport
from specq.pipeline.engines.qwen35 import STATE_DTYPE_ERROR

pytestmark = pytest.mark.integration


def findings(report: ConvertReport, engine: str) -> dict[str, dict]:
    return {f.rule: f.model_dump() for f in report.verdict(engine).findings}  # type: ignore[arg-type]


def test_awq_from_specq_quantize_is_accepted_in_bf16_through_the_compatibility_patch(
    qwen35_quantized: dict[str, Path], cli
) -> None:
    """Every load rule passes on gptqmodel's AWQ (the H200 saw it load). Stock LMDeploy 0.18 runs AWQ in fp16
    against the Gated DeltaNet's bf16 state (the first prefill died there); with specq's compatibility patch
    it runs in bf16, so the PyTorch engine accepts it (no LMDeploy here: serve checks the installed one)."""
    code, out, err = cli("convert", str(qwen35_quantized["awq"]), "--json")
    report = ConvertReport.model_validate(json.loads(out)["report"])
    assert code == 0 and report.ready, err
    assert report.draft is not None and report.draft.kind == "mtp" and report.draft.problems == []
    pt = findings(report, "pytorch")
    assert set(pt) == {
        "qwen3_5.state_dtype", "qwen3_5.linear_attn_projections_quantized",
        "qwen3_5.linear_attn_gates_unquantized", "qwen3_5.vision_unquantized", "qwen3_5.mtp_weights_present",
        "qwen3_5.mtp_projections_stored_as_built", "qwen3_5.mtp_fc_unquantized",
    }  # fmt: skip
    assert all(f["source"].startswith("lmdeploy/") for f in pt.values())
    assert [r for r, f in pt.items() if not f["passed"]] == []
    assert "compatibility patch" in pt["qwen3_5.state_dtype"]["detail"]
    v = report.verdict("pytorch")
    assert v.status == "accepted" and v.reasons == ["AWQ runs in bfloat16 (specq passes --dtype bfloat16)"]
    # specq quantize named the unquantized MTP modules the way LMDeploy matches them, and declared the
    # Gated DeltaNet gates and the vision tower it keeps in bf16
    raw = json.loads((qwen35_quantized["awq"] / "config.json").read_text())["quantization_config"]
    gates = {f"model.language_model.layers.{i}.linear_attn.in_proj_{x}" for i in (0, 1, 2) for x in "ab"}
    assert set(raw["modules_to_not_convert"]) == {
        "mtp.layers.0.self_attn.qkv_proj", "mtp.layers.0.self_attn.o_proj", "mtp.layers.0.mlp.gate_up_proj",
        "mtp.layers.0.mlp.down_proj", "mtp.fc", "model.visual", *gates,
    }  # fmt: skip
    # TurboMind: the toy-sized vision tower (head dim 16) is what it refuses, with LMDeploy's error
    tm = report.verdict("turbomind")
    assert tm.status == "refused"
    assert findings(report, "turbomind")["qwen3_5.turbomind_vit_head_dim"]["expect"] == (
        "NotImplementedError: Qwen3.5 ViT head_dim=16 not supported"
    )


def test_unquantized_target_is_accepted_in_bf16(tiny_qwen35: Path) -> None:
    v = check_readiness(tiny_qwen35, write_manifest=False).verdict("pytorch")
    assert v.status == "accepted" and "--dtype bfloat16" in v.reasons[0]


def test_gptq_is_fixable_by_the_awq_repack_which_keeps_the_rules(
    qwen35_quantized: dict[str, Path], tmp_path: Path
) -> None:
    report = check_readiness(qwen35_quantized["gptq"], write_manifest=False)
    v = report.verdict("pytorch")
    assert v.status == "fixable" and v.fixes and "--to awq" in v.fixes[0]
    from specq.pipeline.convert import repack_gptq_to_awq

    repack_gptq_to_awq(qwen35_quantized["gptq"], tmp_path / "awq")
    again = check_readiness(tmp_path / "awq", write_manifest=False).verdict("pytorch")
    assert again.status == "accepted", again.reasons
    assert [f.rule for f in again.findings if not f.passed] == []


def test_an_lmdeploy_the_patch_does_not_know_refuses_the_awq_target_in_one_line(
    qwen35_quantized: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli
) -> None:
    """With lmdeploy 0.19.0 installed (a copy of the 0.18.0 fixture with another version), convert refuses
    the AWQ Qwen3.5 for the PyTorch engine, and serve refuses it before any launch (exit 4), naming the
    version the patch supports; the unquantized target is unaffected."""
    import shutil

    site = tmp_path / "site"
    shutil.copytree(Path(__file__).resolve().parents[2] / "fixtures" / "lmdeploy-0.18.0", site)
    version = site / "lmdeploy" / "version.py"
    version.write_text(version.read_text().replace("'0.18.0'", "'0.19.0'"))
    monkeypatch.syspath_prepend(str(site))
    report = check_readiness(qwen35_quantized["awq"], write_manifest=False)
    v = report.verdict("pytorch")
    assert v.status == "refused"
    f = {x.rule: x for x in v.findings}["qwen3_5.state_dtype"]
    assert not f.passed and "lmdeploy 0.19.0" in f.detail and "lmdeploy==0.18.0" in f.detail
    assert f.expect == STATE_DTYPE_ERROR
    code, _, err = cli("serve", str(qwen35_quantized["awq"]), "--engine", "lmdeploy", "--backend", "pytorch",
                       "--method", "qwen3_5_mtp", "-k", "2", "--dry-run")  # fmt: skip
    assert code == 4 and len(err.strip().splitlines()) == 1
    assert "lmdeploy 0.19.0" in err and "lmdeploy==0.18.0" in err


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
    assert (
        BREAKS[case][0] == rule
    )  # the GPU probe (benchmarks/scenarios/qwen35_load_probe.py) breaks the same rule
    broken = make_broken(qwen35_quantized["awq"], tmp_path / case, case)
    report = check_readiness(broken, write_manifest=False)
    pt = report.verdict("pytorch")
    assert pt.status == "refused" and not report.ready
    f = {x.rule: x for x in pt.findings}[rule]
    assert not f.passed and f.expect.startswith(expect) and f.source.startswith("lmdeploy/")
    assert any(expect.split(":")[0] in r for r in pt.reasons)


def test_load_probe_cases_carry_the_predictions_the_gpu_run_checks(
    qwen35_quantized: dict[str, Path], tiny_qwen35: Path, tmp_path: Path
) -> None:
    """The qwen35-load-probe scenario's make: the AWQ copy launched plain must load in bf16 (the compatibility
    patch), the unquantized target with MTP must load with the --dtype specq serve would pass, no_mtp is cut
    from it."""
    from benchmarks.scenarios.qwen35_load_probe import READY, make

    make(qwen35_quantized["awq"], tmp_path / "probe", tiny_qwen35)
    cases = json.loads((tmp_path / "probe" / "cases.json").read_text())
    assert set(cases) == {*BREAKS, "awq", "bf16", "turbomind"}
    assert cases["awq"] | {"path": None} == {
        "path": None, "backend": "pytorch", "method": None, "status": "accepted",
        "rule": "qwen3_5.state_dtype", "expect": READY, "dtype": "bfloat16",
    }  # fmt: skip
    bf16 = cases["bf16"]
    assert (bf16["status"], bf16["expect"], bf16["dtype"], bf16["method"]) == (
        "accepted", READY, "bfloat16", "qwen3_5_mtp",
    )  # fmt: skip
    assert cases["no_mtp"]["dtype"] == "bfloat16" and cases["no_mtp"]["expect"].startswith(READY)
    assert not any(n.startswith("mtp.") for n in Checkpoint(tmp_path / "probe" / "no_mtp").tensors)
    assert cases["compressed_tensors"]["dtype"] == "bfloat16"  # every Gated DeltaNet target runs in bf16
