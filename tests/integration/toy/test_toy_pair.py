"""The small toy pair, built once per session (or reused from the cache): real models that transformers
loads, a shared tokenizer, Python-shaped greedy output, and a report whose acceptance is reproducible."""

from __future__ import annotations

import json

import pytest

from specq.pipeline.toy import ToyRequest, build_toy_pair, remeasure_acceptance

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def loaded(toy_pair):
    from specq.pipeline.toy import load_pair

    return load_pair(toy_pair)


def test_files_and_shapes(toy_pair) -> None:
    from specq.pipeline.checkpoint import Checkpoint

    for d in (toy_pair.target, toy_pair.draft):
        for name in ("config.json", "model.safetensors", "generation_config.json", "tokenizer.json"):
            assert (d / name).is_file(), d / name
        config = json.loads((d / "config.json").read_text())
        assert config["architectures"] == ["Qwen3ForCausalLM"]
        assert config["torch_dtype"] == "float32" and config["tie_word_embeddings"] is False
        assert config["head_dim"] in (64, 128) and config["vocab_size"] % 128 == 0
        for name, t in Checkpoint(d).tensors.items():
            if name.endswith("proj.weight") or name == "lm_head.weight":
                out_features, in_features = t.shape
                assert in_features % 128 == 0 and out_features % 32 == 0, name


def test_both_load_and_share_a_vocabulary(toy_pair, loaded) -> None:
    from transformers import AutoTokenizer

    tokenizer, target, draft = loaded
    draft_tok = AutoTokenizer.from_pretrained(toy_pair.draft)
    assert draft_tok.get_vocab() == tokenizer.get_vocab()
    assert target.config.vocab_size == draft.config.vocab_size >= len(tokenizer)
    assert sum(p.numel() for p in draft.parameters()) < sum(p.numel() for p in target.parameters())
    assert tokenizer.eos_token == "<|endoftext|>"
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_different_prompts_give_different_outputs(loaded) -> None:
    import torch

    tokenizer, target, _ = loaded
    outputs = []
    for prompt in ("def __init__(self", "import os\nimport sys\n\n"):
        ids = tokenizer(prompt, return_tensors="pt").input_ids
        with torch.no_grad():
            out = target.generate(ids, max_new_tokens=16, min_new_tokens=16, do_sample=False)
        outputs.append(tokenizer.decode(out[0, ids.shape[1] :]))
    assert outputs[0] != outputs[1]
    assert all(o.strip() for o in outputs)


def test_report_acceptance_matches_a_fresh_measurement(toy_pair) -> None:
    report = toy_pair.load_report()
    assert [a.k for a in report.acceptance.by_k] == [1, 2, 3, 4, 5, 6]
    assert report.target.heldout_perplexity < report.draft.heldout_perplexity
    fresh = remeasure_acceptance(toy_pair)
    for saved, now in zip(report.acceptance.by_k, fresh, strict=True):
        assert now.per_position == pytest.approx(saved.per_position, abs=1e-6)
        assert now.tokens_per_step == pytest.approx(saved.tokens_per_step, abs=1e-6)


def test_second_call_reuses_the_cache(toy_pair) -> None:
    mtime = toy_pair.report.stat().st_mtime_ns
    weights = (toy_pair.target / "model.safetensors").stat().st_mtime_ns
    again = build_toy_pair(ToyRequest(size="small", seed=0))
    assert again == toy_pair
    assert again.report.stat().st_mtime_ns == mtime
    assert (again.target / "model.safetensors").stat().st_mtime_ns == weights


def test_cli_build_json(cli, toy_pair, tmp_path) -> None:
    out = tmp_path / "toy"
    code, stdout, _ = cli("toy", "build", str(out), "--json")
    assert code == 0
    data = json.loads(stdout)
    assert data["target"] == str(out / "target") and data["report"]["size"] == "small"
    assert (out / "draft" / "model.safetensors").is_file()
    # an earlier toy pair in OUT is replaced; anything else is refused
    code, _, _ = cli("toy", "build", str(out), "--json")
    assert code == 0
    other = tmp_path / "other"
    other.mkdir()
    (other / "keep.txt").write_text("x")
    code, _, stderr = cli("toy", "build", str(other))
    assert code == 2 and "not a toy pair" in stderr


def test_cli_bad_size(cli, tmp_path) -> None:
    code, _, stderr = cli("toy", "build", str(tmp_path / "x"), "--size", "huge")
    assert code == 2
