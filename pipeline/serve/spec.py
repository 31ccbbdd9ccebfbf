"""From a resolved `SpecqConfig` to what will be served: which engine and backend, which target and
drafter, which speculative method with how many draft tokens, on which host and port, under which name. All
checks that need no GPU happen here, so `--dry-run` catches the same mistakes as a launch: compatibility
(exit 2), the PyTorch engine's refusal of GPTQ targets (exit 2, with the repack command), and an fp16 copy of
a bf16 drafter for an AWQ target (announced here, written at launch)."""

from __future__ import annotations

import dataclasses
import hashlib
import os
from pathlib import Path

from .. import hardware
from ..checkpoint import Checkpoint, validate_checkpoint
from ..config.models import SpecqConfig
from ..engines.speculation import KIND_TO_METHOD, MTP_METHODS, check_draft
from ..errors import UsageError
from ..progress import Progress, null_progress
from .process import free_port


@dataclasses.dataclass
class ServeSpec:
    engine: str  # "lmdeploy" | "embedded"
    backend: str | None  # LMDeploy: "turbomind" | "pytorch"; embedded: None
    target: Checkpoint
    draft: Checkpoint | None
    method: str | None  # None: plain decoding
    draft_tokens: int  # 0: plain decoding
    host: str
    port: int
    port_given: bool
    model_name: str
    # When set, the drafter is served from this fp16 copy, written (once, cached) just before launch.
    draft_fp16: Path | None = None

    @property
    def speculative(self) -> bool:
        return self.method is not None and self.draft_tokens > 0

    @property
    def draft_path(self) -> Path | None:
        if self.draft_fp16 is not None:
            return self.draft_fp16
        return self.draft.path if self.draft is not None else None


def lmdeploy_available() -> bool:
    return hardware.module_present("lmdeploy") and bool(hardware.list_gpus())


def choose_engine(cfg: SpecqConfig, method: str | None, progress: Progress) -> str:
    name = cfg.engine.engine
    if name != "auto":
        return name
    if method == "draft":
        return "embedded"  # LMDeploy cannot speculate with a plain draft model
    if lmdeploy_available():
        return "lmdeploy"
    progress("no NVIDIA GPU with lmdeploy here: using the embedded engine (transformers) instead of LMDeploy")
    return "embedded"


def _detect_method(cfg: SpecqConfig, draft: Checkpoint | None) -> str | None:
    if cfg.model.draft_tokens == 0:
        return None
    if cfg.speculative.method is not None:
        return cfg.speculative.method
    if draft is not None:
        method = KIND_TO_METHOD.get(draft.draft_kind)
        if method is None:
            raise UsageError(
                f"{draft.path}: cannot tell what kind of drafter this is "
                f"(architectures {draft.architectures}); pass --method"
            )
        return method
    return None


def _is_bf16(ckpt: Checkpoint) -> bool:
    if str(ckpt.torch_dtype or "").lower() in ("bfloat16", "bf16"):
        return True
    try:
        dtypes = {t.dtype for t in ckpt.tensors.values()}
    except Exception:  # unreadable tensors are reported by the engine itself
        return False
    return "BF16" in dtypes


def _cache_root() -> Path:
    return Path(os.environ.get("SPECQ_CACHE") or Path.home() / ".cache" / "specq")


def fp16_copy_path(draft: Checkpoint) -> Path:
    """Where the fp16 copy of `draft` is cached: keyed by its resolved path and its weight files' sizes and
    modification times, so an edited drafter gets a fresh copy."""
    h = hashlib.sha256(str(draft.path.resolve()).encode())
    for f in sorted(draft.path.glob("*.safetensors")):
        st = f.stat()
        h.update(f"{f.name}:{st.st_size}:{st.st_mtime_ns}".encode())
    return _cache_root() / "fp16-drafters" / f"{draft.name}-{h.hexdigest()[:12]}"


def resolve_spec(cfg: SpecqConfig, progress: Progress = null_progress) -> ServeSpec:
    """Everything `specq serve` will launch, checked. Raises UsageError (exit 2) for what the user passed."""
    if not cfg.model.model_path:
        raise UsageError("no model to serve: pass MODEL or set model.model_path in the config")
    # weights present are checked here (dry run included); a config-only directory is refused at launch
    target = validate_checkpoint(Checkpoint(cfg.model.model_path), weights=False, role="target")
    draft_tokens = cfg.model.draft_tokens
    draft = (
        Checkpoint(cfg.model.draft_model_path) if cfg.model.draft_model_path and draft_tokens > 0 else None
    )
    if draft is not None:
        validate_checkpoint(draft, tokenizer=False, weights=False, role="drafter")
    if cfg.model.draft_model_path and draft_tokens == 0:
        progress(
            "draft tokens = 0: serving without speculation (the baseline); the draft model is not loaded"
        )
    method = _detect_method(cfg, draft)
    engine = choose_engine(cfg, method, progress)
    if method in MTP_METHODS and draft is not None:
        progress(f"method {method} uses the target's own MTP head: the draft model is ignored")
        draft = None

    problems = check_draft(target, draft, method, draft_tokens, engine)
    if method is None and draft_tokens > 0 and not problems:
        problems = ["draft tokens > 0 but no draft model and no method"]
    if problems:
        raise UsageError("; ".join(problems))

    backend: str | None = None
    if engine == "lmdeploy":
        backend = cfg.engine.backend
        if backend == "auto":
            backend = "pytorch" if method is not None else "turbomind"
        if method is not None and backend == "turbomind":
            raise UsageError(
                "TurboMind does no speculative decoding in LMDeploy 0.18; "
                "use --backend pytorch (or draft tokens 0)"
            )
        if method == "dflash" and cfg.engine.enable_prefix_caching:
            raise UsageError(
                "LMDeploy 0.18 refuses prefix caching together with DFlash; drop --enable-prefix-caching "
                "(engine.enable_prefix_caching = false)"
            )
        if backend == "pytorch":
            from ..engines.pytorch import pytorch_engine_refusal

            refusal = pytorch_engine_refusal(target)
            if refusal:
                raise UsageError(refusal)
    elif cfg.engine.backend not in ("auto",):
        progress(f"--backend {cfg.engine.backend} applies to LMDeploy only; the embedded engine ignores it")

    draft_fp16: Path | None = None
    quant = target.quantization
    if (
        engine == "lmdeploy"
        and backend == "pytorch"
        and draft is not None
        and quant is not None
        and quant.method == "awq"
        and _is_bf16(draft)
    ):
        draft_fp16 = fp16_copy_path(draft)
        progress(
            f"the AWQ target runs in fp16 in LMDeploy's PyTorch engine and the drafter is bf16: "
            f"serving an fp16 copy of it ({draft_fp16}{'' if draft_fp16.exists() else ', written at launch'})"
        )

    host = cfg.engine.host
    port = cfg.engine.port
    return ServeSpec(
        engine=engine,
        backend=backend,
        target=target,
        draft=draft if method is not None else None,
        method=method,
        draft_tokens=draft_tokens if method is not None else 0,
        host=host,
        port=port if port is not None else free_port(_bind_host(host)),
        port_given=port is not None,
        model_name=cfg.model.model_name or target.name,
        draft_fp16=draft_fp16,
    )


def _bind_host(host: str) -> str:
    return "127.0.0.1" if host in ("", "localhost") else host


def write_fp16_copy(spec: ServeSpec, progress: Progress = null_progress) -> None:
    """Write the fp16 copy of the drafter, when one is needed and not cached yet (convert's cast_drafter)."""
    if spec.draft_fp16 is None or spec.draft is None or spec.draft_fp16.exists():
        return
    from ..convert.cast import cast_drafter  # numpy: only when a copy is written, not at `specq --help`

    progress(f"writing an fp16 copy of {spec.draft.path} to {spec.draft_fp16}")
    spec.draft_fp16.parent.mkdir(parents=True, exist_ok=True)
    cast_drafter(spec.draft.path, spec.draft_fp16, dtype="float16", progress=progress)
