"""`specq twin`: a random-weight checkpoint with a real model's exact shapes (and drafters of matching
shape), from its config.json alone, to measure memory and step cost before downloading the model."""

from __future__ import annotations

from typing import Annotated

import typer

from specq.pipeline.twin import TwinRequest

from ._common import emit, progress
from ._fields import Given, arg, opt, takes
from ._options import JsonOpt, OutOpt

ShardOpt = Annotated[
    float, typer.Option("--shard-gib", min=0.001, max=1024, help="Largest safetensors shard, GiB.")
]
FIELDS = ("quant", "drafters", "draft_quants", "draft_layers", "block_size", "device", "seed")


@takes(
    arg(TwinRequest, "config", dest="config", required=True, path=True, metavar="CONFIG"),
    "out_dir",
    *(opt(TwinRequest, k) for k in FIELDS),
    "shard_gib",
    opt(TwinRequest, "force"),
)
def twin(given: Given, out_dir: OutOpt = None, shard_gib: ShardOpt = 2.0, as_json: JsonOpt = False) -> None:
    """Build a scale twin into --out (target/, dflash/, eagle3/, twin_report.json): random weights at the
    exact shapes of CONFIG's model (dense Qwen3 / Llama, Qwen3.5), a synthetic tokenizer of its real
    vocabulary size, and drafters of matching shape. Every config.json it writes is marked `specq_twin`,
    and `plan` / `bench` reports on a twin say so: memory and speed are real, acceptance and outputs mean
    nothing.

    Example: specq twin tests/fixtures/twin/qwen3_5-27b-config.json --out specq-out/twin27 --quant awq
    --drafter mtp --drafter dflash --draft-layers 5 [--draft-quant bf16 --draft-quant awq]
    """
    from specq.pipeline.errors import UsageError
    from specq.pipeline.twin import build_twin

    if out_dir is None:
        raise UsageError(
            "no --out: pass the directory to create (it receives target/, the drafters, the report)"
        )
    request = TwinRequest(**given.inputs(TwinRequest), out=str(out_dir), shard_bytes=int(shard_gib * 2**30))
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
