"""The typed result of `specq convert`: one verdict per engine (`engines.verdict.EngineVerdict`), the
drafter's report, and the readiness report that `specq-manifest.json` is made from."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from ..engines import EngineName
from ..engines.verdict import EngineVerdict


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

    def verdict(self, engine: EngineName) -> EngineVerdict:
        return next(v for v in self.verdicts if v.engine == engine)

    @property
    def fixes(self) -> list[str]:
        seen: list[str] = []
        for v in self.verdicts:
            for f in v.fixes:
                if f not in seen:
                    seen.append(f)
        return seen
