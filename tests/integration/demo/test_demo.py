"""`specq demo --quick`, end to end on CPU, as a newcomer runs it: every stage, a sweep table with the
baseline and k = 4 and 6, plots, and nothing left running. (--quick runs on the small toy pair the suite
builds anyway; the full demo's pair, `specq toy build --size demo`: tests/integration/toy/.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_demo_quick_runs_the_whole_pipeline(cli, toy_pair, tmp_path: Path) -> None:
    out = tmp_path / "demo"
    code, stdout, err = cli("demo", "--quick", "--out", str(out), "--json")
    assert code == 0, err
    result = json.loads(stdout)
    assert set(result["stage_seconds"]) == {"toy pair", "quantize", "convert", "serve + bench"}
    # stage 2: a real 4-bit GPTQ checkpoint with its quality report
    q = result["quantize"][0]
    assert (out / "target-gptq" / "quant_report.json").is_file()
    assert q["method"] == "gptq"
    # stage 3: GPTQ is refused by the PyTorch engine with the fix; the AWQ repack is accepted
    gptq, awq = result["convert"]
    pt = {v["engine"]: v for v in gptq["verdicts"]}
    assert any("--to awq" in f for v in pt.values() for f in v["fixes"])
    assert any(v["engine"] != "turbomind" and v["status"] == "accepted" for v in awq["verdicts"])
    # stages 4-5: baseline and k = 4, 6 were measured against the served quantized target
    report = json.loads(Path(result["bench_report"]).read_text())
    labels = [r["label"] for r in report["runs"]]
    assert labels == ["baseline", "k=4", "k=6"]
    assert all(r["status"] == "ok" for r in report["runs"])
    assert "baseline" in result["summary_table"] and "k=6" in result["summary_table"]
    assert result["toy_size"] == "small"
    assert any(name.endswith(".png") for name in result["bench_files"])
    assert result["best_k"] is not None
    # the toy's own workload (held-out code prefixes, completion mode): text it writes, not a loop
    assert report["workload"]["mode"] == "completion"
    assert report["workload"]["categories"] == {"code-completion": 4}
    assert (out / "prompts.jsonl").is_file()
    assert not any(f.startswith("repetitive") for f in report["runs"][0]["flags"])


def test_demo_refuses_a_non_empty_out(cli, tmp_path: Path) -> None:
    (tmp_path / "x").write_text("keep me")
    code, _, err = cli("demo", "--quick", "--out", str(tmp_path))
    assert code == 2 and "not empty" in err
    assert (tmp_path / "x").read_text() == "keep me"
