"""Whether a busy machine made a benchmark's figures meaningless: a run whose measured output tok/s (the
median of its trials) and its last warm-up pass are more than NOISE_FACTOR apart (either way), or whose trials
spread by more than NOISE_SPREAD ((max - min) / median). The bench table and `specq demo` say so under the
figures, instead of letting a reader take a speedup from them."""

from __future__ import annotations

from .models import BenchReport

NOISE_FACTOR = 2.0
NOISE_SPREAD = 0.25


def noise_warnings(
    report: BenchReport, factor: float = NOISE_FACTOR, spread: float = NOISE_SPREAD
) -> list[str]:
    """One line per run that fails either check, and, when any does, one line saying what that means for the
    whole table; empty when the figures look consistent."""
    lines = []
    for r in report.runs:
        if r.status != "ok":
            continue
        steady = r.throughput.median or r.aggregate.output_tokens_per_s
        warm = r.warmup.rates[-1] if r.warmup and r.warmup.rates else None
        apart = max(steady / warm, warm / steady) if steady and warm else 0.0
        if apart > factor:
            lines.append(
                f"{r.label}: the last warm-up pass ran at {warm:.1f} tok/s and the measurement at "
                f"{steady:.1f} ({apart:.1f}x apart, more than {factor:g}x)"
            )
        for name, s in (("output", r.throughput), ("decode", r.decode_throughput)):
            if s.n > 1 and s.rel_spread is not None and s.rel_spread > spread:
                lines.append(
                    f"{r.label}: its {s.n} trials' {name} tok/s spread {s.rel_spread:.0%} "
                    f"({s.min:.1f}-{s.max:.1f}; more than {spread:.0%})"
                )
                break
    if lines:
        lines.append(
            "the machine was busy while this was measured: these speedups are noise; rerun on an idle machine"
        )
    return lines
