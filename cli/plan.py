"""`specq plan`."""

from __future__ import annotations

import typer

from ._stub import stub


def register(app: typer.Typer) -> None:
    stub(app, "plan", "Plan GPU memory: weights, KV cache, drafter, the longest session that fits.")
