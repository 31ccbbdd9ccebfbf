"""The bench table at the terminal's width: secondary columns left out (named under the table) until it
fits 80 or 120 columns, every column with --wide or in the files, and the notes under it: a recommendation
among the measured k only, each per-run note once; and the throughput plot's two panels with error bars."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specq.pipeline.report.formatters import COLUMNS, render, throughput_figure
from specq.pipeline.report.models import (
    Acceptance,
    BenchReport,
    BestK,
    HostInfo,
    Run,
    RunAggregate,
    Spread,
    Stats,
    WorkloadInfo,
)


def make_report() -> BenchReport:
    """A baseline at 100 tok/s and k = 4 at 150, as a sweep writes them."""
    wl = WorkloadInfo(source="suite:code", digest="abc", requests=4, categories={"code": 4}, mode="chat",
                      max_tokens=16, temperature=0.0)  # fmt: skip
    rep = BenchReport(created_at="2026-12-02T00:00:00+00:00", specq_version="0.1.0",
                      host=HostInfo(platform="linux", python="3.11"), workload=wl)  # fmt: skip
    for label, k, tps in (("baseline", 0, 100.0), ("k=4", 4, 150.0)):
        agg = RunAggregate(
            requests=4, ok=4, output_tokens=64, output_tokens_per_s=tps,
            ttft_s=Stats(n=4, mean=0.01, p50=0.01, p90=0.02, p99=0.02), tpot_s=Stats(n=4, mean=0.002),
            itl_s=Stats(n=60, p50=0.002, p90=0.003, p99=0.004),
        )  # fmt: skip
        run = Run(label=label, draft_tokens=k, concurrency=1, baseline=k == 0, aggregate=agg)
        if k:
            run.speedup = run.decode_rate_speedup = run.e2e_speedup = tps / 100.0
            run.acceptance = Acceptance(source="lmdeploy:", drafts=10, draft_tokens=40, accepted_tokens=20,
                                        acceptance_rate=0.5, acceptance_length=3.0,
                                        per_position=[0.8, 0.6, 0.4, 0.2])  # fmt: skip
        rep.runs.append(run)
    return rep


def _widest(text: str) -> int:
    return max(len(line) for line in text.splitlines())


def _table_part(text: str) -> str:
    return text[: text.index("└")] + text[text.index("└") :].split("\n", 1)[0]


def wide_report():
    rep = make_report()
    for r in rep.runs:  # every column holds a figure, so nothing is left out for saying nothing
        r.aggregate.decode_rate_tokens_per_s = r.aggregate.output_tokens_per_s
        r.throughput = r.decode_throughput = Spread(
            n=2, used=2, median=100.0, min=95.0, max=105.0, rel_spread=0.1
        )
        r.status = "ok"
        r.step_cost_ratio = 1.5 if r.draft_tokens else None
    rep.runs[0].concurrency = 1
    rep.runs[1].concurrency = 4  # two concurrencies: the c column says something
    rep.runs[1].flags = ["unsteady: warm-up did not settle"]
    return rep


@pytest.mark.parametrize("width", [80, 120])
def test_the_table_fits_the_width_and_names_what_it_left_out(width: int) -> None:
    rep = wide_report()
    text = render(rep, "table", width=width)
    assert _widest(text) <= width
    table = _table_part(text)
    assert "k=4" in table and "baseline" in table and "τ" in table and "UNSTEADY" in table
    every = render(rep, "table")  # no width: every column, as the report files have it
    assert _widest(_table_part(every)) > 120
    if width == 80:
        assert "left out to fit 80 columns:" in text and "ITL p90 ms" in text and "--wide" in text
        assert "ITL" not in _table_part(text)


def test_wide_shows_every_column() -> None:
    rep = wide_report()
    wide = render(rep, "table", width=80, wide=True)
    header = next(line for line in wide.splitlines() if "run" in line and "check" in line)
    for name, *_ in COLUMNS:
        assert name in header
    assert "left out" not in wide


def test_the_recommendation_is_a_measured_k_and_an_unmeasured_prediction_says_so() -> None:
    rep = make_report()
    rows = [
        {"k": 1, "predicted_speedup": 1.10, "measured_speedup": None},
        {"k": 4, "predicted_speedup": 1.05, "measured_speedup": 1.28},
    ]
    rep.best_k = BestK(recommended_k=1, predicted_speedup=1.10, step_cost_fixed=1.0, step_cost_per_token=0.1,
                       acceptance_by_position=[0.6], rows=rows, best_measured_k=4, k_range=[4])  # fmt: skip
    text = render(rep, "table")
    assert "recommended draft tokens: k=4 (measured 1.28x)" in text
    assert "k=1" not in text  # the model's k=1 (1.10x) is below what k=4 measured: not worth a line
    rows = rep.best_k.rows
    rows[1]["measured_speedup"] = 0.9
    rows[0]["predicted_speedup"] = rep.best_k.predicted_speedup = 0.95
    text = render(rep, "table")
    assert "recommended draft tokens: k=4 (measured 0.90x) - below 1 at every measured k" in text
    assert "predicts k=1 (predicted 0.95x), which was not measured: try --draft-tokens 1" in text
    for row in rows:
        row["measured_speedup"] = None
    assert "k=1 (predicted 0.95x); not measured" in render(rep, "table")


def test_a_note_several_runs_share_is_printed_once() -> None:
    rep = make_report()
    for r in rep.runs:
        r.aggregate.token_count_mismatches = 3
    rep.notes = ["a report note"]
    text = render(rep, "table")
    assert text.count("tokenizer recount differs") == 1
    assert "baseline@c1, k=4@c1: tokenizer recount differs from the server's usage in 3 request(s)" in text
    md = render(rep, "md")
    assert md.count("a report note") == 1 and md.count("tokenizer recount") == 1


def _show(report: Path, columns: str, *extra: str) -> str:
    env = {**os.environ, "COLUMNS": columns}
    cmd = [sys.executable, "-m", "specq.cli", "report", "show", str(report), *extra]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout


def test_report_show_honours_columns(tmp_path: Path) -> None:
    p = wide_report().save(tmp_path / "report.json")
    for cols in ("80", "120"):
        shown = _show(p, cols)
        assert "k=4" in shown and _widest(shown) <= int(cols), shown
    assert _widest(_table_part(_show(p, "80", "--wide"))) > 120
    assert json.loads(_show(p, "80", "--json"))["runs"][1]["label"] == "k=4"


def test_the_throughput_plot_has_two_panels_integer_ticks_and_trial_error_bars() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rep = make_report()
    base = rep.runs[0]
    spec = []
    for k, rate in ((3, 120.0), (5, 150.0)):
        r = rep.runs[1].model_copy(deep=True)
        r.label, r.draft_tokens, r.speedup = f"k={k}", k, rate / 100
        r.speedup_low, r.speedup_high = rate / 100 - 0.1, rate / 100 + 0.2
        r.aggregate.decode_rate_tokens_per_s = rate
        r.decode_throughput = Spread(n=2, used=2, median=rate, min=rate - 10, max=rate + 5)
        spec.append(r)
    fig = throughput_figure(spec, [base], "decode", 1)
    try:
        top, bottom = fig.axes
        assert list(bottom.get_xticks()) == [3, 5]
        bars = top.containers[0]  # the errorbar container of the tok/s line
        segments = bars.lines[2][0].get_segments()
        assert [tuple(s[:, 1]) for s in segments] == [(110.0, 125.0), (140.0, 155.0)]
        low_high = [tuple(s[:, 1]) for s in bottom.containers[0].lines[2][0].get_segments()]
        assert low_high == [pytest.approx((1.1, 1.4)), pytest.approx((1.4, 1.7))]
        assert any(line.get_ydata()[0] == 1.0 for line in bottom.lines)  # 1x drawn in the speedup panel
    finally:
        plt.close(fig)
