"""`specq fa3 build`: build the FlashAttention-3 the served models need (pipeline: `specq.pipeline.fa3`)."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ._common import emit, note, progress
from ._options import JsonOpt, OutOpt

if TYPE_CHECKING:
    from specq.pipeline.fa3 import Fa3Plan

fa3_app = typer.Typer(
    help="Build the FlashAttention-3 that LMDeploy's speculative decoding needs, for your models and GPU.",
    no_args_is_help=True,
)


class ArchOpt(str, Enum):
    auto = "auto"
    sm80 = "sm80"
    sm90 = "sm90"


class DtypeOpt(str, Enum):
    bf16 = "bf16"
    fp16 = "fp16"


@fa3_app.command("build")
def build(
    source: Annotated[
        Path,
        typer.Option(
            "--source", help="A flash-attention checkout: the directory containing hopper/ (or hopper/)."
        ),
    ],
    models: Annotated[
        list[Path] | None,
        typer.Argument(metavar="MODEL", help="The model directories to serve: target(s) and drafter(s)."),
    ] = None,
    arch: Annotated[
        ArchOpt,
        typer.Option(help="auto: this GPU's (sm90 on Hopper, sm80 on Ampere/Ada such as the RTX 3090)."),
    ] = ArchOpt.auto,
    head_dim: Annotated[
        list[int] | None, typer.Option("--head-dim", help="Also build this head dim (repeatable).")
    ] = None,
    dtype: Annotated[
        DtypeOpt | None,
        typer.Option(
            help="The dtype the engine runs in, instead of the one derived (as `specq serve --dtype`)."
        ),
    ] = None,
    jobs: Annotated[
        int | None, typer.Option(help="Parallel nvcc jobs (default: min(cores, available GiB / 4)).")
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the exact environment and command; build nothing.")
    ] = False,
    check: Annotated[
        bool,
        typer.Option(
            "--check/--no-check", help="Self-check against torch SDPA before installing (needs a GPU)."
        ),
    ] = True,
    out_dir: OutOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Derive the kernel set from MODELs (head dims, dtype: AWQ → fp16, arch), build only that from the
    flash-attention checkout, self-check it against torch, and install it into this environment (or, with
    --out, write the built modules to that new directory instead of installing).

    Example: specq fa3 build --source ./flash-attention ./toy/target ./toy-dflash --dry-run
    """
    from specq.pipeline.fa3 import Fa3Request, build_fa3, make_plan
    from specq.pipeline.report.text import fa3_build_text

    request = Fa3Request(
        source=str(source), models=tuple(map(str, models or [])), arch=arch.value,
        head_dims=tuple(head_dim or []), dtype=dtype.value if dtype else None, jobs=jobs, check=check,
        out=str(out_dir) if out_dir else None,
    )  # fmt: skip
    plan = make_plan(request)
    for line in plan.notes:
        note(line)
    if dry_run:
        _dry_run(plan, as_json)
        return
    result = build_fa3(request, plan=plan, progress=progress)
    emit(result, as_json, lambda r: fa3_build_text(r, plan))


def _dry_run(plan: Fa3Plan, as_json: bool) -> None:
    from specq.pipeline.fa3.plan import probe_toolchain
    from specq.pipeline.report.text import fa3_plan_text

    _, problems = probe_toolchain()
    for problem in problems:
        note(f"a build here would stop: {problem}")
    data = plan.model_dump(mode="json") | {"shell": plan.shell(), "problems": problems}
    emit(data, as_json, lambda _: fa3_plan_text(plan))
