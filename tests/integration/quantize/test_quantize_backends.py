"""Quantize the toy target (a small real Qwen3) with every installed backend from a local JSONL file, once
per backend per session; check the output is complete, loads and generates on CPU, and lost little
quality. Interrupting a run leaves nothing behind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specq.pipeline.checkpoint import Checkpoint
from specq.pipeline.config.models import QuantizeSection
from specq.pipeline.engines.embedded import load_quantized
from specq.pipeline.hardware import module_present
from specq.pipeline.quantize import CONFIG_FILE, REPORT_FILE, QuantizeRequest, QuantizeResult, quantize
from tests.tinymodel import write_jsonl

pytestmark = pytest.mark.integration

SMALL = {"samples": 4, "seqlen": 64, "eval_samples": 2, "device": "cpu"}
CASES = [
    ("gptqmodel", "gptq", "gptqmodel"),
    ("gptqmodel", "awq", "gptqmodel"),
    ("llmcompressor", "gptq", "llmcompressor"),
    ("autoawq", "awq", "awq"),
]


@pytest.fixture(scope="module")
def tiny(toy_pair, toy_corpus, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The toy target and a JSONL calibration file of the toy corpus's training texts."""
    from specq.pipeline.toy.corpus import write_jsonl as write_texts

    calib = write_texts(tmp_path_factory.mktemp("calib") / "calib.jsonl", toy_corpus.train[:200])
    return Path(toy_pair.target), calib


def layer_count(model: Path) -> int:
    return int(Checkpoint(model).text_config["num_hidden_layers"])


@pytest.fixture(scope="module", params=CASES, ids=[f"{b}-{m}" for b, m, _ in CASES])
def quantized(request: pytest.FixtureRequest, tiny, tmp_path_factory: pytest.TempPathFactory):
    backend, method, module = request.param
    if not module_present(module):
        pytest.skip(f"{backend} is not installed")
    model, calib = tiny
    out = tmp_path_factory.mktemp(f"q-{backend}-{method}") / "out"
    if backend == "gptqmodel" and method == "gptq":
        # through the CLI, as a user would: default --for speculative, so GPTQ comes with the repack advice
        from typer.testing import CliRunner

        from specq.cli.app import app

        args = [
            "quantize",
            str(model),
            "--method",
            "gptq",
            "--calib",
            str(calib),
            "--out",
            str(out),
            "--json",
        ]
        args += ["--samples", "4", "--seqlen", "64", "--eval-samples", "2", "--device", "cpu"]
        res = CliRunner().invoke(app, args, catch_exceptions=False)
        assert res.exit_code == 0, res.stderr
        result = QuantizeResult.model_validate(json.loads(res.stdout))  # stdout is pure JSON
        n = layer_count(model)
        assert f"layer 1/{n}" in res.stderr and f"layer {n}/{n}" in res.stderr
        # with convert's repacker present the GPTQ result is repacked to AWQ for the PyTorch engine
        assert result.repacked_to_awq == module_present("specq.pipeline.convert.repack")
    else:
        cfg = QuantizeSection.model_validate(
            {**SMALL, "method": method, "backend": backend, "calib": str(calib), "for": "plain"}
        )
        seen: list[str] = []
        result = quantize(QuantizeRequest.from_config(cfg, model=model, out=out), progress=seen.append)
        n = layer_count(model)
        assert any(f"layer {n}/{n}" in s for s in seen), seen
    return backend, method, out, result


def test_output_is_complete(quantized) -> None:
    backend, method, out, result = quantized
    for name in (
        REPORT_FILE,
        CONFIG_FILE,
        "tokenizer.json",
        "tokenizer_config.json",
        "generation_config.json",
    ):
        assert (out / name).is_file(), name
    assert QuantizeResult.model_validate_json((out / REPORT_FILE).read_text()) == result
    assert f'backend = "{backend}"' in (out / CONFIG_FILE).read_text()
    q = Checkpoint(out).quantization
    assert q is not None and q.bits == 4 and q.group_size == 128
    if backend == "llmcompressor":
        assert q.method == "compressed-tensors" and q.sym is True and not q.desc_act
    elif result.repacked_to_awq or method == "awq":
        assert q.method == "awq" and q.version == "gemm" and q.zero_point is True
    else:
        assert q.method == "gptq" and q.sym is True and q.desc_act is False
        assert any("specq convert" in w for w in result.warnings)
    assert result.calibration.samples == 4 and result.calibration.tokens_used == 4 * 64
    assert result.compression_ratio > 1.2
    assert not list(out.parent.glob(".*partial")) and not list(out.parent.glob(".*work"))


def test_quality_is_bounded(quantized) -> None:
    _, _, _, result = quantized
    q = result.quality
    assert q is not None and q.perplexity_ratio is not None and q.logits_cosine_mean is not None
    assert q.perplexity_ratio < 1.5, q
    assert q.logits_cosine_mean > 0.9, q
    assert q.top1_agreement is not None and 0.5 < q.top1_agreement <= 1.0, q


def test_reloads_and_generates(quantized) -> None:
    import torch

    _, _, out, _ = quantized
    model = load_quantized(out, "cpu")
    ids = torch.tensor([[5, 6, 7, 8]])
    gen = model.generate(input_ids=ids, max_new_tokens=4, do_sample=False)
    assert gen.shape[1] == 8


def test_interrupt_leaves_no_output(tiny, tmp_path: Path) -> None:
    model, calib = tiny
    out = tmp_path / "out"
    cfg = QuantizeSection.model_validate({**SMALL, "method": "gptq", "calib": str(calib), "for": "plain"})

    def progress(msg: str) -> None:
        if "layer 1/" in msg:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        quantize(QuantizeRequest.from_config(cfg, model=model, out=out), progress=progress)
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []


def test_bad_calibration_is_exit_2_with_one_line(cli, tiny, tmp_path: Path) -> None:
    model, _ = tiny
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"body": "x"}])
    for calib, expected in [(str(tmp_path / "nope.jsonl"), "does not exist"), (str(bad), "no field 'text'")]:
        code, _, err = cli("quantize", str(model), "--calib", calib, "--out", str(tmp_path / "o"))
        lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("•")]
        assert code == 2 and len(lines) == 1 and expected in lines[0], err
    assert not (tmp_path / "o").exists()
