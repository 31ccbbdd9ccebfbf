"""The servers specq starts, by `ServerName`. Imported lazily so that choosing one never imports the other's
dependencies."""

from __future__ import annotations

import importlib
from pathlib import Path

from ..engines import ServerName
from ..progress import Progress, null_progress
from .base import ProcessEngine
from .spec import ServeSpec

SERVERS: dict[ServerName, tuple[str, str]] = {
    "lmdeploy": (".lmdeploy", "LMDeployEngine"),
    "embedded": (".embedded", "EmbeddedEngine"),
}


def build_engine(spec: ServeSpec, run_dir: Path, progress: Progress = null_progress) -> ProcessEngine:
    """The handle on the server `spec.server` names (not started)."""
    module, cls = SERVERS[spec.server]
    engine: ProcessEngine = getattr(importlib.import_module(module, __package__), cls)(
        spec, Path(run_dir), progress
    )
    return engine
