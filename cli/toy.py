"""`specq toy`."""

from __future__ import annotations

import typer

from ._stub import stub

toy_app = typer.Typer(help="Build the project's own tiny target/draft model pair.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    stub(toy_app, "build", "Build the project's own tiny target/draft model pair.")
    app.add_typer(toy_app, name="toy")
