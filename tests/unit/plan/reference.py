"""The reference case on paper: Qwen3.5-27B AWQ 4-bit + its DFlash drafter on a 24 GB card (docs/plan.md says
where every number comes from). Config-only directories: the planner estimates weights from the config."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

QWEN35_27B_TEXT: dict[str, Any] = {
    "model_type": "qwen3_5_text",
    "hidden_size": 5120,
    "intermediate_size": 17408,
    "num_hidden_layers": 64,
    "num_attention_heads": 24,
    "num_key_value_heads": 4,
    "head_dim": 256,
    "vocab_size": 248320,
    "full_attention_interval": 4,
    "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"] * 16,
    "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_num_key_heads": 16,
    "linear_num_value_heads": 48,
    "attn_output_gate": True,
    "attention_bias": False,
    "tie_word_embeddings": False,
    "mtp_num_hidden_layers": 1,
    "max_position_embeddings": 262144,
    "rms_norm_eps": 1e-6,
}
QWEN35_27B_VISION: dict[str, Any] = {
    "depth": 27,
    "hidden_size": 1152,
    "intermediate_size": 4304,
    "in_channels": 3,
    "num_heads": 16,
    "num_position_embeddings": 2304,
    "out_hidden_size": 5120,
    "patch_size": 16,
    "spatial_merge_size": 2,
    "temporal_patch_size": 2,
}
AWQ_CONFIG: dict[str, Any] = {
    "quant_method": "awq",
    "bits": 4,
    "group_size": 128,
    "zero_point": True,
    "version": "gemm",
    "modules_to_not_convert": ["visual"],
}
QWEN35_27B_DFLASH: dict[str, Any] = {
    "architectures": ["DFlashDraftModel"],
    "model_type": "qwen3",
    "hidden_size": 5120,
    "intermediate_size": 17408,
    "num_hidden_layers": 5,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 248320,
    "num_target_layers": 64,
    "block_size": 16,
    "dflash_config": {"block_size": 16, "mask_token_id": 248070, "target_layer_ids": [1, 16, 31, 46, 61]},
    "layer_types": ["full_attention"] * 5,
    "torch_dtype": "float16",
}


def write_reference(root: Path, draft_layers: int = 5) -> tuple[Path, Path]:
    """Write config-only target (AWQ) and drafter directories under `root`; return their paths. The public
    drafter has 5 layers; `draft_layers` writes one of the same shape with fewer (the 24 GiB preset's)."""
    target = root / "qwen3.5-27b-awq"
    draft = root / ("qwen3.5-27b-dflash-fp16" if draft_layers == 5 else f"qwen3.5-27b-dflash-{draft_layers}l")
    target.mkdir(parents=True, exist_ok=True)
    draft.mkdir(parents=True, exist_ok=True)
    cfg = {
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "model_type": "qwen3_5",
        "torch_dtype": "float16",
        "tie_word_embeddings": False,
        "text_config": QWEN35_27B_TEXT,
        "vision_config": QWEN35_27B_VISION,
        "quantization_config": AWQ_CONFIG,
    }
    (target / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
    drafter = {
        **QWEN35_27B_DFLASH,
        "num_hidden_layers": draft_layers,
        "layer_types": ["full_attention"] * draft_layers,
    }
    (draft / "config.json").write_text(json.dumps(drafter), encoding="utf-8")
    return target, draft
