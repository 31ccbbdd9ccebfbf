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
        "--temperature", "0", "--out", str(out), "--min-speedup", "1e6",
    )  # fmt: skip
    # a bar no pair of measured runs reaches (the speedup is a ratio of two real-time runs, so a reachable
    # bar would make the exit code depend on the load between them)
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
    assert json.loads((out / "report.json").read_text())["schema_version"] == "1.3"


def test_a_divergence_is_explained_by_the_baselines_logprob_margin(toy_pair, tmp_path):
    """The baseline served in float32, the k = 3 run verified in bfloat16 (other numerics, as a speculative
    engine's verification batch has): the run leaves the baseline's text on some of the code prompts (which
    ones depends on the toy's trained weights, so four prompts of 48 tokens are sent), and report.json says
    where, with which tokens, at what top-2 margin the baseline's untimed reference pass measured there, and
    that each is a near-tie. Each run's two trials are compared first: the embedded engine on CPU decodes the
    same tokens every time, so the baseline is reproducible and the divergences are judged."""
    import dataclasses

    from specq.pipeline.bench import BenchRequest
    from specq.pipeline.bench.runner import run_bench
    from specq.pipeline.config.models import SpecqConfig
    from specq.pipeline.serve import create_engine

    def factory(request, run_dir, progress):
        if request.draft_tokens > 0:
            bf16 = dataclasses.replace(request.options, dtype="bfloat16")
            request = dataclasses.replace(request, options=bf16)
        return create_engine(request, run_dir, progress)

    cfg = SpecqConfig.model_validate(
        {"model": {"model_path": str(toy_pair.target), "draft_model_path": str(toy_pair.draft)},
         "engine": {"engine": "embedded", "device": "cpu"},
         "bench": {"draft_tokens": [3], "suite": "code", "mode": "completion", "requests": 4,
                   "max_tokens": 48, "warmup": 0, "trials": 2, "out": str(tmp_path / "run")}}
    )  # fmt: skip
    run_bench(BenchRequest.from_config(cfg), engine_factory=factory)
    saved = json.loads((tmp_path / "run" / "report.json").read_text())
    base, k3 = saved["runs"]
    ref = base["reference_pass"]
    counts = (ref["requests"], ref["with_logprobs"], ref["with_token_ids"], ref["same_as_timed"])
    assert counts == (4, 4, 4, 4)
    assert "reference" not in base and all("scores" not in r for r in base["requests"])
    assert all(len(r["token_ids"]) == r["output_tokens"] for r in base["requests"] + k3["requests"])
    for run in (base, k3):
        rep = run["reproducibility"]
        assert (rep["trials"], rep["compared"], rep["equal"], rep["unit"], rep["reproducible"]) == (
            2, 4, 4, "tokens", True,
        )  # fmt: skip
        assert run["server_ready_s"] > 0  # the real server's launch to its first ready answer
    ll = k3["lossless"]
    assert ll["token_ids"] and (ll["compared"], ll["near_tie_margin"]) == (8, 0.25)
    assert (ll["baseline_reproducible"], ll["not_judged"]) == (True, 0)
    n = len(ll["mismatches"])
    assert n >= 1 and n % 2 == 0 and ll["exact_matches"] == 8 - n  # each diverging prompt, in both trials
    for m in ll["mismatches"]:
        ids = {r["id"]: r["token_ids"] for r in base["requests"]}[m["id"]]
        run_ids = {r["id"]: r["token_ids"] for r in k3["requests"]}[m["id"]]
        k = m["first_divergence"]
        assert ids[:k] == run_ids[:k] and ids[k] != run_ids[k]
        assert (m["baseline_token"]["id"], m["run_token"]["id"]) == (ids[k], run_ids[k])
        assert 0 <= m["margin"] < 0.25 and m["verdict"] == "near-tie" and m["runner_up"] is True
    assert (ll["near_ties"], ll["real_mismatches"], ll["unexplained"]) == (n, 0, 0)
    assert ll["summary"].startswith(f"lossless: {8 - n}/8 equal, {n} near-tie")
    assert ll["summary"] in (tmp_path / "run" / "summary.md").read_text()
