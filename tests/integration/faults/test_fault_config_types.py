"""Wrong-typed and damaged values inside a checkpoint that parses: a string where an integer belongs, a list
where an object belongs, a dtype safetensors does not define, sizes the weights contradict, a tokenizer that
does not load, a config.json that is not UTF-8. Each is refused up front with exit 2 and one line naming the
file and the key, by every command that reads the checkpoint, and nothing is called ready or written."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from .conftest import assert_one_line

pytestmark = pytest.mark.integration
ST = "model.safetensors"


def _set(d: Path, **changes: object) -> None:
    cfg = json.loads((d / "config.json").read_text())
    cfg.update(changes)
    (d / "config.json").write_text(json.dumps(cfg))


def _args(command: str, model: Path, tmp: Path) -> list[str | Path]:
    return {
        "convert": ["convert", model],
        "plan": ["plan", model, "--gpu-memory", "24GiB"],
        "serve --dry-run": ["serve", model, "--engine", "embedded", "--dry-run"],
    }[command]


WRONG_TYPES: list[tuple[str, object, str]] = [
    ("hidden_size", "128", "'hidden_size' must be a positive integer, not a string"),
    ("num_hidden_layers", [2], "'num_hidden_layers' must be a positive integer, not a list"),
    ("vocab_size", 2048.5, "'vocab_size' must be a positive integer"),
    ("head_dim", True, "'head_dim' must be a positive integer, not a boolean"),
    ("max_position_embeddings", "big", "'max_position_embeddings' must be a positive integer"),
    ("quantization_config", [1], "'quantization_config' must be an object, not a list"),
    ("quantization_config", {"quant_method": "gptq", "bits": "four"}, "'quantization_config.bits'"),
    (
        "quantization_config",
        {"quant_method": ["gptq"]},
        "'quantization_config.quant_method' must be a string",
    ),
    ("quantization_config", {"quant_method": "gptq", "bits": 4, "group_size": "128"}, "group_size"),
    ("text_config", [1], "'text_config' must be an object"),
    ("text_config", {"hidden_size": "64"}, "'text_config.hidden_size'"),
    ("architectures", "Qwen3ForCausalLM", "'architectures' must be a list of strings"),
    ("architectures", [1], "'architectures' must be a list of strings"),
    ("torch_dtype", 5, "'torch_dtype' must be a string"),
    ("tie_word_embeddings", "no", "'tie_word_embeddings' must be true or false"),
    ("dflash_config", "x", "'dflash_config' must be an object"),
]


@pytest.mark.parametrize("command", ["convert", "plan", "serve --dry-run"])
@pytest.mark.parametrize(("key", "value", "needle"), WRONG_TYPES, ids=lambda v: str(v)[:24])
def test_wrong_typed_config_value_names_file_and_key(
    key, value, needle, command, specq, toy_target, tmp_path
):
    _set(toy_target, **{key: value})
    r = specq(*_args(command, toy_target, tmp_path))
    assert_one_line(r, 2, "config.json", needle)
    assert r.out == ""
    assert not (toy_target / "specq-manifest.json").exists()
    assert not (tmp_path / "specq-out").exists()


def test_config_that_is_not_an_object(specq, toy_target):
    (toy_target / "config.json").write_text("[1, 2]")
    assert_one_line(specq("convert", toy_target), 2, "config.json", "must be a JSON object, not a list")


def test_config_nested_too_deeply(specq, toy_target):
    (toy_target / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    assert_one_line(specq("plan", toy_target, "--gpu-memory", "24GiB"), 2, "config.json")


@pytest.mark.parametrize(
    ("key", "value"), [("num_target_layers", "two"), ("target_hidden_size", [128]), ("hidden_size", None)]
)
def test_wrong_typed_drafter_config(key, value, specq, toy_target, toy_draft):
    _set(toy_draft, **{key: value})
    r = specq("convert", toy_target, "--draft-model", toy_draft, "--draft-tokens", "3")
    assert_one_line(r, 2, "hidden_size" if value is None else f"'{key}'")
    assert str(toy_draft) in r.err
    assert not (toy_target / "specq-manifest.json").exists()


def _q7_dtype(d: Path) -> str:
    data = (d / ST).read_bytes()
    i = data.index(b'"dtype":"F32"')
    (d / ST).write_bytes(data[:i] + b'"dtype":"Q7" ' + data[i + len(b'"dtype":"F32"') :])
    return "dtype 'Q7', which safetensors does not define"


def _no_heads(d: Path) -> str:
    _set(d, num_attention_heads=0)
    return "'num_attention_heads' must be a positive integer, not an integer 0"


def _negative_kv_heads(d: Path) -> str:
    _set(d, num_key_value_heads=-2)
    return "'num_key_value_heads' must be a positive integer"


def _intermediate_disagrees(d: Path) -> str:
    _set(d, intermediate_size=512)
    return "intermediate_size 512; the config does not belong to these weights"


def _hidden_disagrees(d: Path) -> str:
    _set(d, hidden_size=256)
    return "config.json says"


def _tokenizer_without_vocab(d: Path) -> str:
    (d / "tokenizer.json").write_text(json.dumps({"model": {"type": "BPE", "vocab": 5}}))
    return "tokenizers library cannot load it"


def _tokenizer_model_not_object(d: Path) -> str:
    (d / "tokenizer.json").write_text(json.dumps({"model": "BPE"}))
    return "has no tokenizer model"


def _tokenizer_unknown_type(d: Path) -> str:
    (d / "tokenizer.json").write_text(json.dumps({"model": {"type": "Q7", "vocab": {}}}))
    return "tokenizers library cannot load it"


def _tokenizer_config_corrupt(d: Path) -> str:
    (d / "tokenizer_config.json").write_bytes(b'{"model_max_length": \xff')
    return "tokenizer_config.json: not valid JSON"


def _tokenizer_config_a_list(d: Path) -> str:
    (d / "tokenizer_config.json").write_text("[]")
    return "tokenizer_config.json: not a JSON object"


DAMAGE: list[Callable[[Path], str]] = [
    _q7_dtype, _no_heads, _negative_kv_heads, _intermediate_disagrees, _hidden_disagrees,
    _tokenizer_without_vocab, _tokenizer_model_not_object, _tokenizer_unknown_type,
    _tokenizer_config_corrupt, _tokenizer_config_a_list,
]  # fmt: skip


@pytest.mark.parametrize("command", ["convert", "serve --dry-run"])
@pytest.mark.parametrize("damage", DAMAGE, ids=lambda f: f.__name__.strip("_"))
def test_damaged_checkpoint_caught_up_front(damage, command, specq, toy_target, tmp_path):
    needle = damage(toy_target)
    r = specq(*_args(command, toy_target, tmp_path))
    assert_one_line(r, 2, needle)
    assert r.out == ""
    assert not (toy_target / "specq-manifest.json").exists()


@pytest.mark.parametrize("damage", [_intermediate_disagrees, _hidden_disagrees, _q7_dtype])
def test_damaged_drafter_caught_up_front(damage, specq, toy_target, toy_draft):
    needle = damage(toy_draft)
    r = specq("convert", toy_target, "--draft-model", toy_draft, "--draft-tokens", "3")
    assert_one_line(r, 2, needle)
    assert not (toy_target / "specq-manifest.json").exists()


@pytest.mark.parametrize("command", ["convert", "plan", "serve --dry-run"])
@pytest.mark.parametrize(
    "raw", [b'{"hidden_size": \xff}', b"\xfe\xff\x00{\x00}", b'{"model_type": "qwen3\xc3"}'], ids=str
)
def test_config_not_utf8_names_the_file(raw, command, specq, toy_target, tmp_path):
    (toy_target / "config.json").write_bytes(raw)
    r = specq(*_args(command, toy_target, tmp_path))
    line = assert_one_line(r, 2, "not UTF-8", "iconv")
    assert str(toy_target / "config.json") in line


def test_drafter_config_not_utf8_names_the_file(specq, toy_target, toy_draft):
    (toy_draft / "config.json").write_bytes(b'{"a": "\xff"}')
    r = specq("convert", toy_target, "--draft-model", toy_draft, "--draft-tokens", "3")
    assert str(toy_draft / "config.json") in assert_one_line(r, 2, "not UTF-8")


def test_a_vision_tower_mlp_of_its_own_size_is_not_a_mismatch(specq, toy_target):
    """Multimodal checkpoints carry encoder MLPs sized by their vision config: only the language model's
    MLP weights are held to hidden_size / intermediate_size."""
    import numpy as np

    from specq.pipeline.convert.st_io import read_tensors, write_tensors

    tensors, meta = read_tensors(toy_target / ST)
    items = [(n, t.dtype, t.array.copy()) for n, t in tensors.items()]
    items.append(("model.visual.blocks.0.mlp.gate_proj.weight", "F32", np.zeros((96, 32), dtype=np.float32)))
    del tensors
    write_tensors(toy_target / ST, items, meta)
    r = specq("convert", toy_target, "--json")
    assert r.code == 0, r.err
