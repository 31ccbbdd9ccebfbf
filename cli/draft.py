"""`specq draft`: train and evaluate a DFlash drafter (pipeline: `specq.pipeline.draft`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ._common import emit, progress, resolve
from ._options import ConfigOpt, JsonOpt, OutOpt

draft_app = typer.Typer(help="Train and evaluate a DFlash drafter for a target.", no_args_is_help=True)

TargetArg = Annotated[
    Path,
    typer.Argument(help="The target: a Qwen3-family or Llama model directory (bf16, or GPTQ/AWQ for eval)."),
]


@draft_app.command("train")
def train(
    target: TargetArg,
    out_dir: OutOpt,
    layers: Annotated[int | None, typer.Option(help="Draft decoder layers (default 1).")] = None,
    block_size: Annotated[int | None, typer.Option(help="DFlash block size: 8 or 16 (default 8).")] = None,
    steps: Annotated[int | None, typer.Option(help="Training steps (default 300).")] = None,
    data: Annotated[
        str | None, typer.Option(help="Training texts: a .jsonl/.json/.txt file, a directory, or 'toy'.")
    ] = None,
    device: Annotated[str | None, typer.Option(help="cpu, cuda or auto.")] = None,
    dtype: Annotated[
        str | None, typer.Option(help="Checkpoint dtype: auto (the target's; fp16 for AWQ), float16, ...")
    ] = None,
    seed: Annotated[int | None, typer.Option(help="Seed: same seed, same drafter.")] = None,
    teacher: Annotated[
        Path | None,
        typer.Option(
            help="Learn from this checkpoint instead of TARGET: the one that will be served, e.g. TARGET "
            "quantized to AWQ/GPTQ by specq quantize (its hidden states and greedy continuations)."
        ),
    ] = None,
    self_distill: Annotated[
        bool | None,
        typer.Option("--self-distill/--no-self-distill", help="Train on the target's own continuations."),
    ] = None,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Train a DFlash drafter for TARGET and write it in LMDeploy 0.18's DFlash layout into the --out
    directory (required; created).

    Example: specq draft train ./toy/target --out ./toy-dflash --steps 300 --device cpu

    For a 4-bit target: specq draft train ./toy/target --teacher ./toy-awq --out ./toy-dflash-awq
    """
    from specq.pipeline.draft import DraftTrainRequest, train_drafter
    from specq.pipeline.report.text import draft_train_text

    section = dict(layers=layers, block_size=block_size, steps=steps, data=data, device=device, dtype=dtype)
    cfg = resolve(config, draft=dict(section, seed=seed, self_distill=self_distill))
    request = DraftTrainRequest.from_config(cfg, target=target, out=out_dir, teacher=teacher)
    report = train_drafter(request, progress)
    emit(report, as_json, draft_train_text)


@draft_app.command("eval")
def evaluate(
    target: TargetArg,
    draft: Annotated[Path, typer.Argument(help="A DFlash drafter directory (LMDeploy layout).")],
    prompts: Annotated[
        Path | None, typer.Option(help="Held-out texts (.jsonl/.json/.txt or a directory); default: toy.")
    ] = None,
    data: Annotated[str | None, typer.Option(help="Texts whose held-out tenth to use instead.")] = None,
    suite: Annotated[
        str | None,
        typer.Option(help="Decode a bench suite's chat prompts as a server would (e.g. code) instead."),
    ] = None,
    mode: Annotated[
        str | None,
        typer.Option(
            help="chat | completion: decode --suite or --prompts (a bench prompts file) as bench --mode does."
        ),
    ] = None,
    max_tokens: Annotated[int, typer.Option(min=4, help="Tokens per --suite prompt, as in bench.")] = 128,
    requests: Annotated[int, typer.Option(min=1, help="--suite prompts, as bench's --requests.")] = 8,
    device: Annotated[str | None, typer.Option(help="cpu, cuda or auto.")] = None,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Offline acceptance of DRAFT against TARGET's greedy tokens, and the speedup it predicts per k.

    Example: specq draft eval ./toy/target ./toy-dflash --suite code --max-tokens 128 --json

    The toys' own workload: specq draft eval ./toy/target ./toy-dflash --prompts heldout.jsonl --mode
    completion (heldout.jsonl from `specq toy prompts`)
    """
    from specq.pipeline.draft import DraftEvalRequest, evaluate_drafter
    from specq.pipeline.report.text import draft_eval_text

    cfg = resolve(config, draft=dict(data=data, device=device))
    request = DraftEvalRequest.from_config(
        cfg,
        target=target,
        draft=draft,
        prompts=prompts,
        suite=suite,
        mode=mode,
        max_tokens=max_tokens,
        requests=requests,
    )
    report = evaluate_drafter(request, progress)
    emit(report, as_json, draft_eval_text)
