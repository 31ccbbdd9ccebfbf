"""`specq plan`: will this model (and drafter) fit the GPU, and with which cache settings."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from specq.pipeline.errors import EnvironmentMissing
from specq.pipeline.plan import PlanRequest, run_plan
from specq.pipeline.report.text import plan_diagnostics, plan_text

from ._common import emit, out, resolve
from ._options import ConfigOpt, DraftModelOpt, DraftTokensOpt, JsonOpt, TpOpt

EngineOpt = Annotated[
    str | None,
    typer.Option("--engine", help="lmdeploy | embedded (default: auto; for plan, the memory model)."),
]


def plan(
    model: Annotated[
        Path | None, typer.Argument(help="Target checkpoint directory (config.json is enough).")
    ] = None,
    draft_model: DraftModelOpt = None,
    gpu_memory: Annotated[str | None, typer.Option("--gpu-memory", help="e.g. 24GiB; default: NVML.")] = None,
    batch: Annotated[int | None, typer.Option("--batch", min=1, help="Concurrent sequences.")] = None,
    session_len: Annotated[
        int | None, typer.Option("--session-len", min=64, help="Tokens per session.")
    ] = None,
    draft_tokens: DraftTokensOpt = None,
    engine: EngineOpt = None,
    tp: TpOpt = None,
    kv_dtype: Annotated[
        str | None, typer.Option("--kv-dtype", help="KV dtype: auto, float16, bfloat16, int8 or int4.")
    ] = None,
    cache_max_entry_count: Annotated[
        float | None,
        typer.Option(
            "--cache-max-entry-count",
            min=0.01,
            max=0.99,
            help="Evaluate this LMDeploy KV ratio (what the server will run with, e.g. specq serve's 0.8) "
            "instead of recommending one.",
        ),
    ] = None,  # fmt: skip
    check: Annotated[bool, typer.Option("--check", help="Exit 4 when it will not fit.")] = False,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Plan GPU memory: weights, KV cache, recurrent state, drafter, margins; recommend cache_max_entry_count
    and the longest session_len that fits. Reads config.json and safetensors headers only (no torch).
    "Will not fit" is a result: exit 0 unless --check (then exit 4, like serve's preflight).

    Example: specq plan ./qwen3.5-27b-awq --draft-model ./dflash --gpu-memory 24GiB --session-len 8192
    """
    cfg = resolve(
        config,
        model={"model_path": model, "draft_model_path": draft_model, "draft_tokens": draft_tokens},
        engine={"tp": tp},
        plan={"gpu_memory": gpu_memory, "batch": batch, "session_len": session_len, "engine": engine,
              "kv_dtype": kv_dtype, "cache_max_entry_count": cache_max_entry_count},
    )  # fmt: skip
    result = run_plan(PlanRequest.from_config(cfg))
    refused = check and not result.fits  # then the advice goes into the one error line, not before it
    emit(result, as_json, lambda r: plan_text(r, out.width), [] if refused else plan_diagnostics(result))
    if refused:
        advice = f"; would fit: {'; or '.join(result.advice)}" if result.advice else ""
        raise EnvironmentMissing(result.verdict + advice)
