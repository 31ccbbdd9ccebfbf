"""`specq bench`."""

from __future__ import annotations

import typer

from ._stub import stub


def register(app: typer.Typer) -> None:
    stub(app, "bench", "Benchmark a server: tokens/s, latency, acceptance, NVML, draft-token sweeps.")
