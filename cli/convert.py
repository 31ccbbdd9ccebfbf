"""`specq convert`."""

from __future__ import annotations

import typer

from ._stub import stub


def register(app: typer.Typer) -> None:
    stub(app, "convert", "Check (and fix) a checkpoint for TurboMind and the PyTorch engine.")
