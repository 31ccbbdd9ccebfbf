"""engines.pytorch.auto_dtype, the one mirror of LMDeploy 0.18's `_update_torch_dtype` under --dtype auto, on
real checkpoint directories (config.json and a safetensors header)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from specq.pipeline.checkpoint import Checkpoint
from specq.pipeline.engines.pytorch import auto_dtype

BASE = {
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 256,
    "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 64, "vocab_size": 1024,
}  # fmt: skip
AWQ = {"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemm", "zero_point": True}
CT = {"quant_method": "compressed-tensors", "format": "pack-quantized"}


def _ckpt(path: Path, tensor_dtype: str = "BF16", **config: object) -> Checkpoint:
    path.mkdir()
    (path / "config.json").write_text(json.dumps({**BASE, **config}))
    header = json.dumps(
        {"model.norm.weight": {"dtype": tensor_dtype, "shape": [256], "data_offsets": [0, 512]}}
    )
    (path / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header.encode() + bytes(512))
    return Checkpoint(path)


@pytest.mark.parametrize(
    ("config", "want"),
    [
        ({"torch_dtype": "bfloat16"}, "bfloat16"),
        ({"dtype": "float16"}, "float16"),
        ({"torch_dtype": "float32"}, "float16"),  # LMDeploy's fallback: it has no fp32 path
        ({"torch_dtype": "bfloat16", "quantization_config": AWQ}, "float16"),  # AWQ is forced to fp16
        ({"torch_dtype": "bfloat16", "quantization_config": CT}, "bfloat16"),  # compressed-tensors is not
    ],
)
def test_auto_dtype_follows_lmdeploys_rule(tmp_path: Path, config: dict, want: str) -> None:
    dtype, why = auto_dtype(_ckpt(tmp_path / "m", **config))
    assert dtype == want and why


def test_auto_dtype_reads_the_config_not_the_tensors(tmp_path: Path) -> None:
    """Without a dtype in config.json LMDeploy takes fp16, whatever the tensors are; specq's own
    Checkpoint.torch_dtype guesses from the tensors, which is not what the engine does."""
    ckpt = _ckpt(tmp_path / "m")
    assert ckpt.torch_dtype == "bfloat16"
    assert auto_dtype(ckpt) == ("float16", "config dtype unset: LMDeploy runs it in fp16 (its fallback)")
