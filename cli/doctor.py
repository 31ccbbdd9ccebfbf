"""`specq doctor`: report what this machine can run."""

from __future__ import annotations

import typer

from specq.pipeline.doctor import doctor_text, run_doctor

from ._common import emit, out
from ._options import JsonOpt


def doctor(as_json: JsonOpt = False) -> None:
    """Check Python, hardware, GPUs (NVML), torch/CUDA, lmdeploy, TurboMind, FlashAttention-3 and the
    quantization backends. Exits 4 when a check fails.

    Example: specq doctor --json
    """
    report = run_doctor()
    emit(report, as_json, lambda r: doctor_text(r, out.width))
    if report.worst == "fail":
        raise typer.Exit(4)
