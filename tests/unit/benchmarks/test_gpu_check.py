"""The check scenario's tables on the real outputs of the H200 run of 2026-12-01 23:50 UTC: the bench
report of the Qwen3.5 toy's DFlash sweep on its held-out prefixes, and `specq draft eval` on the same prompts
there."""

import gzip
import json
from pathlib import Path

from benchmarks.scenarios.check import budgeted_step, offline_vs_served, tau_table

FIXTURES = Path(__file__).parents[2] / "fixtures"


def load() -> tuple[dict, dict]:
    with gzip.open(FIXTURES / "bench-reports" / "h200-qwen35-dflash-heldout-1.2.json.gz", "rt") as f:
        report = json.load(f)
    offline = json.loads((FIXTURES / "draft-eval" / "h200-qwen35-dflash-heldout-eval.json").read_text())
    return report, offline


def test_offline_tau_is_paired_with_the_served_tau_at_the_same_k():
    report, offline = load()
    rows = offline_vs_served(offline, report)
    assert [r["k"] for r in rows] == [3, 4, 5, 6]  # the baseline has no τ; walk_tau starts at k = 1
    for r in rows:
        assert r["offline_tau"] == offline["walk_tau"][r["k"] - 1]
        run = next(x for x in report["runs"] if x["draft_tokens"] == r["k"])
        assert r["served_tau"] == run["acceptance"]["acceptance_length"]
    # what docs/verification.md records for that run: offline 3-6 % above the served τ
    assert all(0.03 <= r["rel_diff"] <= 0.07 for r in rows), rows
    table = tau_table(rows)
    assert len(table) == 2 + 4 and table[2].startswith("| 3 | 2.77 | 2.61 | +6.")
    assert table[2].endswith("| – |")  # that eval predates walk_tau_text


def test_the_text_only_offline_tau_is_paired_when_the_eval_has_it():
    report, offline = load()
    offline = dict(offline, walk_tau_text=[1.5, 2.0, 2.5, 2.75])  # k = 1..4 only
    rows = offline_vs_served(offline, report)
    assert [r["offline_tau_text"] for r in rows] == [2.5, 2.75, None, None]
    assert tau_table(rows)[2].endswith("| 2.50 |")


def test_runs_beyond_the_drafters_block_or_not_ok_are_left_out():
    report, offline = load()
    offline = dict(offline, walk_tau=offline["walk_tau"][:4])  # a drafter that offers k <= 4 only
    report["runs"][1]["status"] = "failed"  # k = 3
    assert [r["k"] for r in offline_vs_served(offline, report)] == [4]


def test_a_step_runs_within_the_budget_and_is_skipped_once_it_is_spent(tmp_path):
    import sys
    import time

    cmd = [sys.executable, "-c", "print('ran')"]
    res = budgeted_step("ok", cmd, tmp_path, 60, time.monotonic() + 120, reserve=30)
    assert res["exit"] == 0 and (tmp_path / "ok.out").read_text() == "ran\n"
    res = budgeted_step("late", cmd, tmp_path, 60, time.monotonic() + 10, reserve=30)
    assert res["exit"] is None and res["skipped"].endswith("s left < 30 s")
    assert not (tmp_path / "late.out").exists()
    slow = [sys.executable, "-c", "import time; time.sleep(120)"]  # the time left bounds the step
    res = budgeted_step("slow", slow, tmp_path, 600, time.monotonic() + 3, reserve=1, margin=1)
    # killed at the 2 s left (exit 124), long before its 120 s sleep or its own 600 s timeout; the bound
    # is 10x the 2 s, so a busy machine's slow process start does not fail it
    assert res["exit"] == 124 and res["seconds"] < 20
