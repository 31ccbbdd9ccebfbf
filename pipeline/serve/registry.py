"""The engines by name. Imported lazily so that choosing one never imports the other's dependencies."""

from __future__ import annotations

import importlib
from pathlib import Path

from ..config.models import SpecqConfig
from ..progress import Progress, null_progress
from .base import ProcessEngine
from .spec import ServeSpec

ENGINES: dict[str, tuple[str, str]] = {
    "lmdeploy": (".lmdeploy", "LMDeployEngine"),
    "embedded": (".embedded", "EmbeddedEngine"),
}


def build_engine(
    spec: ServeSpec, cfg: SpecqConfig, run_dir: Path, progress: Progress = null_progress
) -> ProcessEngine:
    module, cls = ENGINES[spec.engine]
    engine: ProcessEngine = getattr(importlib.import_module(module, __package__), cls)(
        spec, cfg, Path(run_dir), progress
    )
    return engine
