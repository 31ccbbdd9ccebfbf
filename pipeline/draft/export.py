"""Write a trained drafter in LMDeploy 0.18's DFlash checkpoint layout: `config.json` with exactly the
contract's fields (`contract.dflash_config`) and `model.safetensors` with exactly the contract's tensor
names, in one dtype. The caller writes into an `atomic_dir`, so a failed export leaves nothing behind."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..checkpoint import Checkpoint
from . import contract

DTYPES = ("float16", "bfloat16", "float32")


def resolve_dtype(requested: str, target: Checkpoint) -> str:
    """`auto`: for a quantized target the dtype the PyTorch engine runs it in (fp16 for AWQ, where a bf16
    drafter crashes; bf16 for a Gated DeltaNet target such as Qwen3.5, which specq serves in bf16 through
    its LMDeploy compatibility patch), else the target's own dtype."""
    from ..engines.qwen35 import serve_dtype

    if requested != "auto":
        return requested
    if target.quantization is not None:
        return serve_dtype(target) or "float16"
    dt = str(target.torch_dtype or "float32").replace("torch.", "")
    return dt if dt in DTYPES else "float32"


def write_checkpoint(out: Path, config: dict[str, Any], state_dict: dict[str, Any], dtype: str) -> None:
    """config.json + model.safetensors into `out` (an existing, empty directory)."""
    import torch
    from safetensors.torch import save_file

    want = contract.expected_tensors(config)
    if set(state_dict) != set(want):
        raise AssertionError(f"drafter tensors {sorted(set(state_dict) ^ set(want))} break the contract")
    tdtype = getattr(torch, dtype)
    tensors = {k: v.detach().to("cpu", tdtype).contiguous() for k, v in sorted(state_dict.items())}
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    config = {**config, **dict.fromkeys(contract.DTYPE_FIELDS, dtype)}
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
