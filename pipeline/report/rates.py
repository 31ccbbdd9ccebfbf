"""The two figures a run's speedup can be measured on (`BenchReport.speedup_basis`, `--headline`): the
client decode rate (`decode`, the default: the decode phase only, which is what speculative decoding
changes) and output tokens/s (`e2e`: end to end, each request's time to first token included). Shared by
the benchmark's analysis and the report's gates and comparisons, so that both read a run the same way."""

from __future__ import annotations

from collections.abc import Sequence

from .models import HeadlineBasis, RequestRecord, Run, Trial

BASIS_NAMES: dict[str, str] = {"decode": "decode-rate", "e2e": "end-to-end"}


def client_decode_rate(records: Sequence[RequestRecord]) -> float | None:
    """The client decode rate, Σ (output tokens − 1) / Σ (e2e − TTFT) over the ok requests that have a TTFT:
    the decode phase only. The first token arrives at TTFT, so it is not in the interval and not counted;
    the server's decode rate is counted the same way (`bench.metrics.server_check`)."""
    ok = [r for r in records if r.ok and r.ttft_s is not None and r.e2e_s is not None and r.output_tokens]
    toks = sum((r.output_tokens or 1) - 1 for r in ok)
    time_s = sum((r.e2e_s or 0.0) - (r.ttft_s or 0.0) for r in ok)
    return toks / time_s if time_s > 0 else None


def run_rate(run: Run, basis: HeadlineBasis) -> float | None:
    """A run's tok/s on `basis`: its client decode rate (`decode`) or output tok/s (`e2e`), the median over
    its steady trials. A report from before 1.2 stores no decode rate: it is computed from its records (all
    trials together)."""
    if basis == "e2e":
        return run.aggregate.output_tokens_per_s
    if run.aggregate.decode_rate_tokens_per_s is not None:
        return run.aggregate.decode_rate_tokens_per_s
    return client_decode_rate(run.requests)


def trial_rate(trial: Trial, basis: HeadlineBasis) -> float | None:
    return trial.decode_tokens_per_s if basis == "decode" else trial.output_tokens_per_s
