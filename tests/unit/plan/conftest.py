"""Small real checkpoints for the planner: tiny Qwen3 and Qwen3.5 (hybrid) models saved by transformers, and
quantized layouts written with safetensors.numpy (int32-packed codes, fp16 scales, packed zeros)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from safetensors.numpy import save_file


def config_only_copy(src: Path, dest: Path) -> Path:
    """The same config.json without weights: the planner must estimate from the config."""
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy(src / "config.json", dest / "config.json")
    return dest


@pytest.fixture(scope="session")
def hf_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Tiny fp16 models saved by transformers itself (real tensor names and shapes)."""
    pytest.importorskip("transformers")
    import torch
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig, Qwen3Config, Qwen3ForCausalLM

    root = tmp_path_factory.mktemp("hf")
    torch.manual_seed(0)
    qwen3 = Qwen3ForCausalLM(
        Qwen3Config(
            hidden_size=64, intermediate_size=160, num_hidden_layers=3, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, vocab_size=320, tie_word_embeddings=False,
        )
    ).half()  # fmt: skip
    qwen3.save_pretrained(root / "qwen3")
    hybrid = Qwen3_5ForCausalLM(
        Qwen3_5TextConfig(
            hidden_size=64, intermediate_size=128, num_hidden_layers=8, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, vocab_size=256, linear_conv_kernel_dim=4,
            linear_key_head_dim=8, linear_value_head_dim=8, linear_num_key_heads=2, linear_num_value_heads=4,
            full_attention_interval=4, tie_word_embeddings=False,
        )
    ).half()  # fmt: skip
    hybrid.save_pretrained(root / "qwen3_5")
    return {"qwen3": root / "qwen3", "qwen3_5": root / "qwen3_5"}


SMALL: dict[str, Any] = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "vocab_size": 1000,
    "tie_word_embeddings": False,
    "torch_dtype": "float16",
}


def _linears(cfg: dict[str, Any]) -> list[tuple[str, int, int]]:
    h, i = cfg["hidden_size"], cfg["intermediate_size"]
    q = cfg["num_attention_heads"] * cfg["head_dim"]
    kv = cfg["num_key_value_heads"] * cfg["head_dim"]
    out = []
    for n in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{n}"
        a, m = f"{p}.self_attn", f"{p}.mlp"
        out += [
            (f"{a}.q_proj", h, q), (f"{a}.k_proj", h, kv), (f"{a}.v_proj", h, kv), (f"{a}.o_proj", q, h),
            (f"{m}.gate_proj", h, i), (f"{m}.up_proj", h, i), (f"{m}.down_proj", i, h),
        ]  # fmt: skip
    return out


def write_quantized(root: Path, method: str, group: int = 128) -> Path:
    """A 2-layer Qwen3 in the AWQ (gemm) or GPTQ on-disk layout: every decoder linear packed 4-bit."""
    cfg = dict(SMALL)
    cfg["quantization_config"] = (
        {"quant_method": "awq", "bits": 4, "group_size": group, "zero_point": True, "version": "gemm"}
        if method == "awq"
        else {"quant_method": "gptq", "bits": 4, "group_size": group, "desc_act": False, "sym": True}
    )
    h, hd = cfg["hidden_size"], cfg["head_dim"]
    t: dict[str, np.ndarray] = {
        "model.embed_tokens.weight": np.zeros((cfg["vocab_size"], h), np.float16),
        "lm_head.weight": np.zeros((cfg["vocab_size"], h), np.float16),
        "model.norm.weight": np.zeros((h,), np.float16),
    }
    for n in range(cfg["num_hidden_layers"]):
        for norm in ("input_layernorm", "post_attention_layernorm"):
            t[f"model.layers.{n}.{norm}.weight"] = np.zeros((h,), np.float16)
        for norm in ("q_norm", "k_norm"):
            t[f"model.layers.{n}.self_attn.{norm}.weight"] = np.zeros((hd,), np.float16)
    for name, in_f, out_f in _linears(cfg):
        g = in_f // group
        if method == "awq":
            t[f"{name}.qweight"] = np.zeros((in_f, out_f // 8), np.int32)
        else:
            t[f"{name}.qweight"] = np.zeros((in_f // 8, out_f), np.int32)
            t[f"{name}.g_idx"] = np.zeros((in_f,), np.int32)
        t[f"{name}.qzeros"] = np.zeros((g, out_f // 8), np.int32)
        t[f"{name}.scales"] = np.zeros((g, out_f), np.float16)
    d = root / f"small-{method}"
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(cfg))
    save_file(t, str(d / "model.safetensors"))
    return d
