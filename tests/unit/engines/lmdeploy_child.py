"""Running a check in a child process on LMDeploy 0.18.0's own code, started the way specq starts LMDeploy
(the compatibility hook on, the `w4a16-specq` patch applied), with specq's kernels under Triton's interpreter:
what test_qwen35_fused_in_proj.py and test_qwen35_fused_mlp.py share. Skips where that LMDeploy does not
import (CI's machines: its wheels are CUDA builds from LMDeploy's own index)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from specq.pipeline.engines import lmdeploy_compat as compat
from specq.pipeline.engines.lmdeploy_compat import hook
from specq.pipeline.kernels import FUSE_SILU_ENV


def run_patched(tmp_path: Path, child: str, *args: str) -> dict[str, Any]:
    """Run the script `child` (argv: `args`) and return the JSON object its last line prints; the child
    starts with none of this process's compatibility, hook-log or stored-activation settings."""
    pytest.importorskip("lmdeploy.pytorch.models.qwen3_5", reason="LMDeploy 0.18.0's PyTorch engine")
    status = compat.status(patch=compat.W4A16_PATCH)
    if status.state != "applies":
        pytest.skip("the installed LMDeploy is not 0.18.0 as released")
    script = tmp_path / "child.py"
    script.write_text(child)
    env = {k: v for k, v in os.environ.items() if k not in (compat.ENV, hook.LOG_ENV, FUSE_SILU_ENV)}
    env = compat.launch_env(env, status)
    proc = subprocess.run(
        [sys.executable, str(script), *args], env={**env, "TRITON_INTERPRET": "1"}, capture_output=True,
        text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])
