"""What specq's embedded engine (transformers, `serve/embedded/`) accepts — any checkpoint transformers
loads, and 4-bit ones when the Python package that runs their format is installed here — and how a quantized
checkpoint is loaded: the one loader the embedded engine and quantize's quality report share (torch,
transformers and gptqmodel are imported only when it runs)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ..checkpoint import Checkpoint
from ..hardware import module_present
from .turbomind import tensor_problems
from .verdict import EngineVerdict

# quant_method -> the Python package that runs it in the embedded engine
LOADERS = {"gptq": "gptqmodel", "awq": "gptqmodel", "compressed-tensors": "compressed_tensors"}


def embedded_verdict(target: Checkpoint) -> EngineVerdict:
    """specq's embedded engine loads checkpoints through transformers; 4-bit ones need a backend installed
    here (gptqmodel for GPTQ/AWQ, compressed-tensors for llmcompressor output)."""
    q = target.quantization
    if q is None:
        return EngineVerdict(engine="embedded", status="accepted")
    need = LOADERS.get(q.method)
    if need is None:
        return EngineVerdict(
            engine="embedded", status="refused", reasons=[f"no embedded loader for quant_method {q.method!r}"]
        )
    problems = tensor_problems(target, q)[1]
    if problems:
        return EngineVerdict(engine="embedded", status="refused", reasons=problems[:5])
    if not module_present(need):
        return EngineVerdict(
            engine="embedded",
            status="fixable",
            reasons=[f"loading {q.method} needs the Python package {need}, which is not installed here"],
            fixes=["pip install 'specq[quant]'"],
        )
    return EngineVerdict(engine="embedded", status="accepted")


def load_quantized(path: Path, device: str) -> Any:
    """A quantized checkpoint as an eval-mode torch model on `device`: gptqmodel for GPTQ/AWQ (it runs both
    formats on CPU and CUDA; transformers itself would need optimum), transformers for the rest."""
    cfg = json.loads((path / "config.json").read_text())
    method = str((cfg.get("quantization_config") or {}).get("quant_method", "")).lower()
    if LOADERS.get(method) == "gptqmodel":
        os.environ.setdefault("GPTQMODEL_CPU_WORKERS", str(min(2, os.cpu_count() or 1) or 1))
        from gptqmodel import GPTQModel

        return GPTQModel.load(str(path), device=device).model.eval()
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(path), device_map=device).eval()
