"""TurboMind's rules for 4-bit checkpoints (LMDeploy 0.18), checked before any work is done: 4 bits, group
size 128 (64 and 32 also load), GPTQ symmetric without act-order, AWQ gemm with zero points."""

from __future__ import annotations

TURBOMIND_BITS = (4,)
TURBOMIND_GROUP_SIZES = (128, 64, 32)


def turbomind_problems(method: str, bits: int, group_size: int, sym: bool, desc_act: bool) -> list[str]:
    """Why TurboMind would refuse this combination; empty when it accepts it."""
    problems: list[str] = []
    if bits not in TURBOMIND_BITS:
        problems.append(f"bits={bits} (TurboMind loads 4-bit weights only)")
    if group_size not in TURBOMIND_GROUP_SIZES:
        problems.append(f"group_size={group_size} (TurboMind accepts 128, 64 or 32)")
    if method == "gptq":
        if not sym:
            problems.append("asymmetric GPTQ (TurboMind needs sym=true)")
        if desc_act:
            problems.append("GPTQ with act-order/desc_act (TurboMind needs desc_act=false)")
    elif method == "awq":
        if sym:
            problems.append("AWQ without zero points (TurboMind needs AWQ gemm with zeros: sym=false)")
        if desc_act:
            problems.append("desc_act is a GPTQ option; AWQ has no act-order")
    return problems
