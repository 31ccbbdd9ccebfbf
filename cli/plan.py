"""`specq plan`: will this model (and drafter) fit the GPU, and with which cache settings."""

from __future__ import annotations

from typing import Annotated

import typer

from specq.pipeline.errors import EnvironmentMissing
from specq.pipeline.plan import PlanRequest, run_plan
from specq.pipeline.report.text import plan_text

from ._common import emit, out, resolve_given
from ._fields import Given, arg, opt, takes
from ._options import ConfigOpt, JsonOpt

OPTIONS = [
    "model.draft_model_path", "plan.gpu_memory", "plan.batch", "plan.session_len", "model.draft_tokens",
    "plan.engine", "engine.tp", "plan.kv_dtype", "plan.cache_max_entry_count",
]  # fmt: skip


@takes(
    arg(
        "model.model_path",
        dest="model",
        path=True,
        help="Target checkpoint directory (config.json is enough), or a config.json file.",
    ),
    *map(opt, OPTIONS),
    opt(PlanRequest, "quant"),
)
def plan(
    given: Given,
    check: Annotated[bool, typer.Option("--check", help="Exit 4 when it will not fit.")] = False,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Plan GPU memory: weights, KV cache, recurrent state, drafter, margins; recommend cache_max_entry_count
    and the longest session_len that fits. Reads config.json and safetensors headers only (no torch).
    "Will not fit" is a result: exit 0 unless --check (then exit 4, like serve's preflight).

    Example: specq plan ./qwen3.5-27b-awq --draft-model ./dflash --gpu-memory 24GiB --session-len 8192;
    before downloading: specq plan ./Qwen3.5-27B/config.json --quant awq --gpu-memory 24GiB --draft-tokens 3
    """
    cfg = resolve_given(config, given)
    result = run_plan(PlanRequest.from_config(cfg, **given.inputs(PlanRequest)))
    emit(result, as_json, lambda r: plan_text(r, out.width))  # the advice follows the verdict, on stdout
    if check and not result.fits:  # one error line, with the advice
        advice = f"; would fit: {'; or '.join(result.advice)}" if result.advice else ""
        raise EnvironmentMissing(result.verdict + advice)
