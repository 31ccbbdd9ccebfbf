"""Rendering a report: a registry of formatters by name (`table`, `md`, `csv`) that each return text (JSON
is every command's `--json`: the report itself),
PNG plots through matplotlib's Agg backend (tok/s and speedup vs k on the report's headline basis with the
baseline line, acceptance by position per k, latency percentiles), and `write_outputs` which saves all of
them into a run directory. Table, Markdown and CSV show both figures, the decode rate and end to end."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from ..fsutil import atomic_files, atomic_write_text
from .models import BenchReport, HeadlineBasis, Lossless, Run
from .noise import noise_warnings
from .rates import BASIS_NAMES, run_rate

# A formatter takes the report and how wide the text may be (`width`: the terminal's columns, None: no
# limit; `wide`: every column even so); only the table uses them.
Formatter = Callable[..., str]
FORMATTERS: dict[str, Formatter] = {}


F = TypeVar("F", bound=Callable[..., str])


def formatter(name: str) -> Callable[[F], F]:
    def deco(fn: F) -> F:
        FORMATTERS[name] = fn
        return fn

    return deco


def _f(v: float | None, spec: str = ".2f", scale: float = 1.0) -> str:
    return "-" if v is None else format(v * scale, spec)


def run_rows(report: BenchReport) -> list[dict[str, Any]]:
    rows = []
    for r in report.runs:
        a, acc, rep = r.aggregate, r.acceptance, r.reproducibility
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
                # False: the baseline's own trials differ and so do the outputs: the rate judges nothing
                "lossless_judged": r.lossless.not_judged == 0 if r.lossless else None,
                "reproducible": rep.reproducible if rep else None,
                "trials_equal": rep.equal if rep and rep.reproducible is not None else None,
                "trials_compared": rep.compared if rep and rep.reproducible is not None else None,
                "server_ready_s": r.server_ready_s,
                "roofline_fraction": r.roofline.fraction if r.roofline else None,
                "energy_j": r.telemetry.energy_j,
                "joules_per_token": r.telemetry.joules_per_output_token,
                "reason": r.reason,
            }
        )
    return rows


@formatter("csv")
def to_csv(report: BenchReport, **_: Any) -> str:
    rows = run_rows(report)
    buf = io.StringIO()
    fields = list(rows[0]) if rows else ["run"]
    w = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    w.writeheader()
    for row in rows:
        w.writerow({k: ("" if v is None else v) for k, v in row.items()})
    return buf.getvalue()


# (header, row key, format, priority): a table narrower than all of them leaves out the highest priority
# numbers first (secondary figures; 0 = always shown). `specq bench --wide` shows every column.
COLUMNS = [
    ("run", "run", None, 0),
    ("c", "concurrency", None, 6),
    ("status", "status", None, 1),
    ("ok/req", None, None, 8),
    ("warm", None, None, 11),
    ("trials", None, None, 7),
    ("dec tok/s", "decode_tokens_per_s", ".1f", 0),
    ("±", "decode_tokens_per_s_spread", ".0%", 0),
    ("dec speedup", "decode_rate_speedup", ".2f", 0),
    ("e2e tok/s", "output_tokens_per_s", ".1f", 9),
    ("±", "tokens_per_s_spread", ".0%", 10),
    ("e2e speedup", "e2e_speedup", ".2f", 4),
    ("step cost", "step_cost_ratio", ".2f", 5),
    ("TTFT p50 ms", "ttft_p50_s", ".1f", 12),
    ("TPOT ms", "tpot_mean_s", ".2f", 13),
    ("ITL p90 ms", "itl_p90_s", ".2f", 14),
    ("accept", "acceptance_rate", ".1%", 3),
    ("τ", "acceptance_length", ".2f", 0),
    ("lossless", "lossless_exact_match", ".0%", 2),
    ("repro", None, None, 15),
    ("ready s", "server_ready_s", ".1f", 16),
    ("check", None, None, 0),
]
# Shorter headers for a narrow table
SHORT = {
    "dec tok/s": "dec t/s", "dec speedup": "dec ×", "e2e tok/s": "e2e t/s", "e2e speedup": "e2e ×",
    "step cost": "step", "TTFT p50 ms": "TTFT ms", "ITL p90 ms": "ITL90 ms", "lossless": "lossl.",
}  # fmt: skip
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
    for name, key, spec, _ in COLUMNS:
        if name == "warm":
            steady = {True: "", False: "!", None: ""}[row["warmup_steady"]]
            out.append(f"{row['warmup_passes']}{steady}")
        elif name == "trials":
            out.append(f"{row['steady_trials']}/{row['trials']}" if row["trials"] else "-")
        elif name == "check":
            out.append(row["check"])
        elif name == "repro":  # prompts with the same output in every trial / prompts compared
            out.append(f"{row['trials_equal']}/{row['trials_compared']}" if row["trials_compared"] else "-")
        elif name == "lossless" and row["lossless_judged"] is False:
            out.append("-")  # not judged: the baseline is not reproducible (the footer says so)
        elif key is None:
            out.append(f"{row['requests'] - row['errors']}/{row['requests']}")
        elif spec is None:
            out.append(str(row[key]))
        else:
            out.append(_f(row[key], spec, 1000.0 if key in MS else 1.0))
    return out


def recommendation(report: BenchReport) -> list[str]:
    """The draft-token count to serve with, chosen among the k that were measured (the step-cost model's
    pick beside it when that k was not measured, marked so, with the sweep that would measure it)."""
    bk = report.best_k
    if bk is None:
        return []
    measured = {
        int(r["k"]): float(r["measured_speedup"]) for r in bk.rows if r.get("measured_speedup") is not None
    }
    predicted = f"k={bk.recommended_k} (predicted {bk.predicted_speedup:.2f}x)"
    if not measured:
        lines = [f"draft tokens: the step-cost model predicts {predicted}; not measured"]
        if bk.step_cost_basis:
            lines.append(
                f"step cost {bk.step_cost_fixed:.2f} + {bk.step_cost_per_token:.3f}·k ({bk.step_cost_basis})"
            )
        return lines
    best = max(measured, key=lambda k: measured[k])
    line = f"recommended draft tokens: k={best} (measured {measured[best]:.2f}x)"
    if max(measured.values()) < 1.0:
        line += " - below 1 at every measured k: speculation does not pay off here; serve without it"
    lines = [line]
    if bk.recommended_k not in measured and bk.predicted_speedup > measured[best]:
        lines.append(
            f"the step-cost model predicts {predicted}, which was not measured: "
            f"try --draft-tokens {bk.recommended_k}"
        )
    if bk.step_cost_basis:
        lines.append(
            f"step cost {bk.step_cost_fixed:.2f} + {bk.step_cost_per_token:.3f}·k ({bk.step_cost_basis})"
        )
    if bk.edge:
        lines.append(bk.edge)
    return lines


def _once(lines: list[tuple[str, str]]) -> list[str]:
    """Per-run lines ("k=4@c1", text): a text that several runs share is printed once, naming them all."""
    keys: dict[str, list[str]] = {}
    for key, text in lines:
        keys.setdefault(text, [])
        if key not in keys[text]:
            keys[text].append(key)
    return [f"{', '.join(ks)}: {text}" for text, ks in keys.items()]


def _footer(report: BenchReport) -> list[str]:
    lines = []
    if report.headline:
        lines.append(report.headline.text)
    lines += [f"NOISE: {n}" for n in noise_warnings(report)]  # before any k is recommended from them
    lines += recommendation(report)
    for g in report.gates:
        lines.append(f"gate {g.name}: {'passed' if g.passed else 'FAILED'} — {g.reason}")
    if not report.complete:
        why = [n for n in report.notes if n.startswith(("interrupted", "incomplete"))]
        lines.append("INCOMPLETE report: " + ("; ".join(why) or "not every run was measured"))
    lines += [n for n in report.notes if not n.startswith(("interrupted", "incomplete"))]
    per_run: list[tuple[str, str]] = []
    for r in report.runs:
        if r.status != "ok" and r.reason:
            per_run.append((r.key, f"{r.status}: {r.reason}"))
        for f in r.flags:
            per_run.append((r.key, f))
        if r.acceptance and r.acceptance.client_disagrees:
            per_run.append((r.key,
                f"client tokens/chunk {r.acceptance.client_tokens_per_chunk:.2f} differs from the "
                f"server's τ {r.acceptance.acceptance_length:.2f} (expected unless one chunk = one step)"
            ))  # fmt: skip
        if r.aggregate.token_count_mismatches:
            n = r.aggregate.token_count_mismatches
            per_run.append((r.key, f"tokenizer recount differs from the server's usage in {n} request(s); "
                            "the rates use the server's count (generated tokens need not re-tokenize "
                            "the same way)"))  # fmt: skip
        trials = r.reproducibility
        if trials is not None and trials.reproducible is False:
            so = "; the plain engine is not deterministic here, so speculation is not judged against it"
            per_run.append((r.key, trials.summary + (so if r.baseline else "")))
        if r.lossless and not r.lossless.passed:
            per_run.append((r.key, lossless_line(r.lossless)))
    return list(dict.fromkeys(lines + _once(per_run)))


def lossless_line(ll: Lossless) -> str:
    """'lossless: 14/16 equal, 2 near-ties (margin 0.03, 0.01), 0 mismatches; first: p1 at token 7
    (' Alice' vs ' Bob')'."""
    first = ll.mismatches[0] if ll.mismatches else {}
    text = ll.summary or f"lossless: {ll.exact_matches}/{ll.compared} equal"

    def tok(t: object) -> str:
        return repr(t.get("text")) if isinstance(t, dict) else "end"

    where = f"{first.get('id')} at {ll.unit[:-1]} {first.get('first_divergence')}"
    if "baseline_token" in first:
        where += f" ({tok(first.get('baseline_token'))} vs {tok(first.get('run_token'))})"
    return f"{text}; first: {where}"


def _table_text(title: str | None, columns: list[tuple[str, int]], rows: list[list[str]], width: int) -> str:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=title)
    for name, _ in columns:
        t.add_column(name, justify="left" if name in ("run", "status") else "right", no_wrap=True)
    for row in rows:
        t.add_row(*row)
    buf = io.StringIO()
    Console(file=buf, width=width, force_terminal=False, color_system=None, markup=False).print(t)
    return buf.getvalue()


@formatter("table")
def to_table(report: BenchReport, width: int | None = None, wide: bool = False) -> str:
    """The run table and its notes. `width` (the terminal's columns): secondary columns are left out, by
    COLUMNS' priority, and headers shortened until the table fits, and a last line names what was left
    out; None or `wide`: every column (what report files and library callers get)."""
    title = f"specq bench — {report.engine.name or '?'} {report.engine.model or ''}".strip()
    rows = [_cells(row) for row in run_rows(report)]
    columns = [(name, prio) for name, _, _, prio in COLUMNS]
    if width is None or wide:
        return _table_text(title, columns, rows, 400) + "".join(line + "\n" for line in _footer(report))
    keep = list(range(len(columns)))
    left_out: list[str] = []

    def text(title: str | None = None) -> str:
        cols = [(SHORT.get(columns[i][0], columns[i][0]), columns[i][1]) for i in keep]
        return _table_text(title, cols, [[row[i] for i in keep] for row in rows], width if title else 400)

    def fits(rendered: str) -> bool:
        return max(len(line) for line in rendered.splitlines() or [""]) <= width

    # Columns that say nothing here go first: nothing measured, one concurrency, every status the same.
    for i in list(keep):
        name, _ = columns[i]
        values = {row[i] for row in rows}
        if name != "run" and (values <= {"-"} or (name in ("c", "status") and len(values) == 1)):
            keep.remove(i)
    rendered = text()
    for prio in sorted({p for _, p in columns if p}, reverse=True):
        if fits(rendered):
            break
        for i in [i for i in keep if columns[i][1] == prio]:
            keep.remove(i)
            left_out.append(columns[i][0])
        rendered = text()
    rendered = text(title)
    if left_out:
        rendered += (
            _wrap(
                f"left out to fit {width} columns: {', '.join(left_out)} (--wide shows every column)", width
            )
            + "\n"
        )
    return rendered + "".join(_wrap(line, width) + "\n" for line in _footer(report))


def _wrap(line: str, width: int) -> str:
    import textwrap

    return textwrap.fill(line, width, subsequent_indent="  ", break_long_words=False, break_on_hyphens=False)


@formatter("md")
def to_markdown(report: BenchReport, **_: Any) -> str:
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
        "| " + " | ".join(n for n, *_ in COLUMNS) + " |",
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
    if foot:  # the report's notes are among them, once
        lines += ["## Notes", ""] + [f"- {x}" for x in foot] + [""]
    return "\n".join(lines)


def _trial_range(runs: list[Run], medians: list[float], basis: str) -> list[list[float]]:
    """Error bars (below, above) from each run's trials: their min and max around the plotted median."""
    below, above = [], []
    for r, m in zip(runs, medians, strict=True):
        s = r.decode_throughput if basis == "decode" else r.throughput
        below.append(max(0.0, m - s.min) if s.min is not None else 0.0)
        above.append(max(0.0, s.max - m) if s.max is not None else 0.0)
    return [below, above]


def throughput_figure(spec: list[Run], bases: list[Run], basis: HeadlineBasis, conc: int) -> Any:
    """Two panels sharing the k axis (integer ticks): tok/s above with the baseline as a line, speedup
    below with 1x as a line; each point the median of the run's trials, its error bar their range."""
    import matplotlib.pyplot as plt

    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(6.4, 6), sharex=True)
    ks = [r.draft_tokens for r in spec]
    if spec:
        rates = [run_rate(r, basis) or 0.0 for r in spec]
        ax.errorbar(
            ks, rates, yerr=_trial_range(spec, rates, basis), fmt="o-", capsize=3, label="speculative"
        )
    for b in bases:
        ax.axhline(run_rate(b, basis) or 0, ls="--", color="gray", label=b.label)
    ax.set_ylabel("decode tokens/s (TTFT excluded)" if basis == "decode" else "output tokens/s (end to end)")
    ax.set_title(f"Throughput and speedup vs k (concurrency {conc})")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="best")
    with_speedup = [r for r in spec if r.speedup is not None]
    if with_speedup:
        sp = [r.speedup or 0.0 for r in with_speedup]
        low = [
            max(0.0, v - (r.speedup_low if r.speedup_low is not None else v))
            for r, v in zip(with_speedup, sp, strict=True)
        ]
        high = [
            max(0.0, (r.speedup_high if r.speedup_high is not None else v) - v)
            for r, v in zip(with_speedup, sp, strict=True)
        ]
        ax2.errorbar([r.draft_tokens for r in with_speedup], sp, yerr=[low, high], fmt="s-", capsize=3,
                     color="tab:orange")  # fmt: skip
    ax2.axhline(1.0, color="gray", ls="--", lw=0.8)
    ax2.set_ylabel(f"{BASIS_NAMES[basis]} speedup (x)")
    ax2.set_xlabel("draft tokens k")
    if ks:
        ax2.set_xticks(sorted(set(ks)))  # integer k only
    return fig


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

    fig = throughput_figure(spec, bases, basis, conc)
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


def render(report: BenchReport, fmt: str, width: int | None = None, wide: bool = False) -> str:
    """The report in format `fmt`; `width` and `wide` shape the table (see `to_table`), not the files."""
    from ..errors import UsageError

    if fmt not in FORMATTERS:
        hint = " (JSON: --json)" if fmt == "json" else ""
        raise UsageError(f"unknown format '{fmt}'; choose one of {', '.join(sorted(FORMATTERS))}{hint}")
    return FORMATTERS[fmt](report, width=width, wide=wide)
