"""The toy's DFlash drafter (`specq toy build --drafter dflash`) to 4-bit AWQ gemm with `specq quantize
DRAFTER --for speculative --target-model TARGET --calib DATA`: GPTQ calibrated on the toy target's hidden
states, a checkpoint `specq convert` accepts and `specq draft eval` scores, and its acceptance against the
bf16 (here float32) drafter's on the same prompts and target, as docs/draft.md records. Round-to-nearest
(no target) is scored too. CPU, one to five minutes on the shared 2-core machine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specq.pipeline.checkpoint import Checkpoint
from specq.pipeline.draft import contract

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TAU_KEPT = 0.95  # the 4-bit drafter's τ is within 5 % of the original's


@pytest.fixture(scope="module")
def quantized(toy_pair, toy_corpus, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from specq.pipeline.draft.toy import toy_dflash

    root = tmp_path_factory.mktemp("dflash4")
    calib = root / "calib.jsonl"
    calib.write_text("".join(json.dumps({"text": t}) + "\n" for t in toy_corpus.train[:60]))
    paths = {"bf16": toy_dflash(toy_pair), "gptq": root / "gptq", "rtn": root / "rtn"}
    return {**paths, "calib": calib, "target": Path(toy_pair.target)}


def _run(cli, *args: str) -> dict:
    code, out, err = cli(*args, "--json")
    assert code == 0, err
    return json.loads(out)


def test_gptq_on_the_targets_hidden_states(cli, quantized: dict[str, Path]) -> None:
    q = quantized
    data = _run(cli, "quantize", str(q["bf16"]), "--target-model", str(q["target"]), "--calib",
                str(q["calib"]), "--samples", "32", "--seqlen", "256", "--device", "cpu", "--out",
                str(q["gptq"]))  # fmt: skip
    d = data["drafter"]
    assert d["algorithm"] == "gptq" and d["target"] == str(q["target"])
    assert d["output_error_basis"] == "calibration inputs" and d["blocks"] > 0 and d["context_tokens"] > 0
    assert set(d["output_error"]) == set(d["quantized"]) and max(d["output_error"].values()) < 0.05
    assert d["hidden_cosine_mean"] > 0.99
    cfg = json.loads((q["bf16"] / "config.json").read_text())
    assert d["target_layer_ids"] == cfg["dflash_config"]["target_layer_ids"]
    ck = Checkpoint(q["gptq"])
    assert contract.check_drafter(ck, Checkpoint(q["target"]), draft_tokens=7) == []
    assert data["size_quantized_bytes"] * 4 < data["size_original_bytes"]


def test_round_to_nearest_without_a_target(cli, quantized: dict[str, Path]) -> None:
    data = _run(cli, "quantize", str(quantized["bf16"]), "--device", "cpu", "--out", str(quantized["rtn"]))
    assert data["drafter"]["algorithm"] == "rtn" and data["calibration"]["samples"] == 0


def test_convert_accepts_the_4bit_drafter(cli, quantized: dict[str, Path], tmp_path: Path) -> None:
    import shutil

    target = tmp_path / "target"  # convert writes its manifest beside the target: not into the cached toy
    shutil.copytree(quantized["target"], target)
    data = _run(cli, "convert", str(target), "--draft-model", str(quantized["gptq"]), "--draft-tokens", "7")
    assert (target / "specq-manifest.json").is_file()
    by = {v["engine"]: v for v in data["report"]["verdicts"]}
    assert by["pytorch"]["status"] == "accepted", by["pytorch"]
    assert data["report"]["draft"]["kind"] == "dflash" and data["report"]["draft"]["method"] == "dflash"


def test_draft_eval_scores_both_on_the_same_prompts_and_the_4bit_keeps_its_tau(
    cli, quantized: dict[str, Path]
) -> None:
    q = quantized
    runs = {
        name: _run(cli, "draft", "eval", str(q["target"]), str(q[name]), "--device", "cpu")
        for name in ("bf16", "gptq", "rtn")
    }
    assert runs["gptq"]["draft_quantization"] == "awq 4-bit, group 128"
    assert runs["bf16"]["draft_quantization"] == "float32"
    assert {r["anchors"] for r in runs.values()} == {runs["bf16"]["anchors"]}  # the same blocks scored
    for name in ("gptq", "rtn"):
        assert runs[name]["tau"] >= TAU_KEPT * runs["bf16"]["tau"], (
            name,
            runs[name]["tau"],
            runs["bf16"]["tau"],
        )
        assert len(runs[name]["predictions"]) == len(runs["bf16"]["predictions"])
