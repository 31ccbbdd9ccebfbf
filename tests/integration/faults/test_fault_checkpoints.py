"""Damaged and incomplete checkpoints, against every command that reads one: each is refused with exit 2 and
one line naming the problem before any work starts, nothing is called ready, and nothing is written."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from specq.pipeline.convert.st_io import read_tensors, write_tensors

from .conftest import assert_one_line

pytestmark = pytest.mark.integration
ST = "model.safetensors"


def _config(d: Path, **changes: object) -> None:
    cfg = json.loads((d / "config.json").read_text())
    for k, v in changes.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    (d / "config.json").write_text(json.dumps(cfg))


def _drop_tensors(d: Path, keep: Callable[[str], bool]) -> None:
    tensors, meta = read_tensors(d / ST)
    items = [(n, t.dtype, t.array.copy()) for n, t in tensors.items() if keep(n)]
    del tensors
    write_tensors(d / ST, items, meta)


def truncated(d: Path) -> str:
    size = (d / ST).stat().st_size
    with open(d / ST, "r+b") as f:
        f.truncate(size // 2)
    return "truncated"


def header_too_long(d: Path) -> str:
    with open(d / ST, "r+b") as f:
        f.write(struct.pack("<Q", 2**40))
    return "damaged or truncated"


def empty_weights(d: Path) -> str:
    (d / ST).write_bytes(b"")
    return "not a readable safetensors file"


def header_not_json(d: Path) -> str:
    with open(d / ST, "r+b") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        f.write(b"\xff" * n)
    return "not a readable safetensors file"


def no_num_hidden_layers(d: Path) -> str:
    _config(d, num_hidden_layers=None)
    return "num_hidden_layers"


def no_hidden_size(d: Path) -> str:
    _config(d, hidden_size=None)
    return "hidden_size"


def no_vocab_size(d: Path) -> str:
    _config(d, vocab_size=None)
    return "vocab_size"


def layers_as_text(d: Path) -> str:
    _config(d, num_hidden_layers="two")
    return "num_hidden_layers"


def config_not_json(d: Path) -> str:
    (d / "config.json").write_text("{ not json")
    return "not valid JSON"


def no_config(d: Path) -> str:
    (d / "config.json").unlink()
    return "no config.json"


def missing_layer(d: Path) -> str:
    _drop_tensors(d, lambda n: ".layers.1." not in n)
    return "none for layer 1"


def more_layers_than_weights(d: Path) -> str:
    _config(d, num_hidden_layers=6)
    return "layers 2..5"


def missing_lm_head(d: Path) -> str:
    _drop_tensors(d, lambda n: not n.startswith("lm_head."))
    return "no lm_head"


def missing_embedding(d: Path) -> str:
    _drop_tensors(d, lambda n: "embed_tokens" not in n)
    return "no token embedding"


def missing_shard(d: Path) -> str:
    (d / ST).rename(d / "model-00001-of-00002.safetensors")
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    (d / "model.safetensors.index.json").write_text(json.dumps(index))
    return "model-00002-of-00002.safetensors which is missing"


def path_is_a_file(d: Path) -> str:
    d.with_name("file").write_text("x")
    return "not a directory"


def path_missing(d: Path) -> str:
    return "not a directory"


FAULTS = [
    truncated, header_too_long, empty_weights, header_not_json, no_num_hidden_layers, no_hidden_size,
    no_vocab_size, layers_as_text, config_not_json, no_config, missing_layer, more_layers_than_weights,
    missing_lm_head, missing_embedding, missing_shard, path_is_a_file, path_missing,
]  # fmt: skip
MODEL_ARG = {path_is_a_file: "file", path_missing: "nowhere"}
# `specq plan` also takes a bare config.json file: a file that is no JSON is refused as such
PLAN_NEEDLE = {path_is_a_file: "not valid JSON"}


def _args(command: str, model: Path, tmp: Path, calib: Path) -> list[str | Path]:
    return {
        "convert": ["convert", model],
        "plan": ["plan", model, "--gpu-memory", "24GiB"],
        "serve --dry-run": ["serve", model, "--engine", "embedded", "--dry-run"],
        "serve": ["serve", model, "--engine", "embedded"],
        "draft train": ["draft", "train", model, "--out", tmp / "drafter"],
        "quantize": [
            "quantize",
            model,
            "--calib",
            calib,
            "--out",
            tmp / "q",
            "--method",
            "gptq",
            "--for",
            "plain",
        ],
    }[command]


@pytest.mark.parametrize("command", ["convert", "plan", "serve --dry-run", "draft train", "quantize"])
@pytest.mark.parametrize("fault", FAULTS, ids=lambda f: f.__name__)
def test_damaged_checkpoint_refused(fault, command, specq, toy_target, tmp_path, calib):
    needle = fault(toy_target)
    if command == "plan":
        needle = PLAN_NEEDLE.get(fault, needle)
    model = tmp_path / MODEL_ARG.get(fault, "target")
    r = specq(*_args(command, model, tmp_path, calib))
    assert_one_line(r, 2, needle)
    assert r.out == ""
    assert not (toy_target / "specq-manifest.json").exists()  # never called ready
    assert not (tmp_path / "drafter").exists() and not (tmp_path / "q").exists()


@pytest.mark.parametrize("fault", [truncated, no_num_hidden_layers], ids=lambda f: f.__name__)
def test_embedded_launch_refused_before_the_server_starts(fault, specq, toy_target, tmp_path, calib):
    needle = fault(toy_target)
    assert_one_line(specq(*_args("serve", toy_target, tmp_path, calib)), 2, needle)
    assert not (tmp_path / "specq-out").exists()  # no run directory: nothing was launched


def bad_tokenizer_json(d: Path) -> str:
    (d / "tokenizer.json").write_text('{"model": ')
    return "tokenizer is damaged"


def no_tokenizer(d: Path) -> str:
    (d / "tokenizer.json").unlink()
    return "no tokenizer"


@pytest.mark.parametrize("command", ["convert", "serve --dry-run", "draft train", "quantize"])
@pytest.mark.parametrize("fault", [bad_tokenizer_json, no_tokenizer], ids=lambda f: f.__name__)
def test_unreadable_tokenizer_refused(fault, command, specq, toy_target, tmp_path, calib):
    needle = fault(toy_target)
    assert_one_line(specq(*_args(command, toy_target, tmp_path, calib)), 2, needle)
    assert not (toy_target / "specq-manifest.json").exists()


def test_plan_needs_no_tokenizer(specq, toy_target):
    no_tokenizer(toy_target)
    assert specq("plan", toy_target, "--gpu-memory", "24GiB").code == 0


@pytest.mark.parametrize("command", ["convert", "serve", "draft train", "quantize"])
def test_config_only_directory_refused_where_weights_are_needed(command, specq, toy_target, tmp_path, calib):
    (toy_target / ST).unlink()
    needle = "no .safetensors"
    assert_one_line(specq(*_args(command, toy_target, tmp_path, calib)), 2, needle)


def test_config_only_directory_plans(specq, toy_target):
    """Planning from config.json alone is a feature (no download needed): not an error."""
    (toy_target / ST).unlink()
    assert specq("plan", toy_target, "--gpu-memory", "24GiB").code == 0


@pytest.mark.parametrize(
    ("arch", "model_type"), [("MistralForCausalLM", "mistral"), ("GPT2LMHeadModel", "gpt2")]
)
def test_draft_train_refuses_a_target_it_cannot_read(arch, model_type, specq, toy_target, tmp_path):
    _config(toy_target, architectures=[arch], model_type=model_type)
    assert_one_line(specq("draft", "train", toy_target, "--out", tmp_path / "d"), 2, arch, "Qwen3-family")
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize("command", ["convert", "serve --dry-run"])
@pytest.mark.parametrize("fault", [truncated, no_hidden_size], ids=lambda f: f.__name__)
def test_damaged_drafter_refused(fault, command, specq, toy_target, toy_draft, tmp_path, calib):
    needle = fault(toy_draft)
    args = [*_args(command, toy_target, tmp_path, calib), "--draft-model", toy_draft, "--draft-tokens", "3"]
    line = assert_one_line(specq(*args), 2, needle)
    assert line.startswith("specq: error: drafter ")
    assert not (toy_target / "specq-manifest.json").exists()


def test_complete_toy_checkpoint_is_ready(specq, toy_target, toy_draft):
    """The control: the same commands accept the undamaged copies."""
    r = specq("convert", toy_target, "--draft-model", toy_draft, "--draft-tokens", "3", "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["report"]["ready"] is True
