"""specq's W4A16 kernel compiled for Hopper (sm_90) and Ampere (sm_86) on the CPU with the installed Triton,
its main loop read from the `nvdisasm` listing: the weights go from memory to the tensor cores in registers.
The only shared-memory traffic a group is the activation tile, the B operand. Triton 3.7 once moved every
weight word through shared memory on Hopper, and every GPU before Hopper did until the words got mma.sync's
own k order (docs/w4a16.md, "Fewer instructions a group", "Ampere's own order"); a Triton that lays the
words out another way fails here."""

from __future__ import annotations

import collections
import re
import subprocess
import tempfile
from pathlib import Path

import pytest
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler.compiler import ASTSource

from specq.pipeline.kernels import w4a16 as W

PTRS = ("x_ptr", "qw_ptr", "s_ptr", "z_ptr", "bias_ptr", "out_ptr", "ws_ptr", "cnt_ptr")
TYPES = dict(zip(PTRS, ("*bf16", "*i32", "*fp16", "*u8", "*bf16", "*bf16", "*fp32", "*i32"), strict=True))
NVDISASM = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "nvdisasm"


def main_loop_ops(
    gpi: int,
    even: bool,
    prefetch: bool,
    maxnreg: int,
    arch: int = 90,
    order: int = W.ORDER_WGMMA,
    silu_mul: bool = False,
) -> collections.Counter[str]:
    """The opcodes of the compiled kernel's longest loop (gate_up's configuration: 64 columns, 4 warps,
    split-K, the 27B's pointers and sizes marked divisible by 16 as a launch specializes them)."""
    fn = W._w4a16_kernel
    const = dict(GROUP=128, BLOCK_M=16, NW=4, R=1, SPLIT=True, HAS_BIAS=False, DEQUANT=W.DEQUANT_ASM,
                 PREFETCH=prefetch, GPI=gpi, DOT_FP32=False, EVEN=even, ORDER=order,
                 SILU_MUL=silu_mul)  # fmt: skip
    sig = {a: TYPES.get(a, "i32") for a in fn.arg_names}
    sig.update(dict.fromkeys(const, "constexpr"))
    aligned = {*PTRS, "N", "K", "stride_xm", "stride_om"}
    attrs = {(i,): [["tt.divisibility", 16]] for i, a in enumerate(fn.arg_names) if a in aligned}
    kernel = triton.compile(
        ASTSource(fn, sig, constexprs=const, attrs=attrs),
        target=GPUTarget("cuda", arch, 32),
        options={"num_warps": 4, "num_stages": 1, "maxnreg": maxnreg},
    )
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "w4a16.cubin"
        cubin.write_bytes(kernel.asm["cubin"])
        sass = subprocess.run([str(NVDISASM), "-c", str(cubin)], capture_output=True, text=True, check=True)
    lines = sass.stdout.splitlines()
    at = (re.search(r"/\*([0-9a-f]{4,})\*/", ln) for ln in lines)
    addr = {i: int(m.group(1), 16) for i, m in enumerate(at) if m}
    labels = {m.group(1): i for i, ln in enumerate(lines) if (m := re.match(r"\.L_x_(\d+):", ln))}
    loops = []
    for i, ln in addr.items():
        m = re.search(r"BRA\s.*\.L_x_(\d+)", lines[i])
        if m and m.group(1) in labels:
            start = min(j for j in addr if j > labels[m.group(1)])
            if addr[start] < ln:
                loops.append((start, i))
    start, end = max(loops, key=lambda se: se[1] - se[0])
    ops: collections.Counter[str] = collections.Counter()
    for i in range(start, end + 1):
        if i in addr:
            text = re.sub(r"^\s*(@!?U?P\w+\s+)?", "", lines[i].split("*/", 1)[1])
            ops[text.split()[0].split(".")[0]] += 1
    return ops


@pytest.mark.skipif(not NVDISASM.exists(), reason="this Triton ships no nvdisasm")
@pytest.mark.parametrize(
    ("gpi", "even", "prefetch", "maxnreg"),
    [(2, True, False, 96), (2, False, False, 96), (2, True, True, 128), (4, True, False, 128)],
    ids=["even", "uneven", "prefetch", "4-groups"],
)
def test_the_weights_reach_the_tensor_cores_without_shared_memory(
    gpi: int, even: bool, prefetch: bool, maxnreg: int
) -> None:
    ops = main_loop_ops(gpi, even, prefetch, maxnreg)
    assert ops["HGMMA"] == 8 * gpi, ops  # 64 x 128 x 16 a group: 8 wgmma of k = 16
    # a group's activation tile (128 k x 16 rows of bf16, 4 KB over 128 threads) is two 16-byte stores a
    # thread; anything more in the loop is the weights going through shared memory
    assert ops["STS"] == 2 * gpi and ops["LDS"] == 0, ops


@pytest.mark.skipif(not NVDISASM.exists(), reason="this Triton ships no nvdisasm")
@pytest.mark.parametrize(("gpi", "maxnreg"), [(2, 96), (4, 128)], ids=["2-groups", "4-groups"])
def test_on_ampere_the_mma_order_keeps_the_weights_out_of_shared_memory(gpi: int, maxnreg: int) -> None:
    ops = main_loop_ops(gpi, True, False, maxnreg, arch=86, order=W.ORDER_MMA)
    assert ops["HMMA"] == 16 * gpi, ops  # 64 x 16 x 128 a group: 16 mma.sync m16n8k16 a warp
    # the activation tile: two 16-byte stores a thread, and eight reads of its B fragments
    assert ops["STS"] == 2 * gpi and ops["LDS"] == 8 * gpi, ops
    # wgmma's order there: Triton moves the dequantized tile through shared memory (64 more stores a group)
    other = main_loop_ops(gpi, True, False, maxnreg, arch=86, order=W.ORDER_WGMMA)
    assert other["STS"] > 20 * gpi, other


@pytest.mark.skipif(not NVDISASM.exists(), reason="this Triton ships no nvdisasm")
def test_storing_silu_of_gate_times_up_leaves_the_main_loop_as_it_is() -> None:
    # the activation is the tile's last step, once a tile: the loop that reads the weights keeps its loads,
    # stores and tensor-core instructions, and its length but for the register allocator's choices (Triton
    # 3.6: 312 instructions against 314, two shifts and an IMAD fewer)
    fused, plain = main_loop_ops(2, True, False, 96, silu_mul=True), main_loop_ops(2, True, False, 96)
    for op in ("HGMMA", "LDG", "STS", "LDS", "LDL", "STL", "BAR"):
        assert fused[op] == plain[op], (op, fused, plain)
    assert abs(sum(fused.values()) - sum(plain.values())) <= 8, (fused, plain)
