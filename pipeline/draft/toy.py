"""A DFlash drafter for a toy pair (`specq toy build --drafter dflash`): trained once with the default
settings, cached beside the pair (`<pair root>/dflash`), and copied to where the caller wants it."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from ..config.models import DraftSection
from ..fsutil import atomic_dir
from ..progress import Progress, null_progress


def toy_dflash(
    pair: Any, out: Path | None = None, cfg: DraftSection | None = None, progress: Progress = null_progress
) -> Path:
    """The toy target's DFlash drafter directory (trained on first use); a copy at `out` when given."""
    from . import DraftTrainRequest, train_drafter

    cached = Path(pair.root) / "dflash"
    if not (cached / "config.json").is_file():
        progress(f"training a DFlash drafter for the toy target into {cached}")
        request = DraftTrainRequest.from_config(cfg or DraftSection(), target=pair.target, out=cached)
        train_drafter(request, progress)
    if out is None:
        return cached
    with atomic_dir(out, overwrite=True) as tmp:
        shutil.copytree(cached, tmp, dirs_exist_ok=True)
    return out
