"""`specq report show|compare`: re-render a saved benchmark report, or compare two run by run."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ._common import emit, out
from ._options import JsonOpt, WideOpt

report_app = typer.Typer(help="Show and compare saved benchmark reports.", no_args_is_help=True)


@report_app.command("show")
def show(
    run: Annotated[Path, typer.Argument(help="A report.json written by specq bench.")],
    fmt: Annotated[str, typer.Option("--format", "-f", help="table | md | csv (JSON: --json).")] = "table",
    wide: WideOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Render a saved benchmark report.

    Example: specq report show specq-out/bench-1/report.json --format md
    """
    from specq.pipeline.report import BenchReport
    from specq.pipeline.report.formatters import render

    emit(BenchReport.load(run), as_json, lambda r: render(r, fmt, width=out.width, wide=wide))


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
    match = ra.workload.digest == rb.workload.digest
    data = {"a": str(a), "b": str(b), "workload_match": match, "rows": rows}
    notes = [] if match else ["note: the two reports measured different workloads (digests differ)"]
    emit(data, as_json, lambda d: compare_table(d["rows"], d["a"], d["b"]), notes)
