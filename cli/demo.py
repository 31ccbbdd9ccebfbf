"""`specq demo`."""

from __future__ import annotations

import typer

from ._stub import stub


def register(app: typer.Typer) -> None:
    stub(app, "demo", "Run the whole pipeline on the toy models.")
