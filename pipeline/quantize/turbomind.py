"""TurboMind's rules for a quantize request, checked before any work is done. The rules themselves live in
one place, `specq.pipeline.convert.turbomind` (the mirror of LMDeploy 0.18's converter), so `quantize` and
`convert` can never disagree; this module only phrases a request as the `quantization_config` it would
produce, plus the one AWQ rule that depends on how the backend is asked to quantize."""

from __future__ import annotations

from ..checkpoint import QuantInfo
from ..convert.turbomind import SUPPORTED_GROUP_SIZES, quant_config_problems

TURBOMIND_GROUP_SIZES = tuple(sorted(SUPPORTED_GROUP_SIZES["gptq"] & SUPPORTED_GROUP_SIZES["awq"]))


def turbomind_problems(method: str, bits: int, group_size: int, sym: bool, desc_act: bool) -> list[str]:
    """Why TurboMind would refuse the checkpoint this request produces; empty when it accepts it."""
    q = QuantInfo(
        method=method,
        bits=bits,
        group_size=group_size,
        sym=sym,
        desc_act=desc_act,
        version="gemm" if method == "awq" else None,
    )
    problems = quant_config_problems(q)
    if method == "awq":
        if sym:
            # TurboMind's AWQ loader cannot synthesise zeros (weight_format.py AWQFormat)
            problems.append("AWQ without zero points (TurboMind needs AWQ gemm with zeros: sym=false)")
        if desc_act:
            problems.append("desc_act is a GPTQ option; AWQ has no act-order")
    return problems
