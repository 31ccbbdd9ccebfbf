"""specq's W4A16 linear: 4-bit AWQ weights (group-wise scales and zero points) times bf16 or fp16 activations,
written for decoding, where a step multiplies 1 to 16 rows (one token, or a speculative verify of k + 1) by
every weight of the model once, so its time is the time to read the weights.

What it guarantees, and how:
- **Deterministic and M-invariant.** Every M from 1 to 16 runs one compiled kernel (the rows are padded to
  16 inside the tensor-core dot), with a launch configuration chosen from the layer's shape (N, K, group
  size) only, never from M. Split-K writes each split's fp32 partial sums to a workspace that the
  tile's last block adds up in split order (a per-tile counter says which block is last; no atomics on the
  data). So row i of the output is bit-identical whether it was
  computed alone or among 16 rows, and two runs of the same input agree bit for bit.
- **Weights in tensor-core fragment order, read once.** The kernel computes out^T = W x^T: the dequantized
  weights are the A operand of the tensor-core instruction (wgmma on Hopper reads it from registers; mma.sync
  elsewhere), the activations, 16 rows padded, its small B operand. The weights are repacked once, at load,
  from AWQ's gemm layout (qweight int32 [K, N/8], nibbles along N) to a group-major one, int32 [K/g, N, g/8]:
  one group's words for every output column, contiguous, and within a column the words in the order the A
  fragment wants them. Lane 4g + c of a warp holds rows g and g + 8 and, for wgmma (Hopper), of every 16 k,
  k = 2c, 2c + 1, 2c + 8, 2c + 9; so word c * g/32 + wi of a column holds, at nibble e * 4 + tlo * 2 + h,
  the value of k = 16 (2 wi + tlo) + 8 h + 2 c + e (`ORDER_WGMMA`). For mma.sync (Ampere, Ada) Triton's
  operand holds 8 k in a row, k = 32 wi + 8 c + 4 tlo + 2 h + e (`ORDER_MMA`); `pack` writes the order of
  the GPU the weights are on. Each thread loads its g/32 words as one run (16 bytes for g = 128),
  one mask-and-or turns nibbles p and p + 4 into the activation-dtype pair (k, k + 1) that one fragment
  register holds, and the tile built from them (`_fragment_tile`: a permute and a reshape of the words'
  index space [4 c, 8 g, warps, 2 j, R, g/32 wi]) already has the fragment's layout: no value goes through
  shared memory on its way to the tensor cores. The zero points become one byte per (group, column); the
  scales stay as they are. The repack is lossless (`dequantize` of the packed layer equals AWQ's; tests).
  Group sizes must be divisible by 32.
- **Dequantization in registers, scale after the dot.** A 4-bit q and its zero z become the exact small
  integer q - z in the activation dtype (magic-number trick: bits 0x4300 | q are bf16 128 + q, 0x6400 | q are
  fp16 1024 + q, so (128 + q) - (128 + z) is exact); the tensor cores multiply those by the activations in
  fp32, and each group's fp32 partial sum is multiplied by its fp32 scale. Activations are read in their own
  dtype and the output is written in it: no cast kernels around the GEMM.

M > 16 (prefill) runs the same kernel with 64- or 128-row blocks (fast enough for a prefill, not
M-invariant with decode). Under Triton's interpreter (`TRITON_INTERPRET=1`, CPU tensors) the kernels
dequantize the same pairs of nibbles in plain Triton (`DEQUANT_PAIRS`); on the GPU inline PTX does it
(`DEQUANT_ASM`); the three ways, with `DEQUANT_PURE`, give the same bits (tests; the GPU run: docs/w4a16.md).

A gate/up layer packed with `silu_mul` (gate and up columns in turns of 8) has each tile store
silu(gate) * up, as LMDeploy's activation kernel would compute it from the layer's output, so an MLP runs no
activation kernel.

`Config.balanced` (not chosen by the tuner yet) runs the same loop over equal runs of the layer's groups, a
whole number of blocks a multiprocessor, instead of a grid of whole tiles (`_w4a16_balanced_kernel`).

`linear(x, packed)` is the entry point; `pack` repacks; `tune` chooses and caches a configuration per GPU
and shape (`SPECQ_W4A16_CACHE`, default `${SPECQ_CACHE:-~/.cache/specq}/w4a16/<gpu>.json`)."""

from __future__ import annotations

import json
import os
import threading
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
import triton
import triton.language as tl

SMALL_M = 16  # every M in 1..SMALL_M runs the same kernel configuration
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)  # AWQ: nibble i of a word holds column 8w + AWQ_ORDER[i]
INTERPRET = os.environ.get("TRITON_INTERPRET", "") == "1"


@dataclass(frozen=True)
class Config:
    """One launch configuration; chosen per (GPU, N, K, group size), never per M. A block of `block_n` columns
    is 16 rows a warp, `rows_per_warp` times over (block_n = 16 num_warps rows_per_warp)."""

    block_n: int = 128
    split_k: int = 1
    num_warps: int = 4
    num_stages: int = 1
    prefetch: int = 1  # the next iteration's inputs loaded ahead: 0 none, 1 its words, 2 and its zero
    # points and scales, 3 and its activations (True / False as 1 / 0)
    gpi: int = 2  # groups an iteration: 1, 2 or 4
    maxnreg: int = (
        0  # registers a thread at most (0: the compiler's choice); fewer let more blocks share an SM
    )
    balanced: int = 0  # blocks a multiprocessor of the balanced kernel (equal runs of groups; split_k
    # unused); 0: the split-K grid of whole tiles

    def __post_init__(self) -> None:
        if self.block_n % (16 * self.num_warps) or self.gpi not in (1, 2, 4) or self.prefetch not in range(4):
            raise ValueError(f"need block_n a multiple of 16 num_warps, gpi 1, 2 or 4, prefetch 0-3: {self}")
        object.__setattr__(self, "prefetch", int(self.prefetch))
        if self.maxnreg and not 24 <= self.maxnreg <= 255:
            raise ValueError(f"maxnreg must be 0 or 24..255: {self}")
        if not 0 <= self.balanced <= 32:
            raise ValueError(f"balanced must be 0 (split-K grid) or 1..32 blocks a multiprocessor: {self}")

    @property
    def rows_per_warp(self) -> int:
        return self.block_n // (16 * self.num_warps)

    def key(self) -> str:
        return (
            f"n{self.block_n}-s{self.split_k}-w{self.num_warps}-st{self.num_stages}-p{int(self.prefetch)}"
            f"-g{self.gpi}"
            + (f"-r{self.maxnreg}" if self.maxnreg else "")
            + (f"-b{self.balanced}" if self.balanced else "")
        )


@dataclass(frozen=True)
class PackedW4:
    """A W4A16 linear's weights in specq's layout (see the module docstring)."""

    qweight: torch.Tensor  # int32 [K // group, N, group // 8]
    scales: torch.Tensor  # fp16/bf16 [K // group, N]
    zeros: torch.Tensor  # uint8 [K // group, N]
    group: int
    order: int = 0  # the words' k order: ORDER_WGMMA (Hopper) or ORDER_MMA (mma.sync: Ampere, Ada), `pack`
    silu_mul: bool = False  # a gate/up layer packed so that `linear` answers silu(gate) * up, [..., N / 2]
    # (`pack(..., silu_mul=True)`: the columns `silu_mul_columns` says)

    @property
    def n(self) -> int:
        return self.qweight.shape[1]

    @property
    def k(self) -> int:
        return self.qweight.shape[0] * self.qweight.shape[2] * 8

    @property
    def out_features(self) -> int:
        """The width of `linear`'s answer: N, or N / 2 for a gate/up layer packed with `silu_mul`."""
        return self.n // 2 if self.silu_mul else self.n


# --- the integer layouts ---


def unpack_awq(qweight: torch.Tensor) -> torch.Tensor:
    """AWQ gemm int32 [R, C/8] (nibbles along the last axis, AWQ's order) -> uint8 [R, C] of values 0..15."""
    shifts = torch.tensor(
        [4 * AWQ_ORDER.index(c) for c in range(8)], dtype=torch.int32, device=qweight.device
    )
    q = (qweight.unsqueeze(-1) >> shifts) & 0xF
    return q.reshape(*qweight.shape[:-1], qweight.shape[-1] * 8).to(torch.uint8)


def pack_awq(q: torch.Tensor) -> torch.Tensor:
    """uint8 [R, C] of values 0..15 -> int32 [R, C/8], AWQ's nibble order along the last axis (`unpack_awq`'s
    inverse)."""
    r, c = q.shape
    q = q.reshape(r, c // 8, 8).to(torch.int32)
    out = torch.zeros(r, c // 8, dtype=torch.int32, device=q.device)
    for i, col in enumerate(AWQ_ORDER):
        out |= q[:, :, col] << (4 * i)
    return out


# The k order of a column's words, by the tensor-core instruction the tile feeds. Word c * g/32 + wi of a
# column holds, at nibble e * 4 + tlo * 2 + h, the value of
#   ORDER_WGMMA (Hopper's wgmma, A from registers):  k = 16 (2 wi + tlo) + 8 h + 2 c + e
#   ORDER_MMA (mma.sync: Ampere, Ada; Triton's A operand holds 8 k in a row there, `kWidth` 8):
#                                                    k = 32 wi + 8 c + 4 tlo + 2 h + e
# Either way lane 4g + c holds rows g and g + 8 and reads its g/32 words as one run; only which k a nibble
# stands for differs. With the other order, Triton moves the dequantized tile through shared memory.
ORDER_WGMMA, ORDER_MMA = 0, 1


def fragment_order(device: torch.device) -> int:
    """The order `pack` writes for a GPU: wgmma's on compute capability 9.x, mma.sync's on any other (and
    wgmma's off the GPU, where the interpreter runs either)."""
    if device.type != "cuda":
        return ORDER_WGMMA
    return ORDER_WGMMA if torch.cuda.get_device_capability(device)[0] == 9 else ORDER_MMA


# the two orders as k's factors, most significant first, and the words' own axes (word c * g/32 + wi, nibble
# e * 4 + tlo * 2 + h): `_to_fragments` and `_from_fragments` both read their permutations from here
K_FACTORS = {ORDER_WGMMA: ("wi", "tlo", "h", "c", "e"), ORDER_MMA: ("wi", "c", "tlo", "h", "e")}
WORD_AXES = ("c", "wi", "e", "tlo", "h")


def _to_fragments(q: torch.Tensor, order: int = ORDER_WGMMA) -> torch.Tensor:
    """Codes [G, group, N] (0..15; k within its group along axis 1) -> int32 words [G, N, group/8] in specq's
    fragment order (`ORDER_WGMMA` or `ORDER_MMA`, above)."""
    g, group, n = q.shape
    wpc = group // 32
    sizes = {"c": 4, "wi": wpc, "e": 2, "tlo": 2, "h": 2}
    k = K_FACTORS[order]
    q6 = q.reshape(g, *(sizes[a] for a in k), n).to(torch.int32)  # [G, k's factors, N]
    q6 = q6.permute(0, 6, *(1 + k.index(a) for a in WORD_AXES))  # [G, N, c, wi, e, tlo, h]
    q6 = q6.reshape(g, n, 4 * wpc, 8)
    out = torch.zeros((g, n, 4 * wpc), dtype=torch.int32, device=q.device)
    for i in range(8):
        out |= q6[..., i] << (4 * i)
    return out


def _from_fragments(words: torch.Tensor, order: int = ORDER_WGMMA) -> torch.Tensor:
    """`_to_fragments`' inverse: int32 words [G, N, group/8] -> codes [G, group, N] (int32)."""
    g, n, kw = words.shape
    wpc = kw // 4
    shifts = torch.arange(0, 32, 4, dtype=torch.int32, device=words.device)
    q = (words.unsqueeze(-1) >> shifts) & 0xF  # [G, N, c * wi, nibble]
    q = q.reshape(g, n, 4, wpc, 2, 2, 2)  # [G, N, c, wi, e, tlo, h]
    return q.permute(0, *(2 + WORD_AXES.index(a) for a in K_FACTORS[order]), 1).reshape(g, kw * 8, n)


def silu_mul_columns(n: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """The column of a gate/up layer (gate [0, n/2), up [n/2, n)) that each column of its `silu_mul` packing
    holds: gate and up in turns of 8, so packed columns 16a .. 16a + 15 are gate columns 8a .. 8a + 7 and
    then the same up columns. A block's tile (a multiple of 16 columns) then holds each of its columns' gate
    and up sums, in the same thread of the tensor-core accumulator (its rows g and g + 8), and the kernel
    stores silu(gate) * up for 8 of every 16 (`_store`)."""
    if n % 16:
        raise ValueError(f"a gate/up layer packed for silu(gate) * up needs N divisible by 16, not {n}")
    half = n // 2
    a = torch.arange(half // 8, device=device)[:, None, None]
    h = torch.arange(2, device=device)[None, :, None]
    j = torch.arange(8, device=device)[None, None, :]
    return (h * half + 8 * a + j).reshape(n)


def pack(
    qweight: torch.Tensor,
    qzeros: torch.Tensor,
    scales: torch.Tensor,
    order: int | None = None,
    silu_mul: bool = False,
) -> PackedW4:
    """AWQ gemm tensors as LMDeploy loads them (qweight int32 [K, N/8], qzeros int32 [K/g, N/8], scales
    [K/g, N]) -> specq's layout, in `order` (None: the one for the tensors' GPU, `fragment_order`). Lossless;
    runs on the tensors' device, one layer at a time. `silu_mul`: the layer is a gate projection's N/2
    columns and then an up projection's; its columns are reordered (`silu_mul_columns`) and `linear` answers
    silu(gate) * up, N/2 wide (a bias must be reordered the same way)."""
    if order is None:
        order = fragment_order(qweight.device)
    k, n = qweight.shape[0], qweight.shape[1] * 8
    groups = qzeros.shape[0]
    if k % groups or scales.shape != (groups, n) or qzeros.shape[1] * 8 != n:
        raise ValueError(
            f"inconsistent AWQ shapes: qweight {tuple(qweight.shape)}, qzeros "
            f"{tuple(qzeros.shape)}, scales {tuple(scales.shape)}"
        )
    group = k // groups
    if group % 32 or n % 8:
        raise ValueError(
            f"specq's W4A16 kernel needs a group size divisible by 32 and N by 8 (group {group}, N {n})"
        )
    cols = silu_mul_columns(n, qweight.device) if silu_mul else None
    packed = torch.empty((groups, n, group // 8), dtype=torch.int32, device=qweight.device)
    step = max(1, 512 // group)  # groups at a time: temporaries near 512 * N * 4 bytes, whatever the layer
    for g0 in range(0, groups, step):
        g1 = min(groups, g0 + step)
        q = unpack_awq(qweight[g0 * group : g1 * group]).reshape(g1 - g0, group, n)
        packed[g0:g1] = _to_fragments(q if cols is None else q[:, :, cols], order)
    zeros = unpack_awq(qzeros)  # [G, N]
    if cols is not None:
        zeros, scales = zeros[:, cols], scales[:, cols]
    return PackedW4(
        qweight=packed,
        scales=scales.contiguous(),
        zeros=zeros.contiguous(),
        group=group,
        order=order,
        silu_mul=silu_mul,
    )


def dequantize(p: PackedW4) -> torch.Tensor:
    """The fp32 weight [K, N] that `p` stands for, (q - z) * s: the reference the kernel is checked by (a
    `silu_mul` layer's columns in their packed order)."""
    q = _from_fragments(p.qweight, p.order).reshape(p.k, p.n).to(torch.float32)
    z = p.zeros.to(torch.float32).repeat_interleave(p.group, dim=0)
    s = p.scales.to(torch.float32).repeat_interleave(p.group, dim=0)
    return (q - z) * s


# --- the kernels ---


@triton.jit
def _pair(words, zpair, SHIFT: tl.constexpr, IS_BF16: tl.constexpr):
    """Two values of each word at once, less the zero point: nibbles SHIFT/4 and SHIFT/4 + 4 (k and k + 1)."""
    if IS_BF16:
        return tl.inline_asm_elementwise(
            f"""{{
            .reg .b32 t, one;
            mov.b32 one, 0x3F803F80;
            shr.u32 t, $2, {SHIFT};
            lop3.b32 t, t, 0x000F000F, 0x43004300, 0xEA;
            fma.rn.bf16x2 t, t, one, $3;
            mov.b32 {{$0, $1}}, t;
            }}""",
            "=h,=h,r,r",
            args=[words, zpair],
            dtype=(tl.bfloat16, tl.bfloat16),
            is_pure=True,
            pack=1,
        )
    else:
        return tl.inline_asm_elementwise(
            f"""{{
            .reg .b32 t, one;
            mov.b32 one, 0x3C003C00;
            shr.u32 t, $2, {SHIFT};
            lop3.b32 t, t, 0x000F000F, 0x64006400, 0xEA;
            fma.rn.f16x2 t, t, one, $3;
            mov.b32 {{$0, $1}}, t;
            }}""",
            "=h,=h,r,r",
            args=[words, zpair],
            dtype=(tl.float16, tl.float16),
            is_pure=True,
            pack=1,
        )


@triton.jit
def _pair_pure(words, z, SHIFT: tl.constexpr, DTYPE: tl.constexpr):
    """`_pair`'s two values in plain Triton."""
    lo = ((words >> SHIFT) & 0xF) - z
    hi = ((words >> (SHIFT + 16)) & 0xF) - z
    return lo.to(tl.float32).to(DTYPE), hi.to(tl.float32).to(DTYPE)


@triton.jit
def _fragment_tile(v, BLOCK_N: tl.constexpr, GROUP: tl.constexpr, ORDER: tl.constexpr):
    """[4 c, 8 g, NW w, 2 j, R r, WPC wi, 2 e, 2 h, 2 tlo] values -> the [BLOCK_N, GROUP] tile of row
    n = 16 NW r + 16 w + 8 j + g and k as ORDER says (`ORDER_WGMMA`, `ORDER_MMA`): a relabelling of the
    registers (each thread already holds what the tensor-core fragment wants of it), no data movement."""
    if ORDER == 0:
        v = tl.permute(v, (4, 2, 3, 1, 5, 8, 7, 0, 6))  # [r, w, j, g, wi, tlo, h, c, e]
    else:
        v = tl.permute(v, (4, 2, 3, 1, 5, 0, 8, 7, 6))  # [r, w, j, g, wi, c, tlo, h, e]
    return tl.reshape(v, (BLOCK_N, GROUP))


@triton.jit
def _dequant(
    words, z, DEQUANT: tl.constexpr, DTYPE: tl.constexpr, BLOCK_N: tl.constexpr, GROUP: tl.constexpr,
    ORDER: tl.constexpr,
):  # fmt: skip
    """words int32 [4, 8, NW, 2, R, WPC] (specq's fragment order), z int32 [1, 8, NW, 2, R, 1] zero points ->
    [BLOCK_N, GROUP] of q - z in DTYPE: exact small integers, so the three ways give the same bits."""
    if DEQUANT == 0:  # each nibble on its own: nibble e * 4 + tlo * 2 + h
        shifts = (tl.arange(0, 8) * 4)[None, None, None, None, None, None, :]
        q = (words[:, :, :, :, :, :, None] >> shifts) & 0xF
        v = (q - z[:, :, :, :, :, :, None]).to(tl.float32).to(DTYPE)
        v = tl.reshape(v, (4, 8, words.shape[2], 2, words.shape[4], words.shape[5], 2, 2, 2))  # e, tlo, h
        v = tl.permute(v, (0, 1, 2, 3, 4, 5, 6, 8, 7))  # e, h, tlo
    else:
        if DEQUANT == 2:
            IS_BF16: tl.constexpr = DTYPE == tl.bfloat16
            if IS_BF16:
                zneg = z | 0xC300  # bf16 bits of -(128 + z): the fma adds it
            else:
                zneg = z | 0xE400  # fp16 bits of -(1024 + z)
            zpair = (zneg | (zneg << 16)) + tl.zeros(words.shape, dtype=tl.int32)
            a0, b0 = _pair(words, zpair, 0, IS_BF16)  # tlo 0, h 0; e = 0 / 1
            a1, b1 = _pair(words, zpair, 4, IS_BF16)  # tlo 0, h 1
            a2, b2 = _pair(words, zpair, 8, IS_BF16)  # tlo 1, h 0
            a3, b3 = _pair(words, zpair, 12, IS_BF16)  # tlo 1, h 1
        else:
            a0, b0 = _pair_pure(words, z, 0, DTYPE)
            a1, b1 = _pair_pure(words, z, 4, DTYPE)
            a2, b2 = _pair_pure(words, z, 8, DTYPE)
            a3, b3 = _pair_pure(words, z, 12, DTYPE)
        # join adds a last axis of 2: e, then h, then tlo
        v = tl.join(tl.join(tl.join(a0, b0), tl.join(a1, b1)), tl.join(tl.join(a2, b2), tl.join(a3, b3)))
    return _fragment_tile(v, BLOCK_N, GROUP, ORDER)


@triton.jit
def _wload(ptrs, mask, LIVE: tl.constexpr, NW: tl.constexpr, R: tl.constexpr, WPC: tl.constexpr):
    """One group's words for the block, [BLOCK_N rows rho, 4 WPC words] (see the kernel), as the index space
    [4 c, 8 g, NW w, 2 j, R r, WPC wi] that `_dequant` takes (a relabelling, no data movement). Each word is
    read once, by one block, so it leaves the L2 first (`evict_first`), not the activations every block
    reads (faster at every decode shape measured, the same bits: docs/w4a16.md). LIVE: the group is known to
    be in the block's split, so no mask."""
    if LIVE:
        w = tl.load(ptrs, eviction_policy="evict_first")
    else:
        w = tl.load(ptrs, mask=mask, other=0, eviction_policy="evict_first")
    return tl.permute(tl.reshape(w, (R, 2, NW, 8, 4, WPC)), (4, 3, 2, 1, 0, 5))


@triton.jit
def _words(g, g_end, w_ptrs, gstride, zero_w, GPI: tl.constexpr, LIVE: tl.constexpr, NW: tl.constexpr,
           R: tl.constexpr, WPC: tl.constexpr):  # fmt: skip
    """The words of the GPI groups from g (`_wload`); groups past GPI repeat the first. LIVE: no masks."""
    w0 = _wload(w_ptrs + g * gstride, (zero_w + g) < g_end, LIVE, NW, R, WPC)
    w1, w2, w3 = w0, w0, w0
    if GPI >= 2:
        w1 = _wload(w_ptrs + (g + 1) * gstride, (zero_w + g + 1) < g_end, LIVE, NW, R, WPC)
    if GPI >= 4:
        w2 = _wload(w_ptrs + (g + 2) * gstride, (zero_w + g + 2) < g_end, LIVE, NW, R, WPC)
        w3 = _wload(w_ptrs + (g + 3) * gstride, (zero_w + g + 3) < g_end, LIVE, NW, R, WPC)
    return w0, w1, w2, w3


@triton.jit
def _group_inputs(g, g_end, z_ptr, frow, s_ptr, x_ptrs, N, offs_nc, offs_k, GROUP: tl.constexpr,
                  EVEN: tl.constexpr, WITH_X: tl.constexpr):  # fmt: skip
    """Group g's zero points (for the words' rows `frow`), scales and (WITH_X; else 0) activations; a group
    at or past g_end reads zeros. EVEN: every group of every iteration is live, so no masks (fewer
    instructions a group)."""
    if EVEN:
        z = tl.load(z_ptr + g * N + frow).to(tl.int32)
        s = tl.load(s_ptr + g * N + offs_nc).to(tl.float32)
    else:
        live_z = (frow * 0 + g) < g_end
        z = tl.load(z_ptr + g * N + frow, mask=live_z, other=0).to(tl.int32)
        live_n = (offs_nc * 0 + g) < g_end
        s = tl.load(s_ptr + g * N + offs_nc, mask=live_n, other=0.0).to(tl.float32)
    xt = 0
    if WITH_X:
        xt = _xload(g, g_end, x_ptrs, offs_k, GROUP, EVEN)
    return z, s, xt


@triton.jit
def _inputs(g, g_end, z_ptr, frow, s_ptr, x_ptrs, N, offs_nc, offs_k, GROUP: tl.constexpr, GPI: tl.constexpr,
            EVEN: tl.constexpr, WITH_X: tl.constexpr):  # fmt: skip
    """`_group_inputs` of the GPI groups from g, (z, s, x) four times; groups past GPI repeat the first."""
    z0, s0, x0 = _group_inputs(g, g_end, z_ptr, frow, s_ptr, x_ptrs, N, offs_nc, offs_k, GROUP, EVEN, WITH_X)
    z1, s1, x1 = z0, s0, x0
    z2, s2, x2 = z0, s0, x0
    z3, s3, x3 = z0, s0, x0
    if GPI >= 2:
        z1, s1, x1 = _group_inputs(
            g + 1, g_end, z_ptr, frow, s_ptr, x_ptrs, N, offs_nc, offs_k, GROUP, EVEN, WITH_X
        )
    if GPI >= 4:
        z2, s2, x2 = _group_inputs(
            g + 2, g_end, z_ptr, frow, s_ptr, x_ptrs, N, offs_nc, offs_k, GROUP, EVEN, WITH_X
        )
        z3, s3, x3 = _group_inputs(
            g + 3, g_end, z_ptr, frow, s_ptr, x_ptrs, N, offs_nc, offs_k, GROUP, EVEN, WITH_X
        )
    return z0, s0, x0, z1, s1, x1, z2, s2, x2, z3, s3, x3


@triton.jit
def _xload(g, g_end, x_ptrs, offs_k, GROUP: tl.constexpr, EVEN: tl.constexpr):
    """Group g's activations, [GROUP, BLOCK_M]; a group at or past g_end reads zeros (EVEN: none is)."""
    if EVEN:
        return tl.load(x_ptrs + g * GROUP)
    live_k = (offs_k * 0 + g) < g_end
    return tl.load(x_ptrs + g * GROUP, mask=live_k[:, None], other=0.0)


@triton.jit
def _activations(g, g_end, x_ptrs, offs_k, GROUP: tl.constexpr, GPI: tl.constexpr, EVEN: tl.constexpr):
    """`_xload` of the GPI groups from g; groups past GPI repeat the first."""
    x0 = _xload(g, g_end, x_ptrs, offs_k, GROUP, EVEN)
    x1, x2, x3 = x0, x0, x0
    if GPI >= 2:
        x1 = _xload(g + 1, g_end, x_ptrs, offs_k, GROUP, EVEN)
    if GPI >= 4:
        x2 = _xload(g + 2, g_end, x_ptrs, offs_k, GROUP, EVEN)
        x3 = _xload(g + 3, g_end, x_ptrs, offs_k, GROUP, EVEN)
    return x0, x1, x2, x3


@triton.jit
def _group(acc, words, z, s, xt, DEQUANT: tl.constexpr, DOT_FP32: tl.constexpr, DTYPE: tl.constexpr,
           BLOCK_N: tl.constexpr, GROUP: tl.constexpr, ORDER: tl.constexpr):  # fmt: skip
    """acc + one group's x (q - z) s for this block of columns (a dead group's zeros add exact zeros)."""
    w = _dequant(words, z, DEQUANT, DTYPE, BLOCK_N, GROUP, ORDER)
    if DOT_FP32:  # Triton's interpreter multiplies bf16 operands wrongly; the values are the same in fp32
        d = tl.dot(w.to(tl.float32), xt.to(tl.float32), input_precision="ieee")
    else:
        d = tl.dot(w, xt)  # [BLOCK_N, BLOCK_M] fp32: sum over the group of x * (q - z)
    return tl.fma(d, s[:, None], acc)  # one rounding, whatever Triton's default for fusing a * b + c


@triton.jit
def _groups(acc, c0, z0, s0, x0, c1, z1, s1, x1, c2, z2, s2, x2, c3, z3, s3, x3, DEQUANT: tl.constexpr,
            DOT_FP32: tl.constexpr, DTYPE: tl.constexpr, BLOCK_N: tl.constexpr, GROUP: tl.constexpr,
            ORDER: tl.constexpr, GPI: tl.constexpr):  # fmt: skip
    """`_group` of an iteration's GPI groups, in order."""
    acc = _group(acc, c0, z0, s0, x0, DEQUANT, DOT_FP32, DTYPE, BLOCK_N, GROUP, ORDER)
    if GPI >= 2:
        acc = _group(acc, c1, z1, s1, x1, DEQUANT, DOT_FP32, DTYPE, BLOCK_N, GROUP, ORDER)
    if GPI >= 4:
        acc = _group(acc, c2, z2, s2, x2, DEQUANT, DOT_FP32, DTYPE, BLOCK_N, GROUP, ORDER)
        acc = _group(acc, c3, z3, s3, x3, DEQUANT, DOT_FP32, DTYPE, BLOCK_N, GROUP, ORDER)
    return acc


@triton.jit
def _iteration(acc, g, g_end, w_ptrs, gstride, zero_w, z_ptr, frow, s_ptr, x_ptrs, N, offs_nc, offs_k,
               GROUP: tl.constexpr, GPI: tl.constexpr, NW: tl.constexpr, R: tl.constexpr, WPC: tl.constexpr,
               DEQUANT: tl.constexpr, DOT_FP32: tl.constexpr, DTYPE: tl.constexpr, BLOCK_N: tl.constexpr,
               ORDER: tl.constexpr):  # fmt: skip
    """acc plus the GPI groups from g, every one in the split (no masks), loaded together and added in
    order: an iteration of the kernel's loop without prefetch."""
    c0, c1, c2, c3 = _words(g, g_end, w_ptrs, gstride, zero_w, GPI, True, NW, R, WPC)
    z0, s0, x0, z1, s1, x1, z2, s2, x2, z3, s3, x3 = _inputs(
        g, g_end, z_ptr, frow, s_ptr, x_ptrs, N, offs_nc, offs_k, GROUP, GPI, True, True
    )
    return _groups(acc, c0, z0, s0, x0, c1, z1, s1, x1, c2, z2, s2, x2, c3, z3, s3, x3, DEQUANT, DOT_FP32,
                   DTYPE, BLOCK_N, GROUP, ORDER, GPI)  # fmt: skip


@triton.jit
def _w4a16_kernel(
    x_ptr, qw_ptr, s_ptr, z_ptr, bias_ptr, out_ptr, ws_ptr, cnt_ptr,
    M, N, K, stride_xm, stride_om, split_k,
    GROUP: tl.constexpr, BLOCK_M: tl.constexpr, NW: tl.constexpr, R: tl.constexpr, SPLIT: tl.constexpr,
    HAS_BIAS: tl.constexpr, DEQUANT: tl.constexpr, PREFETCH: tl.constexpr, GPI: tl.constexpr,
    DOT_FP32: tl.constexpr, EVEN: tl.constexpr, ORDER: tl.constexpr, SILU_MUL: tl.constexpr,
):  # fmt: skip
    """One block of BLOCK_N = 16 NW R columns over one split of K (`_block_sums`, then `_finish`).
    Split-K (SPLIT): each block writes its fp32 partial sums to the workspace and counts itself done on its
    tile's counter; the block that counts last adds the tile's partial sums in split order (the same sum
    whichever block that is) and sets the counter back to 0 for the next launch."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    pid_m = tl.program_id(2)
    g_begin, g_end = _split(pid_k, K // GROUP, split_k)
    acc = _block_sums(x_ptr, qw_ptr, s_ptr, z_ptr, M, N, stride_xm, pid_n, pid_m, g_begin, g_end, GROUP,
                      BLOCK_M, NW, R, DEQUANT, PREFETCH, GPI, DOT_FP32, EVEN, ORDER)  # fmt: skip
    offs_n, n_ok, offs_nc, offs_m, m_ok = _tile(pid_n, pid_m, N, M, 16 * NW * R, BLOCK_M)
    _finish(acc, out_ptr, ws_ptr, cnt_ptr, bias_ptr, offs_n, offs_nc, n_ok, offs_m, m_ok, M, N, stride_om,
            pid_k, split_k, pid_m * tl.num_programs(0) + pid_n, SPLIT, HAS_BIAS, SILU_MUL)  # fmt: skip


@triton.jit
def _w4a16_balanced_kernel(
    x_ptr, qw_ptr, s_ptr, z_ptr, bias_ptr, out_ptr, ws_ptr, cnt_ptr,
    M, N, K, stride_xm, stride_om, runs,
    GROUP: tl.constexpr, BLOCK_M: tl.constexpr, NW: tl.constexpr, R: tl.constexpr,
    HAS_BIAS: tl.constexpr, DEQUANT: tl.constexpr, PREFETCH: tl.constexpr, GPI: tl.constexpr,
    DOT_FP32: tl.constexpr, ORDER: tl.constexpr, SILU_MUL: tl.constexpr,
):  # fmt: skip
    """The same sums with the work dealt out evenly: the layer's tiles x groups, in tile-major order, are cut
    into P = `runs` equal runs, one a block (P a whole number of blocks a multiprocessor, so
    every multiprocessor gets the same number of groups to read, where a split-K grid of whole tiles leaves
    some with a block more than others). A block's run covers the end of one tile, whole tiles, and the start
    of another; a tile whole in one run is stored directly, one cut between runs is added up from the
    runs' partial sums in run order by the last to finish (`_finish_part`). The cuts depend on N, K and P
    only, never on M: M-invariant and deterministic as the split-K kernel is."""
    pid = tl.program_id(0)
    pid_m = tl.program_id(2)
    BLOCK_N: tl.constexpr = 16 * NW * R
    groups = K // GROUP
    tiles = tl.cdiv(N, BLOCK_N)
    units = tiles * groups
    u0 = _run_start(pid, runs, units)
    u1 = _run_start(pid + 1, runs, units)
    t_first = u0 // groups
    for t in range(t_first, (u1 + groups - 1) // groups):  # (no run is empty: runs <= tiles x groups)
        g_begin = tl.maximum(u0, t * groups) - t * groups
        g_end = tl.minimum(u1, t * groups + groups) - t * groups
        pid_n = t
        acc = _block_sums(x_ptr, qw_ptr, s_ptr, z_ptr, M, N, stride_xm, pid_n, pid_m, g_begin, g_end, GROUP,
                          BLOCK_M, NW, R, DEQUANT, PREFETCH, GPI, DOT_FP32, False, ORDER)  # fmt: skip
        offs_n, n_ok, offs_nc, offs_m, m_ok = _tile(pid_n, pid_m, N, M, BLOCK_N, BLOCK_M)
        if (g_end - g_begin) == groups:  # the whole tile is this run's
            _store(acc, out_ptr, bias_ptr, offs_n, offs_nc, offs_m, n_ok[:, None] & m_ok[None, :], stride_om,
                   HAS_BIAS, SILU_MUL)  # fmt: skip
        else:
            _finish_part(acc, out_ptr, ws_ptr, cnt_ptr, bias_ptr, offs_n, offs_nc, n_ok, offs_m, m_ok, M, N,
                         stride_om, pid, runs, t, t_first, units, groups, pid_m * tiles + pid_n, BLOCK_N,
                         HAS_BIAS, SILU_MUL)  # fmt: skip


@triton.jit
def _block_sums(
    x_ptr, qw_ptr, s_ptr, z_ptr, M, N, stride_xm, pid_n, pid_m, g_begin, g_end,
    GROUP: tl.constexpr, BLOCK_M: tl.constexpr, NW: tl.constexpr, R: tl.constexpr, DEQUANT: tl.constexpr,
    PREFETCH: tl.constexpr, GPI: tl.constexpr, DOT_FP32: tl.constexpr, EVEN: tl.constexpr,
    ORDER: tl.constexpr,
):  # fmt: skip
    """The fp32 sums [BLOCK_N, BLOCK_M] of column block pid_n, row block pid_m, over groups [g_begin, g_end),
    GPI groups an iteration: the GPI groups' words are loaded together, each thread reading the 16-byte runs
    of the words its tensor-core fragments need (PREFETCH, into registers one iteration ahead: 1 the words,
    2 and the zero points and scales, 3 and the activations); groups are added into the fp32 accumulator in
    order. EVEN: the groups are a whole number of iterations, so no load but a prefetch past g_end needs a
    mask. Without prefetch no load has a mask at all: the whole iterations run first and the last groups
    (fewer than GPI; none when EVEN) one at a time after them, in the same order."""
    BLOCK_N: tl.constexpr = 16 * NW * R
    WPC: tl.constexpr = GROUP // 32  # words of one column's group that one thread of its four reads
    KW: tl.constexpr = GROUP // 8
    DTYPE: tl.constexpr = x_ptr.dtype.element_ty

    # A group's words are loaded as [BLOCK_N rows rho, 4 WPC words (c, wi)], rho = g + 8 w + 8 NW j + 16 NW r
    # for row n = 16 NW r + 16 w + 8 j + g: Triton lays a contiguous 2-D load out as 16 bytes a thread, 4
    # lanes along a row (c), 8 rows (g) a warp, warps over w and registers over (j, r), which is where the
    # tensor-core fragments want the words (`_fragment_tile`). (A 6-D load of the same words got that
    # layout from Triton 3.6 and another from 3.7, which then moved every word through shared memory.)
    rho = tl.arange(0, BLOCK_N)
    wrow = (pid_n * BLOCK_N + 16 * NW * (rho // (16 * NW)) + 16 * ((rho // 8) % NW)
            + 8 * ((rho // (8 * NW)) % 2) + rho % 8)  # fmt: skip
    wrow = tl.where(wrow < N, wrow, 0)  # clamp rows past N: read a valid row, never store it
    cw = tl.arange(0, KW)
    w_ptrs = qw_ptr + wrow[:, None] * KW + cw[None, :]  # [BLOCK_N, KW]
    # the zero points' rows, in the index space [4 c, 8 g, NW w, 2 j, R r, WPC wi]
    fg = tl.arange(0, 8)[None, :, None, None, None, None]
    fw = tl.arange(0, NW)[None, None, :, None, None, None]
    fj = tl.arange(0, 2)[None, None, None, :, None, None]
    fr = tl.arange(0, R)[None, None, None, None, :, None]
    frow = pid_n * BLOCK_N + 16 * NW * fr + 16 * fw + 8 * fj + fg  # [1, 8, NW, 2, R, 1]
    frow = tl.where(frow < N, frow, 0)

    offs_n, n_ok, offs_nc, offs_m, m_ok = _tile(pid_n, pid_m, N, M, BLOCK_N, BLOCK_M)
    offs_k = tl.arange(0, GROUP)
    gstride = N * KW  # the layout is group-major: one group's words of every column, contiguous
    zero_w = cw[None, :] * 0  # a scalar condition as a tensor mask (the interpreter needs one)

    # rows past M read row M - 1 (no mask): a row's sums never mix with another's, and theirs are not stored
    x_ptrs = x_ptr + tl.minimum(offs_m, M - 1)[None, :] * stride_xm + offs_k[:, None]
    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    if PREFETCH:  # the first iteration's words (2: and zero points and scales; 3: and activations)
        n0, n1, n2, n3 = _words(g_begin, g_end, w_ptrs, gstride, zero_w, GPI, EVEN, NW, R, WPC)
        if PREFETCH >= 2:
            nz0, ns0, nx0, nz1, ns1, nx1, nz2, ns2, nx2, nz3, ns3, nx3 = _inputs(
                g_begin, g_end, z_ptr, frow, s_ptr, x_ptrs, N, offs_nc, offs_k, GROUP, GPI, EVEN,
                PREFETCH == 3)  # fmt: skip
    if PREFETCH:
        for g in range(g_begin, g_end, GPI):
            # every input of the iteration's groups is asked for before the first group is computed; what was
            # loaded ahead is taken, and the next iteration's is asked for (its groups may be past the split)
            c0, c1, c2, c3 = n0, n1, n2, n3
            if PREFETCH >= 2:
                z0, s0, x0, z1, s1, x1 = nz0, ns0, nx0, nz1, ns1, nx1
                z2, s2, x2, z3, s3, x3 = nz2, ns2, nx2, nz3, ns3, nx3
            if PREFETCH == 2:  # the activations come from the L2, not memory
                x0, x1, x2, x3 = _activations(g, g_end, x_ptrs, offs_k, GROUP, GPI, EVEN)
            n0, n1, n2, n3 = _words(g + GPI, g_end, w_ptrs, gstride, zero_w, GPI, False, NW, R, WPC)
            if PREFETCH >= 2:
                nz0, ns0, nx0, nz1, ns1, nx1, nz2, ns2, nx2, nz3, ns3, nx3 = _inputs(
                    g + GPI, g_end, z_ptr, frow, s_ptr, x_ptrs, N, offs_nc, offs_k, GROUP, GPI, False,
                    PREFETCH == 3)  # fmt: skip
            else:
                z0, s0, x0, z1, s1, x1, z2, s2, x2, z3, s3, x3 = _inputs(
                    g, g_end, z_ptr, frow, s_ptr, x_ptrs, N, offs_nc, offs_k, GROUP, GPI, EVEN, True
                )
            acc = _groups(acc, c0, z0, s0, x0, c1, z1, s1, x1, c2, z2, s2, x2, c3, z3, s3, x3, DEQUANT,
                          DOT_FP32, DTYPE, BLOCK_N, GROUP, ORDER, GPI)  # fmt: skip
    else:
        # whole iterations of GPI groups, every one in the split (no masks), then the split's last groups one
        # at a time: the groups are added in the same order either way, so the same bits at any GPI
        g_whole = g_end - (tl.maximum(g_end - g_begin, 0) & (GPI - 1))  # GPI is 1, 2 or 4
        for g in range(g_begin, g_whole, GPI):
            acc = _iteration(acc, g, g_end, w_ptrs, gstride, zero_w, z_ptr, frow, s_ptr, x_ptrs, N, offs_nc,
                             offs_k, GROUP, GPI, NW, R, WPC, DEQUANT, DOT_FP32, DTYPE, BLOCK_N,
                             ORDER)  # fmt: skip
        if GPI > 1 and not EVEN:  # (EVEN: no group is left)
            for g in range(g_whole, g_end):
                acc = _iteration(acc, g, g_end, w_ptrs, gstride, zero_w, z_ptr, frow, s_ptr, x_ptrs, N,
                                 offs_nc, offs_k, GROUP, 1, NW, R, WPC, DEQUANT, DOT_FP32, DTYPE, BLOCK_N,
                                 ORDER)  # fmt: skip
    return acc


@triton.jit
def _split(pid_k, count, split_k):
    """Split pid_k's part [begin, end) of `count` steps of K (groups, or a skinny kernel's blocks of k): the
    first splits take ceil(count / split_k) steps each, the last what is left (possibly none)."""
    per_split = tl.cdiv(count, split_k)
    begin = pid_k * per_split
    return begin, tl.minimum(begin + per_split, count)


@triton.jit
def _tile(pid_n, pid_m, N, M, BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr):
    """A block's output columns offs_n (n_ok: within N; offs_nc: clamped into N, for reads) and rows offs_m
    (m_ok: within M)."""
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = offs_n < N
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    return offs_n, n_ok, tl.where(n_ok, offs_n, 0), offs_m, offs_m < M


@triton.jit
def _store(sums, out_ptr, bias_ptr, offs_n, offs_nc, offs_m, mask, stride_om, HAS_BIAS: tl.constexpr,
           SILU_MUL: tl.constexpr):  # fmt: skip
    """A tile's fp32 sums [BLOCK_N columns, BLOCK_M rows], plus the bias, into out [M, N] in its dtype.
    SILU_MUL: the tile's columns are gate and up in turns of 8 (`silu_mul_columns`), and out [M, N / 2]
    takes silu(gate) * up, computed as LMDeploy's `silu_and_mul` kernel computes it from gate_up stored in
    the output dtype (gate to fp32, silu, back to the dtype, times up), so the same bits as this kernel's
    gate_up followed by that kernel."""
    if HAS_BIAS:
        sums += tl.load(bias_ptr + offs_nc).to(tl.float32)[:, None]
    DT: tl.constexpr = out_ptr.dtype.element_ty
    if SILU_MUL:
        BN: tl.constexpr = sums.shape[0]
        BM: tl.constexpr = sums.shape[1]
        # [16a + 8h + j, m] -> [a, j, m, h]: h = 0 the gate, 1 the up projection (one thread's rows g, g + 8)
        gate, up = tl.split(tl.permute(tl.reshape(sums, (BN // 16, 2, 8, BM)), (0, 2, 3, 1)))
        ok, _ = tl.split(tl.permute(tl.reshape(mask, (BN // 16, 2, 8, BM)), (0, 2, 3, 1)))
        col, _ = tl.split(tl.permute(tl.reshape(offs_n, (BN // 16, 2, 8)), (0, 2, 1)))  # 16a + j
        gate = gate.to(DT).to(tl.float32)
        silu = (gate / (1 + tl.exp(-gate))).to(DT)
        # the product of two 16-bit values is exact in fp32, so rounding it once is LMDeploy's 16-bit multiply
        # (which Triton's interpreter gets wrong)
        act = (silu.to(tl.float32) * up.to(DT).to(tl.float32)).to(DT)
        o_ptrs = out_ptr + offs_m[None, None, :] * stride_om + ((col // 16) * 8 + col % 8)[:, :, None]
        tl.store(o_ptrs, act, mask=ok)
    else:
        o_ptrs = out_ptr + offs_m[None, :] * stride_om + offs_n[:, None]
        tl.store(o_ptrs, sums.to(DT), mask=mask)


@triton.jit
def _finish(acc, out_ptr, ws_ptr, cnt_ptr, bias_ptr, offs_n, offs_nc, n_ok, offs_m, m_ok, M, N, stride_om,
            pid_k, split_k, tile, SPLIT: tl.constexpr, HAS_BIAS: tl.constexpr,
            SILU_MUL: tl.constexpr):  # fmt: skip
    """A block's fp32 sums acc [BLOCK_N columns, BLOCK_M rows] of its split of K into out [M, N] (rows m_ok,
    columns n_ok; offs_nc: the columns clamped into N), with the bias. Split-K (SPLIT): the block writes its
    partial sums to the workspace [split_k, M, N] and counts itself done on its tile's counter (cnt_ptr +
    tile); the block that counts last adds the tile's partial sums in split order (the same sum whichever
    block that is) and sets the counter back to 0 for the next launch."""
    mask = n_ok[:, None] & m_ok[None, :]
    if not SPLIT:
        _store(acc, out_ptr, bias_ptr, offs_n, offs_nc, offs_m, mask, stride_om, HAS_BIAS, SILU_MUL)
    else:
        ws_tile = ws_ptr + offs_m[None, :] * N + offs_n[:, None]
        tl.store(ws_tile + pid_k * M * N, acc, mask=mask)
        tl.debug_barrier()  # every thread's partial sums are written before the block counts itself done
        tile_cnt = cnt_ptr + tile
        done = tl.atomic_add(tile_cnt, 1, sem="acq_rel", scope="gpu")  # orders the stores above before it
        if done == split_k - 1:  # the tile's last block: every split's partial sums are in the workspace
            total = tl.load(ws_tile, mask=mask, other=0.0, cache_modifier=".cg")
            for sp in range(1, split_k):  # in split order: the same sum every time
                total += tl.load(ws_tile + sp * M * N, mask=mask, other=0.0, cache_modifier=".cg")
            _store(total, out_ptr, bias_ptr, offs_n, offs_nc, offs_m, mask, stride_om, HAS_BIAS, SILU_MUL)
            tl.atomic_xchg(tile_cnt, 0, sem="relaxed", scope="gpu")  # ready for the next launch


@triton.jit
def _run_start(p, runs, units):
    """The first unit (tile x groups + group) of run p of `runs` equal runs of `units`: p units // runs (the
    product in 64 bits)."""
    return ((p + tl.zeros((), dtype=tl.int64)) * units // runs).to(tl.int32)


@triton.jit
def _run_of(u, runs, units):
    """The run that unit u is in: the last p with p units // runs <= u, ((u + 1) runs - 1) // units."""
    return (((u + tl.zeros((), dtype=tl.int64) + 1) * runs - 1) // units).to(tl.int32)


@triton.jit
def _finish_part(acc, out_ptr, ws_ptr, cnt_ptr, bias_ptr, offs_n, offs_nc, n_ok, offs_m, m_ok, M, N,
                 stride_om, pid, P, t, t_first, units, groups, tile, BLOCK_N: tl.constexpr,
                 HAS_BIAS: tl.constexpr, SILU_MUL: tl.constexpr):  # fmt: skip
    """`_finish` for a run of the balanced kernel that covers part of tile t: its partial sums go to the
    workspace [2 P, M, BLOCK_N] at slot 2 pid (its first tile) or 2 pid + 1 (its last), and the tile's last
    run to count itself done adds the partial sums of the runs that cover the tile, in run order."""
    mask = n_ok[:, None] & m_ok[None, :]
    cols = offs_n - t * BLOCK_N
    ws_tile = ws_ptr + offs_m[None, :] * BLOCK_N + cols[:, None]
    slot = 2 * pid + (t != t_first)
    tl.store(ws_tile + slot * M * BLOCK_N, acc, mask=mask)
    tl.debug_barrier()  # every thread's partial sums are written before the run counts itself done
    # the runs that cover tile t: run p covers units [p units // P, (p + 1) units // P), so unit u is run
    # ((u + 1) P - 1) // units's
    p_first = _run_of(t * groups, P, units)
    p_last = _run_of(t * groups + groups - 1, P, units)
    tile_cnt = cnt_ptr + tile
    done = tl.atomic_add(tile_cnt, 1, sem="acq_rel", scope="gpu")  # orders the stores above before it
    if done == p_last - p_first:  # the tile's last run: every run's partial sums are in the workspace
        first = 2 * p_first + (t * groups > _run_start(p_first, P, units))  # p_first's slot for tile t
        total = tl.load(ws_tile + first * M * BLOCK_N, mask=mask, other=0.0, cache_modifier=".cg")
        for q in range(p_first + 1, p_last + 1):  # in run order: the same sum every time (each starts in t)
            total += tl.load(ws_tile + 2 * q * M * BLOCK_N, mask=mask, other=0.0, cache_modifier=".cg")
        _store(total, out_ptr, bias_ptr, offs_n, offs_nc, offs_m, mask, stride_om, HAS_BIAS, SILU_MUL)
        tl.atomic_xchg(tile_cnt, 0, sem="relaxed", scope="gpu")  # ready for the next launch


# --- launching ---

DEFAULT = Config()
PREFILL = Config(block_n=128, split_k=1, num_warps=8, num_stages=2, prefetch=False, gpi=1)  # M > SMALL_M


DEQUANT_PURE, DEQUANT_PAIRS, DEQUANT_ASM = 0, 1, 2  # the same bits three ways (tests compare them)

_counters: dict[torch.device, torch.Tensor] = {}


def _tile_counters(device: torch.device, tiles: int) -> torch.Tensor:
    """Split-K's per-tile counters on `device`: zeros between launches (each launch's last blocks set theirs
    back), shared by every layer, since launches on a stream run one after another. Allocated, or grown,
    outside a CUDA graph capture: `prepare` does it when a layer loads."""
    with _lock:
        buf = _counters.get(device)
        if buf is None or buf.numel() < tiles:
            if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
                raise RuntimeError(
                    "specq's W4A16 kernel: split-K counters were not allocated before CUDA graph capture "
                    "(call w4a16.prepare on each layer after loading it)"
                )
            buf = torch.zeros(max(tiles, 4096), dtype=torch.int32, device=device)
            _counters[device] = buf
        return buf


def splits(groups: int, split_k: int, gpi: int) -> tuple[int, bool]:
    """The number of splits a launch runs over a layer's `groups` (split_k, at most one a group), and whether
    they are even: every split the same whole number of iterations of `gpi` groups (the kernel's EVEN)."""
    split = max(1, min(split_k, groups))
    return split, groups % split == 0 and (groups // split) % gpi == 0


def _launch(
    x2: torch.Tensor, p: PackedW4, bias: torch.Tensor | None, cfg: Config, block_m: int, dequant: int
) -> torch.Tensor:
    m, n, k = x2.shape[0], p.n, p.k
    out = torch.empty((m, p.out_features), dtype=x2.dtype, device=x2.device)
    extra = {"maxnreg": cfg.maxnreg} if cfg.maxnreg and not INTERPRET else {}
    if cfg.balanced and m <= block_m:
        runs = min(cfg.balanced * multiprocessors(x2.device), triton.cdiv(n, cfg.block_n) * (k // p.group))
        ws = torch.empty((2 * runs, m, cfg.block_n), dtype=torch.float32, device=x2.device)
        cnt = _tile_counters(x2.device, triton.cdiv(n, cfg.block_n))
        _w4a16_balanced_kernel[(runs, 1, 1)](
            x2, p.qweight, p.scales, p.zeros, bias if bias is not None else out, out, ws, cnt, m, n, k,
            x2.stride(0), out.stride(0), runs, GROUP=p.group, BLOCK_M=block_m, NW=cfg.num_warps,
            R=cfg.rows_per_warp, HAS_BIAS=bias is not None, DEQUANT=dequant, PREFETCH=cfg.prefetch,
            GPI=cfg.gpi, DOT_FP32=INTERPRET, ORDER=p.order, SILU_MUL=p.silu_mul, num_warps=cfg.num_warps,
            num_stages=cfg.num_stages, **extra,
        )  # fmt: skip
        return out
    split, even = splits(k // p.group, cfg.split_k, cfg.gpi)
    grid = (triton.cdiv(n, cfg.block_n), split, triton.cdiv(m, block_m))
    if split > 1:
        ws = torch.empty((split, m, n), dtype=torch.float32, device=x2.device)
        cnt = _tile_counters(x2.device, grid[0] * grid[2])
    else:
        ws = cnt = out  # not read
    _w4a16_kernel[grid](
        x2,
        p.qweight,
        p.scales,
        p.zeros,
        bias if bias is not None else out,
        out,
        ws,
        cnt,
        m,
        n,
        k,
        x2.stride(0),
        out.stride(0),
        split,
        GROUP=p.group,
        BLOCK_M=block_m,
        NW=cfg.num_warps,
        R=cfg.rows_per_warp,
        SPLIT=split > 1,
        HAS_BIAS=bias is not None,
        DEQUANT=dequant,
        PREFETCH=cfg.prefetch,
        GPI=cfg.gpi,
        DOT_FP32=INTERPRET,
        EVEN=even,
        ORDER=p.order,
        SILU_MUL=p.silu_mul,
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
        **extra,
    )
    return out


def linear(
    x: torch.Tensor,
    p: PackedW4,
    bias: torch.Tensor | None = None,
    cfg: Config | None = None,
    dequant: int | None = None,
) -> torch.Tensor:
    """x [..., K] (bf16 or fp16) times the packed weight: [..., N] in x's dtype (a `silu_mul` layer's
    silu(gate) * up: [..., N / 2]). `cfg`: None takes the tuned (or default) configuration for this GPU and
    shape; `dequant`: None takes the inline PTX on a GPU and the pairs in plain Triton under the
    interpreter."""
    if x.dtype not in (torch.bfloat16, torch.float16):
        raise TypeError(f"specq's W4A16 kernel takes bf16 or fp16 activations, not {x.dtype}")
    lead = x.shape[:-1]
    x2 = x.reshape(-1, x.shape[-1])
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    if cfg is None:
        cfg = config_for(p.n, p.k, x.device, p.group)
    if dequant is None:
        dequant = DEQUANT_ASM if (x.is_cuda and not INTERPRET) else DEQUANT_PAIRS
    m = x2.shape[0]
    if m <= SMALL_M:
        out = _launch(x2, p, bias, cfg, SMALL_M, dequant)
    else:  # prefill: bigger row blocks (each reads the weights once); not M-invariant with decode
        out = _launch(x2, p, bias, PREFILL, 64 if m <= 64 else 128, dequant)
    return out.reshape(*lead, p.out_features)


# --- choosing a configuration ---

# a block's registers bound how many blocks share a multiprocessor, and so how many bytes of weights are in
# flight: 64 columns and 4 warps with 2 groups an iteration take 96 registers a thread (5 blocks an SM); one
# group an iteration with the next one's words, zero points and scales loaded ahead (prefetch 2) takes 80 (6
# blocks), without prefetching 72 (7 blocks) (Triton 3.6-3.9, sm_90, read from the compiled code); caps that
# spill a few bytes are candidates too, for the timing to judge
REG_CAPS = {  # (prefetch, gpi) -> maxnreg
    (0, 2): (96, 80), (0, 4): (128,), (1, 2): (96, 128),
    (0, 1): (72,), (1, 1): (80,), (2, 1): (80,), (3, 1): (88,), (2, 2): (128,),
}  # fmt: skip
CANDIDATES = tuple(
    Config(block_n=bn, split_k=sk, num_warps=w, num_stages=st, prefetch=pf, gpi=gpi, maxnreg=r)
    for bn, w in ((64, 4), (128, 4), (128, 8), (256, 8))
    for st, pf, gpi, r in (
        *((1, pf, gpi, 0) for pf in (1, 0) for gpi in (2, 4)),  # groups in flight in registers
        *((1, pf, gpi, r) for (pf, gpi), caps in REG_CAPS.items() for r in caps if bn == 64 and w == 4),
        *((st, 0, gpi, 0) for st in (3, 4) for gpi in (1, 2)),  # or through Triton's pipeliner (cp.async)
    )
    for sk in (1, 2, 4, 8, 16)
)
# the benchmark's quick search: blocks of 64 columns and 4 warps (what every shape chose on the H100 and the
# H200), groups in flight in registers, with and without a register cap
QUICK_CANDIDATES = tuple(c for c in CANDIDATES if c.block_n == 64 and c.num_warps == 4 and c.num_stages == 1)
# what a shape the shipped table lacks is tuned over when a model loads: the quick search less the three
# one-group families with a prefetch, which no shape chose on the H100 (2026-12-07); one group capped at 72
# registers (qkv_proj's choice) and two groups with prefetch level 2 (in_proj_z's) are in
LOAD_CANDIDATES = tuple(
    c
    for c in QUICK_CANDIDATES
    if (c.gpi > 1 and c.prefetch < 2) or (c.prefetch, c.gpi, c.maxnreg) in ((0, 1, 72), (2, 2, 128))
)
# the balanced kernel (equal runs of groups, `balanced` blocks a multiprocessor) in the families that fit 4 or
# more blocks an SM with at most a few spill loads in the loop (sm_90, Triton 3.6): timed by the benchmark's
# `--families`, not yet among the tuner's candidates (not timed on a GPU yet)
BALANCED_CANDIDATES = tuple(
    Config(block_n=64, num_warps=4, gpi=gpi, maxnreg=r, prefetch=0, balanced=b)
    for b, gpi, r in ((4, 2, 96), (5, 2, 96), (6, 1, 72), (7, 1, 72))
)
_lock = threading.Lock()
_chosen: dict[str, Config] = {}


def multiprocessors(device: torch.device) -> int:
    """The GPU's multiprocessor count, which the balanced kernel's grid (and the skinny kernel's split) is
    sized by (8 off the GPU)."""
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 8


def _gpu_name(device: torch.device) -> str:
    if device.type != "cuda":
        return device.type
    return torch.cuda.get_device_name(device).replace(" ", "-")


def cache_file(device: torch.device) -> Path:
    root = os.environ.get("SPECQ_W4A16_CACHE")
    if root:
        return Path(root).expanduser() / f"{_gpu_name(device)}.json"
    base = Path(os.environ.get("SPECQ_CACHE", "~/.cache/specq")).expanduser()
    return base / "w4a16" / f"{_gpu_name(device)}.json"


def _shape_key(n: int, k: int, group: int = 128) -> str:
    """Configurations are chosen per shape, for bf16 activations; fp16 runs the same instruction mix."""
    return f"{n}x{k}-g{group}"


SHIPPED = Path(__file__).resolve().parent / "w4a16_tuned.json"  # choices measured by the project, per GPU


def _shipped(device: torch.device) -> dict[str, dict]:
    try:
        data = json.loads(SHIPPED.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    table = data.get(_gpu_name(device), {}) if isinstance(data, dict) else {}
    return table if isinstance(table, dict) else {}


def _read_cache(device: torch.device) -> dict[str, dict]:
    try:
        data = json.loads(cache_file(device).read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _write_cache(device: torch.device, key: str, cfg: Config, us: float) -> None:
    path = cache_file(device)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        data = _read_cache(device)
        data[key] = {**asdict(cfg), "us": round(us, 2)}
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only cache only costs a re-tune in the next process


def _cached(key: str, device: torch.device) -> dict | None:
    return _read_cache(device).get(key) or _shipped(device).get(key)


def config_for(n: int, k: int, device: torch.device, group: int = 128) -> Config:
    """The configuration chosen for this shape on this GPU: tuned earlier (this process, the cache file, or
    the table shipped with specq), else the default. Never depends on M."""
    key = _shape_key(n, k, group)
    with _lock:
        if key in _chosen:
            return _chosen[key]
        entry = _cached(key, device)
        cfg = DEFAULT
        if entry:
            try:
                cfg = Config(**{f: entry[f] for f in asdict(DEFAULT) if f in entry})
            except (KeyError, TypeError):
                cfg = DEFAULT
        _chosen[key] = cfg
        return cfg


ROTATE_BYTES = 256 << 20  # more weights than any L2 holds: each timed launch reads its copy from memory


def copies_to_rotate(nbytes: int, least: int = 1) -> int:
    """How many copies of a layer of `nbytes` make ROTATE_BYTES at least (and `least` at least), so that
    launches timed one after another over them each read their copy from memory, not the L2."""
    return max(least, -(-ROTATE_BYTES // nbytes))


# a GPU that was idle runs slow for a while: on the H100 (2026-12-07) the benchmark's first timings after its
# checks read 2-11 % slow even after 20 ms of replays, and not when another kernel had run first; so a graph
# is replayed for WARM_MS before it is timed, and a series of timings starts with COLD_MS of load
WARM_MS = 20.0
COLD_MS = 300.0


def graph_us(ops: list, reps: int = 10, warm_ms: float = WARM_MS) -> float:
    """Median µs per op of a CUDA graph that runs `ops` (callables) once each: the launch cost is the
    graph's, as in an engine that captures its decode step, not Python's. The graph is replayed back to back
    for about `warm_ms` first, so the timed replays see a busy GPU."""
    import statistics

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for op in ops:
            op()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for op in ops:
            op()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    graph.replay()
    end.record()
    end.synchronize()
    for _ in range(min(10_000, int(warm_ms / max(start.elapsed_time(end), 1e-3)))):
        graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / len(ops))
    return statistics.median(times)


def rotating_copies(p: PackedW4) -> list[PackedW4]:
    """`p` and copies of it, ROTATE_BYTES in all at least: timed one after another, each launch reads its
    weights from memory, not the L2."""
    nbytes = p.qweight.numel() * 4 + p.scales.numel() * 2 + p.zeros.numel()
    return [p] + [
        replace(p, qweight=p.qweight.clone(), scales=p.scales.clone(), zeros=p.zeros.clone())
        for _ in range(copies_to_rotate(nbytes) - 1)
    ]


def tune(
    p: PackedW4, dtype: torch.dtype = torch.bfloat16, candidates=CANDIDATES, rows: int = SMALL_M,
    force: bool = False,
) -> Config:  # fmt: skip
    """Time every candidate on this GPU at `rows` rows (decode's largest M; the choice then serves every M up
    to SMALL_M), each as a CUDA graph over copies of the weights that outsize the L2, and keep the fastest,
    in this process and in the cache file. Returns the known choice unless `force`."""
    key = _shape_key(p.n, p.k, p.group)
    device = p.qweight.device
    if not force and _cached(key, device):
        return config_for(p.n, p.k, device, p.group)
    copies = rotating_copies(p)
    x = torch.randn(rows, p.k, dtype=dtype, device=device)
    best: tuple[float, Config] | None = None
    warm = COLD_MS
    for cfg in candidates:
        try:
            us = graph_us([lambda c=c, cfg=cfg: linear(x, c, cfg=cfg) for c in copies], reps=5, warm_ms=warm)
            warm = WARM_MS
        except Exception:  # a configuration this GPU cannot run (shared memory, registers): skip it
            continue
        if best is None or us < best[0]:
            best = (us, cfg)
    del copies
    if device.type == "cuda":  # the copies' memory goes back to the device: an engine sizes its KV cache next
        torch.cuda.empty_cache()
    if best is None:
        return DEFAULT
    with _lock:
        _chosen[key] = best[1]
    _write_cache(device, key, best[1], best[0])
    return best[1]


def prepare(p: PackedW4) -> Config:
    """Make sure `p`'s shape has a configuration before it is used (LMDeploy captures CUDA graphs after
    loading, and nothing may be timed inside a capture): known ones are kept; on a GPU, an unknown shape is
    tuned now (`SPECQ_W4A16_TUNE=0`: take the default instead). Split-K's counters are allocated here too, for
    any block size."""
    if p.qweight.is_cuda and os.environ.get("SPECQ_W4A16_TUNE", "1") != "0":
        cfg = tune(p, candidates=LOAD_CANDIDATES)
    else:
        cfg = config_for(p.n, p.k, p.qweight.device, p.group)
    _tile_counters(p.qweight.device, triton.cdiv(p.n, 16))
    return cfg
