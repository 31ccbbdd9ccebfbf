"""What the benchmark computes from its records: per-run aggregates (mean/p50/p90/p99 of TTFT, latency,
per-token ITL, TPOT, tokens/s), the roofline fraction of AR runs, the lossless check of speculative runs
against the baseline, speedups, and the best-k prediction through the shared speedup model
(`specq.pipeline.speedup`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..checkpoint import Checkpoint
from ..report.models import BestK, Lossless, RequestRecord, Roofline, Run, RunAggregate, Stats
from ..speedup import StepCost, best_k, expected_tokens_per_step, predict_speedup
from .client import TokenCounter, per_token_latencies


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


def client_decode_rate(records: Sequence[RequestRecord]) -> float | None:
    """Σ output tokens / Σ (e2e − TTFT): the client's figure comparable to a server's decode counters."""
    toks = sum(r.output_tokens or 0 for r in records if r.ok)
    time_s = sum((r.e2e_s or 0) - (r.ttft_s or 0) for r in records if r.ok and r.ttft_s is not None)
    return toks / time_s if time_s > 0 else None


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


def _common_prefix(a: Sequence[object], b: Sequence[object]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def lossless(baseline: Run, run: Run, counter: TokenCounter | None = None) -> Lossless | None:
    """Compare outputs prompt by prompt (same id and repeat); token-level with a tokenizer, else chars."""
    base = {(r.id, r.repeat): r.output_text for r in baseline.requests if r.ok}
    pairs = [
        (r.id, base[(r.id, r.repeat)], r.output_text)
        for r in run.requests
        if r.ok and (r.id, r.repeat) in base
    ]
    if not pairs:
        return None
    unit = "tokens" if counter is not None else "chars"
    exact = 0
    agree: list[float] = []
    mismatches = []
    for rid, a, b in pairs:
        sa: Sequence[object] = counter.encode(a) if counter is not None else a
        sb: Sequence[object] = counter.encode(b) if counter is not None else b
        if sa == sb:
            exact += 1
            agree.append(1.0)
            continue
        k = _common_prefix(sa, sb)
        longest = max(len(sa), len(sb)) or 1
        agree.append(k / longest)
        mismatches.append(
            {
                "id": rid,
                "first_divergence": k,
                "baseline_len": len(sa),
                "run_len": len(sb),
                "baseline_next": repr(a[len(a[:k]) : len(a[:k]) + 20]) if unit == "chars" else None,
            }
        )
    n = len(pairs)
    return Lossless(
        compared=n,
        exact_matches=exact,
        exact_match_rate=exact / n,
        mean_prefix_agreement=sum(agree) / n,
        unit=unit,
        mismatches=mismatches[:20],
        passed=exact == n,
    )


# ----------------------------------------------------------------------------------------------- best k


def _tpot(run: Run) -> float | None:
    return run.aggregate.tpot_s.mean


def predict_best_k(baseline: Run, spec_runs: Sequence[Run]) -> BestK | None:
    """From measured per-position acceptance and the measured cost of a draft+verify step relative to an AR
    step (cost(k) = τ_k · TPOT_k / TPOT_AR), fit the shared StepCost and recommend k."""
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
    cost = StepCost.fit(points)
    ks = sorted({r.draft_tokens for r in runs} | set(range(1, len(acc) + 1)))
    k, speed = best_k(acc, ks, cost)
    measured = {r.draft_tokens: r.speedup for r in runs}
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
        acceptance_by_position=acc,
        rows=rows,
    )
