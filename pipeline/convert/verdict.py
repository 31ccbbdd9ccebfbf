"""The typed results of `specq convert`: one verdict per engine (accepted / refused / fixable with the exact
`specq convert …` command that fixes it) and the readiness report that `specq-manifest.json` is made from."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

Engine = Literal["turbomind", "pytorch", "embedded"]
Status = Literal["accepted", "refused", "fixable"]
ENGINE_LABELS: dict[str, str] = {
    "turbomind": "TurboMind",
    "pytorch": "PyTorch engine",
    "embedded": "embedded",
}


class EngineVerdict(BaseModel):
    engine: Engine
    status: Status
    reasons: list[str] = Field(default_factory=list)
    fixes: list[str] = Field(default_factory=list, description="exact commands that make it accepted")

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


class DraftReport(BaseModel):
    path: str | None = None
    kind: str  # dflash | eagle3 | eagle | model | mtp | unknown
    method: str | None = Field(None, description="LMDeploy --speculative-algorithm, None for a plain model")
    dtype: str | None = None
    problems: list[str] = Field(default_factory=list)


class ConvertReport(BaseModel):
    schema_version: int = 1
    model: str
    architecture: str | None = None
    model_format: str = Field(description="hf (not quantized) | awq | gptq | compressed-tensors | …")
    dtype: str | None = None
    quantization: dict[str, Any] | None = None
    draft: DraftReport | None = None
    draft_tokens: int | None = None
    max_draft_tokens: int | None = Field(None, description="largest --draft-tokens the pair allows")
    verdicts: list[EngineVerdict]
    engine: str | None = Field(None, description="recommended engine/backend for what was asked")
    ready: bool
    manifest: str | None = None
    notes: list[str] = Field(default_factory=list)

    def verdict(self, engine: Engine) -> EngineVerdict:
        return next(v for v in self.verdicts if v.engine == engine)

    @property
    def fixes(self) -> list[str]:
        seen: list[str] = []
        for v in self.verdicts:
            for f in v.fixes:
                if f not in seen:
                    seen.append(f)
        return seen


def sibling(path: Path, suffix: str) -> Path:
    """`DIR-suffix` next to `DIR`: the default output of a fix command."""
    path = Path(path)
    return path.with_name(f"{path.name}-{suffix}")


def repack_command(model: Path) -> str:
    return shlex.join(["specq", "convert", str(model), "--to", "awq", "--out", str(sibling(model, "awq"))])


def cast_command(draft: Path, dtype: str = "float16") -> str:
    short = "fp16" if dtype == "float16" else "bf16"
    return shlex.join(["specq", "convert", str(draft), "--dtype", dtype, "--out", str(sibling(draft, short))])
