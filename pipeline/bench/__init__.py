"""Stage: bench — `run_bench(request)` measures an OpenAI-compatible server (or a sweep of servers it starts
through the serve stage) and returns a `specq.pipeline.report.BenchReport`. The request is built once from the
resolved config: `BenchRequest.from_config(cfg)`."""

from __future__ import annotations

from .request import BenchRequest
from .runner import run_bench

__all__ = ["BenchRequest", "run_bench"]
