"""What `specq quantize` returns and saves as `quant_report.json`: the versioned `QuantizeResult`, with a
drafter's own part (`DrafterQuantReport`), and the names of the files written beside a checkpoint. Torch-free;
the stage (`quantize/__init__.py`) and the drafter path (`quantize/drafter.py`) both build it."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from ..calibration import CalibrationReport
from ..hardware import package_version
from .quality import QualityReport

SCHEMA_VERSION = 1
REPORT_FILE = "quant_report.json"
CONFIG_FILE = "specq-quantize.toml"


class DrafterQuantReport(BaseModel):
    """How a drafter was quantized, beside the usual quantize report."""

    kind: str = "dflash"
    algorithm: Literal["gptq", "rtn"] = Field(
        description="gptq: calibrated on the target's hidden states; rtn: none"
    )
    target: str | None = Field(None, description="the target whose hidden states calibrated it")
    why_rtn: str | None = Field(None, description="why calibration did not run (algorithm rtn)")
    target_layer_ids: list[int] = Field(default_factory=list)
    quantized: list[str] = Field(default_factory=list, description="linears written as AWQ gemm")
    kept: list[str] = Field(default_factory=list, description="tensors copied as they are")
    blocks: int = Field(0, description="calibration query blocks (one every block_size positions)")
    context_tokens: int = Field(0, description="calibration positions whose target features fed the drafter")
    output_error: dict[str, float] = Field(
        default_factory=dict,
        description="per linear ‖(W − Ŵ)X‖² / ‖WX‖² on the calibration inputs (rtn: on the weights)",
    )
    output_error_basis: Literal["calibration inputs", "weights"] = "weights"
    hidden_cosine_mean: float | None = Field(
        None, description="the drafter's final hidden states, original vs 4-bit, on calibration blocks"
    )
    hidden_cosine_min: float | None = None


class QuantizeResult(BaseModel):
    schema_version: int = SCHEMA_VERSION
    model: str
    out: str
    method: str
    backend: str
    target: str  # speculative | plain
    bits: int
    group_size: int
    sym: bool
    desc_act: bool
    device: str
    format: str  # what the output is: gptq | awq | compressed-tensors
    turbomind_check: bool
    warnings: list[str] = []
    calibration: CalibrationReport
    quality: QualityReport | None = None
    size_original_bytes: int
    size_quantized_bytes: int
    compression_ratio: float
    seconds_total: float
    seconds_quantize: float
    seconds_eval: float = 0.0
    layers: int = 0
    repacked_to_awq: bool = False
    versions: dict[str, str | None] = {}
    drafter: DrafterQuantReport | None = None  # a DFlash drafter: how it was quantized (quantize/drafter.py)


def checkpoint_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.iterdir() if p.suffix in (".safetensors", ".bin"))


def versions_of(names: list[str]) -> dict[str, str | None]:
    from .. import __version__

    return {"specq": __version__, **{n: package_version(n) for n in names}}
