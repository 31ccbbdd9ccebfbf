"""`specq report show|compare`: re-render a saved benchmark report, or compare two run by run."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ._common import emit_json, out
from ._options import JsonOpt

report_app = typer.Typer(help="Show and compare saved benchmark reports.", no_args_is_help=True)


@report_app.command("show")
def show(
    run: Annotated[Path, typer.Argument(help="A report.json written by specq bench.")],
    fmt: Annotated[str, typer.Option("--format", "-f", help="table | md | csv | json.")] = "table",
    as_json: JsonOpt = False,
) -> None:
    """Render a saved benchmark report.

    Example: specq report show specq-out/bench-1/report.json --format md
    """
    from specq.pipeline.report import BenchReport
    from specq.pipeline.report.formatters import render

    text = render(BenchReport.load(run), "json" if as_json else fmt)
    out.print(text, end="" if text.endswith("\n") else "\n", highlight=False, markup=False, soft_wrap=True)


@report_app.command("compare")
def compare(
    a: Annotated[Path, typer.Argument(help="Report A (the reference).")],
    b: Annotated[Path, typer.Argument(help="Report B (compared against A).")],
    as_json: JsonOpt = False,
) -> None:
    """Compare two benchmark reports run by run: A, B, delta and relative change.

    Example: specq report compare old/report.json new/report.json
    """
    from specq.pipeline.report import BenchReport
    from specq.pipeline.report.compare import compare as compare_reports
    from specq.pipeline.report.formatters import compare_table

    ra, rb = BenchReport.load(a), BenchReport.load(b)
    rows = compare_reports(ra, rb)
    if as_json:
        emit_json({"a": str(a), "b": str(b), "workload_match": ra.workload.digest == rb.workload.digest,
                   "rows": rows})  # fmt: skip
        return
    out.print(compare_table(rows, str(a), str(b)), end="", highlight=False, markup=False)
    if ra.workload.digest != rb.workload.digest:
        from ._common import note

        note("the two reports measured different workloads (digests differ)")


def register(app: typer.Typer) -> None:
    app.add_typer(report_app, name="report")
