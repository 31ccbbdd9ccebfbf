"""A real GPTQ checkpoint for the convert integration tests, built once per session by the quantize stage's
`quantize()` (gptqmodel 7.6.0, `for = "plain"` so it stays GPTQ) from the tiny random Qwen3 of
`tests/tinymodel.py` and a local JSONL calibration file. Switch to the toy pair's target once it is on
main."""

from __future__ import annotations

from pathlib import Path

import pytest

SMALL = {"samples": 8, "seqlen": 64, "evaluate": False}


def quantize_gptq(root: Path, device: str) -> Path:
    """tiny Qwen3 → `root/gptq` (symmetric 4-bit GPTQ, group 128, no act-order)."""
    from specq.pipeline.config.models import QuantizeSection
    from specq.pipeline.quantize import quantize
    from tests.tinymodel import build_tiny_model, calibration_rows, write_jsonl

    model = build_tiny_model(root / "model")
    calib = write_jsonl(root / "calib.jsonl", calibration_rows(1500))
    cfg = QuantizeSection.model_validate(
        {
            "method": "gptq",
            "for": "plain",
            "backend": "gptqmodel",
            "calib": str(calib),
            "device": device,
            **SMALL,
        }
    )
    quantize(model, cfg, root / "gptq")
    return root / "gptq"


@pytest.fixture(scope="session")
def gptq_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("gptqmodel")
    return quantize_gptq(tmp_path_factory.mktemp("convert-real"), "cpu")
