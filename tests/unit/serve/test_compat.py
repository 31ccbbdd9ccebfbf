"""Draft/target compatibility: each mismatch is one exit-2 line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specq.pipeline.checkpoint import Checkpoint
from specq.pipeline.engines.speculation import check_draft


def edit(path: Path, **changes: object) -> Path:
    cfg = json.loads((path / "config.json").read_text())
    for k, v in changes.items():
        if isinstance(v, dict) and isinstance(cfg.get(k), dict):
            cfg[k].update(v)
        else:
            cfg[k] = v
    (path / "config.json").write_text(json.dumps(cfg))
    return path


def test_compatible_pairs(ckpts: dict[str, Path]) -> None:
    t = Checkpoint(ckpts["target"])
    assert check_draft(t, Checkpoint(ckpts["dflash"]), None, 5, "lmdeploy") == []
    assert check_draft(t, Checkpoint(ckpts["eagle3"]), "eagle3", 3, "lmdeploy") == []
    assert check_draft(t, Checkpoint(ckpts["draft"]), None, 4, "embedded") == []
    assert check_draft(t, None, "qwen3_5_mtp", 2, "lmdeploy") == []
    assert check_draft(t, None, None, 0, "lmdeploy") == []


def test_dflash_layer_count_and_ids(ckpts: dict[str, Path]) -> None:
    t = Checkpoint(ckpts["target"])
    d = edit(ckpts["dflash"], num_target_layers=36, dflash_config={"target_layer_ids": [1, 7]})
    problems = check_draft(t, Checkpoint(d), "dflash", 4, "lmdeploy")
    assert any("36-layer target, but the target has 4 layers" in p for p in problems)
    assert any("target_layer_ids [7] out of range" in p for p in problems)


def test_dflash_block_size_bounds_k(ckpts: dict[str, Path]) -> None:
    problems = check_draft(Checkpoint(ckpts["target"]), Checkpoint(ckpts["dflash"]), "dflash", 8, "lmdeploy")
    assert problems == ["DFlash block_size 8 allows at most 7 draft tokens, asked for 8"]


def test_vocab_and_hidden_mismatch(ckpts: dict[str, Path]) -> None:
    d = edit(ckpts["dflash"], vocab_size=2048, hidden_size=512)
    problems = check_draft(Checkpoint(ckpts["target"]), Checkpoint(d), "dflash", 4, "lmdeploy")
    assert "vocabulary sizes differ: target 1024, draft 2048" in problems
    assert any("hidden size 512" in p for p in problems)
    e = edit(ckpts["eagle3"], hidden_size=128)
    problems = check_draft(Checkpoint(ckpts["target"]), Checkpoint(e), "eagle3", 4, "lmdeploy")
    assert problems == ["EAGLE drafter hidden size 128 does not match the target's 256"]


def test_plain_draft_must_share_tokenizer(ckpts: dict[str, Path]) -> None:
    problems = check_draft(
        Checkpoint(ckpts["target"]), Checkpoint(ckpts["other_tok"]), "draft", 4, "embedded"
    )
    assert len(problems) == 1 and "tokenizers differ" in problems[0]


def test_method_needs_draft_and_k_range(ckpts: dict[str, Path]) -> None:
    t = Checkpoint(ckpts["target"])
    assert check_draft(t, None, "dflash", 4, "lmdeploy") == [
        "method 'dflash' needs a draft model: pass --draft-model DRAFT"
    ]
    assert any("in 1..15" in p for p in check_draft(t, Checkpoint(ckpts["dflash"]), "dflash", 16, "lmdeploy"))
    assert any("no draft model and no method" in p for p in check_draft(t, None, None, 3, "lmdeploy"))


@pytest.mark.parametrize(
    ("draft", "method", "engine", "needle"),
    [
        ("draft", None, "lmdeploy", "LMDeploy 0.18 has no 'draft' method"),
        ("dflash", None, "embedded", "embedded engine speculates only with a plain draft model"),
        ("draft", "dflash", "lmdeploy", "is a 'model' checkpoint, not a dflash drafter"),
    ],
)
def test_method_engine_mismatch(
    ckpts: dict[str, Path], draft: str, method: str | None, engine: str, needle: str
) -> None:
    problems = check_draft(Checkpoint(ckpts["target"]), Checkpoint(ckpts[draft]), method, 4, engine)
    assert any(needle in p for p in problems), problems


def test_dflash_beside_a_llama_target_is_refused_on_lmdeploy_only(ckpts: dict[str, Path]) -> None:
    """`specq draft train` writes DFlash drafters for Llama targets too (offline evaluation); LMDeploy 0.18's
    DFlash is qwen3_dflash, so serving one there is refused, naming the target and what to do instead."""
    t = Checkpoint(edit(ckpts["target"], architectures=["LlamaForCausalLM"], model_type="llama"))
    problems = check_draft(t, Checkpoint(ckpts["dflash"]), "dflash", 5, "lmdeploy")
    assert len(problems) == 1
    assert "LlamaForCausalLM target" in problems[0] and "specq draft eval" in problems[0]
    embedded = check_draft(t, Checkpoint(ckpts["dflash"]), "dflash", 5, "embedded")
    assert not any("Qwen3-family" in p for p in embedded)
    assert any("plain draft model" in p for p in embedded)  # the embedded engine has no DFlash at all
