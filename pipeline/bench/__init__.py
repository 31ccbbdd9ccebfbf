"""Stage: bench — `run_bench(cfg)` measures an OpenAI-compatible server (or a sweep of servers it starts
through the serve stage) and returns a `specq.pipeline.report.BenchReport`."""

from __future__ import annotations

from typing import Any

__all__ = ["run_bench"]


def run_bench(*args: Any, **kwargs: Any) -> Any:
    from .runner import run_bench as _run

    return _run(*args, **kwargs)
