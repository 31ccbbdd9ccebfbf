"""An fp16 (or bf16) copy of a drafter. LMDeploy 0.18's PyTorch engine runs AWQ targets in float16, and a bf16
drafter next to one crashes the engine at start-up (`expected mat1 and mat2 to have the same dtype`); an fp16
copy of the same drafter serves. Every floating-point weight is checked against fp16's range before anything
is written, and the first one that does not fit is named."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
from pydantic import BaseModel

from ..checkpoint import Checkpoint
from ..errors import InputError, UsageError
from ..fsutil import atomic_dir, atomic_write_text
from ..progress import Progress, null_progress
from .st_io import StTensor, read_tensors, write_tensors

FP16_MAX = float(np.finfo(np.float16).max)  # 65504
FLOAT_DTYPES = ("F16", "BF16", "F32", "F64")
TARGET = {"float16": "F16", "bfloat16": "BF16"}


class CastResult(BaseModel):
    source: str
    out: str
    dtype: str
    tensors_cast: int
    tensors_copied: int
    underflow_to_zero: int  # nonzero weights that become 0 in the new dtype (precision, not range)


def fp16_range_problems(model: Path, limit: int = 1) -> list[str]:
    """Floating-point tensors with a value outside fp16's finite range (or NaN/inf), by name."""
    problems = []
    for f in Checkpoint(model).weight_files:
        tensors, _ = read_tensors(f)
        for name, t in sorted(tensors.items()):
            if t.dtype not in ("BF16", "F32", "F64") or t.array.size == 0:
                continue
            x = t.as_float32() if t.dtype != "F64" else t.array
            if not np.all(np.isfinite(x)):
                problems.append(f"tensor {name} holds NaN or inf")
            else:
                peak = float(np.max(np.abs(x)))
                if peak > FP16_MAX:
                    problems.append(
                        f"tensor {name} has |value| {peak:.4g} > {FP16_MAX:g}, the float16 maximum"
                    )
            if len(problems) >= limit:
                return problems
    return problems


def set_config_dtype(config: dict, dtype: str) -> dict:
    """Record `dtype` under whichever key the checkpoint uses (transformers 5 writes `dtype`)."""
    keys = [k for k in ("dtype", "torch_dtype") if k in config] or ["dtype"]
    for k in keys:
        config[k] = dtype
    return config


def _to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 → bfloat16 bits with round-to-nearest-even (NaN stays NaN)."""
    u = x.astype(np.float32).view(np.uint32)
    rounding = ((u >> 16) & 1) + np.uint32(0x7FFF)
    out = ((u + rounding) >> 16).astype(np.uint16)
    nan = np.isnan(x)
    if nan.any():
        out[nan] = 0x7FC0
    return out


def _cast(t: StTensor, dtype: str) -> tuple[np.ndarray, int]:
    x = t.as_float32() if t.dtype != "F64" else t.array
    if dtype == "F16":
        y = x.astype(np.float16)
        under = int(np.count_nonzero((y == 0) & (x != 0)))
        return y, under
    bits = _to_bf16_bits(x)
    under = int(np.count_nonzero(((bits & 0x7FFF) == 0) & (x != 0)))
    return bits, under


def cast_drafter(
    src: str | Path,
    out: str | Path,
    dtype: str = "float16",
    *,
    overwrite: bool = False,
    progress: Progress = null_progress,
) -> CastResult:
    """Write a copy of the checkpoint `src` at `out` with every floating-point weight in `dtype`."""
    if dtype not in TARGET:
        raise UsageError(f"--dtype {dtype!r}: choose float16 or bfloat16")
    ckpt = Checkpoint(src)
    if ckpt.quantization is not None:
        raise InputError(
            f"{ckpt.path}: is {ckpt.quantization.method}-quantized; --dtype casts unquantized drafters"
        )
    files = ckpt.weight_files
    if not files:
        raise InputError(f"{ckpt.path}: no .safetensors files")
    if dtype == "float16":
        progress("checking that every weight fits float16")
        bad = fp16_range_problems(ckpt.path)
        if bad:
            raise InputError(f"{ckpt.path}: cannot cast to float16: {bad[0]}")
    st = TARGET[dtype]
    cast = copied = under = 0
    with atomic_dir(Path(out), overwrite=overwrite, progress=progress) as tmp:
        for f in files:
            tensors, meta = read_tensors(f)
            items = []
            for name, t in tensors.items():
                if t.dtype in FLOAT_DTYPES and t.dtype != st:
                    arr, u = _cast(t, st)
                    items.append((name, st, arr))
                    cast += 1
                    under += u
                else:
                    items.append((name, t.dtype, t.array))
                    copied += 1
            write_tensors(tmp / f.name, items, meta or {"format": "pt"})
            progress(f"wrote {f.name}")
        for f in sorted(ckpt.path.iterdir()):
            if f.suffix == ".safetensors" or f.name in ("config.json", "specq-manifest.json"):
                continue
            if f.is_dir():
                shutil.copytree(f, tmp / f.name)
            else:
                shutil.copy2(f, tmp / f.name)
        config = set_config_dtype(dict(ckpt.config), dtype)
        atomic_write_text(tmp / "config.json", json.dumps(config, indent=2) + "\n")
    return CastResult(
        source=str(ckpt.path), out=str(out), dtype=dtype, tensors_cast=cast, tensors_copied=copied,
        underflow_to_zero=under,
    )  # fmt: skip
