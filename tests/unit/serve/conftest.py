"""Checkpoint directories made of config.json (+ tokenizer.json, + safetensors headers where a test needs
them): enough for argument building and compatibility checks, which never load weights."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest

QWEN3 = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "vocab_size": 1024,
    "torch_dtype": "bfloat16",
}


def write_ckpt(
    path: Path,
    config: dict[str, Any],
    vocab: dict[str, int] | None = None,
    tensors: dict[str, tuple[str, list[int]]] | None = None,
) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config))
    if vocab is not None:
        (path / "tokenizer.json").write_text(
            json.dumps({"model": {"type": "BPE", "vocab": vocab, "merges": []}})
        )
    if tensors:
        header: dict[str, Any] = {}
        offset = 0
        for name, (dtype, shape) in tensors.items():
            n = {"I32": 4, "F32": 4}.get(dtype, 2)
            for d in shape:
                n *= d
            header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
            offset += n
        raw = json.dumps(header).encode()
        (path / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * offset)
    return path


VOCAB = {f"t{i}": i for i in range(16)}


def quantized_tensors(method: str) -> dict[str, tuple[str, list[int]]]:
    """Headers of one 4-bit, group-128 linear layer (256 → 256) in the GPTQ or AWQ layout."""
    layers: dict[str, tuple[str, list[int]]] = {}
    for i in range(QWEN3["num_hidden_layers"]):  # every layer: a checkpoint missing one is refused
        p = f"model.layers.{i}.self_attn.q_proj."
        if method == "gptq":
            layers |= {p + "qweight": ("I32", [32, 256]), p + "qzeros": ("I32", [2, 32]),
                       p + "scales": ("F16", [2, 256]), p + "g_idx": ("I32", [256])}  # fmt: skip
        else:
            layers |= {
                p + "qweight": ("I32", [256, 32]),
                p + "qzeros": ("I32", [2, 32]),
                p + "scales": ("F16", [2, 256]),
            }
    head = {"model.norm.weight": ("F16", [256]), "lm_head.weight": ("F16", [1024, 256])}
    return {"model.embed_tokens.weight": ("F16", [1024, 256]), **layers, **head}


@pytest.fixture
def ckpts(tmp_path: Path) -> dict[str, Path]:
    """A zoo: plain bf16 target, AWQ and GPTQ targets, DFlash/EAGLE-3 drafters, plain drafts."""
    awq_q = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"}
    gptq_q = {"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": True, "desc_act": False}
    dflash = {
        "architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": 256,
        "num_hidden_layers": 1, "vocab_size": 1024, "num_target_layers": 4, "torch_dtype": "bfloat16",
        "dflash_config": {"block_size": 8, "mask_token_id": 5, "target_layer_ids": [2]},
    }  # fmt: skip
    return {
        "target": write_ckpt(tmp_path / "target", QWEN3, VOCAB),
        "awq": write_ckpt(
            tmp_path / "awq",
            {**QWEN3, "quantization_config": awq_q, "torch_dtype": "float16"},
            VOCAB,
            tensors=quantized_tensors("awq"),
        ),
        "gptq": write_ckpt(
            tmp_path / "gptq",
            {**QWEN3, "quantization_config": gptq_q},
            VOCAB,
            tensors=quantized_tensors("gptq"),
        ),
        "dflash": write_ckpt(
            tmp_path / "dflash",
            dflash,
            tensors={"fc.weight": ("BF16", [256, 256]), "layers.0.mlp.up_proj.weight": ("BF16", [512, 256])},
        ),
        "eagle3": write_ckpt(
            tmp_path / "eagle3",
            {
                "architectures": ["Eagle3LlamaForCausalLM"],
                "hidden_size": 256,
                "num_hidden_layers": 1,
                "vocab_size": 1024,
            },
        ),  # fmt: skip
        "draft": write_ckpt(tmp_path / "draft", {**QWEN3, "num_hidden_layers": 1}, VOCAB),
        "other_tok": write_ckpt(
            tmp_path / "other_tok", {**QWEN3, "num_hidden_layers": 1}, {**VOCAB, "t0": 99, "x": 0}
        ),
    }
