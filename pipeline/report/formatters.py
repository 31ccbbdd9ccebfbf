"""Rendering a report: a registry of formatters by name (`table`, `md`, `csv`, `json`) that each return text,
PNG plots through matplotlib's Agg backend (tok/s and speedup vs k on the report's headline basis with the
baseline line, acceptance by position per k, latency percentiles), and `write_outputs` which saves all of
them into a run directory. Table, Markdown and CSV show both figures, the decode rate and end to end."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..fsutil import atomic_files, atomic_write_text
from .models import BenchReport, Run
from .rates import BASIS_NAMES, run_rate

Formatter = Callable[[BenchReport], str]
FORMATTERS: dict[str, Formatter] = {}


def formatter(name: str) -> Callable[[Formatter], Formatter]:
    def deco(fn: Formatter) -> Formatter:
        FORMATTERS[name] = fn
        return fn

    return deco


def _f(v: float | None, spec: str = ".2f", scale: float = 1.0) -> str:
    return "-" if v is None else format(v * scale, spec)


def run_rows(report: BenchReport) -> list[dict[str, Any]]:
    rows = []
    for r in report.runs:
        a, acc = r.aggregate, r.acceptance
        e2e = r.e2e_speedup if r.e2e_speedup is not None or report.speedup_basis != "e2e" else r.speedup
        rows.append(
            {
                "run": r.label,
                "draft_tokens": r.draft_tokens,
                "concurrency": r.concurrency,
                "engine": r.engine,
                "backend": r.backend,
                "status": r.status,
                "requests": a.requests,
                "errors": a.errors,
                "output_tokens": a.output_tokens,
                "output_tokens_per_s": a.output_tokens_per_s,
                "decode_tokens_per_s": a.decode_rate_tokens_per_s,
                "trials": len(r.trials),
                "steady_trials": r.throughput.used if r.trials else None,
                "tokens_per_s_min": r.throughput.min,
                "tokens_per_s_max": r.throughput.max,
                "tokens_per_s_spread": r.throughput.rel_spread if len(r.trials) > 1 else None,
                "decode_tokens_per_s_min": r.decode_throughput.min,
                "decode_tokens_per_s_max": r.decode_throughput.max,
                "decode_tokens_per_s_spread": r.decode_throughput.rel_spread if len(r.trials) > 1 else None,
                "warmup_passes": r.warmup.passes if r.warmup else 0,
                "warmup_steady": r.warmup.steady if r.warmup else None,
                "speedup_basis": report.speedup_basis,
                "speedup": r.speedup,
                "speedup_low": r.speedup_low,
                "speedup_high": r.speedup_high,
                "decode_rate_speedup": r.decode_rate_speedup,
                "decode_rate_speedup_low": r.decode_rate_speedup_low,
                "decode_rate_speedup_high": r.decode_rate_speedup_high,
                "e2e_speedup": e2e,
                "e2e_speedup_low": r.e2e_speedup_low,
                "e2e_speedup_high": r.e2e_speedup_high,
                "decode_speedup": r.decode_speedup,
                "step_cost_ratio": r.step_cost_ratio,
                "step_cost_source": r.step_cost_source,
                "consistent": r.consistency.consistent if r.consistency else None,
                "flags": "; ".join(r.flags) or None,
                "check": _check(r),
                "ttft_p50_s": a.ttft_s.p50,
                "ttft_p99_s": a.ttft_s.p99,
                "e2e_p50_s": a.e2e_s.p50,
                "tpot_mean_s": a.tpot_s.mean,
                "itl_p50_s": a.itl_s.p50,
                "itl_p90_s": a.itl_s.p90,
                "itl_p99_s": a.itl_s.p99,
                "tokens_per_chunk": a.tokens_per_chunk,
                "acceptance_rate": acc.acceptance_rate if acc else None,
                "acceptance_length": acc.acceptance_length if acc else None,
                "acceptance_by_position": ";".join(f"{x:.4f}" for x in acc.per_position) if acc else None,
                "server_decode_tokens_per_s": r.server.server_decode_tokens_per_s if r.server else None,
                "client_decode_tokens_per_s": r.server.client_decode_tokens_per_s if r.server else None,
                "lossless_exact_match": r.lossless.exact_match_rate if r.lossless else None,
                "roofline_fraction": r.roofline.fraction if r.roofline else None,
                "energy_j": r.telemetry.energy_j,
                "joules_per_token": r.telemetry.joules_per_output_token,
                "reason": r.reason,
            }
        )
    return rows


@formatter("json")
def to_json(report: BenchReport) -> str:
    return report.model_dump_json(indent=1)


@formatter("csv")
def to_csv(report: BenchReport) -> str:
    rows = run_rows(report)
    buf = io.StringIO()
    fields = list(rows[0]) if rows else ["run"]
    w = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    w.writeheader()
    for row in rows:
        w.writerow({k: ("" if v is None else v) for k, v in row.items()})
    return buf.getvalue()


COLUMNS = [
    ("run", "run", None),
    ("c", "concurrency", None),
    ("status", "status", None),
    ("ok/req", None, None),
    ("warm", None, None),
    ("trials", None, None),
    ("dec tok/s", "decode_tokens_per_s", ".1f"),
    ("±", "decode_tokens_per_s_spread", ".0%"),
    ("dec speedup", "decode_rate_speedup", ".2f"),
    ("e2e tok/s", "output_tokens_per_s", ".1f"),
    ("±", "tokens_per_s_spread", ".0%"),
    ("e2e speedup", "e2e_speedup", ".2f"),
    ("step cost", "step_cost_ratio", ".2f"),
    ("TTFT p50 ms", "ttft_p50_s", ".1f"),
    ("TPOT ms", "tpot_mean_s", ".2f"),
    ("ITL p90 ms", "itl_p90_s", ".2f"),
    ("accept", "acceptance_rate", ".1%"),
    ("τ", "acceptance_length", ".2f"),
    ("lossless", "lossless_exact_match", ".0%"),
    ("check", None, None),
]
MS = {"ttft_p50_s", "tpot_mean_s", "itl_p90_s"}


def _check(run: Run) -> str:
    """The run's self-check in one word: its flags' kinds (each flag reads "kind: …", e.g. UNSTEADY or
    INCONSISTENT+REPETITIVE), ok, or - (nothing to check)."""
    words = dict.fromkeys(f.split(":", 1)[0].strip() for f in run.flags)
    if words:
        return "+".join(words).upper()
    consistent = run.consistency.consistent if run.consistency else None
    return "ok" if consistent or (run.warmup and run.warmup.steady) else "-"


def _cells(row: dict[str, Any]) -> list[str]:
    out = []
    for name, key, spec in COLUMNS:
        if name == "warm":
            steady = {True: "", False: "!", None: ""}[row["warmup_steady"]]
            out.append(f"{row['warmup_passes']}{steady}")
        elif name == "trials":
            out.append(f"{row['steady_trials']}/{row['trials']}" if row["trials"] else "-")
        elif name == "check":
            out.append(row["check"])
        elif key is None:
            out.append(f"{row['requests'] - row['errors']}/{row['requests']}")
        elif spec is None:
            out.append(str(row[key]))
        else:
            out.append(_f(row[key], spec, 1000.0 if key in MS else 1.0))
    return out


def _footer(report: BenchReport) -> list[str]:
    lines = []
    if report.headline:
        lines.append(report.headline.text)
    if report.best_k:
        bk = report.best_k
        line = f"recommended draft tokens: k={bk.recommended_k} (predicted {bk.predicted_speedup:.2f}x)"
        if bk.predicted_speedup < 1.0:
            line += " - below 1: speculation does not pay off here; serve without it"
        lines.append(line)
        if bk.edge:
            lines.append(bk.edge)
    for g in report.gates:
        lines.append(f"gate {g.name}: {'passed' if g.passed else 'FAILED'} — {g.reason}")
    if not report.complete:
        why = [n for n in report.notes if n.startswith(("interrupted", "incomplete"))]
        lines.append("INCOMPLETE report: " + ("; ".join(why) or "not every run was measured"))
    lines += [n for n in report.notes if not n.startswith(("interrupted", "incomplete"))]
    for r in report.runs:
        if r.status != "ok" and r.reason:
            lines.append(f"{r.key}: {r.status}: {r.reason}")
        for f in r.flags:
            lines.append(f"{r.key}: {f}")
        if r.acceptance and r.acceptance.client_disagrees:
            lines.append(
                f"{r.key}: client tokens/chunk {r.acceptance.client_tokens_per_chunk:.2f} differs from the "
                f"server's τ {r.acceptance.acceptance_length:.2f} (expected unless one chunk = one step)"
            )
        if r.aggregate.token_count_mismatches:
            lines.append(f"{r.key}: tokenizer recount differs from the server's usage in "
                         f"{r.aggregate.token_count_mismatches} request(s); the rates use the server's count "
                         "(generated tokens need not re-tokenize the same way)")  # fmt: skip
        if r.lossless and not r.lossless.passed:
            first = r.lossless.mismatches[0] if r.lossless.mismatches else {}
            differ = r.lossless.compared - r.lossless.exact_matches
            lines.append(
                f"{r.key}: outputs differ from the baseline in {differ}/{r.lossless.compared} prompts "
                f"(first: {first.get('id')} at {r.lossless.unit[:-1]} {first.get('first_divergence')})"
            )
    return lines


@formatter("table")
def to_table(report: BenchReport) -> str:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"specq bench — {report.engine.name or '?'} {report.engine.model or ''}".strip())
    for name, _, _ in COLUMNS:
        t.add_column(name, justify="left" if name in ("run", "status") else "right")
    for row in run_rows(report):
        t.add_row(*_cells(row))
    buf = io.StringIO()
    Console(file=buf, width=280, force_terminal=False, color_system=None).print(t)
    return buf.getvalue() + "".join(line + "\n" for line in _footer(report))


@formatter("md")
def to_markdown(report: BenchReport) -> str:
    w = report.workload
    lines = [
        "# specq bench report",
        "",
        f"- created: {report.created_at} ({'complete' if report.complete else 'INCOMPLETE'})",
        f"- specq {report.specq_version}; engine {report.engine.name} {report.engine.version or ''}; "
        f"model {report.engine.model}",
        f"- host: {report.host.platform}; GPUs: "
        + (", ".join(str(g.get("name")) for g in report.host.gpus) or "none")
        + (f" (driver {report.host.driver})" if report.host.driver else ""),
        f"- workload: {w.source} ({w.requests} requests, digest {w.digest}, mode {w.mode}, "
        f"max_tokens {w.max_tokens}, temperature {w.temperature:g})",
        "",
        *([f"**{report.headline.text}**", ""] if report.headline else []),
        "| " + " | ".join(n for n, _, _ in COLUMNS) + " |",
        "|" + "|".join("---" for _ in COLUMNS) + "|",
    ]
    for row in run_rows(report):
        lines.append("| " + " | ".join(_cells(row)) + " |")
    lines.append("")
    if report.best_k:
        measured = f"measured {BASIS_NAMES[report.speedup_basis]} speedup"
        lines += ["## Best k", "", f"| k | predicted speedup | {measured} |", "|---|---|---|"]
        for row in report.best_k.rows:
            lines.append(
                f"| {row['k']} | {row['predicted_speedup']:.2f} | {_f(row.get('measured_speedup'))} |"
            )
        lines.append("")
    foot = [x for x in _footer(report) if not report.headline or x != report.headline.text]
    if foot or report.notes:
        lines += ["## Notes", ""] + [f"- {x}" for x in foot + report.notes] + [""]
    return "\n".join(lines)


def plot(report: BenchReport, out_dir: Path) -> list[Path]:
    """PNG plots; returns the files written (none when no run completed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    basis = report.speedup_basis
    ok = [r for r in report.runs if r.status == "ok" and run_rate(r, basis)]
    if not ok:
        return written
    conc = min(r.concurrency for r in ok)
    runs = [r for r in ok if r.concurrency == conc]
    spec = sorted((r for r in runs if not r.baseline and r.draft_tokens > 0), key=lambda r: r.draft_tokens)
    bases = [r for r in runs if r.baseline]

    fig, ax = plt.subplots(figsize=(6.4, 4))
    if spec:
        ax.plot([r.draft_tokens for r in spec], [run_rate(r, basis) or 0.0 for r in spec], "o-",
                label="speculative")  # fmt: skip
    for b in bases:
        ax.axhline(run_rate(b, basis) or 0, ls="--", color="gray", label=b.label)
    ax.set_xlabel("draft tokens k")
    ax.set_ylabel("decode tokens/s (TTFT excluded)" if basis == "decode" else "output tokens/s (end to end)")
    ax.set_title(f"Throughput vs k (concurrency {conc})")
    if any(r.speedup for r in spec):
        ax2 = ax.twinx()
        ax2.plot([r.draft_tokens for r in spec], [r.speedup or 0 for r in spec], "s:", color="tab:orange",
                 label="speedup")  # fmt: skip
        ax2.axhline(1.0, color="tab:orange", lw=0.5)
        ax2.set_ylabel(f"{BASIS_NAMES[basis]} speedup over baseline")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="lower left")
    fig.tight_layout()
    written.append(out_dir / "throughput_vs_k.png")
    fig.savefig(written[-1], dpi=100)
    plt.close(fig)

    with_acc = [r for r in spec if r.acceptance and r.acceptance.per_position]
    if with_acc:
        fig, ax = plt.subplots(figsize=(6.4, 4))
        for r in with_acc:
            assert r.acceptance is not None
            ax.plot(
                range(1, len(r.acceptance.per_position) + 1), r.acceptance.per_position, "o-", label=r.label
            )
        ax.set_xlabel("draft position")
        ax.set_ylabel("acceptance (accepted at position / drafts)")
        ax.set_ylim(0, 1.05)
        ax.set_title("Acceptance by position")
        ax.legend()
        fig.tight_layout()
        written.append(out_dir / "acceptance_by_position.png")
        fig.savefig(written[-1], dpi=100)
        plt.close(fig)

    fig, axes = plt.subplots(1, 3, figsize=(12, 4))
    labels = [r.label for r in runs]
    for ax, (title, attr) in zip(
        axes, [("TTFT", "ttft_s"), ("TPOT", "tpot_s"), ("ITL", "itl_s")], strict=True
    ):
        for i, pct in enumerate(("p50", "p90", "p99")):
            vals = [(getattr(getattr(r.aggregate, attr), pct) or 0) * 1000 for r in runs]
            ax.bar([x + i * 0.27 for x in range(len(runs))], vals, width=0.27, label=pct)
        ax.set_xticks([x + 0.27 for x in range(len(runs))], labels, rotation=30)
        ax.set_title(f"{title} (ms)")
    axes[0].legend()
    fig.tight_layout()
    written.append(out_dir / "latency_percentiles.png")
    fig.savefig(written[-1], dpi=100)
    plt.close(fig)
    return written


def write_outputs(report: BenchReport, out_dir: Path) -> dict[str, Path]:
    """report.json, runs.csv, summary.md and plots/*.png under `out_dir`, written to a temporary directory
    beside them and moved into place only once all are complete (a full disk leaves none of them)."""
    with atomic_files(out_dir) as tmp:
        names = {
            "json": report.save(tmp / "report.json").name,
            "csv": atomic_write_text(tmp / "runs.csv", to_csv(report)).name,
            "md": atomic_write_text(tmp / "summary.md", to_markdown(report)).name,
        }
        plots = {p.stem: p.relative_to(tmp) for p in plot(report, tmp / "plots")}
    files = {key: out_dir / name for key, name in names.items()}
    files.update({stem: out_dir / rel for stem, rel in plots.items()})
    return files


def compare_table(rows: list[dict[str, Any]], a_name: str, b_name: str) -> str:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"A = {a_name}   B = {b_name}")
    for c in ("run", "metric", "A", "B", "delta", "change"):
        t.add_column(c, justify="left" if c in ("run", "metric") else "right")
    for r in rows:
        t.add_row(r["run"], r["metric"], _f(r["a"], ".4g"), _f(r["b"], ".4g"), _f(r["delta"], "+.4g"),
                  _f(r["rel_change"], "+.1%"))  # fmt: skip
    buf = io.StringIO()
    Console(file=buf, width=140, color_system=None).print(t)
    return buf.getvalue()


def render(report: BenchReport, fmt: str) -> str:
    from ..errors import UsageError

    if fmt not in FORMATTERS:
        raise UsageError(f"unknown format '{fmt}'; choose one of {', '.join(sorted(FORMATTERS))}")
    return FORMATTERS[fmt](report)
