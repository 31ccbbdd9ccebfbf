"""pipeline/checkpoint.py on real safetensors files: headers, shards, quantization_config, drafter kinds,
damaged files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from specq.pipeline.checkpoint import Checkpoint, read_safetensors_header
from specq.pipeline.errors import InputError


def _dir(tmp_path: Path, config: dict, tensors: dict[str, np.ndarray] | None = None, name: str = "m") -> Path:
    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps(config))
    if tensors is not None:
        save_file(tensors, str(d / "model.safetensors"))
    return d


def test_header_dtypes_shapes_and_bytes(tmp_path: Path) -> None:
    d = _dir(
        tmp_path,
        {"architectures": ["Qwen3ForCausalLM"]},
        {
            "a": np.zeros((3, 4), np.float16),
            "b": np.zeros((5,), np.float32),
            "q": np.zeros((8, 2), np.int32),
            "i": np.zeros((2, 2), np.int8),
        },
    )
    t = Checkpoint(d).tensors
    assert (t["a"].dtype, t["a"].shape, t["a"].nbytes) == ("F16", [3, 4], 24)
    assert (t["b"].dtype, t["b"].nbytes) == ("F32", 20)
    assert (t["q"].dtype, t["q"].nbytes) == ("I32", 64)
    assert t["i"].nbytes == 4
    assert Checkpoint(d).weight_bytes == 24 + 20 + 64 + 4
    assert Checkpoint(d).has_weights


def test_sharded_directory_through_index(tmp_path: Path) -> None:
    d = tmp_path / "sharded"
    d.mkdir()
    (d / "config.json").write_text("{}")
    save_file({"x": np.zeros((4,), np.float16)}, str(d / "model-00001-of-00002.safetensors"))
    save_file({"y": np.zeros((6,), np.float16)}, str(d / "model-00002-of-00002.safetensors"))
    # A stray file not named by the index must not be counted.
    save_file({"z": np.zeros((100,), np.float16)}, str(d / "consolidated.safetensors"))
    index = {"weight_map": {"x": "model-00001-of-00002.safetensors", "y": "model-00002-of-00002.safetensors"}}
    (d / "model.safetensors.index.json").write_text(json.dumps(index))
    ck = Checkpoint(d)
    assert set(ck.tensors) == {"x", "y"}
    assert ck.weight_bytes == 20
    (d / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(InputError, match="missing"):
        _ = Checkpoint(d).tensors


def test_without_index_every_file_is_read(tmp_path: Path) -> None:
    d = _dir(tmp_path, {}, {"x": np.zeros((4,), np.float16)})
    save_file({"y": np.zeros((2,), np.float32)}, str(d / "more.safetensors"))
    assert set(Checkpoint(d).tensors) == {"x", "y"}


@pytest.mark.parametrize(
    "damage",
    ["truncate", "garbage", "huge_header", "empty"],
)
def test_damaged_file_is_input_error(tmp_path: Path, damage: str) -> None:
    d = _dir(tmp_path, {}, {"x": np.ones((64, 64), np.float32)})
    f = d / "model.safetensors"
    data = f.read_bytes()
    if damage == "truncate":
        f.write_bytes(data[: len(data) - 100])
    elif damage == "garbage":
        f.write_bytes(data[:8] + b"\xff" * (len(data) - 8))
    elif damage == "huge_header":
        f.write_bytes((2**40).to_bytes(8, "little") + data[8:])
    else:
        f.write_bytes(b"")
    with pytest.raises(InputError):
        read_safetensors_header(f)
    with pytest.raises(InputError):
        _ = Checkpoint(d).tensors


def test_no_weights_no_config_bad_json(tmp_path: Path) -> None:
    d = _dir(tmp_path, {"architectures": ["X"]})
    assert not Checkpoint(d).has_weights
    with pytest.raises(InputError, match="no .safetensors"):
        _ = Checkpoint(d).tensors
    with pytest.raises(InputError, match="no config.json"):
        Checkpoint(tmp_path)
    with pytest.raises(InputError, match="not a directory"):
        Checkpoint(tmp_path / "nope")
    (d / "config.json").write_text("{not json")
    with pytest.raises(InputError, match="not valid JSON"):
        Checkpoint(d)


def test_quantization_gptq(tmp_path: Path) -> None:
    q = {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False, "sym": True,
         "checkpoint_format": "gptq"}  # fmt: skip
    info = Checkpoint(_dir(tmp_path, {"quantization_config": q})).quantization
    assert info is not None
    assert (info.method, info.bits, info.group_size, info.sym, info.desc_act) == ("gptq", 4, 128, True, False)
    assert info.checkpoint_format == "gptq"


def test_quantization_awq_autoawq_names(tmp_path: Path) -> None:
    q = {"quant_method": "AWQ", "w_bit": 4, "q_group_size": 128, "zero_point": True, "version": "GEMM"}
    info = Checkpoint(_dir(tmp_path, {"quantization_config": q})).quantization
    assert info is not None
    assert (info.method, info.bits, info.group_size, info.zero_point, info.version) == (
        "awq",
        4,
        128,
        True,
        "gemm",
    )


def test_quantization_compressed_tensors(tmp_path: Path) -> None:
    q = {
        "quant_method": "compressed-tensors",
        "format": "pack-quantized",
        "config_groups": {
            "group_0": {
                "targets": ["Linear"],
                "weights": {"num_bits": 4, "group_size": 32, "symmetric": True, "actorder": None},
            }
        },
        "ignore": ["lm_head"],
    }
    info = Checkpoint(_dir(tmp_path, {"quantization_config": q})).quantization
    assert info is not None
    assert (info.method, info.bits, info.group_size, info.sym) == ("compressed-tensors", 4, 32, True)
    assert info.checkpoint_format == "pack-quantized"
    assert info.desc_act is None


def test_quantization_nested_in_text_config_and_absent(tmp_path: Path) -> None:
    nested = {"text_config": {"quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 64}}}
    info = Checkpoint(_dir(tmp_path, nested, name="a")).quantization
    assert info is not None and info.group_size == 64
    assert Checkpoint(_dir(tmp_path, {}, name="b")).quantization is None


@pytest.mark.parametrize(
    ("config", "kind"),
    [
        ({"architectures": ["DFlashDraftModel"]}, "dflash"),
        ({"architectures": ["Qwen3ForCausalLM"], "dflash_config": {"block_size": 8}}, "dflash"),
        ({"architectures": ["Eagle3LlamaForCausalLM"]}, "eagle3"),
        ({"architectures": ["LlamaForCausalLMEagle"]}, "eagle"),
        ({"architectures": ["Qwen3ForCausalLM"]}, "model"),
        ({"architectures": ["SomethingElse"]}, "unknown"),
        ({}, "unknown"),
    ],
)
def test_draft_kind(tmp_path: Path, config: dict, kind: str) -> None:
    assert Checkpoint(_dir(tmp_path, config)).draft_kind == kind


def test_text_config_of_multimodal(tmp_path: Path) -> None:
    ck = Checkpoint(_dir(tmp_path, {"text_config": {"hidden_size": 8}, "vision_config": {}}))
    assert ck.text_config == {"hidden_size": 8}


def test_dtype_from_config_else_from_the_weights(tmp_path: Path) -> None:
    weights = {"a": np.zeros(4, np.float16), "b": np.zeros(4, np.float16), "c": np.zeros(4, np.float32)}
    said = _dir(tmp_path, {"torch_dtype": "bfloat16"}, weights, name="said")
    unsaid = _dir(tmp_path, {"architectures": ["X"]}, weights, name="unsaid")
    config_only = _dir(tmp_path, {"architectures": ["X"]}, name="config-only")
    assert Checkpoint(said).torch_dtype == "bfloat16"  # the config wins
    assert Checkpoint(unsaid).torch_dtype == "float16"  # most tensors are F16
    assert Checkpoint(config_only).torch_dtype is None
