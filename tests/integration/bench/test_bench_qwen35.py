"""The Qwen3.5-shaped toy on the embedded (CPU) engine: plain serving and `specq bench` work; speculation
with a draft model is refused up front (exit 2, one line), because transformers 5.17's assisted generation
refuses stateful models — proven here against transformers itself, so the refusal stays true."""

from __future__ import annotations

import pytest

from specq.pipeline.report import BenchReport

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_transformers_refuses_assisted_generation_for_the_hybrid_target(toy35) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    target = AutoModelForCausalLM.from_pretrained(toy35.target).eval()
    draft = AutoModelForCausalLM.from_pretrained(toy35.draft).eval()
    ids = torch.tensor([[5, 6, 7, 8]])
    with pytest.raises(ValueError, match="not supported with stateful models"):
        target.generate(ids, assistant_model=draft, do_sample=False, max_new_tokens=4)


def test_speculation_is_refused_before_any_server(cli, toy35, tmp_path) -> None:
    for command in ("serve", "bench"):
        extra = ["--dry-run"] if command == "serve" else ["--out", str(tmp_path / "run")]
        code, _, err = cli(
            command, str(toy35.target), "--draft-model", str(toy35.draft), "--engine", "embedded",
            "--draft-tokens", "3", *extra,
        )  # fmt: skip
        lines = err.strip().splitlines()
        assert code == 2, err
        assert lines[-1].startswith("specq: error: ") and "assisted generation" in lines[-1]
        assert "linear_attention" in lines[-1] and "--engine lmdeploy" in lines[-1]
    assert not (tmp_path / "run" / "report.json").exists()


def test_plain_bench_on_the_embedded_engine(cli, toy35, tmp_path) -> None:
    out = tmp_path / "run"
    code, _, err = cli(
        "bench", str(toy35.target), "--engine", "embedded", "--draft-tokens", "0", "--suite", "code",
        "--requests", "2", "--max-tokens", "16", "--warmup", "0", "--trials", "1", "--temperature", "0",
        "--out", str(out),
    )  # fmt: skip
    assert code == 0, err
    report = BenchReport.load(out / "report.json")
    assert report.complete and [r.label for r in report.runs] == ["baseline"]
    run = report.runs[0]
    assert run.status == "ok" and run.aggregate.output_tokens > 0
    assert run.server is not None and run.server.generation_tokens == run.aggregate.output_tokens
