"""Stage: serve. `create_engine(request, run_dir)` turns a `ServeRequest` (built once from the config with
`ServeRequest.from_config(cfg)`) into a ready-to-start `Engine` (LMDeploy's api_server or the embedded
transformers server), after the checks that need no GPU. `specq serve` and `specq bench` drive servers only
through it."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from ..progress import Progress, null_progress
from .engine import Engine
from .spec import ServeRequest, ServerOptions, ServeSpec

if TYPE_CHECKING:
    from .base import ProcessEngine

__all__ = ["Engine", "ServeRequest", "ServeSpec", "ServerOptions", "create_engine"]


def create_engine(
    request: ServeRequest, run_dir: Path | None, progress: Progress = null_progress
) -> ProcessEngine:
    """The server `request.server` names (auto: LMDeploy when an NVIDIA GPU and lmdeploy are present, else
    the embedded engine, with a notice through `progress`), its log in `run_dir` (None:
    specq-out/serve/TIME-PORT). Speculation is on when `request.draft_tokens > 0` and a draft or an MTP
    method is set; 0 is the baseline. Raises UsageError (exit 2) for incompatible inputs; environment
    problems (exit 4) surface at `start()`. The one builder of servers: `specq serve` and `bench`."""
    from .registry import build_engine
    from .spec import resolve_spec

    spec = resolve_spec(request, progress)
    if run_dir is None:
        run_dir = Path("specq-out") / "serve" / f"{datetime.now().strftime('%Y%m%d-%H%M%S')}-{spec.port}"
    return build_engine(spec, Path(run_dir), progress)
