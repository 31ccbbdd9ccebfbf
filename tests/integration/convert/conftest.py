"""A real GPTQ checkpoint for the convert integration tests: the toy pair's target (`toy_pair`, a small
trained Qwen3) quantized once per session by the quantize stage's `quantize()` (gptqmodel 7.6.0,
`for = "plain"` so it stays GPTQ) from a local JSONL calibration file of the toy corpus."""

from __future__ import annotations

from pathlib import Path

import pytest

SMALL = {"samples": 8, "seqlen": 64, "evaluate": False}


def quantize_gptq(model: Path, root: Path, device: str) -> Path:
    """`model` → `root/gptq` (symmetric 4-bit GPTQ, group 128, no act-order)."""
    from specq.pipeline.config.models import QuantizeSection
    from specq.pipeline.quantize import QuantizeRequest, quantize
    from tests.tinymodel import calibration_rows, write_jsonl

    calib = write_jsonl(root / "calib.jsonl", calibration_rows(1500))
    cfg = QuantizeSection.model_validate(
        {"method": "gptq", "for": "plain", "backend": "gptqmodel", "calib": str(calib), "device": device}
        | SMALL
    )
    quantize(QuantizeRequest.from_config(cfg, model=model, out=root / "gptq"))
    return root / "gptq"


@pytest.fixture(scope="session")
def gptq_checkpoint(toy_pair, tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("gptqmodel")
    return quantize_gptq(toy_pair.target, tmp_path_factory.mktemp("convert-real"), "cpu")
