"""`specq twin`: a random-weight checkpoint with a real model's exact shapes (and drafters of matching
shape), from its config.json alone, to measure memory and step cost before downloading the model."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from ._common import emit, progress
from ._options import JsonOpt, OutOpt


class Quant(str, Enum):
    bf16 = "bf16"
    awq = "awq"


class Drafter(str, Enum):
    mtp = "mtp"
    dflash = "dflash"
    eagle3 = "eagle3"


def twin(
    config: Annotated[
        Path, typer.Argument(metavar="CONFIG", help="A config.json, or a checkpoint directory holding one.")
    ],
    out_dir: OutOpt = None,
    quant: Annotated[
        Quant, typer.Option("--quant", help="bf16, or awq: 4-bit AWQ in LMDeploy's gemm layout (group 128).")
    ] = Quant.bf16,
    drafter: Annotated[
        list[Drafter] | None,
        typer.Option(
            "--drafter",
            help="Also build a drafter of matching shape (repeatable): mtp (Qwen3.5's own MTP layer, in the "
            "target), dflash (DIR/dflash), eagle3 (DIR/eagle3).",
        ),
    ] = None,
    draft_quant: Annotated[
        list[Quant] | None,
        typer.Option(
            "--draft-quant",
            help="The DFlash drafter's weights (repeatable): bf16 (DIR/dflash; fp16 beside an AWQ target "
            "other than Qwen3.5), awq: 4-bit AWQ gemm as `specq quantize DRAFTER` writes it "
            "(DIR/dflash-awq).",
        ),
    ] = None,
    draft_layers: Annotated[
        int, typer.Option("--draft-layers", min=1, max=64, help="Layers of the DFlash drafter.")
    ] = 5,
    block_size: Annotated[
        int, typer.Option("--block-size", min=2, max=64, help="DFlash block size (draft tokens ≤ block − 1).")
    ] = 16,
    device: Annotated[
        str, typer.Option("--device", help="auto (cuda when there is a GPU), cuda or cpu: where to generate.")
    ] = "auto",
    seed: Annotated[int, typer.Option("--seed", help="Seed of the random weights.")] = 0,
    shard_gib: Annotated[
        float, typer.Option("--shard-gib", min=0.001, max=1024, help="Largest safetensors shard, GiB.")
    ] = 2.0,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing --out.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Build a scale twin into --out (target/, dflash/, eagle3/, twin_report.json): random weights at the
    exact shapes of CONFIG's model (dense Qwen3 / Llama, Qwen3.5), a synthetic tokenizer of its real
    vocabulary size, and drafters of matching shape. Every config.json it writes is marked `specq_twin`,
    and `plan` / `bench` reports on a twin say so: memory and speed are real, acceptance and outputs mean
    nothing.

    Example: specq twin tests/fixtures/twin/qwen3_5-27b-config.json --out specq-out/twin27 --quant awq
    --drafter mtp --drafter dflash --draft-layers 5 [--draft-quant bf16 --draft-quant awq]
    """
    from specq.pipeline.errors import UsageError
    from specq.pipeline.twin import TwinRequest, build_twin

    if out_dir is None:
        raise UsageError(
            "no --out: pass the directory to create (it receives target/, the drafters, the report)"
        )
    request = TwinRequest(
        config=str(config), out=str(out_dir), quant=quant.value,
        drafters=tuple(d.value for d in drafter or []),
        draft_quants=tuple(q.value for q in draft_quant or [Quant.bf16]), draft_layers=draft_layers,
        block_size=block_size,
        device=device, seed=seed, shard_bytes=int(shard_gib * 2**30), force=force,
    )  # fmt: skip
    result = build_twin(request, progress)

    def text(r: object) -> str:
        lines = [
            f"twin of {result.marker['source_name']} ({result.architecture}, {result.quant}) in {result.out}"
            f" — random weights, not a model",
            f"target:  {result.target.path} ({result.target.params / 1e9:.3f} B params, "
            f"{result.target.weight_bytes / 2**30:.2f} GiB, {len(result.target.files)} file(s))",
        ]
        lines += [
            f"{d.kind + ':':8} {d.path} ({d.params / 1e6:.1f} M params, {d.weight_bytes / 2**30:.2f} GiB"
            f"{', 4-bit AWQ' if d.quant == 'awq' else ''})"
            for d in result.drafters
        ]
        lines.append(
            f"tokenizer: {result.tokenizer_vocab} tokens (synthetic); built in {result.seconds:.1f} s"
        )
        return "\n".join(lines)

    emit(result, as_json, text)
