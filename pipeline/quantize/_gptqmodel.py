"""GPTQ and AWQ through gptqmodel (the maintained successor of auto-gptq). On CPU its AWQ path needs the
torch AWQ kernel, and on small machines it must be told how many CPU workers it may use."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from ..engines.embedded import gptqmodel_text_only
from ..errors import missing_package
from ._capture import hook_layers
from .backends import Job, LayerHook

if TYPE_CHECKING:
    from ..calibration import Calibration


def import_gptqmodel() -> Any:
    # gptqmodel refuses to start on a 2-core machine unless this is set before import.
    os.environ.setdefault("GPTQMODEL_CPU_WORKERS", str(min(2, os.cpu_count() or 1) or 1))
    try:
        import gptqmodel
    except ImportError:
        raise missing_package("gptqmodel", "quant") from None
    return gptqmodel


def quant_config(job: Job) -> Any:
    import_gptqmodel()
    from gptqmodel.quantization.config import AWQConfig, GPTQConfig

    if job.method == "gptq":
        return GPTQConfig(bits=job.bits, group_size=job.group_size, sym=job.sym, desc_act=job.desc_act)
    return AWQConfig(bits=job.bits, group_size=job.group_size, sym=job.sym)


def calibration_rows(calib: Calibration) -> list[dict[str, Any]]:
    import torch

    return [
        {"input_ids": torch.tensor([ids]), "attention_mask": torch.ones(1, len(ids), dtype=torch.long)}
        for ids in calib.samples
    ]


def run(job: Job, calib: Calibration, on_layer: LayerHook) -> None:
    gm = import_gptqmodel()
    backend = gm.BACKEND.AWQ_TORCH if job.method == "awq" and job.device == "cpu" else gm.BACKEND.AUTO
    from gptqmodel.looper import loop_processor

    # gptqmodel writes per-run logs into ./logs of the current directory; keep them in the scratch dir.
    loop_processor._PROJECT_LOG_DIR = job.work / "gptqmodel-logs"
    with gptqmodel_text_only(job.model):
        model = gm.GPTQModel.load(str(job.model), quant_config(job), device=job.device)
        handles = hook_layers(model.model, on_layer)
        try:
            model.quantize(
                calibration_rows(calib), batch_size=1, backend=backend, calibration_data_min_length=1
            )
        finally:
            for h in handles:
                h.remove()
        model.save(str(job.out))
