"""specq quantize on CUDA: GPTQ and AWQ of a tiny Qwen3 with gptqmodel, evaluated on the GPU. Skips without
a CUDA GPU (see tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from specq.pipeline.checkpoint import Checkpoint
from specq.pipeline.config.models import QuantizeSection
from specq.pipeline.quantize import QuantizeRequest, quantize
from tests.tinymodel import build_tiny_model, calibration_rows, write_jsonl

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize(("method", "target"), [("awq", "speculative"), ("gptq", "plain")])
def test_quantize_on_cuda(tmp_path: Path, method: str, target: str) -> None:
    pytest.importorskip("gptqmodel", reason="the GPU machine has no quantization backend installed")
    model = build_tiny_model(tmp_path / "model")
    calib = write_jsonl(tmp_path / "calib.jsonl", calibration_rows(1500))
    cfg = QuantizeSection.model_validate(
        {"method": method, "for": target, "calib": str(calib), "samples": 16, "seqlen": 128, "device": "cuda"}
    )
    result = quantize(QuantizeRequest.from_config(cfg, model=model, out=tmp_path / "out"))
    assert result.device == "cuda" and result.layers == 2
    q = Checkpoint(tmp_path / "out").quantization
    assert q is not None and q.method == method and q.bits == 4 and q.group_size == 128
    assert result.quality is not None and result.quality.logits_cosine_mean is not None
    assert result.quality.logits_cosine_mean > 0.9
