"""The trained Qwen3.5-shaped toy through the stages after it — quantize (gptqmodel AWQ with
`--for plain`), convert's verdicts with LMDeploy 0.18's Qwen3.5 rules,
and plan with the recurrent state of its linear-attention layers. The tiny *random* Qwen3.5
(tests/tinymodel.py) covers each stage's refusals; this file proves the same stages on the trained toy."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def toy35_awq(toy35, tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("gptqmodel")
    from specq.pipeline.config.models import QuantizeSection
    from specq.pipeline.quantize import QuantizeRequest, quantize
    from tests.tinymodel import calibration_rows, write_jsonl

    root = tmp_path_factory.mktemp("toy35-q")
    calib = write_jsonl(root / "calib.jsonl", calibration_rows(1500))
    cfg = QuantizeSection.model_validate(
        {
            "method": "awq",
            "for": "plain",
            "calib": str(calib),
            "device": "cpu",
            "samples": 8,
            "seqlen": 128,
            "eval_samples": 2,
        }  # fmt: skip
    )
    out = root / "awq"
    quantize(QuantizeRequest.from_config(cfg, model=toy35.target, out=out))
    return out


def test_quantize_keeps_what_lmdeploy_needs_unquantized(toy35_awq: Path) -> None:
    from safetensors import safe_open

    cfg = json.loads((toy35_awq / "config.json").read_text())
    q = cfg.get("quantization_config") or cfg["text_config"].get("quantization_config")
    assert q["quant_method"] == "awq"
    names: set[str] = set()
    for f in toy35_awq.glob("*.safetensors"):
        with safe_open(str(f), "pt") as st:
            names |= set(st.keys())
    qweights = {n.rsplit(".", 1)[0] for n in names if n.endswith(".qweight")}
    assert any(".linear_attn.in_proj_qkv" in n for n in qweights)  # LMDeploy builds these quantized
    assert not any(".linear_attn.in_proj_a" in n or ".linear_attn.in_proj_b" in n for n in qweights)
    assert not any(n.startswith("mtp.") or ".visual." in n for n in qweights)
    assert any(n.startswith("mtp.") for n in names)  # the MTP head travels with the target
    assert (toy35_awq / "preprocessor_config.json").is_file()  # and the processor LMDeploy loads at start-up
    report = json.loads((toy35_awq / "quant_report.json").read_text())
    assert 0.9 < report["quality"]["perplexity_ratio"] < 1.1


def test_convert_serves_the_target_and_its_awq_copy_in_bf16(cli, toy35_awq: Path, toy35) -> None:
    """Every LMDeploy load rule passes on the AWQ copy, and specq's compatibility patch runs it in bf16 like
    the Gated DeltaNet state (stock LMDeploy 0.18 ran it in fp16 and the H200's first prefill died so):
    accepted. The float32 target is accepted (in bf16)."""
    code, out, err = cli("convert", str(toy35_awq), "--json")
    assert code == 0, err
    verdicts = {v["engine"]: v for v in json.loads(out)["report"]["verdicts"]}
    pytorch = verdicts["pytorch"]
    assert pytorch["status"] == "accepted" and "bfloat16" in pytorch["reasons"][0], pytorch
    rules = {f["rule"]: f["passed"] for f in pytorch.get("findings", [])}
    assert [r for r, ok in rules.items() if not ok] == []
    assert len(rules) > 1 and all(r.startswith("qwen3_5.") for r in rules)
    assert verdicts["embedded"]["status"] == "refused"  # no speculation on a stateful target there
    code, out, err = cli("convert", str(toy35.target), "--json")
    assert code == 0, err
    pytorch = {v["engine"]: v for v in json.loads(out)["report"]["verdicts"]}["pytorch"]
    assert pytorch["status"] == "accepted" and "--dtype bfloat16" in pytorch["reasons"][0]
    # the toy's plain Qwen3 draft model: LMDeploy has no "any small LLM" method, so it is not a drafter there
    code, _, err = cli("convert", str(toy35.target), "--draft-model", str(toy35.draft), "--json")
    assert code == 2 and "not ready" in err


def test_plan_counts_the_linear_attention_state(cli, toy35_awq: Path) -> None:
    def plan(k: int) -> dict:
        code, out, err = cli("plan", str(toy35_awq), "--engine", "lmdeploy", "--gpu-memory", "24GiB",
                             "-k", str(k), "--json")  # fmt: skip
        assert code == 0, err
        return json.loads(out)

    p0, p5 = plan(0), plan(5)
    assert p0["target"]["linear_attention_layers"] == 3 and p0["target"]["full_attention_layers"] == 1
    assert p0["state_bytes_per_sequence"] > 0
    assert p5["state_bytes_per_sequence"] > p0["state_bytes_per_sequence"]  # LMDeploy keeps 1 + K states
    assert p0["fits"] and p5["fits"]
