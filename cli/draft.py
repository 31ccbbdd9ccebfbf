"""`specq draft`: train and evaluate a DFlash drafter (pipeline: `specq.pipeline.draft`)."""

from __future__ import annotations

import typer

from specq.pipeline.draft import DraftEvalRequest, DraftTrainRequest

from ._common import emit, progress, resolve_given
from ._fields import Given, arg, opt, takes
from ._options import ConfigOpt, JsonOpt, OutOpt

draft_app = typer.Typer(help="Train and evaluate a DFlash drafter for a target.", no_args_is_help=True)

TARGET = "The target: a Qwen3-family or Llama model directory (bf16, or GPTQ/AWQ for eval)."
TRAIN = ["layers", "block_size", "steps", "data", "device", "dtype", "seed"]


@draft_app.command("train")
@takes(
    arg(DraftTrainRequest, "target", dest="target", required=True, path=True, help=TARGET),
    "out_dir",
    *(opt(f"draft.{k}") for k in TRAIN),
    opt(DraftTrainRequest, "teacher"),
    opt("draft.self_distill"),
)
def train(given: Given, out_dir: OutOpt, config: ConfigOpt = None, as_json: JsonOpt = False) -> None:
    """Train a DFlash drafter for TARGET and write it in LMDeploy 0.18's DFlash layout into the --out
    directory (required; created).

    Example: specq draft train ./toy/target --out ./toy-dflash --steps 300 --device cpu

    For a 4-bit target: specq draft train ./toy/target --teacher ./toy-awq --out ./toy-dflash-awq
    """
    from specq.pipeline.draft import train_drafter
    from specq.pipeline.report.text import draft_train_text

    cfg = resolve_given(config, given)
    request = DraftTrainRequest.from_config(cfg, out=out_dir, **given.inputs(DraftTrainRequest))
    report = train_drafter(request, progress)
    emit(report, as_json, draft_train_text)


@draft_app.command("eval")
@takes(
    arg(DraftEvalRequest, "target", dest="target", required=True, path=True, help=TARGET),
    arg(DraftEvalRequest, "draft", dest="draft", required=True, path=True),
    opt(DraftEvalRequest, "prompts"),
    opt("draft.data"),
    *(opt(DraftEvalRequest, k) for k in ("suite", "mode", "max_tokens", "requests")),
    opt("draft.device"),
)
def evaluate(given: Given, config: ConfigOpt = None, as_json: JsonOpt = False) -> None:
    """Offline acceptance of DRAFT against TARGET's greedy tokens, and the speedup it predicts per k.

    Example: specq draft eval ./toy/target ./toy-dflash --suite code --max-tokens 128 --json

    The toys' own workload: specq draft eval ./toy/target ./toy-dflash --prompts heldout.jsonl --mode
    completion (heldout.jsonl from `specq toy prompts`)
    """
    from specq.pipeline.draft import evaluate_drafter
    from specq.pipeline.report.text import draft_eval_text

    request = DraftEvalRequest.from_config(resolve_given(config, given), **given.inputs(DraftEvalRequest))
    report = evaluate_drafter(request, progress)
    emit(report, as_json, draft_eval_text)
