"""The GPU memory plan: weights, KV cache, recurrent state, drafter, runtime buffers and margins against the
GPU's memory, and the `cache_max_entry_count` / `session_len` that fit. No torch, no weights loaded.

Two memory models:
- `lmdeploy`: LMDeploy 0.18's PyTorch engine (the engine that speculates). After the weights are loaded it
  measures the FREE memory, subtracts the recurrent-state pool (`(max_batch_size + 2)` slots) and a runtime
  reserve of `(max_prefill_token_num + 2*max_batch_size) * vocab * 2` bytes (halving the prefill budget until
  at least 16 KV blocks fit), then gives `cache_max_entry_count` of what is left to the paged KV cache; target
  and drafter share the block count, each block holding 64 tokens of both. Activations and CUDA graphs live in
  the remaining `1 - cache_max_entry_count`. (lmdeploy/pytorch/engine/executor/base.py, `update_configs`.)
  The runtime reserve is kept free but is not in the predicted peak: generation computes the logits of the
  last position only, so only requests for prompt logprobs fill it. The fixed costs (driver reservation, CUDA
  context, what loading adds beyond the weight files, CUDA graphs and buffers after warm-up) are each read
  off the NVML timeline of a Qwen3.5-27B-AWQ twin served on the H200 (docs/plan.md, 2026-12-03).
- `embedded`: transformers generation without a preallocated cache: weights + a KV cache that grows with the
  sequence + activations; the peak is what `torch.cuda.max_memory_allocated` reports, plus the CUDA context.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..checkpoint import DTYPE_BYTES, Checkpoint, twin_note, validate_checkpoint
from ..config.models import EngineSection, Method, PlanSection, SpecqConfig, flag
from ..engines import ServerName
from ..engines.parallel import draft_is_sharded, kv_heads_per_gpu, tp_problems
from ..engines.pytorch import auto_dtype
from ..engines.qwen35 import serve_dtype
from ..engines.speculation import KIND_TO_METHOD, target_has_mtp
from ..errors import ConfigError, EnvironmentMissing, InputError, UsageError
from .paper import PaperQuant, as_quantized, open_target, paper_note
from .shapes import ModelShape, estimate_weights, quantized_linear_bytes, shape_from_config

SCHEMA_VERSION = 1

# LMDeploy 0.18 PyTorch engine constants (see docs/plan.md for the source lines).
LMDEPLOY_BLOCK_SIZE = 64  # PytorchEngineConfig.block_size
LMDEPLOY_MIN_BLOCKS = 16  # _get_runtime_size halves the prefill budget until this many blocks fit
LMDEPLOY_STATE_SPARE_SLOTS = 2  # _get_state_cache_mem: max_batches + 2 state slots
LMDEPLOY_STATE_BYTES = 2  # Gated-DeltaNet conv/recurrent state allocated in bfloat16 (fp16 without bf16)
LMDEPLOY_STATE_ALIGN = 256  # pytorch/engine/cache_engine/schema.py CacheDesc.alignment
LMDEPLOY_MAX_RATIO = 0.95  # never recommend more than this fraction (LMDeploy requires < 1)
SAFETY_FRACTION = 0.02  # of GPU memory, kept free on top of every estimate (allocator fragmentation)

_UNITS = {
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
    "k": 2**10,
    "m": 2**20,
    "g": 2**30,
    "t": 2**40,
}
GIB = 2**30


def parse_memory(text: str, what: str = "--gpu-memory") -> int:
    """'24GiB', '24 GB', '24576MiB', '80G' (bare K/M/G/T are binary, as nvidia-smi prints) → bytes."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]+)\s*", str(text))
    if not m or m.group(2).lower() not in _UNITS:
        raise ConfigError(
            f"{what}: cannot read '{text}' as a memory size; write it like 24GiB, 24GB or 24576MiB"
        )
    value = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if value <= 0:
        raise ConfigError(f"{what}: must be positive, got '{text}'")
    return int(value)


def gib(n: float) -> str:
    return f"{n / GIB:.2f} GiB"


class ModelMemory(BaseModel):
    """One checkpoint's share of the plan."""

    path: str
    role: Literal["target", "draft"]
    kind: str  # model | dflash | eagle3 | mtp ...
    weights_bytes: int
    weights_source: Literal["safetensors headers", "config estimate"]
    weights_breakdown: dict[str, int]
    quantization: str | None
    compute_dtype: str
    layers: int
    full_attention_layers: int
    sliding_attention_layers: int
    linear_attention_layers: int
    kv_bytes_per_token: int
    state_bytes_per_sequence: int


class PlanRow(BaseModel):
    item: str
    bytes: int
    note: str = ""


class GpuPlan(BaseModel):
    """One GPU's share of a tensor-parallel plan (`--tp N`: N of these; one for a single GPU)."""

    index: int = Field(description="tensor-parallel rank = position among the visible GPUs")
    gpu_memory_bytes: int
    gpu_memory_source: str
    cuda_context_bytes: int = Field(description="fixed: driver reservation, CUDA context, load overhead")
    weights_bytes: int = Field(description="target + drafter weights held by this GPU")
    state_cache_bytes: int
    runtime_reserve_bytes: int
    kv_cache_bytes: int
    kv_bytes_per_token: int = Field(description="target + drafter KV this GPU holds per cached token")
    activation_bytes: int
    cuda_graph_bytes: int
    safety_bytes: int
    peak_bytes: int
    fits: bool


class MemoryPlan(BaseModel):
    """What `specq plan` reports; `fits` is the verdict, `advice` what would fit when it does not."""

    schema_version: int = SCHEMA_VERSION
    engine: ServerName
    tp: int = Field(1, description="GPUs the model is sharded over; the byte figures below are GPU 0's")
    gpu_memory_bytes: int
    gpu_memory_source: str
    batch: int
    session_len: int | None
    draft_tokens: int
    kv_dtype: str
    target: ModelMemory
    draft: ModelMemory | None = None
    kv_bytes_per_token: int = Field(description="target + drafter, every cached token")
    state_bytes_per_sequence: int
    cuda_context_bytes: int
    driver_reserved_bytes: int = Field(0, description="NVML's used memory with no process on the GPU")
    load_overhead_bytes: int = Field(0, description="lmdeploy: held beyond the weight files once loaded")
    weights_bytes: int
    free_after_weights_bytes: int
    state_cache_bytes: int
    runtime_reserve_bytes: int
    max_prefill_token_num: int | None
    activation_bytes: int
    cuda_graph_bytes: int
    kv_cache_bytes: int
    kv_cache_tokens: int
    cache_max_entry_count: float | None = Field(description="lmdeploy: the value used (given or recommended)")
    cache_max_entry_count_given: bool = False
    max_session_len: int = Field(
        description="longest session_len that fits at `batch` (0: none), at most the model's positions"
    )
    max_position_embeddings: int | None = Field(None, description="the target's positions (config.json)")
    max_session_len_memory: int | None = Field(
        None, description="the longest session memory alone allows, when the model's positions cap it lower"
    )
    max_batch_at_session_len: int | None
    peak_bytes: int = Field(
        description="predicted peak device memory (NVML view: driver reservation and context included; the "
        "runtime reserve excluded, which only prompt-logprob requests fill)"
    )
    peak_allocated_bytes: int = Field(description="predicted torch allocator peak (context excluded)")
    fits: bool
    verdict: str
    advice: list[str] = Field(default_factory=list)
    rows: list[PlanRow] = Field(default_factory=list)
    gpus: list[GpuPlan] = Field(default_factory=list, description="per GPU; `fits` needs every one to fit")
    notes: list[str] = Field(default_factory=list)
    # role ("target", "drafter") -> the `specq_twin` marker of a scale twin's config.json (random weights)
    twin: dict[str, dict[str, Any]] = Field(default_factory=dict)


# ---- per-model analysis ------------------------------------------------------------------------------------


@dataclass
class _Model:
    ckpt: Checkpoint
    shape: ModelShape
    role: Literal["target", "draft"]
    weights: int
    breakdown: dict[str, int]
    source: Literal["safetensors headers", "config estimate"]
    stored_dtype_bytes: int
    replicated: int = (
        0  # bytes every tensor-parallel GPU holds whole: embeddings, LM head, norms, DFlash's fc
    )


_QUANT_SUFFIXES = (
    ".qweight",
    ".qzeros",
    ".scales",
    ".g_idx",
    ".weight_packed",
    ".weight_scale",
    ".weight_zero_point",
    ".weight_shape",
    ".weight_g_idx",
)


def _dtype_bytes(name: str | None, default: int = 2) -> int:
    return {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}.get(str(name or "").lower(), default)


def _analyse(
    ckpt: Checkpoint, role: Literal["target", "draft"], cast_float_to: int | None, include_mtp: bool
) -> _Model:
    shape = shape_from_config(ckpt.config)
    stored = _dtype_bytes(ckpt.torch_dtype)
    if ckpt.has_weights:
        bd = {"quantized_linear": 0, "dense": 0, "embeddings": 0, "lm_head": 0, "vision": 0, "mtp": 0}
        replicated = 0
        for name, t in ckpt.tensors.items():
            nbytes = t.nbytes
            if cast_float_to and t.dtype in ("F32", "F16", "BF16", "F64"):
                nbytes = t.numel * cast_float_to
            if name.startswith("mtp.") or ".mtp." in name:
                if include_mtp:
                    bd["mtp"] += nbytes
                    replicated += nbytes if _replicated(name) else 0
                continue
            replicated += nbytes if _replicated(name) else 0
            if name.endswith(_QUANT_SUFFIXES):
                bd["quantized_linear"] += nbytes
            elif "embed_tokens" in name:
                bd["embeddings"] += nbytes
            elif "lm_head" in name:
                bd["lm_head"] += nbytes
            elif "visual" in name or "vision" in name:
                bd["vision"] += nbytes
            else:
                bd["dense"] += nbytes
        return _Model(ckpt, shape, role, sum(bd.values()), bd, "safetensors headers", stored, replicated)
    elem = cast_float_to or stored
    est = estimate_weights(shape, ckpt.quantization, elem, include_mtp=include_mtp)
    replicated = est.embeddings + est.lm_head
    if shape.is_dflash:  # its fc over the target's features is not split (qwen3_dflash.py: is_tp=False)
        features = shape.dflash_context_layers * (shape.target_hidden or shape.hidden)
        q = ckpt.quantization  # a 4-bit drafter's fc is 4-bit too (plan/shapes.py)
        fc = quantized_linear_bytes(features, shape.hidden, q) if q else features * shape.hidden * elem
        replicated += fc
    return _Model(ckpt, shape, role, est.total, est.as_dict(), "config estimate", stored, replicated)


def _replicated(name: str) -> bool:
    """Whether LMDeploy keeps tensor `name` whole on every tensor-parallel GPU (engines/parallel.py): the
    embeddings, the LM head, norms and the `fc` of DFlash and MTP (built without `is_tp`)."""
    parts = name.split(".")
    module = parts[-2] if len(parts) >= 2 else name
    if "visual" in name or "vision" in name:
        return False
    return "embed_tokens" in name or "lm_head" in name or module.endswith("norm") or module == "fc"


def _shard(m: _Model, tp: int, weights: int) -> _Model:
    """`m` as one of `tp` GPUs holds it: attention, KV, Gated-DeltaNet heads and MLP width divided by `tp`
    (KV heads replicated to one per GPU when fewer than `tp`), holding `weights` bytes."""
    if tp <= 1:
        return dataclasses.replace(m, weights=weights)
    sh = m.shape
    shape = dataclasses.replace(
        sh,
        num_heads=max(1, sh.num_heads // tp),
        num_kv_heads=kv_heads_per_gpu(sh.num_kv_heads, tp),
        intermediate=sh.intermediate // tp,
        linear_k_heads=sh.linear_k_heads // tp,
        linear_v_heads=sh.linear_v_heads // tp,
    )
    return dataclasses.replace(m, shape=shape, weights=weights)


# ---- the plan ----------------------------------------------------------------------------------------------


class PlanRequest(BaseModel):
    """Everything a memory plan reads, frozen: the target (and drafter) directories, the draft-token count
    and method, and copies of the `[engine]` and `[plan]` settings. Build it once with `from_config`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str | None = None
    draft_model: str | None = None
    draft_tokens: int = 0
    method: Method | None = None
    engine: EngineSection = Field(default_factory=EngineSection)
    plan: PlanSection = Field(default_factory=PlanSection)
    quant: PaperQuant | None = Field(
        None,
        description="Plan an unquantized model as the 4-bit checkpoint specq would make of it: awq (what "
        "quantize --for speculative writes and twin --quant awq builds, the same modules kept in bf16).",
        json_schema_extra=flag(choices=True),
    )  # paper.py

    @classmethod
    def from_config(cls, cfg: SpecqConfig, *, quant: PaperQuant | None = None) -> PlanRequest:
        return cls(
            model=cfg.model.model_path,
            draft_model=cfg.model.draft_model_path,
            draft_tokens=cfg.model.draft_tokens,
            method=cfg.speculative.method,
            engine=cfg.engine.model_copy(deep=True),
            plan=cfg.plan.model_copy(deep=True),
            quant=quant,
        )


def _engine_of(cfg: PlanRequest, engine: ServerName | None) -> ServerName:
    if engine:
        return engine
    if cfg.plan.engine:
        return cfg.plan.engine
    return "embedded" if cfg.engine.engine == "embedded" else "lmdeploy"


def _gpu_memory(cfg: PlanRequest, gpu_memory_bytes: int | None, tp: int = 1) -> list[tuple[int, str]]:
    """The memory of each of the `tp` GPUs the plan is for: the size given (every GPU alike), else the first
    `tp` GPUs CUDA would use (NVML, filtered by CUDA_VISIBLE_DEVICES)."""
    if gpu_memory_bytes:
        return [(gpu_memory_bytes, "given")] * tp
    if cfg.plan.gpu_memory:
        return [(parse_memory(cfg.plan.gpu_memory), f"--gpu-memory {cfg.plan.gpu_memory}")] * tp
    from ..hardware import visible_gpus

    gpus = visible_gpus()
    if not gpus:
        raise EnvironmentMissing(
            "no NVIDIA GPU visible through NVML to plan against; "
            "pass the card's memory, e.g. --gpu-memory 24GiB"
        )
    if len(gpus) < tp:
        raise EnvironmentMissing(
            f"--tp {tp}: {len(gpus)} GPU{'' if len(gpus) == 1 else 's'} visible to plan against; "
            "pass the memory of one card, e.g. --gpu-memory 24GiB, to plan for GPUs not in this machine"
        )
    return [(g.memory_total_bytes, f"NVML GPU {g.index}: {g.name}") for g in gpus[:tp]]


def _forced_dtype(model: _Model, engine: ServerName, cfg: PlanRequest) -> str | None:
    """bf16 for an unquantized Qwen3.5 on LMDeploy's PyTorch engine with dtype 'auto': specq serve passes
    --dtype bfloat16 (engines/qwen35.py); None otherwise."""
    if engine != "lmdeploy" or cfg.engine.backend == "turbomind" or cfg.engine.dtype != "auto":
        return None
    return serve_dtype(model.ckpt)


def _compute_dtype(model: _Model, engine: ServerName, cfg: PlanRequest) -> tuple[str, int]:
    """The dtype activations and the KV cache use. LMDeploy: the dtype specq launches it with
    (`_forced_dtype`), else LMDeploy's 'auto' (`engines.pytorch.auto_dtype`: fp32/fp16 → fp16, bf16 → bf16,
    AWQ/GPTQ → fp16). Embedded: the checkpoint's dtype unless engine.dtype says."""
    want = cfg.engine.dtype
    if want != "auto":
        return want, _dtype_bytes(want)
    forced = _forced_dtype(model, engine, cfg)
    if forced:
        return forced, 2
    if engine == "lmdeploy":
        return auto_dtype(model.ckpt)[0], 2
    dt = str(model.ckpt.torch_dtype or "float16").lower()
    return dt, _dtype_bytes(dt)


def _kv_per_token(shape: ModelShape, kv_dtype: str, act_bytes: int, engine: ServerName, session: int) -> int:
    """KV bytes per cached token. LMDeploy's paged cache holds every attention layer at full length; the
    embedded engine's sliding layers keep at most `sliding_window` tokens (averaged over `session`)."""
    if kv_dtype == "int8":
        return shape.kv_bytes_per_token(1, scale_bytes=2 * act_bytes)
    if kv_dtype == "int4":
        return shape.kv_bytes_per_token(0.5, scale_bytes=2 * act_bytes)
    elem = _dtype_bytes(kv_dtype, act_bytes) if kv_dtype != "auto" else act_bytes
    if engine == "embedded" and shape.sliding_layers and shape.sliding_window and session:
        full = shape.kv_bytes_per_token(elem, layers=shape.full_layers)
        frac = min(1.0, shape.sliding_window / session)
        return full + int(shape.kv_bytes_per_token(elem, layers=shape.sliding_layers) * frac)
    return shape.kv_bytes_per_token(elem)


def _activation_bytes(shape: ModelShape, tokens: int, act_bytes: int) -> int:
    """Transient activations of one forward over `tokens`: residual/normed hidden states, the fused
    gate/up output and its product, and the attention projections (linear-attention layers are smaller)."""
    q = shape.num_heads * shape.head_dim * (2 if shape.attn_output_gate else 1)
    kv = 2 * shape.num_kv_heads * shape.head_dim
    width = 4 * shape.hidden + 3 * shape.intermediate + q + kv
    return tokens * width * act_bytes


def plan_memory(
    target: Checkpoint,
    draft: Checkpoint | None = None,
    cfg: PlanRequest | None = None,
    *,
    gpu_memory_bytes: int | None = None,
    engine: ServerName | None = None,
    cache_max_entry_count: float | None = None,
) -> MemoryPlan:
    """Plan GPU memory for serving `target` (and `draft`) as `cfg` describes. Raises InputError for unreadable
    checkpoints, ConfigError for a bad --gpu-memory, EnvironmentMissing when no GPU size is known.
    `cache_max_entry_count` evaluates that LMDeploy ratio; None recommends one. Where it does not fit, the
    advice names only the changes whose own plan fits (`_replanned_advice`)."""
    cfg = cfg or PlanRequest()
    plan = _plan(target, draft, cfg, gpu_memory_bytes, engine, cache_max_entry_count)
    if not plan.fits:

        def replan(changed: PlanRequest, without_draft: bool = False, gpu: int | None = None) -> MemoryPlan:
            return _plan(
                target,
                None if without_draft else draft,
                changed,
                gpu or gpu_memory_bytes,
                engine,
                cache_max_entry_count,
            )

        _replanned_advice(plan, cfg, replan)
    return plan


def _plan(
    target: Checkpoint,
    draft: Checkpoint | None,
    cfg: PlanRequest,
    gpu_memory_bytes: int | None,
    engine: ServerName | None,
    cache_max_entry_count: float | None,
) -> MemoryPlan:
    """`plan_memory` without the advice that needs plans of its own (what those plans are made with)."""
    eng = _engine_of(cfg, engine)
    tp = cfg.engine.tp
    if tp > 1 and eng == "embedded":
        raise UsageError(tp_problems(target, draft, None, tp, "embedded")[0])
    gpus = _gpu_memory(cfg, gpu_memory_bytes, tp)
    total, source = gpus[0]
    batch = cfg.plan.batch or cfg.engine.max_batch_size
    session = cfg.plan.session_len or cfg.engine.session_len
    k = cfg.draft_tokens
    method = cfg.method
    if method is None and draft is None and k > 0 and target_has_mtp(target):
        method = "qwen3_5_mtp"  # K without a drafter: the target's own MTP head drafts (as convert reads it)
    include_mtp = method in ("qwen3_5_mtp", "deepseek_mtp", "hy3_mtp")
    draft_method = method or (KIND_TO_METHOD.get(draft.draft_kind) if draft is not None else None)
    problems = tp_problems(target, draft, draft_method, tp, eng)
    if problems:
        raise UsageError("; ".join(problems))
    context = parse_memory(cfg.plan.cuda_context, "plan.cuda_context")
    driver = parse_memory(cfg.plan.driver_reserved, "plan.driver_reserved")
    overhead = parse_memory(cfg.plan.load_overhead, "plan.load_overhead") if eng == "lmdeploy" else 0
    ctx = context + driver + overhead  # fixed per GPU, before the weights
    graphs = (
        0
        if (eng == "embedded" or cfg.engine.eager_mode)
        else parse_memory(cfg.plan.cuda_graphs, "plan.cuda_graphs")
    )

    # LMDeploy casts fp32 weights to fp16; the embedded engine casts only when engine.dtype says so.
    cast = (
        2 if eng == "lmdeploy" else (None if cfg.engine.dtype == "auto" else _dtype_bytes(cfg.engine.dtype))
    )
    t = _analyse(target, "target", cast, include_mtp)
    d = _analyse(draft, "draft", cast, False) if draft is not None else None
    t_dtype, act = _compute_dtype(t, eng, cfg)
    notes: list[str] = []
    d_dtype = _draft_dtype(t, d, eng, cfg, t_dtype)
    d_act = _dtype_bytes(d_dtype)
    kv_dtype = _kv_dtype(cfg, eng)
    speculating = (d is not None or include_mtp) and k > 0
    lookahead = _lookahead(d, k, include_mtp)
    d_sharded = d is not None and draft_is_sharded(draft_method, d.ckpt)

    def rank_inputs(r: int) -> _Inputs:
        """What GPU `r` of `tp` holds: its share of the sharded weights, the replicated ones, and a drafter
        LMDeploy does not shard on GPU 0 only (engines/parallel.py)."""
        tr = _shard(t, tp, t.replicated + -(-(t.weights - t.replicated) // tp) if tp > 1 else t.weights)
        dr: _Model | None = None
        if d is not None and (d_sharded or r == 0):
            share = d.replicated + -(-(d.weights - d.replicated) // tp) if d_sharded and tp > 1 else d.weights
            dr = _shard(d, tp if d_sharded else 1, share)

        def per_token(s: int) -> tuple[int, int]:
            tk = _kv_per_token(tr.shape, kv_dtype, act, eng, s)
            if include_mtp and tr.shape.mtp_layers:
                tk += tr.shape.kv_bytes_per_token(act, layers=tr.shape.mtp_layers)
            dk = _kv_per_token(dr.shape, kv_dtype, d_act, eng, s) if dr is not None else 0
            return tk, dk

        mem = gpus[r][0]
        return _Inputs(
            total=mem, ctx=ctx, weights=tr.weights + (dr.weights if dr else 0),
            state_seq=_state_per_sequence(tr, eng, act, k if speculating else 0), batch=batch,
            session=session, lookahead=lookahead, safety=int(mem * SAFETY_FRACTION), cfg=cfg, t=tr, d=dr,
            act=act, per_token=per_token,
        )  # fmt: skip

    ranks = [rank_inputs(r) for r in range(tp)]
    inputs = ranks[0]
    res = _lmdeploy(ranks, graphs, cache_max_entry_count) if eng == "lmdeploy" else _embedded(inputs)
    per_gpu = res.pop("gpus", None)
    tk, dk = inputs.per_token(session or 0)
    full_tk = _kv_per_token(t.shape, kv_dtype, act, eng, session or 0)
    if include_mtp and t.shape.mtp_layers:
        full_tk += t.shape.kv_bytes_per_token(act, layers=t.shape.mtp_layers)
    full_dk = _kv_per_token(d.shape, kv_dtype, d_act, eng, session or 0) if d is not None else 0
    plan = MemoryPlan(
        engine=eng,
        tp=tp,
        gpu_memory_bytes=total,
        gpu_memory_source=source,
        batch=batch,
        session_len=session,
        draft_tokens=k,
        kv_dtype=kv_dtype if kv_dtype != "auto" else t_dtype,
        target=_model_memory(t, t_dtype, full_tk),
        draft=_model_memory(d, d_dtype, full_dk) if d is not None else None,
        kv_bytes_per_token=tk + dk,
        state_bytes_per_sequence=inputs.state_seq,
        cuda_context_bytes=context,
        driver_reserved_bytes=driver,
        load_overhead_bytes=overhead,
        weights_bytes=inputs.weights,
        notes=notes,
        **res,
    )
    plan.gpus = [
        GpuPlan(index=r, gpu_memory_bytes=gpus[r][0], gpu_memory_source=gpus[r][1], **g)
        for r, g in enumerate(per_gpu or [_single_gpu(plan, inputs.safety)])
    ]
    plan.notes = _assumptions(plan, t, eng, k if speculating else 0, include_mtp)
    _cap_at_positions(plan, inputs.t.ckpt.config)
    _finish(plan, inputs.t, inputs.d, inputs.safety)
    return plan


def _replanned_advice(plan: MemoryPlan, cfg: PlanRequest, replan: Callable[..., MemoryPlan]) -> None:
    """The advice that changes a setting, each only where the plan with that change fits (or, int8 KV, holds
    longer sessions), naming the value and what it then holds. `replan(cfg, without_draft, gpu)` plans the
    change; its plans carry no such advice of their own. Where the weights and fixed costs leave no room, only
    dropping the drafter or more GPUs can help."""
    room = plan.free_after_weights_bytes > 0
    lmdeploy = plan.engine == "lmdeploy"
    if room and lmdeploy and plan.kv_dtype not in ("int8", "int4"):
        _int8_advice_checked(plan, replan(_with(cfg, plan={"kv_dtype": "int8"})))
    if room and lmdeploy and plan.max_prefill_token_num:
        _prefill_advice_checked(plan, cfg, replan)
    if plan.draft is not None:
        again = replan(cfg.model_copy(update={"draft_model": None, "draft_tokens": 0, "method": None}), True)
        if again.fits:
            plan.advice.append(f"serve without the drafter (frees its weights and KV; {_holds_note(again)})")
    if lmdeploy and plan.tp > 1:
        _tp_advice_checked(plan, cfg, replan)


def _with(cfg: PlanRequest, **sections: dict[str, Any]) -> PlanRequest:
    """`cfg` with some `[engine]`/`[plan]` settings changed."""
    return cfg.model_copy(
        update={name: getattr(cfg, name).model_copy(update=changes) for name, changes in sections.items()}
    )


def _holds_note(again: MemoryPlan) -> str:
    """What a plan that fits holds: 'fits session_len 8192 at batch 1, longest session_len 11904' (and the
    cache_max_entry_count it recommends, where none was given)."""
    want = f"session_len {again.session_len}" if again.session_len else "a session"
    note = f"fits {want} at batch {again.batch}, longest session_len {again.max_session_len}"
    if again.engine == "lmdeploy" and not again.cache_max_entry_count_given and again.cache_max_entry_count:
        note += f", cache_max_entry_count {again.cache_max_entry_count}"
    return note


def _int8_advice_checked(plan: MemoryPlan, again: MemoryPlan) -> None:
    """The int8-KV advice (`again` is the int8 plan) only where it fits or holds longer sessions (then it says
    how long): where the weights and state leave no KV room at all (the 27B-AWQ with the 5-layer DFlash
    drafter on 24 GiB), halving KV bytes does not help."""
    advice = "int8 KV cache (plan.kv_dtype = 'int8', LMDeploy --quant-policy 8) halves KV bytes"
    if again.fits:
        plan.advice.append(advice)
    elif again.max_session_len > plan.max_session_len:
        plan.advice.append(f"{advice}: longest session_len {again.max_session_len}")


def _prefill_advice_checked(plan: MemoryPlan, cfg: PlanRequest, replan: Callable[..., MemoryPlan]) -> None:
    """A smaller LMDeploy prefill budget shrinks the runtime reserve LMDeploy keeps free and the activations
    of a prefill chunk, but not the weights, state or KV: the largest budget below the plan's (halving, as
    `_lmdeploy` tries them, down to 256) whose plan fits, if any does."""
    p = (plan.max_prefill_token_num or 0) // 2
    while p >= 256:
        again = replan(_with(cfg, plan={"max_prefill_token_num": p}))
        if again.fits:
            n = again.max_prefill_token_num
            setting = f"engine.max_prefill_token_num = {n}"
            plan.advice.append(f"LMDeploy --max-prefill-token-num {n} ({setting}; {_holds_note(again)})")
            return
        p //= 2


def _tp_advice_checked(plan: MemoryPlan, cfg: PlanRequest, replan: Callable[..., MemoryPlan]) -> None:
    """Twice the GPUs, each the size of the smallest one here, where the heads divide and that plan fits."""
    tp = 2 * plan.tp
    smallest = min(g.gpu_memory_bytes for g in plan.gpus)
    try:
        again = replan(_with(cfg, engine={"tp": tp}), False, smallest)
    except UsageError:  # the heads do not divide
        return
    if again.fits:
        split = "weights, KV and state split further"
        plan.advice.append(f"--tp {tp} on GPUs of {gib(smallest)} ({split}; {_holds_note(again)})")


def _fixed(plan: MemoryPlan) -> int:
    """What a GPU holds before the weights: driver reservation, CUDA context, (lmdeploy) load overhead."""
    return plan.driver_reserved_bytes + plan.cuda_context_bytes + plan.load_overhead_bytes


def _single_gpu(plan: MemoryPlan, safety: int) -> dict[str, Any]:
    """The one GPU of a plan without tensor parallelism, as its `gpus` entry."""
    return {
        "cuda_context_bytes": _fixed(plan), "weights_bytes": plan.weights_bytes,
        "state_cache_bytes": plan.state_cache_bytes, "runtime_reserve_bytes": plan.runtime_reserve_bytes,
        "kv_cache_bytes": plan.kv_cache_bytes, "kv_bytes_per_token": plan.kv_bytes_per_token,
        "activation_bytes": plan.activation_bytes, "cuda_graph_bytes": plan.cuda_graph_bytes,
        "safety_bytes": safety, "peak_bytes": plan.peak_bytes, "fits": plan.fits,
    }  # fmt: skip


def model_positions(config: dict[str, Any]) -> int | None:
    """The longest sequence the model's positions cover: `max_position_embeddings` (the text config's, for a
    multimodal model), times a `rope_scaling` factor (YaRN and the like) over the original positions."""
    text = config.get("text_config") or config
    positions = text.get("max_position_embeddings") if isinstance(text, dict) else None
    if not isinstance(positions, int) or isinstance(positions, bool) or positions <= 0:
        return None
    scaling = text.get("rope_scaling") if isinstance(text, dict) else None
    factor = scaling.get("factor") if isinstance(scaling, dict) else None
    if isinstance(factor, int | float) and not isinstance(factor, bool) and factor > 1:
        base = scaling.get("original_max_position_embeddings") if isinstance(scaling, dict) else None
        base = base if isinstance(base, int) and not isinstance(base, bool) and base > 0 else positions
        return max(positions, int(base * factor))
    return positions


def _cap_at_positions(plan: MemoryPlan, config: dict[str, Any]) -> None:
    """A session cannot be longer than the model's positions, whatever memory allows: the recommended
    session length stops at them, and a session asked for beyond them is refused (exit 2)."""
    positions = model_positions(config)
    if positions is None:
        return
    plan.max_position_embeddings = positions
    if plan.session_len and plan.session_len > positions:
        raise UsageError(
            f"--session-len {plan.session_len} is longer than the model's {positions} positions "
            f"(max_position_embeddings); pass --session-len {positions} or less"
        )
    if plan.max_session_len > positions:
        plan.max_session_len_memory = plan.max_session_len
        plan.max_session_len = positions
        plan.notes.append(
            f"session length capped at the model's max_position_embeddings {positions} "
            f"(memory alone would allow {plan.max_session_len_memory})"
        )


def _assumptions(plan: MemoryPlan, t: _Model, engine: ServerName, spec: int, include_mtp: bool) -> list[str]:
    """What the plan takes for granted, stated with it (most matter for a hybrid model planned on paper)."""
    notes = []
    if t.source == "config estimate":
        notes.append(
            "weights estimated from config.json: every decoder projection stored as quantization_config says "
            "unless modules_to_not_convert names it; norms, conv kernels, embeddings, lm_head and the vision "
            "tower in the compute dtype"
        )
    if engine == "lmdeploy" and t.shape.linear_layers:
        notes.append(
            f"linear-attention state: bf16 (fp16 on GPUs without bf16; recurrent in fp32 with "
            f"LMDEPLOY_FP32_MAMBA_SSM_DTYPE=1), sized for {spec} draft tokens (conv window kernel + K, "
            f"recurrent state x (1 + K)), max_batch_size + 2 slots, no prefix-cache state budget "
            "(lmdeploy/pytorch/configurations/qwen3_5.py, engine/executor/base.py)"
        )
    if include_mtp and t.shape.mtp_layers:
        notes.append(
            f"MTP drafter: the mtp.* weights and {t.shape.mtp_layers} full-attention layer(s) of KV per "
            "token, sharing the target's block count"
        )
    if plan.tp > 1:
        notes.append(
            f"tensor parallel over {plan.tp} GPUs as LMDeploy 0.18 shards it: embeddings, LM head, norms and "
            "the fc of DFlash/MTP whole on every GPU, every other weight split evenly; attention, KV and "
            "Gated-DeltaNet heads divided by tp (KV heads replicated to one per GPU when fewer); the logits "
            "reserve, CUDA context, CUDA graphs and safety margin on every GPU; an EAGLE/EAGLE-3 drafter "
            "unsharded on GPU 0 only; KV blocks: the fewest any GPU fits (engines/parallel.py, docs/plan.md)"
        )
    if engine == "lmdeploy":
        notes.append(
            f"fixed costs measured on one H200 (2026-12-03, LMDeploy 0.18, a Qwen3.5-27B-AWQ twin): driver "
            f"reservation {gib(plan.driver_reserved_bytes)}, CUDA context {gib(plan.cuda_context_bytes)}, "
            f"load overhead {gib(plan.load_overhead_bytes)}, CUDA graphs and buffers "
            f"{gib(plan.cuda_graph_bytes)} "
            "(plan.driver_reserved, plan.cuda_context, plan.load_overhead, plan.cuda_graphs); other GPUs and "
            "models may differ"
        )
    return notes


def _draft_dtype(t: _Model, d: _Model | None, engine: ServerName, cfg: PlanRequest, t_dtype: str) -> str:
    if d is not None and engine == "lmdeploy" and t.ckpt.quantization is not None:
        return "float16"  # AWQ runs in fp16 in the PyTorch engine; the drafter must match (serve casts it)
    if d is not None and _forced_dtype(t, engine, cfg):
        return t_dtype  # the target's forced --dtype bfloat16 loads the drafter in bf16 too
    if d is not None:
        return _compute_dtype(d, engine, cfg)[0]
    return t_dtype


def _kv_dtype(cfg: PlanRequest, engine: ServerName) -> str:
    kv_dtype = cfg.plan.kv_dtype
    if engine == "embedded" and kv_dtype in ("int8", "int4"):
        raise ConfigError(
            "plan.kv_dtype: int8/int4 KV is an LMDeploy option; "
            "the embedded engine keeps KV in the model dtype"
        )
    return kv_dtype


def _lookahead(d: _Model | None, k: int, include_mtp: bool) -> int:
    """Speculative slots per sequence: k + 1, or a DFlash drafter's whole block."""
    lookahead = (k + 1) if (d is not None or include_mtp) and k > 0 else 0
    if d is not None and d.shape.is_dflash and d.shape.dflash_block_size and k > 0:
        lookahead = max(lookahead, int(d.shape.dflash_block_size))
    return lookahead


def _state_per_sequence(t: _Model, engine: ServerName, act: int, spec_tokens: int) -> int:
    """LMDeploy: bf16 conv and recurrent state sized for the draft-token count (the target's state shapes
    are built with `num_spec_tokens`, pytorch/configurations/qwen3_5.py); transformers: fp32 recurrent."""
    if engine == "lmdeploy":
        return t.shape.state_bytes_per_sequence(
            LMDEPLOY_STATE_BYTES, LMDEPLOY_STATE_BYTES, spec_tokens=spec_tokens, align=LMDEPLOY_STATE_ALIGN
        )
    return t.shape.state_bytes_per_sequence(act, 4)  # transformers keeps the recurrent state in fp32


def _model_memory(m: _Model, dtype: str, kvb: int) -> ModelMemory:
    q = m.ckpt.quantization
    return ModelMemory(
        path=str(m.ckpt.path),
        role=m.role,
        kind=m.ckpt.draft_kind if m.role == "draft" else "model",
        weights_bytes=m.weights,
        weights_source=m.source,
        weights_breakdown=m.breakdown,
        quantization=(f"{q.method} {q.bits}-bit g{q.group_size}" if q else None),
        compute_dtype=dtype,
        layers=m.shape.num_layers,
        full_attention_layers=m.shape.full_layers,
        sliding_attention_layers=m.shape.sliding_layers,
        linear_attention_layers=m.shape.linear_layers,
        kv_bytes_per_token=kvb,
        state_bytes_per_sequence=m.shape.state_bytes_per_sequence(2, 2) if m.role == "target" else 0,
    )


@dataclass(frozen=True)
class _Inputs:
    """What both engines' memory models start from (bytes unless said otherwise)."""

    total: int  # GPU memory
    ctx: int  # fixed: driver reservation, CUDA context and (lmdeploy) load overhead
    weights: int  # target + drafter
    state_seq: int  # recurrent state per sequence
    batch: int
    session: int | None  # tokens per sequence
    lookahead: int  # speculative slots per sequence
    safety: int
    cfg: PlanRequest
    t: _Model
    d: _Model | None
    act: int  # activation bytes per element
    per_token: Callable[[int], tuple[int, int]]  # session length -> (target, drafter) KV bytes per token


def _lmdeploy(ranks: list[_Inputs], graphs: int, given: float | None) -> dict[str, Any]:
    """LMDeploy's memory model over the tensor-parallel GPUs `ranks` (one for a single GPU): each GPU
    reserves its own state pool and runtime buffers, one `cache_max_entry_count` applies to all, and the KV
    block count is the smallest any GPU fits (executor/base.py `_get_min_num_gpu_blocks`)."""
    inp = ranks[0]

    def rank_at(r: _Inputs, b: int, prefill: int) -> dict[str, Any]:
        tk, dk = r.per_token(r.session or 0)
        ctx_layers = r.d.shape.dflash_context_layers if (r.d is not None and r.d.shape.is_dflash) else 0
        free = r.total - r.ctx - r.weights
        state = r.state_seq * (b + LMDEPLOY_STATE_SPARE_SLOTS)
        runtime = (prefill + 2 * b) * r.t.shape.vocab * 2
        acts = (
            _activation_bytes(r.t.shape, prefill, r.act) + prefill * ctx_layers * r.t.shape.hidden * r.act * 2
        )
        if r.d is not None:
            acts += _activation_bytes(r.d.shape, max(r.lookahead, 1) * b, r.act)
        avail = free - state - runtime
        return {"free": free, "state": state, "runtime": runtime, "acts": acts, "avail": avail,
                "block": (tk + dk) * LMDEPLOY_BLOCK_SIZE, "need": acts + graphs + r.safety}  # fmt: skip

    def at(b: int, prefill: int) -> dict[str, Any]:
        per = [rank_at(r, b, prefill) for r in ranks]
        ratios = [_floor2((g["avail"] - g["need"]) / g["avail"]) if g["avail"] > 0 else 0.0 for g in per]
        ratio = min(given if given is not None else min(ratios), LMDEPLOY_MAX_RATIO)
        counts = [
            int(g["avail"] * ratio) // g["block"] if (g["avail"] > 0 and ratio > 0 and g["block"] > 0) else 0
            for g in per
        ]
        blocks = min(counts)
        for g, own in zip(per, ratios, strict=True):
            g["ok"] = g["avail"] > 0 and g["avail"] - int(g["avail"] * ratio) >= g["need"]
            # judged alone (its own best ratio): does this GPU's memory hold its share of the session?
            own = min(given if given is not None else own, LMDEPLOY_MAX_RATIO)
            alone = int(g["avail"] * own) // g["block"] if (g["avail"] > 0 and own > 0 and g["block"]) else 0
            g["alone"] = g["avail"] > 0 and g["avail"] - int(g["avail"] * own) >= g["need"]
            g["alone"] = g["alone"] and _holds(alone, inp)
        ok = blocks >= LMDEPLOY_MIN_BLOCKS and all(g["ok"] for g in per)
        return {
            **per[0],
            "per": per,
            "prefill": prefill,
            "ratio": ratio,
            "blocks": blocks,
            "ok": ok,
            "session_ok": ok
            and (inp.session is None or blocks * LMDEPLOY_BLOCK_SIZE >= b * (inp.session + inp.lookahead)),
        }

    def attempt(b: int) -> dict[str, Any]:
        """Given a ratio: LMDeploy's own loop (halve the prefill budget until 16 blocks fit). Recommending:
        the largest prefill budget whose plan holds the session; else the one with the most KV blocks."""
        prefills = []
        p = inp.cfg.plan.max_prefill_token_num
        while p >= 256:
            prefills.append(p)
            p //= 2
        tries = [at(b, p) for p in prefills] or [at(b, inp.cfg.plan.max_prefill_token_num)]
        if given is not None:
            return next((r for r in tries if r["blocks"] >= LMDEPLOY_MIN_BLOCKS), tries[-1])
        good = [r for r in tries if r["session_ok"]]
        return good[0] if good else max(tries, key=lambda r: (r["ok"], r["blocks"]))

    a = attempt(inp.batch)
    tokens = a["blocks"] * LMDEPLOY_BLOCK_SIZE
    max_session = (
        _floor_to(tokens // inp.batch - inp.lookahead, LMDEPLOY_BLOCK_SIZE)
        if a["blocks"] >= LMDEPLOY_MIN_BLOCKS
        else 0
    )
    max_batch = None
    if inp.session:
        max_batch = 0
        for b in range(1, 1025):
            if not attempt(b)["session_ok"]:
                break
            max_batch = b
    gpus = []
    for r, g in zip(ranks, a["per"], strict=True):
        kv = a["blocks"] * g["block"]
        gpus.append({
            "cuda_context_bytes": r.ctx, "weights_bytes": r.weights, "state_cache_bytes": g["state"],
            "runtime_reserve_bytes": g["runtime"], "kv_cache_bytes": kv,
            "kv_bytes_per_token": g["block"] // LMDEPLOY_BLOCK_SIZE, "activation_bytes": g["acts"],
            "cuda_graph_bytes": graphs, "safety_bytes": r.safety,
            "peak_bytes": r.ctx + r.weights + g["state"] + kv + g["acts"] + graphs,
            "fits": bool(g["free"] > 0 and g["alone"]),
        })  # fmt: skip
    session_fits = inp.session is None or max_session >= inp.session
    return {
        "free_after_weights_bytes": a["free"],
        "state_cache_bytes": a["state"],
        "runtime_reserve_bytes": a["runtime"],
        "max_prefill_token_num": a["prefill"],
        "activation_bytes": a["acts"],
        "cuda_graph_bytes": graphs,
        "kv_cache_bytes": gpus[0]["kv_cache_bytes"],
        "kv_cache_tokens": tokens,
        "cache_max_entry_count": round(a["ratio"], 2) if a["ratio"] > 0 else None,
        "cache_max_entry_count_given": given is not None,
        "max_session_len": max(0, max_session),
        "max_batch_at_session_len": max_batch,
        "peak_bytes": gpus[0]["peak_bytes"],
        "peak_allocated_bytes": gpus[0]["peak_bytes"] - inp.ctx,
        "fits": bool(all(g["free"] > 0 for g in a["per"]) and a["ok"] and session_fits),
        "verdict": "",
        "gpus": gpus,
    }


def _holds(blocks: int, inp: _Inputs) -> bool:
    """Whether `blocks` KV blocks are at least LMDeploy's minimum and hold `inp`'s batch of sessions (the
    longest session they hold as `max_session_len` counts it)."""
    if blocks < LMDEPLOY_MIN_BLOCKS:
        return False
    tokens = blocks * LMDEPLOY_BLOCK_SIZE
    return (
        inp.session is None
        or _floor_to(tokens // inp.batch - inp.lookahead, LMDEPLOY_BLOCK_SIZE) >= inp.session
    )


def _embedded(inp: _Inputs) -> dict[str, Any]:
    def need(b: int, s: int) -> tuple[int, int, int, int]:
        tk, dk = inp.per_token(s)
        kv = b * (s + inp.lookahead) * (tk + dk)
        # transformers' DynamicLayer.update grows the cache with torch.cat, keys first and then values, so at
        # the peak one layer's K (or V) tensor exists twice: the old one and its grown copy.
        growth = (tk // max(1, 2 * (inp.t.shape.full_layers + inp.t.shape.sliding_layers))) * b * s
        prefill = min(inp.cfg.plan.prefill_tokens or s, s)
        acts = (
            _activation_bytes(inp.t.shape, b * prefill, inp.act)
            + b * (inp.lookahead + 1) * inp.t.shape.vocab * 4 * 2
        )
        if inp.d is not None:
            acts = max(acts, _activation_bytes(inp.d.shape, b * prefill, inp.act))
        return inp.weights + kv + growth + inp.state_seq * b + acts, kv + growth, acts, inp.state_seq * b

    budget = inp.total - inp.ctx - inp.safety
    s_probe = inp.session or 2048
    peak_alloc, kv, acts, state = need(inp.batch, s_probe)
    lo, hi = 0, 1 << 22
    while lo < hi:  # longest session that fits at this batch
        mid = (lo + hi + 1) // 2
        if need(inp.batch, mid)[0] <= budget:
            lo = mid
        else:
            hi = mid - 1
    max_batch = None
    if inp.session:
        max_batch = 0
        while max_batch < 4096 and need(max_batch + 1, inp.session)[0] <= budget:
            max_batch += 1
    tk, dk = inp.per_token(s_probe)
    return {
        "free_after_weights_bytes": inp.total - inp.ctx - inp.weights,
        "state_cache_bytes": state,
        "runtime_reserve_bytes": 0,
        "max_prefill_token_num": None,
        "activation_bytes": acts,
        "cuda_graph_bytes": 0,
        "kv_cache_bytes": kv,
        "kv_cache_tokens": inp.batch * s_probe,
        "cache_max_entry_count": None,
        "cache_max_entry_count_given": False,
        "max_session_len": lo if lo >= 64 else 0,
        "max_batch_at_session_len": max_batch,
        "peak_bytes": inp.ctx + peak_alloc,
        "peak_allocated_bytes": peak_alloc,
        "fits": bool(
            inp.weights + inp.ctx < inp.total
            and (inp.session is None or need(inp.batch, inp.session)[0] <= budget)
            and lo >= 64
        ),
        "verdict": "",
    }


def _floor2(x: float) -> float:
    return max(0.0, int(x * 100) / 100)


def _floor_to(x: int, step: int) -> int:
    return (x // step) * step if x > 0 else 0


def _finish(plan: MemoryPlan, t: _Model, d: _Model | None, safety: int) -> None:
    """Verdict, the advice this plan's own numbers give, and the table rows."""
    rows = [
        PlanRow(item="GPU memory", bytes=plan.gpu_memory_bytes, note=plan.gpu_memory_source),
        PlanRow(
            item="driver reservation", bytes=plan.driver_reserved_bytes, note="NVML: used with no process"
        ),
        PlanRow(item="CUDA context", bytes=plan.cuda_context_bytes, note="per process"),
        PlanRow(
            item="target weights",
            bytes=t.weights,
            note=f"{t.source}; {plan.target.quantization or plan.target.compute_dtype}",
        ),
    ]
    if d is not None and plan.draft is not None:
        rows.append(PlanRow(item=f"draft weights ({plan.draft.kind})", bytes=d.weights, note=d.source))
    if plan.load_overhead_bytes:
        rows.append(
            PlanRow(item="load overhead", bytes=plan.load_overhead_bytes, note="beyond the weight files")
        )
    if plan.state_cache_bytes:
        n = plan.target.linear_attention_layers
        rows.append(
            PlanRow(
                item="linear-attention state",
                bytes=plan.state_cache_bytes,
                note=f"{gib(plan.state_bytes_per_sequence)}/sequence over {n} Gated-DeltaNet layers",
            )
        )
    if plan.runtime_reserve_bytes:
        rows.append(
            PlanRow(
                item="runtime reserve (logits)",
                bytes=plan.runtime_reserve_bytes,
                note=f"(max_prefill_token_num {plan.max_prefill_token_num} + 2*batch) * vocab * 2; kept "
                "free, not in the peak (prompt-logprob requests fill it)",
            )
        )
    kv_note = f"{plan.kv_bytes_per_token} B/token ({plan.target.kv_bytes_per_token} target"
    kv_note += f" + {plan.draft.kv_bytes_per_token} draft)" if plan.draft else ")"
    if plan.tp > 1:
        whole = plan.target.kv_bytes_per_token + (plan.draft.kv_bytes_per_token if plan.draft else 0)
        kv_note = f"{plan.kv_bytes_per_token} B/token on this GPU ({whole} for the whole model)"
    rows.append(
        PlanRow(item=f"KV cache ({plan.kv_cache_tokens} tokens)", bytes=plan.kv_cache_bytes, note=kv_note)
    )
    rows.append(
        PlanRow(item="activations (peak)", bytes=plan.activation_bytes, note="estimate, see docs/plan.md")
    )
    if plan.cuda_graph_bytes:
        rows.append(PlanRow(item="CUDA graphs + buffers", bytes=plan.cuda_graph_bytes, note="after warm-up"))
    rows.append(PlanRow(item="safety margin", bytes=safety, note=f"{SAFETY_FRACTION:.0%} of GPU memory"))
    rows.append(PlanRow(item="predicted peak", bytes=plan.peak_bytes, note="NVML view"))
    plan.rows = rows

    want = f"session_len {plan.session_len}" if plan.session_len else "a session"
    where = ""
    if plan.tp > 1:
        short = [str(g.index) for g in plan.gpus if not g.fits]
        where = f" on GPU {','.join(short) or '0'} of {plan.tp}"
        where = f" on each of {plan.tp} GPUs" if plan.fits else where
    if plan.fits:
        plan.verdict = (
            f"fits{where}: {want} at batch {plan.batch}; longest session_len at this batch "
            f"{plan.max_session_len}"
        )
        if plan.engine == "lmdeploy" and plan.cache_max_entry_count is not None:
            plan.verdict += f"; cache_max_entry_count {plan.cache_max_entry_count}"
            plan.verdict += f", max_prefill_token_num {plan.max_prefill_token_num}"
        return
    if plan.free_after_weights_bytes <= 0:
        plan.verdict = (
            f"will not fit{where}: weights alone need {gib(plan.weights_bytes + _fixed(plan))} "
            f"of {gib(plan.gpu_memory_bytes)}"
        )
        plan.advice.append("use a GPU with more memory or a smaller quantization")
        return
    plan.verdict = f"will not fit{where}: {want} at batch {plan.batch}"
    if plan.max_session_len >= 64:
        plan.advice.append(
            f"--session-len {plan.max_session_len} (the longest that fits at batch {plan.batch})"
        )
    if plan.max_batch_at_session_len:
        plan.advice.append(f"--batch {plan.max_batch_at_session_len} (the largest that fits {want})")


def fits(request: PlanRequest, *, gpu_memory_bytes: int | None = None) -> str | None:
    """Serve preflight: None when `request`'s model (and draft) fit the GPU at the server's own
    `cache_max_entry_count`, else a one-line reason with the fix. Also None when no GPU size is known (the GPU
    preflight reports that) or no model is set."""
    if not request.model:
        return None
    target = Checkpoint(request.model)
    draft = Checkpoint(request.draft_model) if request.draft_model else None
    try:
        plan = plan_memory(
            target,
            draft,
            request,
            gpu_memory_bytes=gpu_memory_bytes,
            cache_max_entry_count=request.engine.cache_max_entry_count,
        )
    except EnvironmentMissing:
        return None
    if plan.fits:
        return None
    fix = f"; try {plan.advice[0]}" if plan.advice else ""
    if plan.engine == "lmdeploy" and plan.free_after_weights_bytes > 0:
        rec = plan_memory(target, draft, request, gpu_memory_bytes=gpu_memory_bytes)
        if rec.fits:
            fix = (
                f"; it fits with engine.cache_max_entry_count {rec.cache_max_entry_count} and LMDeploy "
                f"--max-prefill-token-num {rec.max_prefill_token_num}"
            )
    ratio = request.engine.cache_max_entry_count
    reason = plan.verdict + (f" with cache_max_entry_count {ratio}" if plan.engine == "lmdeploy" else "")
    return f"VRAM plan: {reason}{fix} (see `specq plan`)"


def run_plan(cfg: PlanRequest, *, gpu_memory_bytes: int | None = None) -> MemoryPlan:
    """The stage's entry point: `plan_memory` for the target and drafter directories in `cfg`."""
    if not cfg.model:
        raise InputError("no model to plan: pass MODEL or set model.model_path")
    # a config-only directory, or a bare config.json, plans from the config alone (no download needed)
    target = validate_checkpoint(open_target(cfg.model), tokenizer=False, weights=False, role="target")
    if cfg.quant is not None:
        target = as_quantized(target, cfg.quant)
    draft = Checkpoint(cfg.draft_model) if cfg.draft_model else None
    if draft is not None:
        validate_checkpoint(draft, tokenizer=False, weights=False, role="drafter")
    plan = plan_memory(
        target,
        draft,
        cfg,
        gpu_memory_bytes=gpu_memory_bytes,
        cache_max_entry_count=cfg.plan.cache_max_entry_count,
    )
    twins = []
    for role, ck in (("target", target), ("drafter", draft)):
        if ck is not None and (marker := ck.twin) is not None:
            plan.twin[role] = marker
            twins.append(twin_note(role, str(ck.path), marker))
    plan.notes = twins + ([paper_note(cfg.quant)] if cfg.quant is not None else []) + plan.notes
    return plan


__all__ = [
    "DTYPE_BYTES",
    "MemoryPlan",
    "ModelMemory",
    "fits",
    "PlanRequest",
    "parse_memory",
    "plan_memory",
    "run_plan",
]
