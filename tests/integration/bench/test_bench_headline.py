"""What the headline speedup measures, against the synthetic server (real HTTP, known schedule) with a time to
first token that is large next to decoding, as on the H200 (there about 25 ms of a 110 ms request): TTFT
320 ms, then the baseline decodes one token every 40 ms and the speculative run four tokens per 40 ms step
(steps long next to a busy machine's per-chunk lag of a few ms, which 10 ms steps did not outlast).
The modelled decode speedup is 4.0x; end to end, each request's 320 ms TTFT (which speculation does not
shorten) pulls it down to about 2.5x. The default headline is the decode rate's, with the end-to-end figure
beside it; `--headline e2e` switches the headline, best k and the gates to the end-to-end figure."""

from __future__ import annotations

import json

import pytest

from specq.pipeline.bench import BenchRequest
from specq.pipeline.bench.runner import run_bench
from specq.pipeline.config.models import SpecqConfig
from specq.pipeline.errors import GateFailed
from specq.pipeline.report.compare import enforce_gates, evaluate_gates
from tests.fake_openai import SyntheticEngine, plan_chunks, start_server, stop_server

pytestmark = pytest.mark.integration
K = 3
MAX_TOKENS = 33  # the first token at TTFT, then 32: 32 plain steps or 8 speculative steps of 4 tokens
TTFT, STEP = 0.320, 0.040
SERVER = ["--ttft-s", str(TTFT), "--step-s", str(STEP), "--accept-pattern", str(K)]  # every draft accepted


def decode_s(k: int) -> float:
    """A request's decode time on the schedule: every step after the first token."""
    return (len(plan_chunks(k, MAX_TOKENS, [K], 1)) - 1) * STEP


MODELLED_DECODE_SPEEDUP = decode_s(0) / decode_s(K)  # 1.280 / 0.320 s = 4.0
E2E_PREDICTED = (TTFT + decode_s(0)) / (TTFT + decode_s(K))  # 1.600 / 0.640 s = 2.5


def config(tmp_path, **bench) -> SpecqConfig:
    cfg = SpecqConfig()
    b = {"draft_tokens": [K], "requests": 4, "max_tokens": MAX_TOKENS, "metrics_settle_timeout_s": 5.0,
         "out": str(tmp_path / "out"), "suite": "code"}  # fmt: skip
    b.update(bench)
    cfg.bench = cfg.bench.model_validate(b)
    return cfg


def factory(request, run_dir, progress):
    return SyntheticEngine(request, run_dir, progress, *SERVER)


# Every speedup below is the ratio of two real-time runs (the baseline's and k = 3's, measured seconds apart),
# so no assertion rests on how close a measured ratio comes to a number: the load may change between the
# runs. What is checked is (a) arithmetic on the report's own figures, exact; (b) each run against its own
# server's counters over the same requests (one run, two ends of one interval); (c) effects of the schedule
# too large for any machine's jitter to hide: the decode-rate figure is nearer the schedule's 4.0x than the
# end-to-end 2.5x, the end-to-end one nearer 2.5x (to cross the midpoint, every speculative request's 320 ms
# decode would have to read ~74 ms longer than the baseline's, or every baseline request 480 ms longer end
# to end, where the absolute schedule leaves only the last chunk's delay); (d) gate verdicts against bars
# taken from the report.
MIDPOINT = (MODELLED_DECODE_SPEEDUP + E2E_PREDICTED) / 2  # 3.25
# the subject here is the headline, not the client-server consistency check (test_bench_steady.py's): with
# every core busy a client trial's decode rate read 11-15 % below its server's, past the 10 % default
# (min_speedup 1.0, a quarter of the schedule's decode speedup: the configured gate passes on any machine)
NOT_CONSISTENCY = {"consistency_tolerance": 0.5, "min_speedup": 1.0}


def _gate(report, basis: str, bar: float) -> bool:
    (gate,) = evaluate_gates(report, min_speedup=bar)
    assert gate.basis == f"lowest {basis} speedup over the trials", gate.reason
    return gate.passed


def test_the_headline_is_the_decode_rate_speedup_with_the_end_to_end_figure_beside_it(tmp_path):
    assert MODELLED_DECODE_SPEEDUP == pytest.approx(4.0)
    report = run_bench(BenchRequest.from_config(config(tmp_path, **NOT_CONSISTENCY)), engine_factory=factory)
    base, spec = report.runs
    assert report.speedup_basis == "decode"
    for run in (base, spec):
        assert run.flags == [] and run.consistency is not None and run.consistency.consistent, run.flags
        assert len(run.trials) == 3 and all(t.decode_tokens_per_s for t in run.trials)
        assert run.decode_throughput.median == run.aggregate.decode_rate_tokens_per_s
    # the client decode rate leaves the first token out, as the server's counters do: counted in, the 320 ms
    # TTFT would make the speculative run's 320 ms of decoding read 50 % slow (a busy machine's lag: 15 %)
    assert spec.consistency is not None
    assert abs(spec.consistency.decode_rel_diff or 1) < 0.35, spec.consistency
    # the decode-rate speedup is the ratio of the two runs' client decode rates, and the headline's figure
    rate_b, rate_s = base.aggregate.decode_rate_tokens_per_s, spec.aggregate.decode_rate_tokens_per_s
    assert rate_b and rate_s and spec.decode_rate_speedup == pytest.approx(rate_s / rate_b, rel=1e-9)
    assert spec.speedup == spec.decode_rate_speedup and spec.speedup_low == spec.decode_rate_speedup_low
    assert spec.speedup_low is not None and spec.speedup_high is not None
    assert spec.speedup_low <= spec.speedup <= spec.speedup_high
    # the server's counters give the schedule's decode speedup exactly (its decode time is the schedule's)
    assert spec.step_cost_source == "server" and spec.decode_speedup == pytest.approx(MODELLED_DECODE_SPEEDUP)
    # end to end is lower: each request takes its TTFT, which speculation does not shorten, plus its decode
    ttft_b, ttft_s = base.aggregate.ttft_s.p50, spec.aggregate.ttft_s.p50
    assert ttft_b >= TTFT and ttft_s >= TTFT  # causal: the server sends nothing before its TTFT
    assert spec.e2e_speedup is not None and spec.e2e_speedup < MIDPOINT < spec.speedup, (
        spec.e2e_speedup,
        spec,
    )
    h = report.headline
    assert h is not None and h.reliable and h.basis == "decode" and h.speedup == spec.speedup
    assert h.e2e_speedup == spec.e2e_speedup and h.ttft_p50_s == ttft_s
    assert h.text.startswith(f"headline: k={K}@c1 decode-rate speedup {spec.speedup:.2f}x over baseline")
    assert "(TTFT excluded; median of 3/3 steady trials, range " in h.text
    assert f"; end to end {spec.e2e_speedup:.2f}x incl. TTFT p50 {ttft_s * 1000:.0f} ms" in h.text
    # the gates use the decode-rate speedup's conservative end: exactly it passes, a hair above it fails
    gate = report.gates[0]
    assert gate.passed and gate.basis == "lowest decode-rate speedup over the trials", gate.reason
    assert _gate(report, "decode-rate", spec.speedup_low) and not _gate(
        report, "decode-rate", spec.speedup_low * 1.001
    )
    # a bar between the end-to-end and decode-rate figures passes here (it would fail end to end: next test)
    assert spec.e2e_speedup_low is not None and spec.e2e_speedup_low < spec.speedup_low
    assert _gate(report, "decode-rate", (spec.e2e_speedup_low + spec.speedup_low) / 2)
    # ... and a failed gate exits 3
    report.gates = evaluate_gates(report, min_speedup=spec.speedup_low * 1.001)
    with pytest.raises(GateFailed, match="best decode-rate speedup") as e:
        enforce_gates(report)
    assert e.value.exit_code == 3
    # both figures in every rendering
    out = tmp_path / "out"
    md = (out / "summary.md").read_text()
    assert f"**{h.text}**" in md and "| dec speedup |" in md and "e2e speedup" in md
    rows = (out / "runs.csv").read_text().splitlines()
    row = dict(zip(rows[0].split(","), rows[2].split(","), strict=True))
    assert float(row["e2e_speedup"]) == pytest.approx(spec.e2e_speedup)
    assert float(row["speedup"]) == pytest.approx(spec.speedup) and row["speedup_basis"] == "decode"


def test_headline_e2e_switches_the_headline_and_the_gates(tmp_path):
    cfg = config(tmp_path, headline="e2e", trials=2, **NOT_CONSISTENCY)
    report = run_bench(BenchRequest.from_config(cfg), engine_factory=factory)
    _, spec = report.runs
    assert report.speedup_basis == "e2e" and spec.speedup == spec.e2e_speedup
    assert spec.decode_rate_speedup is not None and spec.speedup < MIDPOINT < spec.decode_rate_speedup  # both
    h = report.headline
    assert h is not None and h.basis == "e2e" and h.speedup == spec.e2e_speedup
    assert h.text.startswith(f"headline: k={K}@c1 end-to-end speedup {spec.speedup:.2f}x over baseline")
    ttft_ms = spec.aggregate.ttft_s.p50 * 1000
    assert TTFT * 1000 <= ttft_ms
    assert f"(TTFT p50 {ttft_ms:.0f} ms included; median of 2/2 steady trials" in h.text
    assert f"; decode rate {spec.decode_rate_speedup:.2f}x" in h.text
    # the bar between the two figures that the decode-rate basis passes fails end to end, and says so
    assert report.gates[0].passed and report.gates[0].basis == "lowest end-to-end speedup over the trials"
    assert spec.speedup_low == spec.e2e_speedup_low and spec.decode_rate_speedup_low is not None
    bar = (spec.e2e_speedup_low + spec.decode_rate_speedup_low) / 2
    assert not _gate(report, "end-to-end", bar)
    report.gates = evaluate_gates(report, min_speedup=bar)
    with pytest.raises(GateFailed, match=r"min_speedup: best end-to-end speedup \d\.\d{3}x") as e:
        enforce_gates(report)
    assert e.value.exit_code == 3


def test_the_headline_option_on_the_command_line(cli, tmp_path):
    proc, url = start_server("--k", "4", "--step-s", "0.001", "--ttft-s", "0.002")
    try:
        args = ["bench", "--url", url, "--requests", "2", "--max-tokens", "8", "--warmup", "0", "--json"]
        code, out, err = cli(*args, "--out", str(tmp_path / "a"))
        assert code == 0, err
        assert json.loads(out)["speedup_basis"] == "decode"
        code, out, err = cli(*args, "--headline", "e2e", "--out", str(tmp_path / "b"))
        assert code == 0, err
        doc = json.loads(out)
        assert doc["speedup_basis"] == "e2e" and doc["config"]["bench"]["headline"] == "e2e"
        code, _, err = cli(*args, "--headline", "ttft", "--out", str(tmp_path / "c"))
        assert code == 2 and err.strip().splitlines()[-1].startswith("specq: error: bench.headline:")
    finally:
        stop_server(proc)
