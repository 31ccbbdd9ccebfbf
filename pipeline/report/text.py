"""Plain-text renderings of the stages' results other than the benchmark report (whose formatters are in
`formatters`): quantize's quality table, convert's verdicts, plan's memory table, the
drafter's training and evaluation, the FlashAttention-3 plan and build, and the toy pair's acceptance. Each
returns the text the command prints on stdout, so that the CLI has one output path (`--json` or this text);
`*_diagnostics` return the lines that belong on stderr. Tables are drawn by rich without a terminal, as the
benchmark table is, at the width the caller's console has."""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.table import Table

    from ..convert.run import ConvertResult
    from ..draft import DraftEvalReport, DraftTrainReport
    from ..fa3 import Fa3BuildResult, Fa3Plan
    from ..plan import MemoryPlan
    from ..quantize import QuantizeResult
    from ..toy import ToyReport


def table_text(table: Table, width: int) -> str:
    from rich.console import Console

    buf = io.StringIO()
    # markup=False: cells hold paths and commands such as pip install 'specq[lmdeploy]', never rich markup
    Console(file=buf, width=width, color_system=None, soft_wrap=False, markup=False).print(table)
    return buf.getvalue()


def _mib(n: int) -> str:
    return f"{n / 2**20:.2f} MiB"


def quantize_text(r: QuantizeResult, width: int = 100) -> str:
    from rich.table import Table

    t = Table(title=f"specq quantize: {r.method.upper()} {r.bits}-bit g{r.group_size} via {r.backend}")
    t.add_column("", style="bold")
    t.add_column("value")
    c, q, d = r.calibration, r.quality, r.drafter
    calibration = f"{c.samples} samples x ≤{c.seqlen} tokens = {c.tokens_used} tokens ({c.texts} texts)"
    rows = [
        ("output", f"{r.out} ({r.format}{', repacked to AWQ' if r.repacked_to_awq else ''})"),
        ("for", r.target),
        ("calibration", calibration if c.samples else "none"),
        (
            "size",
            f"{_mib(r.size_original_bytes)} → {_mib(r.size_quantized_bytes)} ({r.compression_ratio:.2f}x)",
        ),
        (
            "time",
            f"{r.seconds_total:.1f} s (quantize {r.seconds_quantize:.1f} s, eval {r.seconds_eval:.1f} s)",
        ),
    ]
    if q is not None:
        if q.perplexity_original is not None and q.perplexity_quantized is not None:
            rows.append(
                (
                    "perplexity",
                    f"{q.perplexity_original:.3f} → {q.perplexity_quantized:.3f} "
                    f"(x{q.perplexity_ratio:.3f}, {q.heldout_tokens} held-out tokens)",
                )
            )
        if q.top1_agreement is not None:
            rows.append(("top-1 agreement", f"{100 * q.top1_agreement:.2f} % of held-out positions"))
        if q.logits_cosine_mean is not None:
            rows.append(("logits cosine", f"mean {q.logits_cosine_mean:.4f}, min {q.logits_cosine_min:.4f}"))
    if d is not None:
        how = (
            f"GPTQ on the hidden states of {d.target} at layers {d.target_layer_ids} "
            f"({d.blocks} query blocks over {d.context_tokens} positions)"
            if d.algorithm == "gptq"
            else f"round-to-nearest: {d.why_rtn}"
        )
        rows.append(
            ("drafter", f"{d.kind}: {len(d.quantized)} linears to 4-bit, {len(d.kept)} tensors kept; {how}")
        )
        if d.output_error:
            worst = max(d.output_error, key=lambda k: d.output_error[k])
            mean = sum(d.output_error.values()) / len(d.output_error)
            rows.append(
                (
                    "output error",
                    f"mean {mean:.2e}, worst {d.output_error[worst]:.2e} ({worst}) on the "
                    f"{d.output_error_basis}",
                )
            )
        if d.hidden_cosine_mean is not None:
            rows.append(
                (
                    "hidden cosine",
                    f"mean {d.hidden_cosine_mean:.4f}, min {d.hidden_cosine_min:.4f} (vs original)",
                )
            )
        rows.append(("next", f"specq draft eval TARGET {r.out}: τ against the original drafter's"))
    rows += [("warning", w) for w in r.warnings]
    for k, v in rows:
        t.add_row(k, v)
    return table_text(t, width)


def convert_text(result: ConvertResult, width: int = 100) -> str:
    from rich.table import Table

    lines: list[str] = []
    if result.repack is not None:
        lines.append(f"AWQ checkpoint: {result.repack.out}")
    if result.cast is not None:
        c = result.cast
        lines.append(f"{c.dtype} copy: {c.out} ({c.tensors_cast} tensors cast, {c.tensors_copied} copied)")
    rep = result.report
    if rep is None:
        return "".join(line + "\n" for line in lines)
    draft = f", draft {rep.draft.kind} ({rep.draft.method or 'embedded only'})" if rep.draft else ""
    lines.append(f"{rep.model}: {rep.architecture} · {rep.model_format}{draft}")
    table = Table("engine", "verdict", "why", show_lines=False)
    table.columns[2].overflow = "fold"
    for v in rep.verdicts:
        table.add_row(v.label, v.status, "; ".join(v.reasons))
    text = "".join(line + "\n" for line in lines) + table_text(table, width)
    after = [f"fix for {v.label}: {' && '.join(v.fixes)}" for v in rep.verdicts if v.fixes]  # whole lines
    if rep.max_draft_tokens is not None:
        after.append(f"largest --draft-tokens: {rep.max_draft_tokens}")
    if rep.engine:
        after.append(f"serve with: {rep.engine}")
    return text + "".join(line + "\n" for line in after)


def convert_diagnostics(result: ConvertResult) -> list[str]:
    lines = []
    if result.repack is not None:
        r = result.repack
        lines.append(
            f"repacked {r.linears} linears (group {r.group_size}), copied {r.tensors_copied} tensors"
        )
    if result.cast is not None and result.cast.underflow_to_zero:
        c = result.cast
        lines.append(f"note: {c.underflow_to_zero} tiny nonzero weights became 0 in {c.dtype}")
    if result.report is not None:
        lines += [f"note: {n}" for n in result.report.notes]
        if result.report.manifest:
            lines.append(f"wrote {result.report.manifest}")
    return lines


def plan_text(p: MemoryPlan, width: int = 100) -> str:
    """The verdict first ("fits: …" or "will not fit: …"), the table, then what to run with: the recommended
    settings, or for a plan that does not fit the changes whose own plans fit ("would fit: …"), and the
    assumptions."""
    from rich.table import Table

    per_gpu = f", tp {p.tp}: GPU 0" if p.tp > 1 else ""
    table = Table(
        title=f"specq plan ({p.engine} engine, batch {p.batch}, session_len {p.session_len or '-'}{per_gpu})"
    )
    table.add_column("item")
    table.add_column("GiB", justify="right")
    table.add_column("note")
    for r in p.rows:
        table.add_row(r.item, f"{r.bytes / 2**30:.2f}", r.note)
    text = p.verdict + "\n" + table_text(table, width)
    if p.tp > 1:
        text += table_text(_gpu_table(p), width)
    lines = [f"would fit: {a}" for a in p.advice]
    if p.fits and p.engine == "lmdeploy" and p.cache_max_entry_count is not None:
        lines.append(
            f"recommended: --cache-max-entry-count {p.cache_max_entry_count} "
            f"--max-prefill-token-num {p.max_prefill_token_num} "
            f"--session-len {p.session_len or p.max_session_len}"
        )
    lines += [n if n.startswith("TWIN:") else f"assumption: {n}" for n in p.notes]
    return text + "".join(line + "\n" for line in lines)


def _gpu_table(p: MemoryPlan) -> Any:
    """One column per tensor-parallel GPU: what each holds, in GiB."""
    from rich.table import Table

    table = Table(title=f"per GPU (--tp {p.tp})")
    table.add_column("GiB")
    for g in p.gpus:
        table.add_column(f"GPU {g.index}", justify="right")
    fields = [("GPU memory", "gpu_memory_bytes"), ("fixed (driver, context, load)", "cuda_context_bytes"),
              ("weights", "weights_bytes"), ("linear-attention state", "state_cache_bytes"),
              ("runtime reserve (not in peak)", "runtime_reserve_bytes"), ("KV cache", "kv_cache_bytes"),
              ("activations", "activation_bytes"), ("CUDA graphs", "cuda_graph_bytes"),
              ("safety margin", "safety_bytes"), ("predicted peak", "peak_bytes")]  # fmt: skip
    for label, field in fields:
        table.add_row(label, *(f"{getattr(g, field) / 2**30:.2f}" for g in p.gpus))
    table.add_row("fits", *("yes" if g.fits else "NO" for g in p.gpus))
    return table


def _lines(lines: list[str]) -> str:
    return "".join(line + "\n" for line in lines)


def draft_train_text(report: DraftTrainReport) -> str:
    ev = report.eval
    return _lines(
        [
            f"drafter: {report.out}  ({report.steps} steps, {report.train_seconds:.0f}s training)",
            f"taught by: {report.teacher or report.target} ({report.teacher_quantization or '?'}); "
            f"offline figures below are against it",
            f"acceptance by position: {' / '.join(f'{a:.2f}' for a in ev.acceptance_by_position)}",
            f"τ (mean accepted length): {ev.tau:.2f}   "
            f"best k: {ev.best_k} (predicted ×{ev.best_speedup:.2f})",
        ]
    )


def draft_eval_text(report: DraftEvalReport) -> str:
    k = report.block_size - 1
    lines = [
        f"against: {report.target} ({report.target_quantization or '?'})",
        f"drafter: {report.draft} ({report.draft_quantization or '?'})",
        f"acceptance by position: {' / '.join(f'{a:.2f}' for a in report.acceptance_by_position)}",
        f"τ (mean accepted length, k={k}): {report.tau:.2f}  [{report.workload}]",
    ]
    if report.walk_tau:
        lines.append(f"τ along the served path, k={k}: {report.walk_tau[-1]:.2f}")
    if report.looping_outputs and report.walk_tau_text:
        lines.append(
            f"τ along the served path without the {report.looping_outputs} looping output(s), k={k}: "
            f"{report.walk_tau_text[-1]:.2f}"
        )
    for p in report.predictions:
        lines.append(f"  k={p.k}: {p.tokens_per_step:.2f} tokens/step, predicted speedup ×{p.speedup:.2f}")
    lines.append(
        f"best k: {report.best_k} (×{report.best_speedup:.2f}; step cost {report.step_cost.fixed} + "
        f"{report.step_cost.per_token}·k: {report.step_cost_basis}; `specq bench` measures your own)"
    )
    if report.repetitive:
        lines.append(f"NOT RELIABLE: {report.repetitive}")
    return _lines(lines)


def fa3_build_text(result: Fa3BuildResult, plan: Fa3Plan) -> str:
    lines = [f"FA3 built in {result.build_seconds:.0f}s ({len(plan.kernel_files)} kernel files, {plan.arch})"]
    for c in result.cases:
        lines.append(f"  self-check {c.name}: max abs err {c.max_abs_err:.2e} (≤ {c.tolerance:g})")
    lines += [f"installed: {p}" for p in result.installed]
    if result.out:
        lines.append(f"written to: {result.out}")
    return _lines(lines)


def fa3_plan_text(plan: Fa3Plan) -> str:
    ks = plan.kernels
    lines = [f"# arch {plan.arch} ({plan.arch_reason})"]
    for m in plan.models:
        dims = ", ".join(map(str, m.head_dims)) or "none"
        lines.append(f"# {m.role} {m.path}: head dim {dims}; {'/'.join(m.dtypes)} ({m.dtype_reason})")
    lines.append(
        f"# kernels: head dims {', '.join(map(str, ks.hdims))} × {'+'.join(ks.dtypes)} × paged/not paged; "
        f"{len(plan.kernel_files)} kernel files, {len(plan.sources)} compile steps, {plan.jobs} jobs "
        f"({plan.cores} cores, {plan.memory_gib} GiB available)"
    )
    lines.append(plan.shell())
    return _lines(lines)


def toy_diagnostics(report: ToyReport, width: int = 100) -> list[str]:
    from rich.table import Table

    t, d = report.target, report.draft
    table = Table(title="greedy acceptance of the draft (held-out code prompts)", title_justify="left")
    for col in ("k", "accepted/step", "rate", "tokens/step", "per position"):
        table.add_column(col, justify="right")
    for a in report.acceptance.by_k:
        per = " ".join(f"{r:.2f}" for r in a.per_position)
        table.add_row(
            str(a.k), f"{a.mean_accepted:.2f}", f"{a.acceptance_rate:.0%}", f"{a.tokens_per_step:.2f}", per
        )
    lines = [
        f"{report.arch} target {t.params / 1e6:.2f}M params, held-out perplexity {t.heldout_perplexity:.2f}; "
        f"draft {d.params / 1e6:.2f}M, {d.heldout_perplexity:.2f}",
        table_text(table, width).rstrip("\n"),
    ]
    if report.mtp is not None:
        rows = ", ".join(
            f"k={a.k} {a.acceptance_rate:.0%} ({a.tokens_per_step:.2f}/step)"
            for a in report.mtp.acceptance.by_k
        )
        lines.append(f"built-in MTP head ({report.mtp.params / 1e6:.2f}M params), chained acceptance: {rows}")
    return lines
