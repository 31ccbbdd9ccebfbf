"""Which FlashAttention-3 kernels the models to be served need, and which files flash-attention's
`hopper/setup.py` compiles for a set of `FLASH_ATTENTION_DISABLE_*` flags.

LMDeploy 0.18's PyTorch engine calls FA3 in two ways (`lmdeploy/pytorch/backends/cuda/attention/fa3.py`):
`flash_attn_varlen_func` for prefill (varlen, contiguous K/V) and `flash_attn_with_kvcache` with a
`page_table` for multi-token (speculative) decoding (paged KV). It never passes new K/V to the kernel
(appendkv), never asks for split-KV or PackGQA explicitly, and never runs the backward pass or fp8. So
PAGEDKV and VARLEN stay on; BACKWARD, FP8, SPLIT, PACKGQA, APPENDKV, CLUSTER and the different-V-head-dim
(MLA) kernels stay off; LOCAL (sliding windows) and SOFTCAP are on only when a model uses them. What varies
is the head dims, the dtypes and the GPU architecture.

The source enumeration mirrors `hopper/setup.py` of flash-attention at commit 0251105a2fb1 (lines ~590-660),
so the progress total is right; a test compares it with that setup.py's own code when the sources are at
hand. Pure Python: no torch."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from ..checkpoint import Checkpoint
from ..engines.pytorch import auto_dtype
from ..engines.qwen35 import serve_dtype
from ..errors import InputError

Dtype = Literal["bf16", "fp16"]
Arch = Literal["sm80", "sm90"]
Role = Literal["target", "draft"]

# The head-dim buckets FA3 instantiates; a head dim runs in the smallest built bucket that holds it.
HDIM_BUCKETS = (64, 96, 128, 192, 256)
# LMDeploy uses FA3 only for head sizes up to 256 (`_enable_fa3` in backends/cuda/attention/__init__.py).
MAX_FA3_HEAD_DIM = 256
DRAFT_KINDS = ("dflash", "eagle3", "eagle")
# Layer types LMDeploy runs through its attention backend; linear-attention layers (Qwen3.5/Qwen3-Next
# gated delta net) do not touch FA3.
ATTENTION_LAYER_TYPES = {"full_attention", "sliding_attention", "attention", "chunked_attention"}
TORCH_DTYPES: dict[str, Dtype] = {"bfloat16": "bf16", "float16": "fp16"}

# Every FLASH_ATTENTION_DISABLE_* variable setup.py reads (SM80 is spelled SM80 in the environment).
FLAG_NAMES = (
    "BACKWARD", "SPLIT", "PAGEDKV", "APPENDKV", "LOCAL", "SOFTCAP", "PACKGQA", "FP16", "FP8", "VARLEN",
    "CLUSTER", "HDIM64", "HDIM96", "HDIM128", "HDIM192", "HDIM256", "SM80", "HDIMDIFF64", "HDIMDIFF192",
)  # fmt: skip
# setup.py switches to flash_api_stable.cpp from this torch on.
STABLE_API_TORCH = "2.9.0.dev20250830"


class ModelNeed(BaseModel):
    """What one model directory asks of FA3 when LMDeploy's PyTorch engine serves it."""

    model_config = ConfigDict(frozen=True)

    path: str
    role: Role
    head_dims: tuple[int, ...]  # of the layers that go through FA3; empty: none do
    dtypes: tuple[Dtype, ...]
    dtype_reason: str
    local: bool = False  # sliding-window attention
    softcap: bool = False  # attention logit soft-capping
    notes: tuple[str, ...] = ()


class KernelSet(BaseModel):
    """The kernels to build: what decides the flags and the file list."""

    model_config = ConfigDict(frozen=True)

    arch: Arch
    hdims: tuple[int, ...]  # buckets, ascending
    dtypes: tuple[Dtype, ...]  # bf16 is always built: setup.py can only disable fp16
    paged: bool = True
    varlen: bool = True
    local: bool = False
    softcap: bool = False

    def disabled(self) -> tuple[str, ...]:
        """The FLASH_ATTENTION_DISABLE_* names (without prefix) to set to TRUE, in setup.py's order."""
        off = {"BACKWARD", "SPLIT", "APPENDKV", "PACKGQA", "FP8", "CLUSTER", "HDIMDIFF64", "HDIMDIFF192"}
        off |= {f"HDIM{h}" for h in HDIM_BUCKETS if h not in self.hdims}
        if "fp16" not in self.dtypes:
            off.add("FP16")
        if not self.local:
            off.add("LOCAL")
        if not self.softcap:
            off.add("SOFTCAP")
        if not self.paged:
            off.add("PAGEDKV")
        if not self.varlen:
            off.add("VARLEN")
        if self.arch != "sm80":
            off.add("SM80")
        return tuple(n for n in FLAG_NAMES if n in off)

    def env(self) -> dict[str, str]:
        return {f"FLASH_ATTENTION_DISABLE_{n}": "TRUE" for n in self.disabled()}


def bucket(head_dim: int) -> int | None:
    """The FA3 head-dim bucket a head dim runs in, or None above 256 (LMDeploy does not use FA3 there)."""
    return next((b for b in HDIM_BUCKETS if head_dim <= b), None)


def engine_dtype(ckpt: Checkpoint) -> tuple[Dtype, str]:
    """The FA3 dtype LMDeploy's PyTorch engine runs a target in as specq launches it, and why: bf16 for an
    unquantized Qwen3.5 (specq serves it with --dtype bfloat16, qwen35.py), else LMDeploy's 'auto' rule
    (`engines.pytorch.auto_dtype`; FA3 has no fp32 kernels, and LMDeploy falls back to fp16)."""
    if serve_dtype(ckpt) is not None:
        return "bf16", "Qwen3.5 target: specq serves it with --dtype bfloat16 (bf16 linear-attention state)"
    dtype, why = auto_dtype(ckpt)
    return TORCH_DTYPES[dtype], why


def _attention_shape(ckpt: Checkpoint) -> tuple[tuple[int, ...], bool, bool, list[str]]:
    """(head dims of FA3 layers, sliding window, softcap, notes) from the config's language-model part."""
    tc = ckpt.text_config
    notes: list[str] = []
    if tc.get("kv_lora_rank"):
        raise InputError(
            f"{ckpt.path}: an MLA model (kv_lora_rank in config.json); `specq fa3` derives kernels for "
            "standard multi-head/GQA attention only: build FA3 by hand with the HDIMDIFF kernels"
        )
    layer_types = tc.get("layer_types")
    if isinstance(layer_types, list) and layer_types:
        types = {str(t) for t in layer_types}
        if not types & ATTENTION_LAYER_TYPES:
            notes.append(f"{ckpt.name}: no attention layers ({', '.join(sorted(types))}); FA3 is not used")
            return (), False, False, notes
    else:
        types = set()
    try:
        head_dim = ckpt.head_dim
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        raise InputError(
            f"{ckpt.path}: config.json has no head_dim and no hidden_size/num_attention_heads to derive it"
        ) from None
    if bucket(head_dim) is None:
        notes.append(
            f"{ckpt.name}: head dim {head_dim} > {MAX_FA3_HEAD_DIM}: LMDeploy does not use FA3 for it"
        )
        return (), False, False, notes
    local = "sliding_attention" in types or bool(tc.get("use_sliding_window") and tc.get("sliding_window"))
    softcap = bool(tc.get("attn_logit_softcapping"))
    return (head_dim,), local, softcap, notes


def role_of(ckpt: Checkpoint) -> Role:
    return "draft" if ckpt.draft_kind in DRAFT_KINDS else "target"


def derive_needs(models: Sequence[str | Path], dtype: Dtype | None = None) -> list[ModelNeed]:
    """What each model needs. Drafters run in their targets' dtype (LMDeploy loads the drafter with the
    target's model config); a drafter given without a target runs in its own checkpoint's dtype. `dtype`
    overrides the engine dtype (`specq serve --dtype`)."""
    ckpts = [Checkpoint(m) for m in models]
    target_dtypes: list[Dtype] = []
    needs: list[ModelNeed] = []
    for ckpt in ckpts:
        if role_of(ckpt) == "target":
            dt, why = (dtype, "engine dtype given") if dtype else engine_dtype(ckpt)
            target_dtypes.append(dt)
            needs.append(_need(ckpt, "target", (dt,), why))
    for ckpt in ckpts:
        if role_of(ckpt) == "draft":
            dts: tuple[Dtype, ...]
            if dtype:
                dts, why = (dtype,), "engine dtype given"
            elif target_dtypes:
                dts, why = tuple(dict.fromkeys(target_dtypes)), "drafter runs in the target's dtype"
            else:
                dt, why = engine_dtype(ckpt)
                dts, why = (dt,), f"no target given; {why}"
            needs.append(_need(ckpt, "draft", dts, why))
    return needs


def _need(ckpt: Checkpoint, role: Role, dtypes: tuple[Dtype, ...], why: str) -> ModelNeed:
    head_dims, local, softcap, notes = _attention_shape(ckpt)
    return ModelNeed(
        path=str(ckpt.path),
        role=role,
        head_dims=head_dims,
        dtypes=dtypes,
        dtype_reason=why,
        local=local,
        softcap=softcap,
        notes=tuple(notes),
    )


def kernel_set(
    needs: Iterable[ModelNeed],
    arch: Arch,
    extra_head_dims: Iterable[int] = (),
    extra_dtypes: Iterable[Dtype] = (),
) -> KernelSet:
    needs = list(needs)
    head_dims = {h for n in needs for h in n.head_dims} | set(extra_head_dims)
    for h in head_dims:
        if h <= 0 or bucket(h) is None:
            raise InputError(f"head dim {h}: FA3 builds head dims 1-{MAX_FA3_HEAD_DIM} only")
    hdims = tuple(sorted({b for h in head_dims if (b := bucket(h)) is not None}))
    if not hdims:
        raise InputError(
            "nothing to build: no model given runs attention through FA3; pass MODEL directories or "
            "--head-dim"
        )
    want = {d for n in needs for d in n.dtypes} | set(extra_dtypes)
    dtypes: tuple[Dtype, ...] = ("bf16", "fp16") if "fp16" in want else ("bf16",)
    return KernelSet(
        arch=arch,
        hdims=hdims,
        dtypes=dtypes,
        local=any(n.local for n in needs),
        softcap=any(n.softcap for n in needs),
    )


def _version_tuple(v: str) -> Any:
    from packaging.version import InvalidVersion, Version

    try:
        return Version(v)
    except InvalidVersion:
        return Version("0")


def setup_py_sources(disabled: Iterable[str], torch_version: str) -> list[str]:
    """The source files hopper/setup.py compiles with these FLASH_ATTENTION_DISABLE_* names set, in its order.
    A line-by-line mirror of setup.py's enumeration (commit 0251105a2fb1)."""
    off = set(disabled)
    dtype_fwd_sm80 = ["bf16"] + ([] if "FP16" in off else ["fp16"])
    dtype_fwd_sm90 = dtype_fwd_sm80 + ([] if "FP8" in off else ["e4m3"])
    half_dtype_fwd_sm90 = dtype_fwd_sm80
    dtype_bwd = dtype_fwd_sm80
    hdims = [h for h in HDIM_BUCKETS if f"HDIM{h}" not in off]
    diff64 = [] if "HDIMDIFF64" in off else ["64_256", "64_512"]
    diff192 = [] if "HDIMDIFF192" in off else ["192_128"]
    split = [""] + ([] if "SPLIT" in off else ["_split"])
    paged = [""] + ([] if "PAGEDKV" in off else ["_paged"])
    softcap = [""] + ([] if "SOFTCAP" in off else ["_softcap"])
    softcap_all = [""] if "SOFTCAP" in off else ["_softcapall"]
    packgqa = [""] + ([] if "PACKGQA" in off else ["_packgqa"])

    def fwd90(hds: list[Any], dts: list[str]) -> list[str]:
        return [
            f"instantiations/flash_fwd_hdim{h}_{d}{p}{s}{c}{g}_sm90.cu"
            for h, d, s, p, c, g in itertools.product(hds, dts, split, paged, softcap, packgqa)
            if not (g and (p or s))
        ]

    fwd_sm80 = [
        f"instantiations/flash_fwd_hdim{h}_{d}{p}{s}{c}_sm80.cu"
        for h, d, s, p, c in itertools.product(hdims, dtype_fwd_sm80, split, paged, softcap_all)
    ]
    fwd_sm90 = fwd90(list(hdims), dtype_fwd_sm90)
    if "HDIMDIFF64" not in off:
        fwd_sm90 += fwd90(list(diff64), half_dtype_fwd_sm90)
    if "HDIMDIFF192" not in off:
        fwd_sm90 += fwd90(list(diff192), dtype_fwd_sm90)
    bwd_sm80 = [
        f"instantiations/flash_bwd_hdim{h}_{d}{c}_sm80.cu"
        for h, d, c in itertools.product(hdims, dtype_bwd, softcap)
    ]
    bwd_sm90 = [
        f"instantiations/flash_bwd_hdim{h}_{d}{c}_sm90.cu"
        for h, d, c in itertools.product(hdims, dtype_bwd, softcap_all)
    ]
    if "BACKWARD" in off:
        bwd_sm80, bwd_sm90 = [], []
    stable = _version_tuple(torch_version) >= _version_tuple(STABLE_API_TORCH)
    sm8x = "SM80" not in off
    sources = (
        ["flash_api_stable.cpp" if stable else "flash_api.cpp"]
        + (fwd_sm80 if sm8x else [])
        + fwd_sm90
        + (bwd_sm80 if sm8x else [])
        + bwd_sm90
    )
    if "SPLIT" not in off:
        sources += ["flash_fwd_combine.cu"]
    sources += ["flash_prepare_scheduler.cu"]
    return sources
