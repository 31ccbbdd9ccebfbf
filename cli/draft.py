"""`specq draft`."""

from __future__ import annotations

import typer

from ._stub import stub

draft_app = typer.Typer(help="Train and evaluate a DFlash drafter for a target.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    stub(draft_app, "train", "Train and evaluate a DFlash drafter for a target.")
    stub(draft_app, "eval", "Train and evaluate a DFlash drafter for a target.")
    app.add_typer(draft_app, name="draft")
