"""GPTQ → AWQ (gemm) repacking with no re-quantization: the same 4-bit codes, the same scales, the zero
point 8 of symmetric GPTQ written as AWQ zeros, in AWQ's packing order. LMDeploy 0.18's PyTorch engine (the
engine that speculates) refuses GPTQ but loads AWQ gemm, so this is how a GPTQ checkpoint becomes servable
with speculation.

Layouts (verified against gptqmodel 7.6.0's output and LMDeploy 0.18 `lmdeploy/turbomind/weight_format.py`):
- GPTQ `qweight` int32 [K/8, N]: input row 8r + j sits in bits 4j..4j+3 of word [r, n] (sequential order).
  `qzeros` int32 [K/g, N/8]: column 8c + j in bits 4j; checkpoint_format `gptq` (v1) stores zero − 1 (so
  symmetric 4-bit stores 7, word 0x77777777), `gptq_v2` stores the zero itself. `g_idx` int32 [K] is
  `k // g` without act-order. Dequantized: w[k, n] = (q[k, n] − zero[k // g, n]) · scales[k // g, n].
- AWQ gemm `qweight` int32 [K, N/8]: output column 8c + AWQ_ORDER[j] sits in bits 4j of word [k, c], with
  AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7] (autoawq `awq/utils/packing_utils.py`; TurboMind unpacks with the
  inverse [0, 4, 1, 5, 2, 6, 3, 7]). `qzeros` int32 [K/g, N/8] in the same order holding the zero itself
  (8 for symmetric 4-bit); `scales` [K/g, N]. Dequantized: w[k, n] = (q[k, n] − zero[k // g, n]) · scales.
Everything is numpy on memory-mapped files; nothing needs torch."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel

from ..checkpoint import Checkpoint
from ..engines.pytorch import repack_blockers
from ..errors import InputError
from ..fsutil import atomic_dir, atomic_write_text
from ..progress import Progress, null_progress
from .cast import fp16_range_problems, set_config_dtype
from .st_io import StTensor, read_tensors, write_tensors

AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)
SHIFTS = np.arange(0, 32, 4, dtype=np.uint32)
# Files that describe the source's quantization; the output gets its own.
SKIP_FILES = {"config.json", "quantize_config.json", "quant_config.json", "specq-manifest.json",
              "model.safetensors.index.json", "quant_log.csv"}  # fmt: skip


class RepackResult(BaseModel):
    source: str
    out: str
    group_size: int
    linears: int
    tensors_copied: int
    files_copied: list[str]
    checkpoint_format: str


# --- int4 packing, written from each format's definition --------------------------------------------------


def unpack_rows(q: np.ndarray) -> np.ndarray:
    """GPTQ qweight [K/8, N] → codes [K, N] (row 8r + j from bits 4j)."""
    u = q.view(np.uint32)
    codes = (u[:, None, :] >> SHIFTS[None, :, None]) & 0xF
    return codes.reshape(u.shape[0] * 8, u.shape[1]).astype(np.uint8)


def unpack_cols_sequential(q: np.ndarray) -> np.ndarray:
    """GPTQ qzeros [G, N/8] → [G, N] (column 8c + j from bits 4j)."""
    u = q.view(np.uint32)
    vals = (u[:, :, None] >> SHIFTS[None, None, :]) & 0xF
    return vals.reshape(u.shape[0], u.shape[1] * 8).astype(np.uint8)


def pack_cols_awq(codes: np.ndarray) -> np.ndarray:
    """Codes [R, N] (0..15) → AWQ int32 [R, N/8]: column 8c + AWQ_ORDER[j] into bits 4j."""
    r, n = codes.shape
    c = codes.reshape(r, n // 8, 8).astype(np.uint32)
    word = np.zeros((r, n // 8), dtype=np.uint32)
    for j, col in enumerate(AWQ_ORDER):
        word |= c[:, :, col] << np.uint32(4 * j)
    return word.view(np.int32)


def unpack_cols_awq(q: np.ndarray) -> np.ndarray:
    """AWQ int32 [R, N/8] → codes [R, N] (inverse of `pack_cols_awq`)."""
    u = q.view(np.uint32)
    out = np.zeros((u.shape[0], u.shape[1], 8), dtype=np.uint8)
    for j, col in enumerate(AWQ_ORDER):
        out[:, :, col] = (u >> np.uint32(4 * j)) & 0xF
    return out.reshape(u.shape[0], u.shape[1] * 8)


def pack_awq_linear(
    codes: np.ndarray, zeros: np.ndarray, scales: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A linear in the AWQ gemm layout from its 4-bit codes [K, N], zero points [K/g, N] and scales [K/g, N]:
    (qweight I32 [K, N/8], qzeros I32 [K/g, N/8], scales F16 [K/g, N])."""
    return pack_cols_awq(codes), pack_cols_awq(zeros), np.ascontiguousarray(scales, dtype=np.float16)


def dequantize_awq(qweight: np.ndarray, qzeros: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """An AWQ gemm linear's weights [K, N] in float32:
    w[k, n] = (q[k, n] − zero[k // g, n]) · scales[k // g, n], with g = K / scales.shape[0]."""
    codes = unpack_cols_awq(qweight).astype(np.float32)
    zeros = unpack_cols_awq(qzeros).astype(np.float32)
    g = codes.shape[0] // scales.shape[0]
    return (codes - np.repeat(zeros, g, axis=0)) * np.repeat(scales.astype(np.float32), g, axis=0)


# --- the repack -------------------------------------------------------------------------------------------


def awq_quantization_config(gptq: dict[str, Any]) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "quant_method": "awq",
        "bits": 4,
        "group_size": int(gptq["group_size"]),
        "zero_point": True,
        "version": "gemm",
        "modules_to_not_convert": gptq.get("modules_to_not_convert"),
    }
    return cfg


def repack_gptq_to_awq(
    model: str | Path, out: str | Path, *, overwrite: bool = False, progress: Progress = null_progress
) -> RepackResult:
    """Write an AWQ gemm copy of a symmetric, non-act-order 4-bit GPTQ checkpoint at `out` (atomically)."""
    src = Checkpoint(model)
    q = src.quantization
    if q is None or q.method != "gptq":
        method = q.method if q else "not quantized"
        raise InputError(f"{src.path}: --to awq repacks GPTQ checkpoints; this one is {method}")
    blockers = repack_blockers(src)
    if blockers:
        raise InputError(f"{src.path}: cannot repack to AWQ without re-quantizing: {blockers[0]}")
    assert q.group_size is not None
    g = int(q.group_size)
    v1 = (q.checkpoint_format or "gptq") == "gptq"
    # AWQ runs in float16 in LMDeploy's PyTorch engine: refuse up front if a kept tensor cannot be fp16.
    too_big = fp16_range_problems(src.path)
    if too_big:
        raise InputError(f"{src.path}: cannot run as float16 AWQ: {too_big[0]}")
    out = Path(out)
    linears = copied = 0
    with atomic_dir(out, overwrite=overwrite, progress=progress) as tmp:
        weight_map: dict[str, str] = {}
        # All shards memory-mapped at once (nothing is read yet), so that a linear whose qweight, qzeros and
        # scales sit in different shards still repacks; its output goes to the shard holding its qweight.
        shards = {f.name: read_tensors(f) for f in src.weight_files}
        everything = {n: t for tensors, _ in shards.values() for n, t in tensors.items()}
        for fname, (tensors, meta) in shards.items():
            prefixes = sorted({n[: -len(".qweight")] for n in tensors if n.endswith(".qweight")})
            progress(f"repacking {fname}: {len(prefixes)} quantized linears")
            out_items: list[tuple[str, str, np.ndarray]] = []
            for p in prefixes:
                out_items += _repack_linear(everything, p, g, v1)
                linears += 1
            for name, t in tensors.items():
                prefix, _, suffix = name.rpartition(".")
                if suffix in ("qweight", "qzeros", "scales", "g_idx") and f"{prefix}.qweight" in everything:
                    continue  # written with its linear
                out_items.append((name, t.dtype, t.array))
                copied += 1
            out_items.sort(key=lambda x: x[0])
            write_tensors(tmp / fname, out_items, {**meta, "format": "pt"})
            weight_map.update({name: fname for name, _, _ in out_items})
        files = _copy_other_files(src.path, tmp)
        config = dict(src.config)
        qc = awq_quantization_config(q.raw)
        if "quantization_config" in config:
            config["quantization_config"] = qc
        else:  # nested (multimodal) configs keep it under text_config
            config["text_config"] = {**config["text_config"], "quantization_config": qc}
        config = set_config_dtype(config, "float16")
        atomic_write_text(tmp / "config.json", json.dumps(config, indent=2) + "\n")
        if (src.path / "model.safetensors.index.json").is_file():
            index = json.loads((src.path / "model.safetensors.index.json").read_text(encoding="utf-8"))
            index["weight_map"] = dict(sorted(weight_map.items()))
            atomic_write_text(tmp / "model.safetensors.index.json", json.dumps(index, indent=2) + "\n")
        provenance = {"converted_by": "specq convert --to awq", "source": str(src.path), "repacked": True,
                      "source_quantization_config": q.raw}  # fmt: skip
        atomic_write_text(tmp / "specq-convert.json", json.dumps(provenance, indent=2, default=str) + "\n")
    progress(f"wrote {out} ({linears} linears repacked, {copied} tensors copied)")
    return RepackResult(
        source=str(src.path),
        out=str(out),
        group_size=g,
        linears=linears,
        tensors_copied=copied,
        files_copied=files,
        checkpoint_format=q.checkpoint_format or "gptq",
    )


def _repack_linear(
    tensors: dict[str, StTensor], prefix: str, g: int, v1: bool
) -> list[tuple[str, str, np.ndarray]]:
    try:
        qw, sc = tensors[f"{prefix}.qweight"], tensors[f"{prefix}.scales"]
    except KeyError as e:
        raise InputError(f"{prefix}: missing {e.args[0]}") from None
    qz = tensors.get(f"{prefix}.qzeros")  # absent: symmetric zeros (8), as TurboMind assumes
    codes = unpack_rows(qw.array)  # [K, N]
    k, n = codes.shape
    gi = tensors.get(f"{prefix}.g_idx")
    if gi is not None and not np.array_equal(gi.array, np.arange(k, dtype=np.int64) // g):
        raise InputError(f"{prefix}.g_idx is not k // group_size: act-order GPTQ cannot be repacked to AWQ")
    if qz is None:
        zeros = np.full((k // g, n), 8, dtype=np.int16)
    else:
        zeros = unpack_cols_sequential(qz.array).astype(np.int16) + (1 if v1 else 0)
    if not np.all(zeros == 8):
        bad = sorted(set(np.unique(zeros).tolist()) - {8})
        raise InputError(
            f"{prefix}.qzeros holds zero points {bad[:4]} besides 8: asymmetric GPTQ cannot be repacked"
        )
    awq_qweight = pack_cols_awq(codes)
    awq_qzeros = pack_cols_awq(np.full((k // g, n), 8, dtype=np.uint8))
    items = [
        (f"{prefix}.qweight", "I32", awq_qweight),
        (f"{prefix}.qzeros", "I32", awq_qzeros),
        (f"{prefix}.scales", sc.dtype, sc.array),
    ]
    return items


def _copy_other_files(src: Path, dst: Path) -> list[str]:
    copied = []
    for f in sorted(src.iterdir()):
        if f.name in SKIP_FILES or f.suffix == ".safetensors" or f.name.startswith("."):
            continue
        if f.is_dir():
            shutil.copytree(f, dst / f.name)
        else:
            shutil.copy2(f, dst / f.name)
        copied.append(f.name)
    return copied
