"""What specq's embedded engine (transformers, `serve/embedded/`) accepts: any checkpoint transformers
loads, and 4-bit ones when the Python package that runs their format is installed here."""

from __future__ import annotations

from ..checkpoint import Checkpoint
from ..hardware import module_present
from .turbomind import tensor_problems
from .verdict import EngineVerdict


def embedded_verdict(target: Checkpoint) -> EngineVerdict:
    """specq's embedded engine loads checkpoints through transformers; 4-bit ones need a backend installed
    here (gptqmodel for GPTQ/AWQ, compressed-tensors for llmcompressor output)."""
    q = target.quantization
    if q is None:
        return EngineVerdict(engine="embedded", status="accepted")
    need = {"gptq": "gptqmodel", "awq": "gptqmodel", "compressed-tensors": "compressed_tensors"}.get(q.method)
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
