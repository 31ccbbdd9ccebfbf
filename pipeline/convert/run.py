"""The one entry point behind `specq convert`: a readiness check, a GPTQ → AWQ repack (followed by the check
of its output), or a drafter dtype cast, chosen by the convert settings. Its one input is a `ConvertRequest`
(frozen), its result a `ConvertResult`."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from ..checkpoint import Checkpoint
from ..config import SpecqConfig
from ..config.models import ConvertSection
from ..engines.verdict import sibling
from ..errors import UsageError
from ..fsutil import check_writable
from ..progress import Progress, null_progress
from .cast import CastResult, cast_drafter
from .readiness import check_readiness
from .repack import RepackResult, repack_gptq_to_awq
from .verdict import ConvertReport


class ConvertRequest(ConvertSection):
    """Everything `run_convert` needs, frozen: the `[convert]` settings, the checkpoint and, for a
    readiness check of a speculative setup, the drafter and its draft-token count. Build it once with
    `from_config`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str
    draft_model: str | None = None
    draft_tokens: int | None = None

    @classmethod
    def from_config(cls, cfg: SpecqConfig, *, model: str | Path | None = None) -> ConvertRequest:
        """The request for `cfg` (its `[convert]` section and `model.*` paths); `model` overrides
        `model.model_path`. A draft-token count of 0 (no speculation) checks no count."""
        model = model or cfg.model.model_path
        if not model:
            raise UsageError("no model to convert: pass MODEL or set model.model_path")
        return cls.model_validate(
            {
                **cfg.convert.model_dump(),
                "model": str(model),
                "draft_model": cfg.model.draft_model_path,
                "draft_tokens": cfg.model.draft_tokens or None,
            }
        )


class ConvertResult(BaseModel):
    action: Literal["check", "repack", "cast"]
    report: ConvertReport | None = None
    repack: RepackResult | None = None
    cast: CastResult | None = None

    @property
    def ready(self) -> bool:
        return self.report is None or self.report.ready


def run_convert(cfg: ConvertRequest, progress: Progress = null_progress) -> ConvertResult:
    model, draft_model, draft_tokens = Path(cfg.model), cfg.draft_model, cfg.draft_tokens
    if cfg.to and cfg.dtype:
        raise UsageError("--to and --dtype do different jobs (repack a target, cast a drafter): give one")
    if cfg.to == "awq":
        out = Path(cfg.out) if cfg.out else sibling(model, "awq")
        check_writable(out, need_bytes=Checkpoint(model).file_bytes // 2)
        progress(f"repacking GPTQ {model} as AWQ gemm into {out}")
        rep = repack_gptq_to_awq(model, out, progress=progress)
        report = check_readiness(out, draft_model, draft_tokens, engine_check=cfg.engine_check)
        return ConvertResult(action="repack", report=report, repack=rep)
    if cfg.dtype:
        if draft_model:
            raise UsageError("--dtype casts MODEL itself; run it on the drafter without --draft-model")
        out = Path(cfg.out) if cfg.out else sibling(model, "fp16" if cfg.dtype == "float16" else "bf16")
        check_writable(out, need_bytes=Checkpoint(model).file_bytes // 2)
        progress(f"casting {model} to {cfg.dtype} into {out}")
        return ConvertResult(action="cast", cast=cast_drafter(model, out, cfg.dtype, progress=progress))
    if cfg.out:
        raise UsageError(
            "--out needs --to awq or --dtype (a readiness check writes only specq-manifest.json)"
        )
    report = check_readiness(model, draft_model, draft_tokens, engine_check=cfg.engine_check)
    return ConvertResult(action="check", report=report)
