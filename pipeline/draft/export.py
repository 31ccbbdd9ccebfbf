"""Write a trained drafter in LMDeploy 0.18's DFlash checkpoint layout: `config.json` with exactly the
contract's fields (`contract.CONFIG_FIELDS`) and `model.safetensors` with exactly the contract's tensor
names, in one dtype. The caller writes into an `atomic_dir`, so a failed export leaves nothing behind."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..checkpoint import Checkpoint
from . import contract

DTYPES = ("float16", "bfloat16", "float32")


def drafter_config(
    target: Checkpoint,
    *,
    layers: int,
    block_size: int,
    mask_token_id: int,
    target_layer_ids: list[int],
) -> dict[str, Any]:
    """The drafter's config.json: shapes from the target (hidden size must equal the target's, since the
    drafter shares its embeddings and lm_head), plus the DFlash fields."""
    tc = target.text_config
    heads = int(tc["num_attention_heads"])
    rope_theta = tc.get("rope_theta") or (tc.get("rope_parameters") or {}).get("rope_theta") or 10000.0
    cfg: dict[str, Any] = {
        "architectures": [contract.ARCHITECTURE],
        "model_type": "qwen3",
        "hidden_size": int(tc["hidden_size"]),
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": int(tc.get("num_key_value_heads") or heads),
        "head_dim": int(tc.get("head_dim") or tc["hidden_size"] // heads),
        "intermediate_size": int(tc["intermediate_size"]),
        "rms_norm_eps": float(tc.get("rms_norm_eps") or 1e-6),
        "rope_theta": float(rope_theta),
        "max_position_embeddings": int(tc.get("max_position_embeddings") or 4096),
        "vocab_size": int(tc["vocab_size"]),
        "layer_types": ["full_attention"] * layers,
        "use_sliding_window": False,
        "num_target_layers": int(tc["num_hidden_layers"]),
        "target_hidden_size": int(tc["hidden_size"]),
        "dflash_config": {
            "block_size": block_size,
            "mask_token_id": mask_token_id,
            "target_layer_ids": list(target_layer_ids),
        },
    }
    assert tuple(cfg) == contract.CONFIG_FIELDS
    return cfg


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
