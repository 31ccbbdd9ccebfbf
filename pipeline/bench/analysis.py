"""What the benchmark computes from its records: per-run aggregates (mean/p50/p90/p99 of TTFT, latency,
per-token ITL, TPOT, tokens/s, the client decode rate), the self-consistency of client and server figures,
the median and spread over trials, the roofline fraction of AR runs, each run's trials against each other
and the lossless check of speculative runs against the baseline, whether the outputs loop (a drafter
predicts a loop almost perfectly), speedups on both bases (decode rate, end to end) and the step cost, the
headline, and the best-k prediction through the shared speedup model (`specq.pipeline.speedup`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..checkpoint import Checkpoint
from ..engines.speculation import MAX_DRAFT_TOKENS
from ..repetition import looping, partly_looping
from ..report.models import (
    BenchReport,
    BestK,
    Consistency,
    Headline,
    HeadlineBasis,
    Lossless,
    Reproducibility,
    RequestRecord,
    Roofline,
    Run,
    RunAggregate,
    ServerCheck,
    Spread,
    Stats,
)
from ..report.rates import BASIS_NAMES, client_decode_rate, run_rate, trial_rate
from ..speedup import StepCost, StepCostCurve, best_k, expected_tokens_per_step, load_curve, predict_speedup
from .client import TokenCounter, per_token_latencies
from .divergence import NEAR_TIE_MARGIN, Divergence, common_prefix, explain, not_judged
from .divergence import summary as divergence_summary


def aggregate(records: Sequence[RequestRecord], wall_s: float) -> RunAggregate:
    ok = [r for r in records if r.ok]
    itl: list[float] = []
    tpot: list[float] = []
    req_tps: list[float] = []
    dec_tps: list[float] = []
    chunks = tokens_after_first = 0
    sources: dict[str, int] = {}
    for r in ok:
        i, t = per_token_latencies(r.chunk_times, r.chunk_tokens)
        itl.extend(i)
        if t is not None:
            tpot.append(t)
        n = r.output_tokens or 0
        if r.e2e_s and n:
            req_tps.append(n / r.e2e_s)
        if r.e2e_s and r.ttft_s is not None and n > 1 and r.e2e_s > r.ttft_s:
            dec_tps.append((n - 1) / (r.e2e_s - r.ttft_s))
        nz = [c for c in r.chunk_tokens if c > 0]
        if len(nz) > 1:
            chunks += len(nz) - 1
            tokens_after_first += sum(nz[1:])
        if r.chunk_token_source:
            sources[r.chunk_token_source] = sources.get(r.chunk_token_source, 0) + 1
    out_tokens = sum(r.output_tokens or 0 for r in ok)
    n = len(records)
    return RunAggregate(
        requests=n,
        ok=len(ok),
        errors=n - len(ok),
        error_rate=(n - len(ok)) / n if n else 0.0,
        duration_s=wall_s,
        output_tokens=out_tokens,
        output_tokens_per_s=out_tokens / wall_s if wall_s > 0 and ok else None,
        decode_rate_tokens_per_s=client_decode_rate(ok),
        request_tokens_per_s=Stats.of(req_tps),
        decode_tokens_per_s=Stats.of(dec_tps),
        ttft_s=Stats.of([r.ttft_s for r in ok if r.ttft_s is not None]),
        e2e_s=Stats.of([r.e2e_s for r in ok if r.e2e_s is not None]),
        itl_s=Stats.of(itl),
        tpot_s=Stats.of(tpot),
        tokens_per_chunk=tokens_after_first / chunks if chunks else None,
        token_count_mismatches=sum(1 for r in ok if r.token_count_mismatch),
        chunk_token_sources=sources,
    )


def _median(values: Sequence[float]) -> float | None:
    import statistics

    return float(statistics.median(values)) if values else None


def _rel(a: float | None, b: float | None) -> float | None:
    return (a - b) / b if a is not None and b else None


def consistency(
    records: Sequence[RequestRecord],
    wall_s: float,
    server: ServerCheck | None,
    tolerance: float,
    ttft_ref_s: float | None = None,
) -> Consistency | None:
    """The client's figures against the server's counters over the same requests. Three checks, each a
    relative difference against `tolerance`: output tokens (client usage vs the server's generation
    counter), decode rate (the headline's Σ (tokens − 1) / Σ (e2e − TTFT) vs the server's tokens after each
    request's first / Σ decode time), and output rate (client tokens / wall vs what the server's decode rate
    implies: every request taking `ttft_ref_s` — the run's median TTFT — for its first token plus the rest
    at the server's decode rate, at the run's own overlap Σ e2e / wall). None when the server exports
    neither counter."""
    if server is None or (server.generation_tokens is None and server.server_decode_tokens_per_s is None):
        return None
    ok = [r for r in records if r.ok and r.e2e_s]
    c = Consistency(tolerance=tolerance)
    c.client_output_tokens = sum(r.output_tokens or 0 for r in ok)
    c.server_generation_tokens = server.generation_tokens
    c.tokens_rel_diff = _rel(float(c.client_output_tokens), server.generation_tokens)
    c.client_decode_tokens_per_s = client_decode_rate(ok)
    c.server_decode_tokens_per_s = server.server_decode_tokens_per_s
    c.decode_rel_diff = _rel(c.client_decode_tokens_per_s, c.server_decode_tokens_per_s)
    if ok and wall_s > 0:
        c.client_output_tokens_per_s = c.client_output_tokens / wall_s
        rate = c.server_decode_tokens_per_s
        ttft = ttft_ref_s
        if ttft is None:
            ttft = _median([r.ttft_s for r in ok if r.ttft_s is not None])
        if rate and ttft is not None:
            implied_e2e = sum(ttft + max((r.output_tokens or 0) - 1, 0) / rate for r in ok)
            actual_e2e = sum(r.e2e_s or 0.0 for r in ok)
            if implied_e2e > 0:
                c.implied_output_tokens_per_s = c.client_output_tokens_per_s * actual_e2e / implied_e2e
                c.output_rel_diff = _rel(c.client_output_tokens_per_s, c.implied_output_tokens_per_s)
    checks = [
        ("output tokens", c.tokens_rel_diff, "client", "server's generation counter"),
        ("decode rate", c.decode_rel_diff, "client", "server's"),
        ("output rate", c.output_rel_diff, "client", "rate the server's decode rate implies"),
    ]
    done = [x for x in checks if x[1] is not None]
    if not done:
        return c
    for name, diff, who, other in done:
        assert diff is not None
        if abs(diff) > tolerance:
            c.problems.append(f"{who} {name} {abs(diff):.0%} {'above' if diff > 0 else 'below'} the {other}")
    c.consistent = not c.problems
    return c


def warmup_settled(rates: Sequence[float], tolerance: float) -> bool:
    """Whether the warm-up has reached steady state: the last pass was no faster than the one before it by
    more than `tolerance`. Compilation on first use only ever makes early passes slower, so the warm-up ends
    once the rate stops rising; a pass slower than the last is noise, not warm-up (LMDeploy's host-bound
    decoding of a toy varies 10-20 % between identical passes, seen on the H200)."""
    return len(rates) >= 2 and rates[-1] <= rates[-2] * (1 + tolerance)


def spread(values: Sequence[float], used: Sequence[float]) -> Spread:
    """Median and range of `used` (the steady trials' figures) out of `values` (all trials')."""
    if not used:
        return Spread(n=len(values))
    med = _median(used)
    lo, hi = min(used), max(used)
    return Spread(
        n=len(values), used=len(used), median=med, min=lo, max=hi,
        rel_spread=(hi - lo) / med if med else None,
    )  # fmt: skip


def used_rates(run: Run, basis: HeadlineBasis = "e2e") -> list[float]:
    """The trial rates behind a run's tok/s on `basis`: its steady trials', else all of them."""
    rates = [r for t in run.trials if (r := trial_rate(t, basis)) is not None]
    steady = [r for t in run.trials if t.steady and (r := trial_rate(t, basis)) is not None]
    if steady or rates:
        return steady or rates
    one = run_rate(run, basis)
    return [one] if one else []


def speedup_range(base: Run, run: Run, basis: HeadlineBasis = "e2e") -> tuple[float | None, float | None]:
    """(lowest, highest) speedup the trials allow: the run's slowest trial over the baseline's fastest, and
    its fastest over the baseline's slowest. The low end is what the gates use."""
    rb, rr = used_rates(base, basis), used_rates(run, basis)
    if not rb or not rr or min(rb) <= 0:
        return None, None
    return min(rr) / max(rb), max(rr) / min(rb)


def speedups(base: Run, run: Run, basis: HeadlineBasis) -> None:
    """Fill `run`'s speedups over `base` on both bases (median over median, and the trials' range), and
    `run.speedup` with the one on `basis`."""
    figures: dict[str, tuple[float | None, float | None, float | None]] = {}
    bases: tuple[HeadlineBasis, ...] = ("e2e", "decode")
    for b in bases:
        rb, rr = run_rate(base, b), run_rate(run, b)
        if not rb or rr is None:
            figures[b] = (None, None, None)
            continue
        figures[b] = (rr / rb, *speedup_range(base, run, b))
        run.baseline_label = base.label
    run.e2e_speedup, run.e2e_speedup_low, run.e2e_speedup_high = figures["e2e"]
    run.decode_rate_speedup, run.decode_rate_speedup_low, run.decode_rate_speedup_high = figures["decode"]
    run.speedup, run.speedup_low, run.speedup_high = figures[basis]


def headline(report: BenchReport) -> Headline | None:
    """The best speculative run (highest median speedup on the report's basis) with its range, its trials,
    the other basis's speedup and the run's TTFT, its step cost, and every reason not to trust it: its own
    flags and its baseline's."""
    spec = [r for r in report.runs if not r.baseline and r.status == "ok" and r.speedup is not None]
    if not spec:
        return None
    best = max(spec, key=lambda r: r.speedup or 0.0)
    assert best.speedup is not None
    base = next(
        (r for r in report.runs if r.label == best.baseline_label and r.concurrency == best.concurrency), None
    )
    warnings = [f"{best.key} {f}" for f in best.flags]
    if base is not None:
        warnings += [f"{base.key} {f}" for f in base.flags]
    steady = sum(1 for t in best.trials if t.steady)
    basis = report.speedup_basis
    ttft = best.aggregate.ttft_s.p50
    h = Headline(
        run=best.key, basis=basis, speedup=best.speedup, speedup_low=best.speedup_low,
        speedup_high=best.speedup_high, e2e_speedup=best.e2e_speedup,
        decode_rate_speedup=best.decode_rate_speedup, ttft_p50_s=ttft,
        trials=max(len(best.trials), 1), steady_trials=steady if best.trials else 1,
        decode_speedup=best.decode_speedup, step_cost_ratio=best.step_cost_ratio,
        reliable=not warnings, warnings=warnings,
    )  # fmt: skip
    text = f"headline: {best.key} {BASIS_NAMES[basis]} speedup {best.speedup:.2f}x over {best.baseline_label}"
    ms = f"TTFT p50 {ttft * 1000:.0f} ms" if ttft is not None else None
    notes = ["TTFT excluded" if basis == "decode" else f"{ms or 'TTFT'} included"]
    if h.trials > 1:
        notes.append(f"median of {h.steady_trials}/{h.trials} steady trials")
        if best.speedup_low is not None and best.speedup_high is not None:
            notes[-1] += f", range {best.speedup_low:.2f}-{best.speedup_high:.2f}x"
    text += f" ({'; '.join(notes)})"
    if basis == "decode" and best.e2e_speedup is not None:
        text += f"; end to end {best.e2e_speedup:.2f}x" + (f" incl. {ms}" if ms else "")
    elif basis == "e2e" and best.decode_rate_speedup is not None:
        text += f"; decode rate {best.decode_rate_speedup:.2f}x"
    if best.step_cost_ratio is not None:
        text += f"; a speculative step costs {best.step_cost_ratio:.2f} plain steps"
        if best.decode_speedup is not None and best.step_cost_source == "server":
            text += f" (server's decode-rate speedup {best.decode_speedup:.2f}x)"
    if warnings:
        text += " — NOT RELIABLE: " + "; ".join(warnings)
    h.text = text
    return h


def server_trial_rate(run: Run) -> float | None:
    """The server's decode rate for `run` on the headline's basis: the median over its steady trials (else
    all) of each trial's own counters, so that it compares like with like with the client's median; a run
    without per-trial counters gives its whole-run figure."""
    rates = [
        (t.steady, r) for t in run.trials if t.consistency and (r := t.consistency.server_decode_tokens_per_s)
    ]
    used = [r for steady, r in rates if steady] or [r for _, r in rates]
    if used:
        return _median(used)
    return run.server.server_decode_tokens_per_s if run.server else None


def step_cost(base: Run, run: Run) -> None:
    """The measured cost of one speculative step in plain steps: τ over the decode-rate speedup, i.e.
    (spec step time) / (plain step time). The decode rates are the server's when both runs have one (the
    median of the trials' own counters, as the headline takes the client's: `server_trial_rate`), else the
    client's (Σ (tokens − 1) / Σ (e2e − TTFT))."""
    sb, sr = server_trial_rate(base), server_trial_rate(run)
    if sb and sr:
        run.decode_speedup = sr / sb
        run.step_cost_source = "server"
    else:
        cb, cr = client_decode_rate(base.requests), client_decode_rate(run.requests)
        if not cb or not cr:
            return
        run.decode_speedup = cr / cb
        run.step_cost_source = "client"
    tau = run.acceptance.acceptance_length if run.acceptance else None
    if tau and run.decode_speedup:
        run.step_cost_ratio = tau / run.decode_speedup


# ----------------------------------------------------------------------------------------------- roofline


def weight_bytes_per_token(model_path: str | Path) -> int:
    """Bytes of weights read per decoded token (batch 1): every tensor, except that the input embedding is
    a row gather unless it doubles as the output head (tied embeddings)."""
    ck = Checkpoint(model_path)
    tied = bool(ck.text_config.get("tie_word_embeddings", ck.config.get("tie_word_embeddings", False)))
    has_head = any(n.endswith("lm_head.weight") for n in ck.tensors)
    total = 0
    for name, t in ck.tensors.items():
        if "embed_tokens" in name and (has_head or not tied):
            continue
        total += t.nbytes
    return total


def roofline(
    model_path: str | Path | None,
    decode_tokens_per_s: float | None,
    bandwidth_gbps: float | None,
    source: str,
) -> Roofline | None:
    if not model_path or not decode_tokens_per_s or not bandwidth_gbps:
        return None
    wb = weight_bytes_per_token(model_path)
    if wb <= 0:
        return None
    ceiling = bandwidth_gbps * 1e9 / wb
    return Roofline(
        weight_bytes_per_token=wb,
        bandwidth_gbps=bandwidth_gbps,
        bandwidth_source=source,
        ceiling_tokens_per_s=ceiling,
        decode_tokens_per_s=decode_tokens_per_s,
        fraction=decode_tokens_per_s / ceiling,
    )


# ----------------------------------------------------------------------------------------------- lossless


def reproducibility(run: Run) -> Reproducibility | None:
    """A run's trials against each other, the first check of the lossless comparison: for every prompt and
    repeat with an ok output in two or more trials, whether every trial gave the same output (the servers'
    token ids when every output has them, else the text). None when no request succeeded."""
    by_key: dict[tuple[str, int], dict[int, RequestRecord]] = {}
    for r in run.requests:
        if r.ok:
            by_key.setdefault((r.id, r.repeat), {}).setdefault(r.trial, r)
    if not by_key:
        return None
    ids = all(r.token_ids is not None for recs in by_key.values() for r in recs.values())

    def seq(r: RequestRecord) -> Sequence[object]:
        return (r.token_ids or []) if ids else r.output_text

    rep = Reproducibility(
        trials=len({t for recs in by_key.values() for t in recs}), unit="tokens" if ids else "chars"
    )
    for (pid, repeat), recs in by_key.items():
        if len(recs) < 2:
            continue
        rep.compared += 1
        first, *rest = (recs[t] for t in sorted(recs))
        other = next((r for r in rest if seq(r) != seq(first)), None)
        if other is None:
            rep.equal += 1
            continue
        if len(rep.differing) < 20:
            a, b = seq(first), seq(other)
            rep.differing.append(
                {"id": pid, "repeat": repeat, "trial": other.trial, "first_divergence": common_prefix(a, b),
                 "first_len": len(a), "other_len": len(b)}
            )  # fmt: skip
    if rep.compared:
        rep.reproducible = rep.equal == rep.compared
    rep.summary = reproducibility_summary(rep)
    return rep


def reproducibility_summary(rep: Reproducibility) -> str:
    """'trials agree: 4/4 prompts the same in all 3 trials', or 'NOT reproducible: …' naming the first."""
    if rep.reproducible is None:
        return "reproducibility not checked (fewer than two trials)"
    if rep.reproducible:
        return f"trials agree: {rep.equal}/{rep.compared} prompts the same in all {rep.trials} trials"
    first = rep.differing[0]
    return (
        f"NOT reproducible: its {rep.trials} trials gave different greedy outputs for "
        f"{rep.compared - rep.equal}/{rep.compared} prompts (first: {first['id']}, trial "
        f"{first['trial'] + 1} leaves trial 1 at {rep.unit[:-1]} {first['first_divergence']})"
    )


def lossless(
    baseline: Run,
    run: Run,
    counter: TokenCounter | None = None,
    near_tie_margin: float = NEAR_TIE_MARGIN,
) -> Lossless | None:
    """Compare outputs prompt by prompt (same id and repeat): as the servers' token ids when both sent them,
    else re-tokenized with a tokenizer, else as characters; explain every divergence from the baseline's
    reference pass (`divergence.explain`: near-tie, mismatch or unexplained). A baseline whose own trials
    differ (`baseline.reproducibility`) judges nothing: every divergence is baseline-not-reproducible."""
    rep = baseline.reproducibility
    unreproducible = rep is not None and rep.reproducible is False
    why = (
        f"the baseline's own trials differ on {rep.compared - rep.equal}/{rep.compared} prompts"
        if rep is not None and unreproducible
        else None
    )
    base: dict[tuple[str, int], RequestRecord] = {}
    for r in baseline.requests:  # the first trial's output: every later one must equal it too
        if r.ok:
            base.setdefault((r.id, r.repeat), r)
    pairs = [(base[(r.id, r.repeat)], r) for r in run.requests if r.ok and (r.id, r.repeat) in base]
    if not pairs:
        return None
    by_ids = all(a.token_ids is not None and b.token_ids is not None for a, b in pairs)
    unit = "tokens" if by_ids or counter is not None else "chars"
    decode = getattr(counter, "decode", None)
    piece = getattr(counter, "piece_text", None)
    exact = 0
    agree: list[float] = []
    mismatches: list[dict[str, object]] = []
    found: list[Divergence] = []
    for ra, rb in pairs:
        a, b = ra.output_text, rb.output_text
        if by_ids:
            sa: Sequence[object] = ra.token_ids or []
            sb: Sequence[object] = rb.token_ids or []
        elif counter is not None:
            sa, sb = counter.encode(a), counter.encode(b)
        else:
            sa, sb = a, b
        if sa == sb:
            exact += 1
            agree.append(1.0)
            continue
        k = common_prefix(sa, sb)
        longest = max(len(sa), len(sb)) or 1
        agree.append(k / longest)
        d = explain(ra, rb, k, by_ids, baseline.reference.get(ra.id), decode, near_tie_margin, piece)
        if why is not None:
            d = not_judged(d, why)
        found.append(d)
        mismatches.append(
            {
                "id": ra.id,
                "first_divergence": k,
                "baseline_len": len(sa),
                "run_len": len(sb),
                "baseline_next": repr(a[k : k + 20]) if unit == "chars" else None,
                **d.as_dict(),
            }
        )
    n = len(pairs)
    return Lossless(
        compared=n,
        exact_matches=exact,
        exact_match_rate=exact / n,
        mean_prefix_agreement=sum(agree) / n,
        unit=unit,
        token_ids=by_ids,
        mismatches=mismatches[:20],
        passed=exact == n,
        near_ties=sum(d.verdict == "near-tie" for d in found),
        real_mismatches=sum(d.verdict == "mismatch" for d in found),
        unexplained=sum(d.verdict == "unexplained" for d in found),
        near_tie_margin=near_tie_margin,
        baseline_reproducible=rep.reproducible if rep is not None else None,
        not_judged=sum(d.verdict == "baseline-not-reproducible" for d in found),
        summary=divergence_summary(n, exact, found, rep.reproducible if rep is not None else None),
    )


# ----------------------------------------------------------------------------------------------- repetition


def judges_outputs(run: Run) -> bool:
    """Whether a run's outputs are checked for loops: the baseline's, which every speculative run reproduces,
    or a running server's (`--url`) only run."""
    return run.baseline or run.engine == "external"


def partial_repetition_note(records: Sequence[RequestRecord]) -> str | None:
    """A note (not a flag) when some outputs of a run loop but most do not: the loops' near-perfect
    acceptance lifts τ and the speedup above what the rest of the text gets."""
    per_prompt = {r.id: r.output_text for r in records if r.ok}  # trials repeat the prompts
    note = partly_looping(list(per_prompt.values()))
    if note is None:
        return None
    return f"partly repetitive: {note}; their near-perfect acceptance lifts τ and speedup above the rest's"


def repetition_flag(records: Sequence[RequestRecord]) -> str | None:
    """A warning when most outputs of a run loop (`specq.pipeline.repetition`): there every drafter is right
    almost every time, so τ and the speedup measure the engine's speculative step, not the drafter."""
    note = looping([r.output_text for r in records if r.ok])
    if note is None:
        return None
    return (
        f"repetitive: {note}; τ and speedup on a loop overstate what real text gets: use prompts the model "
        "answers properly"
    )


# ----------------------------------------------------------------------------------------------- best k


def _tpot(run: Run) -> float | None:
    return run.aggregate.tpot_s.mean


def edge_note(measured: dict[int, float], k_limit: int | None) -> tuple[int | None, str | None]:
    """(best measured k, a note when it is the smallest or largest k measured and the range could go on)."""
    if not measured:
        return None, None
    best = max(measured, key=lambda k: measured[k])
    ks = sorted(measured)
    limit = k_limit if k_limit is not None else MAX_DRAFT_TOKENS
    if len(ks) > 1 and best == ks[-1] and best < limit:
        return best, (
            f"the best measured k={best} is the largest measured: a larger k may be faster "
            f"(the method allows up to {limit}; try --draft-tokens {best}..{min(limit, best + 4)})"
        )
    if len(ks) > 1 and best == ks[0] and best > 1:
        return best, (
            f"the best measured k={best} is the smallest measured: a smaller k may be faster "
            f"(try --draft-tokens {max(1, best - 2)}..{best})"
        )
    return best, None


def predict_best_k(
    baseline: Run,
    spec_runs: Sequence[Run],
    k_limit: int | None = None,
    *,
    weight_bytes: int | None = None,
    curve: StepCostCurve | None = None,
) -> BestK | None:
    """From measured per-position acceptance and the measured cost of a draft+verify step relative to an AR
    step (cost(k) = τ_k · TPOT_k / TPOT_AR), fit the shared StepCost and recommend k. Runs at two or more k
    give the line; runs at one k give its height, and the slope in k comes from the measured step-cost curve
    (`speedup.STEP_COST_CURVE`) at the target's `weight_bytes`. `k_limit`: the largest k the method allows
    (DFlash: block_size − 1), for the note on the edge of the measured range."""
    runs = [
        r for r in spec_runs if r.status == "ok" and r.acceptance and r.acceptance.per_position and _tpot(r)
    ]
    base_tpot = _tpot(baseline)
    if not runs or not base_tpot:
        return None
    widest = max(runs, key=lambda r: (len(r.acceptance.per_position) if r.acceptance else 0, r.draft_tokens))
    assert widest.acceptance is not None
    acc = widest.acceptance.per_position
    points = []
    for r in runs:
        assert r.acceptance is not None
        tau = r.acceptance.acceptance_length or expected_tokens_per_step(
            r.acceptance.per_position, r.draft_tokens
        )
        points.append((r.draft_tokens, tau * (_tpot(r) or 0.0) / base_tpot))
    curve = curve or load_curve()
    prior = curve.at(weight_bytes)
    cost = StepCost.fit(points, prior=prior)
    measured_ks = sorted({kk for kk, c in points if c > 0})
    if len(measured_ks) > 1:
        basis = f"measured at k = {', '.join(map(str, measured_ks))}"
    else:
        at = measured_ks[0] if measured_ks else "-"
        basis = f"measured at k = {at}; slope from the {curve.describe(weight_bytes)}"
    ks = sorted({r.draft_tokens for r in runs} | set(range(1, len(acc) + 1)))
    k, speed = best_k(acc, ks, cost)
    measured = {r.draft_tokens: r.speedup for r in runs}
    best_measured, edge = edge_note({k: v for k, v in measured.items() if v is not None}, k_limit)
    rows = [
        {
            "k": kk,
            "predicted_speedup": round(predict_speedup(acc, kk, cost), 4),
            "measured_speedup": measured.get(kk),
            "expected_tokens_per_step": round(expected_tokens_per_step(acc, kk), 4),
        }
        for kk in ks
    ]
    return BestK(
        recommended_k=k,
        predicted_speedup=speed,
        step_cost_fixed=cost.fixed,
        step_cost_per_token=cost.per_token,
        step_cost_basis=basis,
        acceptance_by_position=acc,
        rows=rows,
        best_measured_k=best_measured,
        k_range=sorted(measured),
        k_limit=k_limit,
        edge=edge,
    )
