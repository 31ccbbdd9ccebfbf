"""Comparing two reports run by run (same label and concurrency), and the CI gates: `--min-speedup X` (the
best speculative run's measured speedup over its baseline) and `--baseline-report OLD.json
--max-regression P` (no run's tokens/s may drop by more than P against the old report). Both gate the
report's headline basis (`speedup_basis`, `--headline`): the client decode rate (default) or end to end
(output tokens/s). With repeated trials both use the conservative end: the lowest speedup the trials allow
(the run's slowest trial over the baseline's fastest) and the run's slowest trial; the gate's reason and
`basis` say which figure was used."""

from __future__ import annotations

from typing import Any

from ..errors import GateFailed
from .models import BenchReport, Gate, HeadlineBasis, Run
from .rates import BASIS_NAMES, run_rate

METRICS: dict[str, tuple[str, bool]] = {
    # name: (how to read it, higher is better)
    "output_tokens_per_s": ("aggregate.output_tokens_per_s", True),
    "decode_tokens_per_s": ("aggregate.decode_rate_tokens_per_s", True),
    "speedup": ("speedup", True),  # on each report's own basis (speedup_basis)
    "speedup_low": ("speedup_low", True),
    "e2e_speedup": ("e2e_speedup", True),
    "decode_rate_speedup": ("decode_rate_speedup", True),
    "step_cost_ratio": ("step_cost_ratio", False),
    "ttft_p50_s": ("aggregate.ttft_s.p50", False),
    "tpot_mean_s": ("aggregate.tpot_s.mean", False),
    "itl_p90_s": ("aggregate.itl_s.p90", False),
    "acceptance_length": ("acceptance.acceptance_length", True),
    "acceptance_rate": ("acceptance.acceptance_rate", True),
}


def metric(run: Run, path: str) -> float | None:
    obj: Any = run
    for part in path.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return float(obj)


def _value(report: BenchReport, run: Run, name: str, path: str) -> float | None:
    """A metric of a run; a report from before 1.2 holds its end-to-end speedup only as `speedup`."""
    v = metric(run, path)
    if v is None and name == "e2e_speedup" and report.speedup_basis == "e2e":
        return metric(run, "speedup")
    return v


def compare(a: BenchReport, b: BenchReport) -> list[dict[str, Any]]:
    """One row per (run, metric) present in both reports: A, B, delta, relative change (B vs A)."""
    rows = []
    for rb in b.runs:
        ra = a.run(rb.label, rb.concurrency)
        if ra is None:
            continue
        for name, (path, higher) in METRICS.items():
            va, vb = _value(a, ra, name, path), _value(b, rb, name, path)
            if va is None and vb is None:
                continue
            delta = None if va is None or vb is None else vb - va
            rel = None if delta is None or not va else delta / abs(va)
            rows.append(
                {"run": rb.key, "metric": name, "a": va, "b": vb, "delta": delta, "rel_change": rel,
                 "higher_is_better": higher}
            )  # fmt: skip
    return rows


def _trials(run: Run) -> int:
    return len(run.trials)


def _low(run: Run) -> float | None:
    """The conservative end of a run's speedup (a report from before trials has only the speedup)."""
    return run.speedup_low if run.speedup_low is not None else run.speedup


def _slowest(run: Run, basis: HeadlineBasis) -> float | None:
    """The conservative end of a run's tok/s on `basis`: its slowest counted trial."""
    spread = run.decode_throughput if basis == "decode" else run.throughput
    if spread.min is not None:
        return spread.min
    return run_rate(run, basis)


def evaluate_gates(
    report: BenchReport,
    *,
    min_speedup: float | None = None,
    old: BenchReport | None = None,
    max_regression: float | None = None,
) -> list[Gate]:
    gates: list[Gate] = []
    basis = report.speedup_basis
    name = BASIS_NAMES[basis]
    if min_speedup is not None:
        spec = [r for r in report.runs if not r.baseline and r.status == "ok" and r.speedup is not None]
        best = max(spec, key=lambda r: _low(r) or 0.0, default=None)
        if best is None:
            gates.append(Gate(name="min_speedup", passed=False, reason="no speculative run completed with a "
                              "paired baseline, so no speedup was measured"))  # fmt: skip
        else:
            low = _low(best) or 0.0
            ok = low >= min_speedup
            what = (
                f"lowest {name} speedup over the trials" if _trials(best) > 1 else f"measured {name} speedup"
            )
            gates.append(
                Gate(
                    name="min_speedup",
                    passed=ok,
                    reason=f"best {name} speedup {low:.3f}x ({best.key}, {what}"
                    + (f"; median {best.speedup:.3f}x" if _trials(best) > 1 else "")
                    + f") {'>=' if ok else '<'} required {min_speedup:g}x",
                    basis=what,
                )
            )
    if old is not None and max_regression is not None:
        worst: tuple[float, str] | None = None
        for run in report.runs:
            prev = old.run(run.label, run.concurrency)
            if prev is None or run.status != "ok" or prev.status != "ok":
                continue
            va, vb = run_rate(prev, basis), _slowest(run, basis)
            if not va or vb is None:
                continue
            rel = (vb - va) / va
            if worst is None or rel < worst[0]:
                worst = (rel, run.key)
        if worst is None:
            gates.append(Gate(name="max_regression", passed=False,
                              reason="no completed run in common with the baseline report"))  # fmt: skip
        else:
            ok = worst[0] >= -max_regression
            rate = "decode rate" if basis == "decode" else "output tok/s"
            what = f"slowest trial's {rate} vs the old report's"
            gates.append(
                Gate(
                    name="max_regression",
                    passed=ok,
                    reason=f"worst {rate} change {worst[0]:+.1%} ({worst[1]}, {what}); "
                    f"allowed -{max_regression:.1%}",
                    basis=what,
                )
            )
    return gates


def enforce_gates(report: BenchReport) -> None:
    """Raise GateFailed (exit 3) with a one-line reason when a gate in the report failed."""
    failed = [g for g in report.gates if not g.passed]
    if failed:
        raise GateFailed("gate failed: " + "; ".join(f"{g.name}: {g.reason}" for g in failed))
