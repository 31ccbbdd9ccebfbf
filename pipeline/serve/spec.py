"""From a resolved `SpecqConfig` to what will be served. `ServeRequest.from_config(cfg)` copies once what
the serve stage reads from the config (which checkpoints, how many draft tokens, which server and backend, its
launch settings); `resolve_spec(request)` turns it into the `ServeSpec` the engines take as their only input:
which server and backend, which target and drafter, which speculative method with how many draft tokens, on
which host and port, under which name. All checks that need no GPU happen here, so `--dry-run` catches the
same mistakes as a launch: compatibility (exit 2), `--tp N` against the heads of target and drafter (exit 2;
the GPU count is the preflight's, exit 4), the PyTorch engine's refusal of GPTQ targets (exit 2, with
the repack command), and an fp16 copy of a bf16 drafter for an AWQ target (announced here, written at
launch). `specq bench` sweeps with copies of one request that differ in `draft_tokens` only."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path
from typing import TYPE_CHECKING

from .. import hardware
from ..checkpoint import Checkpoint, validate_checkpoint
from ..config.models import EngineSection, PlanSection, SpecqConfig
from ..engines import ServerName
from ..engines.parallel import tp_problems
from ..engines.speculation import KIND_TO_METHOD, MTP_METHODS, check_draft
from ..engines.turbomind import check_quantized_tensors
from ..errors import EnvironmentMissing, UsageError
from ..progress import Progress, null_progress
from .process import free_port, release_port

if TYPE_CHECKING:
    from ..plan import PlanRequest


@dataclasses.dataclass(frozen=True)
class ServerOptions:
    """How a server is launched, beyond what it serves: the `[engine]` settings the engines pass on, the
    embedded engine's `generation.max_new_tokens`, DFlash's block size and the prefill budget (LMDeploy's
    `--max-prefill-token-num`: `engine.max_prefill_token_num`, else the value `specq plan` sized for)."""

    dtype: str = "auto"
    device: str = "auto"
    session_len: int | None = None
    cache_max_entry_count: float = 0.8
    max_prefill_token_num: int = 8192
    max_batch_size: int = 1
    tp: int = 1
    distributed_executor_backend: str | None = None
    enable_prefix_caching: bool = False
    eager_mode: bool = False
    step_patch: bool = False
    w4a16_kernel: str = "auto"
    logprobs_mode: str | None = None
    max_queue: int = 64
    ready_timeout_s: float = 600.0
    max_new_tokens: int = 256
    trust_remote_code: bool = False
    dflash_block_size: int | None = None
    api_keys_env: str | None = None
    api_keys_file: str | None = None


@dataclasses.dataclass(frozen=True)
class ServeRequest:
    """What the user asked to serve, as given (paths unchecked, `auto` unresolved): built once from the
    config; `resolve_spec` checks and resolves it."""

    model_path: str | None
    draft_model_path: str | None = None
    draft_tokens: int = 0  # 0: plain decoding
    method: str | None = None  # None: detected from the drafter
    server: str = "auto"  # ServerName or "auto"
    backend: str = "auto"  # LMDeploy's "turbomind" | "pytorch" | "auto"
    host: str = "127.0.0.1"
    port: int | None = None  # None: a free port
    model_name: str | None = None
    options: ServerOptions = ServerOptions()
    # `specq plan`'s own settings, for the VRAM preflight (`plan_request`)
    plan: PlanSection = dataclasses.field(default_factory=PlanSection)

    @classmethod
    def from_config(cls, cfg: SpecqConfig) -> ServeRequest:
        m, e = cfg.model, cfg.engine
        options = ServerOptions(
            dtype=e.dtype, device=e.device, session_len=e.session_len,
            cache_max_entry_count=e.cache_max_entry_count,
            max_prefill_token_num=e.max_prefill_token_num or cfg.plan.max_prefill_token_num,
            max_batch_size=e.max_batch_size, tp=e.tp,
            distributed_executor_backend=e.distributed_executor_backend,
            enable_prefix_caching=e.enable_prefix_caching,
            eager_mode=e.eager_mode, step_patch=e.step_patch, w4a16_kernel=e.w4a16_kernel,
            logprobs_mode=e.logprobs_mode,
            max_queue=e.max_queue,
            ready_timeout_s=e.ready_timeout_s,
            max_new_tokens=cfg.generation.max_new_tokens, trust_remote_code=m.trust_remote_code,
            dflash_block_size=cfg.speculative.dflash_block_size, api_keys_env=e.api_keys_env,
            api_keys_file=e.api_keys_file,
        )  # fmt: skip
        return cls(
            model_path=m.model_path, draft_model_path=m.draft_model_path, draft_tokens=m.draft_tokens,
            method=cfg.speculative.method, server=e.engine, backend=e.backend, host=e.host, port=e.port,
            model_name=m.model_name, options=options, plan=cfg.plan.model_copy(),
        )  # fmt: skip

    def plan_request(self) -> PlanRequest:
        """What `specq plan` reads for this request: the served paths and count, the launch settings its
        memory model depends on, and `[plan]` with the prefill budget the server is launched with."""
        from ..plan import PlanRequest

        o = self.options
        engine = {
            "engine": self.server, "backend": self.backend, "dtype": o.dtype, "session_len": o.session_len,
            "cache_max_entry_count": o.cache_max_entry_count, "max_batch_size": o.max_batch_size,
            "eager_mode": o.eager_mode, "tp": o.tp,
        }  # fmt: skip
        return PlanRequest(
            model=self.model_path, draft_model=self.draft_model_path, draft_tokens=self.draft_tokens,
            method=self.method, engine=EngineSection.model_validate(engine),
            plan=self.plan.model_copy(update={"max_prefill_token_num": o.max_prefill_token_num}),
        )  # fmt: skip

    def served_models(self) -> list[str]:
        """The target and (when speculating) the drafter this request launches, as given by the user."""
        models = [self.model_path] if self.model_path else []
        if self.draft_model_path and self.draft_tokens > 0:
            models.append(self.draft_model_path)
        return [str(m) for m in models]


@dataclasses.dataclass(frozen=True)
class ServeSpec:
    """Everything an engine needs to launch one server, resolved and checked: its only input."""

    server: ServerName
    backend: str | None  # LMDeploy: "turbomind" | "pytorch"; embedded: None
    target: Checkpoint
    draft: Checkpoint | None
    method: str | None  # None: plain decoding
    draft_tokens: int  # 0: plain decoding
    host: str
    port: int
    port_given: bool
    model_name: str
    request: ServeRequest  # what was asked (the preflight checks the models as the user gave them)
    # When set, the drafter is served from this fp16 copy, written (once, cached) just before launch.
    draft_fp16: Path | None = None
    # The PyTorch engine's kernel for 4-bit AWQ linears ("specq" | "lmdeploy" | "turbomind"); None: none runs
    w4a16_kernel: str | None = None

    @property
    def options(self) -> ServerOptions:
        return self.request.options

    @property
    def speculative(self) -> bool:
        return self.method is not None and self.draft_tokens > 0

    @property
    def draft_path(self) -> Path | None:
        if self.draft_fp16 is not None:
            return self.draft_fp16
        return self.draft.path if self.draft is not None else None

    def release_port(self) -> None:
        """Let go of the port `free_port` holds for this server (a port given with --port is not held): for a
        server that will not start, or will not get as far as its readiness poll."""
        if not self.port_given:
            release_port(self.port)


def lmdeploy_available() -> bool:
    return hardware.module_present("lmdeploy") and bool(hardware.list_gpus())


def choose_server(request: ServeRequest, method: str | None, progress: Progress) -> ServerName:
    if request.server == "lmdeploy":
        return "lmdeploy"
    if request.server == "embedded":
        return "embedded"
    if method == "draft":
        return "embedded"  # LMDeploy cannot speculate with a plain draft model
    if lmdeploy_available() or request.options.tp > 1:
        return "lmdeploy"  # tensor parallelism is LMDeploy's alone (its preflight counts the GPUs)
    progress("no NVIDIA GPU with lmdeploy here: using the embedded engine (transformers) instead of LMDeploy")
    return "embedded"


def _detect_method(request: ServeRequest, draft: Checkpoint | None) -> str | None:
    if request.draft_tokens == 0:
        return None
    if request.method is not None:
        return request.method
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
    from ..fsutil import cache_root

    return cache_root()


def fp16_copy_path(draft: Checkpoint) -> Path:
    """Where the fp16 copy of `draft` is cached: keyed by its resolved path and its weight files' sizes and
    modification times, so an edited drafter gets a fresh copy."""
    h = hashlib.sha256(str(draft.path.resolve()).encode())
    for f in sorted(draft.path.glob("*.safetensors")):
        st = f.stat()
        h.update(f"{f.name}:{st.st_size}:{st.st_mtime_ns}".encode())
    return _cache_root() / "fp16-drafters" / f"{draft.name}-{h.hexdigest()[:12]}"


def check_speculation(
    request: ServeRequest, progress: Progress = null_progress
) -> tuple[Checkpoint, Checkpoint | None, str | None, ServerName]:
    """The target, drafter, method and server `request` asks for, with every reason they cannot speculate
    together raised as one UsageError (exit 2). Reads config files only: `specq bench` calls it for each
    speculative run before it starts any server."""
    if not request.model_path:
        raise UsageError("no model to serve: pass MODEL or set model.model_path in the config")
    # weights present are checked here (dry run included); a config-only directory is refused at launch
    target = validate_checkpoint(Checkpoint(request.model_path), weights=False, role="target")
    if target.has_weights:
        check_quantized_tensors(target)  # a damaged 4-bit checkpoint: here, not in the server's log
    draft_tokens = request.draft_tokens
    draft = Checkpoint(request.draft_model_path) if request.draft_model_path and draft_tokens > 0 else None
    if draft is not None:
        validate_checkpoint(draft, tokenizer=False, weights=False, role="drafter")
    if request.draft_model_path and draft_tokens == 0:
        progress(
            "draft tokens = 0: serving without speculation (the baseline); the draft model is not loaded"
        )
    method = _detect_method(request, draft)
    server = choose_server(request, method, progress)
    if method in MTP_METHODS and draft is not None:
        progress(f"method {method} uses the target's own MTP head: the draft model is ignored")
        draft = None

    problems = check_draft(target, draft, method, draft_tokens, server)
    if method is None and draft_tokens > 0 and not problems:
        problems = ["draft tokens > 0 but no draft model and no method"]
    problems += tp_problems(target, draft, method, request.options.tp, server)
    if problems:
        raise UsageError("; ".join(problems))
    return target, draft, method, server


def resolve_spec(request: ServeRequest, progress: Progress = null_progress) -> ServeSpec:
    """Everything `specq serve` will launch, checked. Raises UsageError (exit 2) for what the user passed."""
    target, draft, method, server = check_speculation(request, progress)
    draft_tokens = request.draft_tokens

    backend: str | None = None
    if server == "lmdeploy":
        backend = _lmdeploy_backend(request, method, target)
        if backend == "pytorch":
            request = _pytorch_dtype(request, target, progress)
            if draft is not None and draft.quantization is not None:  # before any launch, as for the target
                from ..engines import lmdeploy_compat

                lmdeploy_compat.require(f"{draft.name} (a 4-bit drafter)", lmdeploy_compat.DFLASH_AWQ_PATCH)
    elif request.backend not in ("auto",):
        progress(f"--backend {request.backend} applies to LMDeploy only; the embedded engine ignores it")
    if server != "lmdeploy" and request.options.step_patch:
        progress("engine.step_patch applies to LMDeploy's PyTorch engine; the embedded engine ignores it")
    draft_fp16 = _fp16_drafter(target, draft, backend, progress)
    kernel = w4a16_kernel(request, backend, target, draft if method is not None else None, progress)

    host = request.host
    port = request.port
    return ServeSpec(
        server=server,
        backend=backend,
        target=target,
        draft=draft if method is not None else None,
        method=method,
        draft_tokens=draft_tokens if method is not None else 0,
        host=host,
        port=port if port is not None else free_port(_bind_host(host)),
        port_given=port is not None,
        model_name=request.model_name or target.name,
        request=request,
        draft_fp16=draft_fp16,
        w4a16_kernel=kernel,
    )


def _is_w4(ckpt: Checkpoint | None) -> bool:
    q = ckpt.quantization if ckpt is not None else None
    return q is not None and q.method == "awq" and (q.bits or 4) == 4


def w4a16_kernel(
    request: ServeRequest, backend: str | None, target: Checkpoint, draft: Checkpoint | None,
    progress: Progress = null_progress,
) -> str | None:  # fmt: skip
    """The kernel LMDeploy's PyTorch engine runs the 4-bit AWQ linears of `target` (and a 4-bit drafter)
    with, from `engine.w4a16_kernel`; None where no such linear runs (TurboMind, the embedded engine, an
    unquantized model). `auto` is specq's kernel where its patch applies to the LMDeploy installed here, else
    LMDeploy's Triton kernel (said on stderr). `specq` where the patch does not apply, and `turbomind` where
    LMDeploy lacks its TurboMind module, are refused before any launch."""
    choice = request.options.w4a16_kernel
    if backend != "pytorch" or not (_is_w4(target) or _is_w4(draft)):
        return None
    from ..engines import lmdeploy_compat

    if choice == "turbomind":
        if not lmdeploy_compat.turbomind_module():
            raise EnvironmentMissing(
                "engine.w4a16_kernel = turbomind needs LMDeploy's TurboMind module, which this LMDeploy "
                "lacks; set engine.w4a16_kernel = specq or lmdeploy"
            )
        return choice
    if choice == "lmdeploy":
        return choice
    compat = lmdeploy_compat.status(patch=lmdeploy_compat.W4A16_PATCH)
    if compat.ok or compat.state == "absent":  # absent: the lmdeploy preflight says so on its own
        return "specq"
    if choice == "specq":
        lmdeploy_compat.require("engine.w4a16_kernel = specq", lmdeploy_compat.W4A16_PATCH)
    progress(f"W4A16 kernel: LMDeploy's Triton kernel (specq's does not apply: {compat.summary()})")
    return "lmdeploy"


def _lmdeploy_backend(request: ServeRequest, method: str | None, target: Checkpoint) -> str:
    """LMDeploy's backend for `method` (`auto`: PyTorch to speculate, else TurboMind), refusing what it
    would refuse at launch."""
    backend = request.backend
    if backend == "auto":
        backend = "pytorch" if method is not None else "turbomind"
    if method is not None and backend == "turbomind":
        raise UsageError(
            "TurboMind does no speculative decoding in LMDeploy 0.18; "
            "use --backend pytorch (or draft tokens 0)"
        )
    if request.options.step_patch and backend == "turbomind":
        raise UsageError(
            "engine.step_patch patches LMDeploy's PyTorch engine: serve with --backend pytorch, or set "
            "engine.step_patch = false"
        )
    if method == "dflash" and request.options.enable_prefix_caching:
        raise UsageError(
            "LMDeploy 0.18 refuses prefix caching together with DFlash; drop --enable-prefix-caching "
            "(engine.enable_prefix_caching = false)"
        )
    if backend == "pytorch":
        from ..engines import lmdeploy_compat
        from ..engines.pytorch import pytorch_engine_refusal
        from ..engines.qwen35 import needs_compat

        if needs_compat(target):  # an LMDeploy the compatibility patch does not know: before any launch
            lmdeploy_compat.require(f"{target.name} (quantized, Gated DeltaNet)")
        if request.options.step_patch:
            lmdeploy_compat.require("engine.step_patch", lmdeploy_compat.STEP_PATCH)
        refusal = pytorch_engine_refusal(target)
        if refusal:
            raise UsageError(refusal)
    return backend


def _pytorch_dtype(request: ServeRequest, target: Checkpoint, progress: Progress) -> ServeRequest:
    """`request` with the dtype LMDeploy's PyTorch engine must run `target` in: bf16 for an unquantized
    Gated DeltaNet model such as Qwen3.5 (its state is bf16 whatever the model runs in; engines/qwen35.py),
    which 'auto' would run in fp16 when the checkpoint is float32 or float16. Another dtype is refused."""
    from ..engines.qwen35 import serve_dtype

    need, asked = serve_dtype(target), request.options.dtype
    if need is None or asked == need:
        return request
    if asked != "auto":
        raise UsageError(
            f"{target.name} has Gated DeltaNet layers and LMDeploy 0.18's PyTorch engine keeps their "
            f"linear-attention state in {need}: --dtype {asked} fails at the first prefill; "
            f"use --dtype {need} (or auto)"
        )
    if target.quantization is not None:
        method = target.quantization.method.upper()
        why = (
            f": LMDeploy 0.18 keeps the linear-attention state in bf16 and would run {method} in fp16; "
            "specq's compatibility patch (engines/lmdeploy_compat) lets it run in bf16"
        )
    elif target.torch_dtype != need:
        why = (
            ": LMDeploy 0.18 keeps the linear-attention state in bf16, and the checkpoint's own dtype "
            "would run in fp16"
        )
    else:
        why = ""
    progress(f"{target.name}: serving in {need} (--dtype {need}){why}")
    return dataclasses.replace(request, options=dataclasses.replace(request.options, dtype=need))


def _fp16_drafter(
    target: Checkpoint, draft: Checkpoint | None, backend: str | None, progress: Progress
) -> Path | None:
    """Where the fp16 copy of a bf16 drafter goes when an AWQ target runs in fp16 (PyTorch engine; not a
    Gated DeltaNet target, which runs in bf16 with its drafter)."""
    from ..engines.qwen35 import serve_dtype

    quant = target.quantization
    if (
        backend == "pytorch"
        and draft is not None
        and quant is not None
        and quant.method == "awq"
        and serve_dtype(target) is None
        and draft.quantization is None  # a 4-bit drafter runs in the AWQ target's fp16 already
        and _is_bf16(draft)
    ):
        draft_fp16 = fp16_copy_path(draft)
        progress(
            f"the AWQ target runs in fp16 in LMDeploy's PyTorch engine and the drafter is bf16: "
            f"serving an fp16 copy of it ({draft_fp16}{'' if draft_fp16.exists() else ', written at launch'})"
        )
        return draft_fp16
    return None


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
