"""`specq convert MODEL [--draft-model DRAFT]`: per-engine verdicts for a target (and drafter) from headers
and configs only, and the `specq-manifest.json` that `specq serve` reads.

Ready means: what was asked can be served by some engine without a fix. With a drafter (or a target with its
own MTP head) that is the PyTorch engine or, for a plain draft model, the embedded engine; without one, any
engine. TurboMind never speculates in LMDeploy 0.18, so with a drafter it only serves the plain baseline."""

from __future__ import annotations

import json
from pathlib import Path

from ..checkpoint import Checkpoint, validate_checkpoint
from ..engines import ServerName
from ..engines.embedded import embedded_verdict
from ..engines.pytorch import pytorch_engine_verdict
from ..engines.qwen35 import mtp_findings, serve_dtype
from ..engines.turbomind import turbomind_verdict
from ..engines.verdict import EngineVerdict, cast_command
from ..errors import EnvironmentMissing, SpecqError, UsageError
from ..fsutil import atomic_write_text
from ..hardware import lmdeploy_version, module_present
from .draft import draft_report, max_draft_tokens, pair_problems
from .verdict import ConvertReport, DraftReport

MANIFEST = "specq-manifest.json"
ORDER = {"accepted": 0, "fixable": 1, "refused": 2}


class NotReady(UsageError):
    """`specq convert` found the checkpoint not servable as asked (exit 2)."""


def _worst(
    v: EngineVerdict, status: str, reasons: list[str], fixes: list[str] | None = None
) -> EngineVerdict:
    new_status = status if ORDER[status] > ORDER[v.status] else v.status
    # A refused verdict offers no fixes: the commands would not make it servable.
    new_fixes = [] if new_status == "refused" else v.fixes + (fixes or [])
    return v.model_copy(update={"status": new_status, "reasons": v.reasons + reasons, "fixes": new_fixes})


def model_format(ckpt: Checkpoint) -> str:
    q = ckpt.quantization
    return q.method if q else "hf"


def _with_draft(
    v: EngineVerdict, target: Checkpoint, draft: DraftReport, draft_ckpt: Checkpoint | None, k: int | None
) -> EngineVerdict:
    if v.engine == "turbomind":
        return v.model_copy(update={"reasons": v.reasons + ["plain decoding only (no speculative decoding)"]})
    engine: ServerName = "lmdeploy" if v.engine == "pytorch" else "embedded"
    problems = pair_problems(target, draft_ckpt, k, engine)
    if v.engine == "pytorch" and draft.kind == "mtp":  # the MTP head's rules, machine-readable too
        v = v.model_copy(update={"findings": v.findings + mtp_findings(target)})
    if problems:
        v = _worst(v, "refused", problems)
    if v.engine == "pytorch" and draft_ckpt is not None and draft_ckpt.quantization is not None:
        v = _quantized_drafter(v, draft_ckpt)
    # AWQ/GPTQ run in fp16 on the PyTorch engine, except a Gated DeltaNet target (bf16: engines/qwen35.py)
    fp16_target = model_format(target) in ("awq", "gptq") and serve_dtype(target) is None
    if v.engine == "pytorch" and fp16_target and draft_ckpt is not None and not problems:
        if (draft.dtype or "").lower() not in ("float16", "half"):
            v = _worst(
                v,
                "fixable",
                [
                    f"the target runs in float16, the drafter is {draft.dtype}"
                    " (the engine would crash at start-up)"
                ],
                [cast_command(draft_ckpt.path)],
            )
    return v


def _quantized_drafter(v: EngineVerdict, draft: Checkpoint) -> EngineVerdict:
    """A 4-bit drafter on the PyTorch engine: served through specq's dflash-awq patch (its layout and dtype
    rules are `check_draft`'s), refused for an LMDeploy the patch does not know; accepted where none is
    installed (serve checks again on the GPU machine)."""
    from ..engines import lmdeploy_compat

    compat = lmdeploy_compat.status(patch=lmdeploy_compat.DFLASH_AWQ_PATCH)
    why = lmdeploy_compat.refusal(compat, f"{draft.name} (a 4-bit drafter)")
    if why:
        return _worst(v, "refused", [why])
    if v.status == "refused":
        return v
    note = "4-bit drafter: LMDeploy builds its linears as AwqLinear through specq's dflash-awq patch"
    return v.model_copy(update={"reasons": v.reasons + [note]})


def check_readiness(
    model: str | Path,
    draft_model: str | Path | None = None,
    draft_tokens: int | None = None,
    *,
    write_manifest: bool = True,
    engine_check: bool = False,
) -> ConvertReport:
    target = Checkpoint(model)
    if target.draft_kind in ("dflash", "eagle", "eagle3"):
        raise UsageError(
            f"{target.path} is a {target.draft_kind} drafter;"
            " pass the target as MODEL and this as --draft-model"
        )
    # Ready means complete first: a damaged checkpoint gets no verdicts and no manifest.
    validate_checkpoint(target, role="target")
    draft_ckpt = Checkpoint(draft_model) if draft_model else None
    if draft_ckpt is not None:
        validate_checkpoint(draft_ckpt, tokenizer=False, role="drafter")
    draft = draft_report(target, draft_ckpt, draft_tokens)
    verdicts = [turbomind_verdict(target), pytorch_engine_verdict(target), embedded_verdict(target)]
    notes: list[str] = []
    if engine_check:
        verdicts[0] = _lmdeploy_engine_check(target, verdicts[0])
    if draft is not None:
        verdicts = [_with_draft(v, target, draft, draft_ckpt, draft_tokens) for v in verdicts]
    by: dict[str, EngineVerdict] = {v.engine: v for v in verdicts}
    if draft is not None:
        candidates = ["pytorch", "embedded"]
    else:
        candidates = ["turbomind", "pytorch", "embedded"]
    engine = next((e for e in candidates if by[e].status == "accepted"), None)
    limit = max_draft_tokens(draft_ckpt) if draft is not None else None
    q = target.quantization
    report = ConvertReport(
        model=str(target.path),
        architecture=target.architectures[0] if target.architectures else None,
        model_format=model_format(target),
        dtype=target.torch_dtype,
        quantization=q.model_dump(exclude={"raw"}) if q else None,
        draft=draft,
        draft_tokens=draft_tokens,
        max_draft_tokens=limit,
        verdicts=verdicts,
        engine=_engine_label(engine),
        ready=engine is not None,
        notes=notes,
    )
    if write_manifest:
        path = target.path / MANIFEST
        try:
            atomic_write_text(path, json.dumps(manifest(report, serve_dtype(target)), indent=2) + "\n")
            report.manifest = str(path)
        except (OSError, SpecqError) as e:  # a read-only model directory: the verdicts still stand
            report.notes.append(f"could not write {path}: {getattr(e, 'strerror', None) or e}")
    return report


def _engine_label(engine: str | None) -> str | None:
    return {"turbomind": "lmdeploy/turbomind", "pytorch": "lmdeploy/pytorch", "embedded": "embedded"}.get(
        engine or ""
    )


def manifest(report: ConvertReport, dtype: str | None = None) -> dict:
    """What `specq serve` reads: engine choice, model format, the dtype the PyTorch engine runs it in (`dtype`
    when specq launches it in one, else fp16 for AWQ/GPTQ and the checkpoint's own), draft method, limits,
    verdicts."""
    return {
        "schema_version": 1,
        "written_by": "specq convert",
        "model": report.model,
        "model_format": report.model_format,
        "dtype": dtype or ("float16" if report.model_format in ("awq", "gptq") else report.dtype),
        "engine": report.engine,
        "ready": report.ready,
        "draft": report.draft.model_dump() if report.draft else None,
        "draft_method": report.draft.method if report.draft else None,
        "limits": {"max_draft_tokens": report.max_draft_tokens},
        "verdicts": {
            v.engine: {"status": v.status, "reasons": v.reasons, "fixes": v.fixes} for v in report.verdicts
        },
    }


def read_manifest(model: str | Path) -> dict | None:
    """The manifest next to a model, or None (for `specq serve`)."""
    path = Path(model) / MANIFEST
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def _lmdeploy_engine_check(target: Checkpoint, v: EngineVerdict) -> EngineVerdict:
    """LMDeploy's own TurboMind checks on the checkpoint (a GPU user's machine with TurboMind's
    native module): `is_supported` and `get_tm_config`, which validates the quantization config and
    builds the weight-format resolver. Needs `_turbomind`; exit 4 otherwise."""
    if not module_present("lmdeploy") or not module_present("_turbomind"):
        raise EnvironmentMissing(
            "--engine-check runs LMDeploy's own TurboMind checks and needs lmdeploy 0.18 with"
            " TurboMind's native module (_turbomind); install lmdeploy on a CUDA machine,"
            " or drop --engine-check"
        )
    from lmdeploy.messages import TurbomindEngineConfig  # type: ignore[import-not-found]
    from lmdeploy.turbomind.converter import get_tm_config  # type: ignore[import-not-found]
    from lmdeploy.turbomind.supported_models import is_supported  # type: ignore[import-not-found]

    version = lmdeploy_version()
    if not is_supported(str(target.path)):
        return _worst(v, "refused", [f"lmdeploy {version} is_supported() says no"])
    try:
        get_tm_config(str(target.path), TurbomindEngineConfig())
    except Exception as e:  # LMDeploy raises AssertionError/ValueError/KeyError with its reason
        return _worst(v, "refused", [f"lmdeploy {version}: {type(e).__name__}: {e}"])
    return v.model_copy(update={"reasons": v.reasons + [f"lmdeploy {version} engine check passed"]})
