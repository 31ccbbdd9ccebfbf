"""Generating a twin's tensors straight into safetensors shards (torch): one generator on the device (CUDA's
Philox when there is a GPU), each tensor moved to the host as it is made and each shard written as soon as
it is full, so the host never holds more than one shard (a 27B model is never in memory)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..progress import Progress
from .spec import STD, TensorSpec

SHARD_BYTES = 2 * 2**30


def plan_shards(tensors: list[TensorSpec], shard_bytes: int = SHARD_BYTES) -> list[list[TensorSpec]]:
    """Consecutive tensors grouped into shards of at most `shard_bytes` (a bigger tensor gets its own)."""
    shards: list[list[TensorSpec]] = [[]]
    size = 0
    for t in tensors:
        if shards[-1] and size + t.nbytes > shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(t)
        size += t.nbytes
    return [s for s in shards if s]


def shard_names(n: int) -> list[str]:
    if n == 1:
        return ["model.safetensors"]
    return [f"model-{i + 1:05d}-of-{n:05d}.safetensors" for i in range(n)]


def _fill(t: TensorSpec, gen: Any, device: str) -> Any:
    import torch

    dtypes = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32, "I32": torch.int32,
              "I64": torch.int64, "BOOL": torch.bool}  # fmt: skip
    dtype = dtypes[t.dtype]
    shape = t.shape
    if t.init == "normal":
        return torch.empty(shape, dtype=dtype, device=device).normal_(0.0, STD, generator=gen)
    if t.init == "ones":
        return torch.ones(shape, dtype=dtype, device=device)
    if t.init == "zeros":
        return torch.zeros(shape, dtype=dtype, device=device)
    if t.init == "a_log":  # Gated DeltaNet decay: A ~ U(1, 16), stored as log A (transformers' init)
        a = torch.empty(shape, dtype=torch.float32, device=device).uniform_(1.0, 16.0, generator=gen)
        return a.log().to(dtype)
    if t.init == "int4":  # 8 random 4-bit codes per int32: random bytes viewed as int32
        b = torch.randint(0, 256, (t.numel * 4,), dtype=torch.uint8, device=device, generator=gen)
        return b.view(torch.int32).view(shape)
    if t.init == "scales":  # |w| = |q - z| · s ≲ 0.03: the scale of a normal(0, 0.02) weight's group
        return torch.empty(shape, dtype=dtype, device=device).uniform_(0.001, 0.003, generator=gen)
    if t.init in ("d2t", "t2d"):  # EAGLE-3: offset 0 (draft id i is target id i); t2d set by the caller
        return torch.zeros(shape, dtype=dtype, device=device)
    raise AssertionError(f"unknown init {t.init}")


def write_shards(
    tensors: list[TensorSpec],
    out: Path,
    *,
    device: str,
    seed: int,
    progress: Progress,
    shard_bytes: int = SHARD_BYTES,
    t2d_true: int | None = None,
    marker: str = "",
) -> list[str]:
    """Generate `tensors` into safetensors shards in `out` (+ `model.safetensors.index.json` when more than
    one); returns the file names. `marker` goes into every shard's metadata (`specq_twin`) and the index's."""
    import torch
    from safetensors.torch import save_file

    gen = torch.Generator(device=device).manual_seed(seed)
    shards = plan_shards(tensors, shard_bytes)
    names = shard_names(len(shards))
    weight_map: dict[str, str] = {}
    total = 0
    for name, shard in zip(names, shards, strict=True):
        data: dict[str, Any] = {}
        for t in shard:
            x = _fill(t, gen, device)
            if t.init == "t2d" and t2d_true:
                x[:t2d_true] = True
            data[t.name] = x.to("cpu").contiguous()
            weight_map[t.name] = name
            total += t.nbytes
        save_file(data, str(out / name), metadata={"format": "pt", "specq_twin": marker})
        del data
        progress(f"wrote {name} ({sum(t.nbytes for t in shard) / 2**30:.2f} GiB, {len(shard)} tensors)")
    if len(names) > 1:
        index = {"metadata": {"total_size": total, "specq_twin": marker}, "weight_map": weight_map}
        (out / "model.safetensors.index.json").write_text(
            json.dumps(index, indent=2) + "\n", encoding="utf-8"
        )
    return names
