"""`specq draft` commands: help, and the refusals that happen before any model is loaded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def _target(tmp: Path, layers: int = 4) -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    cfg = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "num_hidden_layers": layers,
           "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128,
           "vocab_size": 256}  # fmt: skip
    (tmp / "config.json").write_text(json.dumps(cfg))
    return tmp


def test_help_has_examples(cli) -> None:
    for cmd in ("train", "eval"):
        code, out, _ = cli("draft", cmd, "--help")
        assert code == 0 and "Example:" in out


def test_the_last_target_layer_is_refused(cli, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    conf = tmp_path / "c.toml"
    conf.write_text("[draft]\ntarget_layer_ids = [3]\n")
    code, _, err = cli(
        "draft", "train", str(_target(tmp_path / "t")), "--out", str(tmp_path / "d"), "-c", str(conf)
    )
    assert code == 2
    assert "last layer" in err
    assert not (tmp_path / "d").exists()


def test_block_size_must_be_8_or_16(cli, tmp_path: Path) -> None:
    code, _, err = cli("draft", "train", str(_target(tmp_path / "t")), "--out", str(tmp_path / "d"),
                       "--block-size", "12")  # fmt: skip
    assert code == 2 and "block_size" in err


def test_existing_out_is_refused(cli, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    (tmp_path / "d").mkdir()
    code, _, err = cli("draft", "train", str(_target(tmp_path / "t")), "--out", str(tmp_path / "d"))
    assert code == 2 and "already exists" in err


def test_eval_refuses_a_non_dflash_checkpoint(cli, tmp_path: Path) -> None:
    target = _target(tmp_path / "t")
    code, _, err = cli("draft", "eval", str(target), str(target))
    assert code == 2 and "not a valid LMDeploy DFlash drafter" in err


def test_toy_build_offers_a_dflash_drafter(cli) -> None:
    code, out, _ = cli("toy", "build", "--help")
    assert code == 0 and "--drafter" in out and "dflash" in out


@pytest.mark.parametrize(
    ("arch", "model_type", "accepted"),
    [("Qwen3ForCausalLM", "qwen3", True), ("LlamaForCausalLM", "llama", True),
     ("MistralForCausalLM", "mistral", False), ("GPT2LMHeadModel", "gpt2", False)],
)  # fmt: skip
def test_trainable_target_families(arch: str, model_type: str, accepted: bool, tmp_path: Path) -> None:
    """The trainer reads Qwen3-family and Llama targets (SmolLM2 is a Llama); others are refused."""
    from specq.pipeline.checkpoint import Checkpoint
    from specq.pipeline.config.models import DraftSection
    from specq.pipeline.draft.train import check_target
    from specq.pipeline.errors import InputError

    d = _target(tmp_path / model_type, layers=30)
    cfg = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**cfg, "architectures": [arch], "model_type": model_type}))
    if accepted:
        assert check_target(Checkpoint(d), DraftSection()) == [15]
    else:
        with pytest.raises(InputError, match=f"a {arch} target"):
            check_target(Checkpoint(d), DraftSection())
