"""The report schema: save/load, formatters, compare and gates."""

from __future__ import annotations

import json

import pytest

from specq.pipeline.errors import GateFailed, InputError, UsageError
from specq.pipeline.report.compare import compare, enforce_gates, evaluate_gates
from specq.pipeline.report.formatters import FORMATTERS, plot, render, write_outputs
from specq.pipeline.report.models import (
    Acceptance,
    BenchReport,
    HostInfo,
    Run,
    RunAggregate,
    Stats,
    WorkloadInfo,
)


def make_report(base_tps: float = 100.0, k4_tps: float = 150.0) -> BenchReport:
    wl = WorkloadInfo(
        source="suite:code",
        digest="abc",
        requests=4,
        categories={"code": 4},
        mode="chat",
        max_tokens=16,
        temperature=0.0,
    )
    rep = BenchReport(
        created_at="2026-11-29T00:00:00+00:00",
        specq_version="0.1.0",
        host=HostInfo(platform="linux", python="3.11"),
        workload=wl,
    )
    for label, k, tps in (("baseline", 0, base_tps), ("k=4", 4, k4_tps)):
        agg = RunAggregate(
            requests=4,
            ok=4,
            output_tokens=64,
            output_tokens_per_s=tps,
            ttft_s=Stats(n=4, mean=0.01, p50=0.01, p90=0.02, p99=0.02),
            tpot_s=Stats(n=4, mean=0.002),
            itl_s=Stats(n=60, p50=0.002, p90=0.003, p99=0.004),
        )
        run = Run(label=label, draft_tokens=k, concurrency=1, baseline=k == 0, aggregate=agg)
        if k:
            run.speedup = tps / base_tps
            run.acceptance = Acceptance(
                source="lmdeploy:",
                drafts=10,
                draft_tokens=40,
                accepted_tokens=20,
                acceptance_rate=0.5,
                acceptance_length=3.0,
                per_position=[0.8, 0.6, 0.4, 0.2],
            )
        rep.runs.append(run)
    return rep


def test_save_load_roundtrip(tmp_path):
    rep = make_report()
    p = rep.save(tmp_path / "r.json")
    assert BenchReport.load(p) == rep
    assert json.loads(p.read_text())["schema_version"] == "1.1"


def test_load_refuses_foreign_and_broken_files(tmp_path):
    (tmp_path / "a.json").write_text("[1, 2]")
    with pytest.raises(InputError, match="not a specq bench report"):
        BenchReport.load(tmp_path / "a.json")
    (tmp_path / "b.json").write_text("{")
    with pytest.raises(InputError, match="not a readable"):
        BenchReport.load(tmp_path / "b.json")
    data = json.loads(make_report().model_dump_json())
    data["runs"][0]["concurrency"] = "many"
    (tmp_path / "c.json").write_text(json.dumps(data))
    with pytest.raises(InputError, match=r"runs\.0\.concurrency"):
        BenchReport.load(tmp_path / "c.json")


def test_every_formatter_renders():
    rep = make_report()
    assert set(FORMATTERS) >= {"table", "md", "csv", "json"}
    assert "k=4" in render(rep, "table") and "| k=4 |" in render(rep, "md")
    csv = render(rep, "csv").splitlines()
    assert len(csv) == 3 and csv[2].startswith("k=4,4,1")
    assert json.loads(render(rep, "json"))["kind"] == "specq-bench"
    with pytest.raises(UsageError, match="unknown format"):
        render(rep, "xml")


def test_outputs_and_plots(tmp_path):
    files = write_outputs(make_report(), tmp_path)
    assert {"json", "csv", "md", "throughput_vs_k", "acceptance_by_position", "latency_percentiles"} <= set(
        files
    )
    assert all(p.stat().st_size > 0 for p in files.values())
    empty = make_report()
    empty.runs = []
    assert plot(empty, tmp_path / "none") == []


def test_compare_rows_have_relative_change():
    rows = compare(make_report(), make_report(base_tps=100.0, k4_tps=120.0))
    row = next(r for r in rows if r["run"] == "k=4@c1" and r["metric"] == "output_tokens_per_s")
    assert row["delta"] == pytest.approx(-30.0) and row["rel_change"] == pytest.approx(-0.2)


def test_min_speedup_gate():
    rep = make_report()
    assert evaluate_gates(rep, min_speedup=1.4)[0].passed
    rep.gates = evaluate_gates(rep, min_speedup=1.6)
    with pytest.raises(
        GateFailed, match=r"min_speedup: best speedup 1\.500x \(k=4@c1, measured speedup\) < required 1\.6x"
    ) as e:
        enforce_gates(rep)
    assert e.value.exit_code == 3 and "\n" not in str(e.value)


def test_regression_gate():
    old = make_report()
    ok = evaluate_gates(make_report(k4_tps=145.0), old=old, max_regression=0.05)
    assert ok[0].passed
    bad = make_report(k4_tps=140.0)
    bad.gates = evaluate_gates(bad, old=old, max_regression=0.05)
    assert not bad.gates[0].passed and "-6.7%" in bad.gates[0].reason
    other = make_report()
    for r in other.runs:
        r.label = "x" + r.label
    assert not evaluate_gates(other, old=old, max_regression=0.05)[0].passed


def test_a_schema_1_0_report_still_loads_shows_and_compares(tmp_path):
    doc = json.loads(make_report().model_dump_json())
    doc["schema_version"] = "1.0"
    for run in doc["runs"]:  # what a 1.0 report lacks
        for key in ("warmup", "trials", "throughput", "speedup_low", "speedup_high", "consistency", "flags",
                    "decode_speedup", "step_cost_ratio", "step_cost_source"):  # fmt: skip
            run.pop(key)
    doc.pop("headline")
    (tmp_path / "old.json").write_text(json.dumps(doc))
    old = BenchReport.load(tmp_path / "old.json")
    assert old.runs[1].trials == [] and "k=4" in render(old, "table") and "| k=4 |" in render(old, "md")
    assert any(r["metric"] == "speedup" for r in compare(old, make_report()))
    # gates on a report without trials fall back to the single measured figures
    gate = evaluate_gates(old, min_speedup=1.4)[0]
    assert gate.passed and gate.basis == "measured speedup"


def test_gates_use_the_conservative_end_of_the_trials():
    from specq.pipeline.report.models import Spread, Trial

    rep = make_report(100.0, 150.0)
    k4 = rep.runs[1]
    k4.trials = [Trial(index=i, output_tokens_per_s=v) for i, v in enumerate((130.0, 150.0, 160.0))]
    k4.throughput = Spread(n=3, used=3, median=150.0, min=130.0, max=160.0, rel_spread=0.2)
    k4.speedup_low, k4.speedup_high = 1.2, 1.7
    gate = evaluate_gates(rep, min_speedup=1.4)[0]
    # the median (1.5x) would pass; the lowest speedup the trials allow (1.2x) does not
    assert not gate.passed and gate.basis == "lowest speedup over the trials"
    assert "1.200x" in gate.reason and "median 1.500x" in gate.reason
    old = make_report(100.0, 140.0)
    reg = evaluate_gates(rep, old=old, max_regression=0.05)[0]
    # k=4's slowest trial (130) against the old 140 is a 7 % drop, although its median rose to 150
    assert not reg.passed and "-7.1%" in reg.reason and reg.basis == "slowest trial vs the old report's tok/s"
