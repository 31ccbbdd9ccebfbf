"""`specq draft`: train and evaluate a DFlash drafter (pipeline: `specq.pipeline.draft`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ._common import emit_json, out, progress, resolve
from ._options import ConfigOpt, JsonOpt, OutOpt

draft_app = typer.Typer(help="Train and evaluate a DFlash drafter for a target.", no_args_is_help=True)

TargetArg = Annotated[Path, typer.Argument(help="The target: a Qwen3-family Hugging Face model directory.")]


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
    """
    from specq.pipeline.draft import train_drafter

    section = dict(layers=layers, block_size=block_size, steps=steps, data=data, device=device, dtype=dtype)
    cfg = resolve(config, draft=dict(section, seed=seed, self_distill=self_distill))
    report = train_drafter(target, out_dir, cfg.draft, progress)
    if as_json:
        emit_json(report.model_dump(mode="json"))
        return
    ev = report.eval
    out.print(f"drafter: {report.out}  ({report.steps} steps, {report.train_seconds:.0f}s training)")
    out.print(f"acceptance by position: {' / '.join(f'{a:.2f}' for a in ev.acceptance_by_position)}")
    out.print(
        f"τ (mean accepted length): {ev.tau:.2f}   best k: {ev.best_k} (predicted ×{ev.best_speedup:.2f})"
    )


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
    max_tokens: Annotated[int, typer.Option(min=4, help="Tokens per --suite prompt, as in bench.")] = 128,
    requests: Annotated[int, typer.Option(min=1, help="--suite prompts, as bench's --requests.")] = 8,
    device: Annotated[str | None, typer.Option(help="cpu, cuda or auto.")] = None,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Offline acceptance of DRAFT against TARGET's greedy tokens, and the speedup it predicts per k.

    Example: specq draft eval ./toy/target ./toy-dflash --suite code --max-tokens 128 --json
    """
    from specq.pipeline.draft import evaluate_drafter

    cfg = resolve(config, draft=dict(data=data, device=device))
    report = evaluate_drafter(target, draft, cfg.draft, prompts, progress, suite, max_tokens, requests)
    if as_json:
        emit_json(report.model_dump(mode="json"))
        return
    out.print(f"acceptance by position: {' / '.join(f'{a:.2f}' for a in report.acceptance_by_position)}")
    out.print(f"τ (mean accepted length, k={report.block_size - 1}): {report.tau:.2f}  [{report.workload}]")
    if report.walk_tau:
        out.print(f"τ along the served path, k={report.block_size - 1}: {report.walk_tau[-1]:.2f}")
    for p in report.predictions:
        out.print(f"  k={p.k}: {p.tokens_per_step:.2f} tokens/step, predicted speedup ×{p.speedup:.2f}")
    out.print(
        f"best k: {report.best_k} (×{report.best_speedup:.2f}; step cost {report.step_cost.fixed} + "
        f"{report.step_cost.per_token}·k, an assumption until `specq bench` measures it)"
    )


def register(app: typer.Typer) -> None:
    draft_app.command("train")(train)
    draft_app.command("eval")(evaluate)
    app.add_typer(draft_app, name="draft")
