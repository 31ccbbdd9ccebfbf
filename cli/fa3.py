"""`specq fa3 build`: build the FlashAttention-3 the served models need (pipeline: `specq.pipeline.fa3`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from specq.pipeline.fa3.plan import Fa3Request

from ._common import emit, note, progress
from ._fields import Given, arg, opt, takes
from ._options import JsonOpt, OutOpt

if TYPE_CHECKING:
    from specq.pipeline.fa3 import Fa3Plan

fa3_app = typer.Typer(
    help="Build the FlashAttention-3 that LMDeploy's speculative decoding needs, for your models and GPU.",
    no_args_is_help=True,
)


@fa3_app.command("build")
@takes(
    opt(Fa3Request, "source"),
    arg(Fa3Request, "models", dest="models", path=True, metavar="MODEL"),
    *(opt(Fa3Request, k) for k in ("arch", "head_dims", "dtype", "jobs")),
    "dry_run",
    opt(Fa3Request, "check"),
)
def build(
    given: Given,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the exact environment and command; build nothing.")
    ] = False,
    out_dir: OutOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Derive the kernel set from MODELs (head dims, dtype: AWQ → fp16, arch), build only that from the
    flash-attention checkout, self-check it against torch, and install it into this environment (or, with
    --out, write the built modules to that new directory instead of installing).

    Example: specq fa3 build --source ./flash-attention ./toy/target ./toy-dflash --dry-run
    """
    from specq.pipeline.fa3 import build_fa3, make_plan
    from specq.pipeline.report.text import fa3_build_text

    request = Fa3Request(**given.inputs(Fa3Request), out=str(out_dir) if out_dir else None)
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
