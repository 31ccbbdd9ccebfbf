"""Reading and writing safetensors files with numpy only, so that `specq convert` repacks and casts
checkpoints without torch. The format is an 8-byte little-endian header length, a JSON header mapping
tensor names to dtype/shape/byte offsets, then the raw little-endian data. bfloat16 has no numpy dtype: it
is read as raw uint16 and widened to float32 by a 16-bit shift, which is exact."""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError

# safetensors dtype name -> numpy dtype of the stored bytes (BF16 as raw uint16).
NP_DTYPES: dict[str, Any] = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": np.uint16, "I64": np.int64,
    "I32": np.int32, "U32": np.uint32, "I16": np.int16, "U16": np.uint16, "I8": np.int8, "U8": np.uint8,
    "BOOL": np.bool_, "F8_E4M3": np.uint8, "F8_E5M2": np.uint8,
}  # fmt: skip
ST_DTYPES = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16", np.dtype(np.int32): "I32",
             np.dtype(np.int64): "I64", np.dtype(np.float64): "F64", np.dtype(np.int16): "I16",
             np.dtype(np.int8): "I8", np.dtype(np.uint8): "U8", np.dtype(np.bool_): "BOOL"}  # fmt: skip


class StTensor:
    """One stored tensor: its safetensors dtype name and its data as a numpy array (memory-mapped)."""

    __slots__ = ("dtype", "array")

    def __init__(self, dtype: str, array: np.ndarray):
        self.dtype = dtype
        self.array = array

    def as_float32(self) -> np.ndarray:
        """The values as float32 (exact for F16, BF16 and F32)."""
        if self.dtype == "BF16":
            return (self.array.astype(np.uint32) << 16).view(np.float32)
        return self.array.astype(np.float32)


def read_tensors(path: Path) -> tuple[dict[str, StTensor], dict[str, str]]:
    """All tensors of one file (memory-mapped, nothing copied yet) and its `__metadata__`."""
    try:
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
    except (OSError, struct.error, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: not a readable safetensors file ({type(e).__name__})") from None
    metadata = header.pop("__metadata__", None) or {}
    size = path.stat().st_size
    raw = np.memmap(path, dtype=np.uint8, mode="r") if size > 8 + n else np.zeros(0, np.uint8)
    out: dict[str, StTensor] = {}
    for name, info in header.items():
        dtype = info["dtype"]
        if dtype not in NP_DTYPES:
            raise InputError(f"{path}: tensor {name} has unsupported dtype {dtype}")
        start, end = info["data_offsets"]
        buf = raw[8 + n + start : 8 + n + end]
        out[name] = StTensor(dtype, buf.view(NP_DTYPES[dtype]).reshape(info["shape"]))
    return out, metadata


def write_tensors(
    path: Path, tensors: Iterable[tuple[str, str, np.ndarray]], metadata: dict[str, str] | None = None
) -> None:
    """Write (name, safetensors dtype, array) triples; arrays are written little-endian, C order."""
    items = [(name, dtype, np.ascontiguousarray(a)) for name, dtype, a in tensors]
    header: dict[str, Any] = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    offset = 0
    for name, dtype, a in items:
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
    blob = json.dumps(header, separators=(",", ":")).encode("utf-8")
    blob += b" " * (-len(blob) % 8)  # the data section starts 8-byte aligned, as safetensors writes it
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for _, _, a in items:
            f.write(a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes())
