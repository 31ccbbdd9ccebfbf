"""Stage: bench — `run_bench(request)` measures an OpenAI-compatible server (or a sweep of servers it starts
through the serve stage) and returns a `specq.pipeline.report.BenchReport`. The request is built once from the
resolved config: `BenchRequest.from_config(cfg)`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..progress import Progress, null_progress
from .request import BenchRequest

if TYPE_CHECKING:
    from ..report.models import BenchReport
    from .runner import EngineFactory

__all__ = ["BenchRequest", "run_bench"]


def run_bench(
    request: BenchRequest,
    *,
    progress: Progress = null_progress,
    engine_factory: EngineFactory | None = None,
    out_dir: Path | None = None,
) -> BenchReport:
    """Run the benchmark and write its report files (see `runner.run_bench`)."""
    from .runner import run_bench as _run

    return _run(request, progress=progress, engine_factory=engine_factory, out_dir=out_dir)
