"""`specq convert`: readiness verdicts per engine, GPTQ → AWQ repack, drafter dtype cast."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from ._common import emit_json, err, note, out, progress, resolve, status_text
from ._options import ConfigOpt, DraftModelOpt, DraftTokensOpt, JsonOpt, OutOpt


def register(app: typer.Typer) -> None:
    @app.command("convert")
    def convert(
        model: Annotated[
            Path, typer.Argument(help="Hugging Face model directory (target, or drafter with --dtype).")
        ],
        draft_model: DraftModelOpt = None,
        draft_tokens: DraftTokensOpt = None,
        to: Annotated[str | None, typer.Option("--to", help="Repack a GPTQ checkpoint: awq.")] = None,
        dtype: Annotated[
            str | None, typer.Option("--dtype", help="Cast MODEL's weights: float16 or bfloat16.")
        ] = None,
        out_dir: OutOpt = None,
        engine_check: Annotated[
            bool | None, typer.Option("--engine-check", help="Also run LMDeploy's own TurboMind checks.")
        ] = None,
        config: ConfigOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Check a checkpoint (and drafter) for TurboMind, the PyTorch engine and the embedded engine; fix it.

        Exit 2 when what was asked cannot be served as is; the verdicts print the exact fix command. --out
        is the directory to create for --to or --dtype (default: MODEL-awq, -fp16 or -bf16 next to MODEL).

        Example: specq convert ./qwen3-gptq --draft-model ./dflash --draft-tokens 5
        Example: specq convert ./qwen3-gptq --to awq --out ./qwen3-awq
        Example: specq convert ./dflash-bf16 --dtype float16 --out ./dflash-fp16
        """
        from specq.pipeline.convert import NotReady, run_convert

        cfg = resolve(
            config,
            model={
                "model_path": model,
                "draft_model_path": draft_model,
                "num_draft_tokens": draft_tokens,
            },  # fmt: skip
            convert={
                "to": to,
                "dtype": dtype,
                "out": out_dir,
                "engine_check": engine_check,
            },
        )
        k = cfg.model.num_draft_tokens or None
        result = run_convert(
            model, cfg.convert, draft_model=cfg.model.draft_model_path, draft_tokens=k, progress=progress
        )
        if as_json:
            emit_json(result.model_dump(mode="json"))
        else:
            _render(result)
        if not result.ready and result.report is not None:
            fixes = result.report.fixes
            hint = f"; fix: {' && '.join(fixes)}" if fixes else ""
            raise NotReady(f"{result.report.model} is not ready to serve as asked{hint}")


def _render(result) -> None:  # ConvertResult; typed loosely to keep the pipeline import lazy
    if result.repack is not None:
        r = result.repack
        err.print(f"repacked {r.linears} linears (group {r.group_size}), copied {r.tensors_copied} tensors")
        out.print(f"AWQ checkpoint: {r.out}")
    if result.cast is not None:
        c = result.cast
        out.print(f"{c.dtype} copy: {c.out} ({c.tensors_cast} tensors cast, {c.tensors_copied} copied)")
        if c.underflow_to_zero:
            note(f"{c.underflow_to_zero} tiny nonzero weights became 0 in {c.dtype}")
    rep = result.report
    if rep is None:
        return
    draft = f", draft {rep.draft.kind} ({rep.draft.method or 'embedded only'})" if rep.draft else ""
    out.print(f"{rep.model}: {rep.architecture} · {rep.model_format}{draft}", highlight=False)
    table = Table("engine", "verdict", "why", show_lines=False)
    table.columns[2].overflow = "fold"
    for v in rep.verdicts:
        table.add_row(v.label, status_text(v.status), "; ".join(v.reasons))
    out.print(table)
    for v in rep.verdicts:  # whole lines, so the commands can be copied
        if v.fixes:
            out.print(f"fix for {v.label}: {' && '.join(v.fixes)}", highlight=False)
    if rep.max_draft_tokens is not None:
        out.print(f"largest --draft-tokens: {rep.max_draft_tokens}")
    if rep.engine:
        out.print(f"serve with: {rep.engine}")
    for n in rep.notes:
        note(n)
    if rep.manifest:
        err.print(f"wrote {rep.manifest}")
