"""`specq doctor`: report what this machine can run."""

from __future__ import annotations

import typer
from rich.table import Table

from specq.pipeline.doctor import run_doctor

from ._common import emit_json, out, status_text
from ._options import JsonOpt


def doctor(as_json: JsonOpt = False) -> None:
    """Check Python, hardware, GPUs (NVML), torch/CUDA, lmdeploy, TurboMind, FlashAttention-3 and the
    quantization backends. Exits 4 when a check fails.

    Example: specq doctor --json
    """
    report = run_doctor()
    if as_json:
        emit_json(report.model_dump(mode="json"))
    else:
        table = Table(title="specq doctor")
        for col in ("check", "status", "detail", "fix"):
            table.add_column(col, overflow="fold")  # never cut a path or a command short
        for c in report.checks:
            table.add_row(c.name, status_text(c.status), c.detail, c.fix or "")
        out.print(table)
    if report.worst == "fail":
        raise typer.Exit(4)


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor)
