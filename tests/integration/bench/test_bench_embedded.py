"""`specq bench` end to end on the embedded engine (serve stage) with a real target/draft pair on CPU: a
sweep --draft-tokens 3..4 plus the paired baseline, restarting the server per k; the report validates,
acceptance comes from the server's counters and agrees with the engine's own running figures, the lossless
check passes at temperature 0, plots are written, and a violated gate exits 3."""

from __future__ import annotations

import json

import pytest

from specq.pipeline.report import BenchReport

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_embedded_sweep_with_baseline_and_gate(cli, toy_pair, tmp_path):
    target, draft = toy_pair.target, toy_pair.draft
    out = tmp_path / "run"
    code, _, err = cli(
        "bench", str(target), "--draft-model", str(draft), "--engine", "embedded", "--draft-tokens", "3..4",
        "--suite", "code", "--requests", "2", "--max-tokens", "16", "--warmup", "0", "--trials", "1",
        "--temperature", "0", "--out", str(out), "--min-speedup", "100",
    )  # fmt: skip
    assert code == 3, err
    assert err.strip().splitlines()[-1].startswith("specq: error: gate failed: min_speedup")
    report = BenchReport.load(out / "report.json")
    assert report.complete and report.engine.name == "embedded"
    assert [r.label for r in report.runs] == ["baseline", "k=3", "k=4"]
    assert all(r.status == "ok" for r in report.runs), [(r.label, r.reason, r.log_tail) for r in report.runs]
    base = report.runs[0]
    assert base.acceptance is None and base.aggregate.output_tokens > 0
    for run in report.runs[1:]:
        acc = run.acceptance
        assert acc is not None and acc.source == "lmdeploy:" and acc.drafts > 0
        # transformers drafts fewer than k tokens when max_tokens is near: the engine counts what it drafted
        assert acc.drafts * (run.draft_tokens - 1) < acc.draft_tokens <= acc.drafts * run.draft_tokens
        assert len(acc.per_position) == run.draft_tokens
        assert sum(acc.per_position) == pytest.approx(acc.accepted_tokens / acc.drafts)
        # warm-up 0: the run is the server's whole life, so its own running gauges must equal the diffs
        assert acc.server_mean_acceptance_length == pytest.approx(acc.acceptance_length, rel=1e-9)
        assert acc.server_mean_acceptance_rate == pytest.approx(acc.acceptance_rate, rel=1e-9)
        assert run.lossless is not None and run.lossless.passed, run.lossless
        assert run.lossless.unit == "tokens"
        # per-chunk counts come from the target's own tokenizer; its recount is checked against usage
        assert run.aggregate.chunk_token_sources == {"tokenizer": 2}
        assert all(r.tokenizer_tokens is not None for r in run.requests)
        assert run.server is not None and run.server.generation_tokens == run.aggregate.output_tokens
        assert run.speedup is not None
    assert report.gates[0].name == "min_speedup" and not report.gates[0].passed
    for png in ("throughput_vs_k", "acceptance_by_position", "latency_percentiles"):
        assert (out / "plots" / f"{png}.png").stat().st_size > 1000
    assert json.loads((out / "report.json").read_text())["schema_version"] == "1.2"
