"""`specq quantize`."""

from __future__ import annotations

import typer

from ._stub import stub


def register(app: typer.Typer) -> None:
    stub(app, "quantize", "Quantize a checkpoint to 4-bit GPTQ or AWQ with your calibration data.")
