"""`specq draft train --dtype auto`: the drafter is exported in the dtype the PyTorch engine will run its
target in (draft/export.py `resolve_dtype`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specq.pipeline.checkpoint import Checkpoint
from specq.pipeline.draft.export import resolve_dtype

AWQ = {"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemm"}


def _ckpt(tmp_path: Path, name: str, text: dict, quant: dict | None, dtype: str = "bfloat16") -> Checkpoint:
    d = tmp_path / name
    d.mkdir()
    cfg = {"architectures": ["X"], "torch_dtype": dtype, "text_config": text}
    if quant:
        cfg["quantization_config"] = quant
    (d / "config.json").write_text(json.dumps(cfg))
    return Checkpoint(d)


@pytest.mark.parametrize(
    ("layers", "quant", "dtype", "want"),
    [
        (["full_attention"], AWQ, "float16", "float16"),  # AWQ runs in fp16: a bf16 drafter would crash
        (["linear_attention", "full_attention"], AWQ, "float16", "bfloat16"),  # Qwen3.5 AWQ: bf16 (patch)
        (["full_attention"], None, "bfloat16", "bfloat16"),  # unquantized: the target's own dtype
        (["linear_attention", "full_attention"], None, "float32", "float32"),
    ],
)
def test_auto_follows_the_dtype_the_target_is_served_in(
    tmp_path: Path, layers: list[str], quant: dict | None, dtype: str, want: str
) -> None:
    ckpt = _ckpt(tmp_path, "t", {"layer_types": layers}, quant, dtype)
    assert resolve_dtype("auto", ckpt) == want
    assert resolve_dtype("float16", ckpt) == "float16"  # an explicit dtype is kept
