"""Drafter dtype cast: bf16 → fp16 values exact, out-of-range weights refused by name, atomic output."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from specq.pipeline.convert import cast_drafter
from specq.pipeline.convert.st_io import read_tensors, write_tensors
from specq.pipeline.errors import InputError


def bf16(x: np.ndarray) -> np.ndarray:
    return (x.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)


def test_bf16_to_fp16_copy(make_draft, tmp_path: Path) -> None:
    src = make_draft("dflash", dtype="bfloat16")
    res = cast_drafter(src, tmp_path / "fp16")
    t, _ = read_tensors(tmp_path / "fp16" / "model.safetensors")
    s, _ = read_tensors(src / "model.safetensors")
    assert t["norm.weight"].dtype == "F16"
    assert np.array_equal(t["norm.weight"].array.astype(np.float32), s["norm.weight"].as_float32())
    cfg = json.loads((tmp_path / "fp16" / "config.json").read_text())
    assert cfg["dtype"] == "float16" and cfg["architectures"] == ["DFlashDraftModel"]
    assert (tmp_path / "fp16" / "tokenizer.json").is_file()
    assert res.tensors_cast == 1


def test_out_of_range_refused_naming_tensor(make_draft, tmp_path: Path) -> None:
    src = make_draft("dflash")
    big = np.ones(8, np.float32)
    big[3] = 1e6
    write_tensors(src / "model-00002.safetensors", [("layers.0.mlp.down_proj.weight", "BF16", bf16(big))])
    with pytest.raises(InputError, match=r"layers\.0\.mlp\.down_proj\.weight has \|value\| 9\.9\d+e\+05"):
        cast_drafter(src, tmp_path / "fp16")
    assert not (tmp_path / "fp16").exists()


def test_fp16_to_bf16_round_trip(make_draft, tmp_path: Path) -> None:
    src = make_draft("dflash")
    cast_drafter(src, tmp_path / "a", "float16")
    cast_drafter(tmp_path / "a", tmp_path / "b", "bfloat16")
    a, _ = read_tensors(src / "model.safetensors")
    b, _ = read_tensors(tmp_path / "b" / "model.safetensors")
    assert np.array_equal(a["norm.weight"].array, b["norm.weight"].array)  # bf16 → fp16 → bf16 is exact here
