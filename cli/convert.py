"""`specq convert`: readiness verdicts per engine, GPTQ → AWQ repack, drafter dtype cast."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ._common import emit, out, progress, resolve
from ._options import ConfigOpt, DraftModelOpt, DraftTokensOpt, JsonOpt, OutOpt


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
    from specq.pipeline.convert import ConvertRequest, NotReady, run_convert
    from specq.pipeline.report.text import convert_diagnostics, convert_text

    cfg = resolve(
        config,
        model={"model_path": model, "draft_model_path": draft_model, "draft_tokens": draft_tokens},
        convert={"to": to, "dtype": dtype, "out": out_dir, "engine_check": engine_check},
    )
    result = run_convert(ConvertRequest.from_config(cfg), progress=progress)
    refused = not result.ready and result.report is not None  # then stderr holds the one error line only
    diagnostics = [] if refused else convert_diagnostics(result)
    emit(result, as_json, lambda r: convert_text(r, out.width), diagnostics)
    if refused:
        assert result.report is not None
        fixes = result.report.fixes
        hint = f"; fix: {' && '.join(fixes)}" if fixes else ""
        raise NotReady(f"{result.report.model} is not ready to serve as asked{hint}")
