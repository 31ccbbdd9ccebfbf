"""Synthetic checkpoints for the convert unit tests, written with numpy only (milliseconds each): a Qwen3
config and the GPTQ/AWQ/compressed-tensors tensors of a few linears with random 4-bit codes."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from specq.pipeline.convert.st_io import write_tensors

HIDDEN, INTER, LAYERS, VOCAB = 128, 256, 2, 512
LINEARS = {  # name: (in, out)
    "self_attn.q_proj": (HIDDEN, HIDDEN),
    "self_attn.k_proj": (HIDDEN, 128),
    "mlp.down_proj": (INTER, HIDDEN),
}


def qwen3_config(**extra: Any) -> dict[str, Any]:
    cfg = {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": HIDDEN,
        "intermediate_size": INTER, "num_hidden_layers": LAYERS, "num_attention_heads": 2,
        "num_key_value_heads": 2, "head_dim": 64, "vocab_size": VOCAB, "dtype": "bfloat16",
    }  # fmt: skip
    cfg.update(extra)
    return cfg


def pack_rows_seq(codes: np.ndarray) -> np.ndarray:
    """[K, N] → [K/8, N]: row 8r + j into bits 4j (GPTQ qweight)."""
    k, n = codes.shape
    c = codes.reshape(k // 8, 8, n).astype(np.uint32)
    return sum(c[:, j, :] << np.uint32(4 * j) for j in range(8)).astype(np.uint32).view(np.int32)


def pack_cols_seq(vals: np.ndarray) -> np.ndarray:
    """[R, N] → [R, N/8]: column 8c + j into bits 4j (GPTQ qzeros, compressed-tensors weight_packed)."""
    r, n = vals.shape
    c = vals.reshape(r, n // 8, 8).astype(np.uint32)
    return sum(c[:, :, j] << np.uint32(4 * j) for j in range(8)).astype(np.uint32).view(np.int32)


def gptq_tensors(rng: np.random.Generator, k: int, n: int, g: int, zero: int = 8) -> dict[str, np.ndarray]:
    codes = rng.integers(0, 16, size=(k, n), dtype=np.uint8)
    return {
        "qweight": pack_rows_seq(codes),
        "qzeros": pack_cols_seq(np.full((k // g, n), zero - 1, dtype=np.uint8)),  # v1 stores zero - 1
        "scales": (rng.random((k // g, n), dtype=np.float32) * 0.02 + 0.001).astype(np.float16),
        "g_idx": (np.arange(k) // g).astype(np.int32),
    }


@pytest.fixture
def make_ckpt(tmp_path: Path) -> Callable[..., Path]:
    """make_ckpt(kind="gptq"|"awq"|"ct"|"hf", group=128, name=..., config=..., drop=..., zero=8,
    linears={name: (in, out)}) -> dir."""
    counter = iter(range(1000))

    def make(
        kind: str = "gptq",
        group: int = 128,
        name: str | None = None,
        config: dict[str, Any] | None = None,
        qconfig: dict[str, Any] | None = None,
        drop: tuple[str, ...] = (),
        zero: int = 8,
        seed: int = 0,
        linears: dict[str, tuple[int, int]] | None = None,
    ) -> Path:
        rng = np.random.default_rng(seed)
        d = tmp_path / (name or f"{kind}-{next(counter)}")
        d.mkdir()
        items: list[tuple[str, str, np.ndarray]] = [
            ("model.embed_tokens.weight", "F16", rng.standard_normal((VOCAB, HIDDEN)).astype(np.float16)),
            ("model.norm.weight", "F16", np.ones(HIDDEN, np.float16)),
            ("lm_head.weight", "F16", rng.standard_normal((VOCAB, HIDDEN)).astype(np.float16)),
        ]
        for layer in range(LAYERS):
            for lin, (k, n) in (linears or LINEARS).items():
                p = f"model.layers.{layer}.{lin}"
                if kind == "hf":
                    items.append((f"{p}.weight", "F16", rng.standard_normal((n, k)).astype(np.float16)))
                    continue
                t = gptq_tensors(rng, k, n, group, zero)
                if kind == "awq":
                    from specq.pipeline.convert.repack import pack_cols_awq, unpack_rows

                    codes = unpack_rows(t["qweight"])
                    t = {
                        "qweight": pack_cols_awq(codes),
                        "qzeros": pack_cols_awq(np.full((k // group, n), zero, np.uint8)),
                        "scales": t["scales"],
                    }
                elif kind == "ct":
                    codes = rng.integers(0, 16, size=(n, k), dtype=np.uint8)
                    t = {
                        "weight_packed": pack_cols_seq(codes),
                        "weight_scale": t["scales"].T.copy(),
                        "weight_shape": np.array([n, k], np.int64),
                    }
                for suffix, arr in t.items():
                    if suffix in drop:
                        continue
                    dt = {np.dtype(np.int32): "I32", np.dtype(np.float16): "F16", np.dtype(np.int64): "I64"}
                    items.append((f"{p}.{suffix}", dt[arr.dtype], arr))
        write_tensors(d / "model.safetensors", items, {"format": "pt"})
        # a tokenizer that parses: readiness requires one (checkpoint_problems)
        (d / "tokenizer.json").write_text(
            json.dumps(
                {"version": "1.0", "model": {"type": "WordLevel", "vocab": {"a": 0}, "unk_token": "a"}}
            )
        )
        cfg = qwen3_config(**(config or {}))
        if kind == "gptq":
            q = {"quant_method": "gptq", "bits": 4, "group_size": group, "sym": True, "desc_act": False,
                 "checkpoint_format": "gptq"}  # fmt: skip
        elif kind == "awq":
            q = {"quant_method": "awq", "bits": 4, "group_size": group, "zero_point": True, "version": "gemm"}
        elif kind == "ct":
            q = {"quant_method": "compressed-tensors", "format": "pack-quantized",
                 "config_groups": {"group_0": {"format": "pack-quantized", "targets": ["Linear"],
                     "weights": {"num_bits": 4, "type": "int", "symmetric": True, "group_size": group,
                                 "strategy": "group"}}}}  # fmt: skip
        else:
            q = {}
        if q:
            q.update(qconfig or {})
            cfg["quantization_config"] = q
        (d / "config.json").write_text(json.dumps(cfg))
        (d / "tokenizer.json").write_text(
            json.dumps({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": []}})
        )
        return d

    return make


@pytest.fixture
def make_draft(tmp_path: Path) -> Callable[..., Path]:
    """A DFlash (or other) drafter checkpoint: config plus one bf16 tensor."""

    def make(kind: str = "dflash", name: str = "draft", dtype: str = "bfloat16", **cfg: Any) -> Path:
        d = tmp_path / name
        d.mkdir()
        archs = {
            "dflash": ["DFlashDraftModel"],
            "eagle3": ["Eagle3LlamaForCausalLM"],
            "model": ["Qwen3ForCausalLM"],
        }
        config: dict[str, Any] = {"architectures": archs[kind], "model_type": "qwen3", "hidden_size": HIDDEN,
                                  "num_hidden_layers": 1, "vocab_size": VOCAB, "dtype": dtype}  # fmt: skip
        if kind == "dflash":
            config["num_target_layers"] = LAYERS
            config["dflash_config"] = {"block_size": 8, "mask_token_id": 3, "target_layer_ids": [0]}
        for key, value in cfg.items():
            if key == "dflash_config":
                config["dflash_config"].update(value)
            else:
                config[key] = value
        (d / "config.json").write_text(json.dumps(config))
        bits = (np.linspace(-2, 2, HIDDEN, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)
        write_tensors(d / "model.safetensors", [("norm.weight", "BF16", bits)])
        (d / "tokenizer.json").write_text(
            json.dumps({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": []}})
        )
        return d

    return make
