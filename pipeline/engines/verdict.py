"""One engine's verdict on a checkpoint (accepted / refused / fixable, with the exact `specq convert …`
command that fixes it): what every rule in this package returns."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from . import EngineName

Status = Literal["accepted", "refused", "fixable"]
ENGINE_LABELS: dict[str, str] = {
    "turbomind": "TurboMind",
    "pytorch": "PyTorch engine",
    "embedded": "embedded",
}


class Finding(BaseModel):
    """One architecture-specific load rule of an engine, checked on a checkpoint (`engines/qwen35.py`):
    a stable id, whether it passed, the engine source it comes from, and — when broken — what the engine does
    at load (`expect`), so a GPU run can confirm the prediction."""

    rule: str
    passed: bool
    source: str
    detail: str = ""
    expect: str = ""


class EngineVerdict(BaseModel):
    engine: EngineName
    status: Status
    reasons: list[str] = Field(default_factory=list)
    fixes: list[str] = Field(default_factory=list, description="exact commands that make it accepted")
    findings: list[Finding] = Field(
        default_factory=list, description="architecture rules checked, passed or not (machine-readable)"
    )

    @property
    def label(self) -> str:
        return ENGINE_LABELS[self.engine]

    def line(self) -> str:
        """One line: `PyTorch engine: fixable: <reason>; fix: <command>`."""
        text = f"{self.label}: {self.status}"
        if self.reasons:
            text += ": " + "; ".join(self.reasons)
        if self.fixes:
            text += "; fix: " + " && ".join(self.fixes)
        return text


def sibling(path: Path, suffix: str) -> Path:
    """`DIR-suffix` next to `DIR`: the default output of a fix command."""
    path = Path(path)
    return path.with_name(f"{path.name}-{suffix}")


def repack_command(model: Path) -> str:
    return shlex.join(["specq", "convert", str(model), "--to", "awq", "--out", str(sibling(model, "awq"))])


def cast_command(draft: Path, dtype: str = "float16") -> str:
    short = "fp16" if dtype == "float16" else "bf16"
    return shlex.join(["specq", "convert", str(draft), "--dtype", dtype, "--out", str(sibling(draft, short))])
