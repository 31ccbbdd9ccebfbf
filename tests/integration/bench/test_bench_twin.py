"""`specq bench` on scale twins, end to end on the embedded engine (CPU): a tiny Qwen3 twin target and a
smaller twin of the same vocabulary as its draft model (the synthetic tokenizer is a function of the config,
so the two share it). The report names both twins, and best k from the one k measured takes the slope of the
step-cost curve at the target's size."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specq.pipeline.checkpoint import Checkpoint
from specq.pipeline.report import BenchReport
from specq.pipeline.speedup import STEP_COST_CURVE

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BASE = {
    "model_type": "qwen3", "vocab_size": 640, "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 32, "max_position_embeddings": 2048, "tie_word_embeddings": False, "eos_token_id": 600,
    "bos_token_id": 601, "rms_norm_eps": 1e-6, "rope_theta": 1e6, "architectures": ["Qwen3ForCausalLM"],
}  # fmt: skip


def twin(cli, tmp_path, name: str, **shape) -> str:
    src = tmp_path / f"{name}.json"
    src.write_text(json.dumps({**BASE, **shape}))
    code, out, err = cli("twin", str(src), "--out", str(tmp_path / name), "--device", "cpu", "--json")
    assert code == 0, err
    return json.loads(out)["target"]["path"]


def test_bench_on_twins_says_so_and_reads_the_curve(cli, tmp_path):
    target = twin(cli, tmp_path, "target", hidden_size=128, intermediate_size=384, num_hidden_layers=4)
    draft = twin(cli, tmp_path, "draft", hidden_size=64, intermediate_size=128, num_hidden_layers=1)
    assert (Path(target) / "tokenizer.json").read_text() == (Path(draft) / "tokenizer.json").read_text()
    out = tmp_path / "run"
    code, text, err = cli(
        "bench", target, "--draft-model", draft, "--engine", "embedded", "--draft-tokens", "2",
        "--requests", "2", "--max-tokens", "16", "--warmup", "0", "--trials", "1", "--temperature", "0",
        "--ignore-eos", "--out", str(out),
    )  # fmt: skip
    assert code == 0, err
    report = BenchReport.load(out / "report.json")
    assert set(report.twin) == {"target", "drafter"}
    assert f"TWIN: the target {target} is a scale twin" in " ".join(text.split())  # wrapped to the terminal
    assert "TWIN:" in (out / "summary.md").read_text()
    bk = report.best_k
    assert bk is not None and bk.k_range == [2]
    size = Checkpoint(target).weight_bytes - 640 * 128 * 2  # the embedding is a row gather, not read whole
    assert bk.step_cost_per_token == pytest.approx(STEP_COST_CURVE.at(size).per_token)
    assert bk.step_cost_basis is not None and bk.step_cost_basis.startswith("measured at k = 2; slope from")
