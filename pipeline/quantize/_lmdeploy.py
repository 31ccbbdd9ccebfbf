"""AWQ through LMDeploy's own `lmdeploy lite auto_awq`. It calibrates only on the named sets it knows
(wikitext2, c4, ptb, pileval, ...), so specq passes the hub name through and refuses local data up front."""

from __future__ import annotations

import subprocess
import sys
from typing import TYPE_CHECKING

from ..errors import ProcessFailed, UsageError
from .backends import Job, LayerHook

if TYPE_CHECKING:
    from ..calibration import Calibration


def command(job: Job, samples: int) -> list[str]:
    name = job.calib_source.split(":", 1)[0]
    cmd = [sys.executable, "-m", "lmdeploy", "lite", "auto_awq", str(job.model)]
    cmd += ["--calib-dataset", name, "--calib-samples", str(samples), "--calib-seqlen", str(job.seqlen)]
    cmd += ["--w-bits", str(job.bits), "--w-group-size", str(job.group_size), "--work-dir", str(job.out)]
    if job.device == "cpu":
        cmd += ["--device", "cpu", "--dtype", "float16"]
    return cmd


def run(job: Job, calib: Calibration, on_layer: LayerHook) -> None:
    if job.sym:
        raise UsageError("lmdeploy lite auto_awq crashes with --w-sym; use the default (zero points)")
    proc = subprocess.run(command(job, len(calib.samples)), check=False)
    if proc.returncode != 0:
        raise ProcessFailed(f"lmdeploy lite auto_awq exited with code {proc.returncode}; see quantize.log")
