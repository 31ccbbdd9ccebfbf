"""`specq report`."""

from __future__ import annotations

import typer

from ._stub import stub

report_app = typer.Typer(help="Show and compare saved benchmark reports.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    stub(report_app, "show", "Show and compare saved benchmark reports.")
    stub(report_app, "compare", "Show and compare saved benchmark reports.")
    app.add_typer(report_app, name="report")
