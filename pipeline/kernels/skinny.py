"""A deterministic, M-invariant linear for 16-bit weights with few output columns, for decode's 1-16 rows.

LMDeploy builds a Qwen3.5 Gated DeltaNet's gate projections `in_proj_b` and `in_proj_a` as one unquantized
linear, `in_proj_ba` (5120 → 96 at 27B), and runs it with `F.linear`. For one row cuBLAS takes a split-K
GEMM and a second kernel that reduces it, about 6.3 µs a layer for 1 MB of weights on an H100 (docs/w4a16.md),
and it may take another algorithm for 4 rows than for 1, so a verify step's gates need not be plain
decoding's bits. This kernel computes outᵀ = W · xᵀ for up to 16 rows in one launch: the rows padded to 16
in one tensor-core dot (each row's sums never see another row, so a row is the same bits among 1 or 16), K
split across blocks whose fp32 partial sums the tile's last block adds in split order (no atomics on the
data: `w4a16._finish`). More rows (prefill) go to `F.linear`. On one GPU specq's `w4a16-specq` patch of
LMDeploy runs a dense Qwen3.5's `in_proj_ba` on it (engines/lmdeploy_compat; measured in docs/w4a16.md)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from . import w4a16

SMALL_M = 16  # rows one launch computes M-invariantly
BLOCK_M = 16


@dataclass(frozen=True)
class Config:
    block_n: int = 16  # output columns a block (the tensor-core tile's 16 rows of W)
    block_k: int = 512  # k an iteration
    split_k: int = 1
    num_warps: int = 4


def config_for(n: int, k: int, sms: int) -> Config:
    """About one block a multiprocessor: the 16-column tiles times as many splits of K as fill the GPU
    (each split at least one iteration)."""
    cfg = Config()
    tiles = triton.cdiv(n, cfg.block_n)
    steps = triton.cdiv(k, cfg.block_k)
    return Config(split_k=max(1, min(steps, sms // tiles)))


@triton.jit
def _skinny_kernel(
    x_ptr, w_ptr, bias_ptr, out_ptr, ws_ptr, cnt_ptr, M, N, K, stride_xm, stride_wn, stride_om, split_k,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT: tl.constexpr,
    HAS_BIAS: tl.constexpr, DOT_FP32: tl.constexpr,
):  # fmt: skip
    """One block: BLOCK_N columns of W [N, K] over one split of K's BLOCK_K steps, for BLOCK_M rows of x."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    pid_m = tl.program_id(2)
    steps = tl.cdiv(K, BLOCK_K)
    s_begin, s_end = w4a16._split(pid_k, steps, split_k)

    offs_n, n_ok, offs_nc, offs_m, m_ok = w4a16._tile(pid_n, pid_m, N, M, BLOCK_N, BLOCK_M)
    offs_k = tl.arange(0, BLOCK_K)
    # rows past M read row M - 1 (their sums are not stored); columns past N read column 0 (the same)
    x_ptrs = x_ptr + tl.minimum(offs_m, M - 1)[None, :] * stride_xm + offs_k[:, None]  # [BLOCK_K, BLOCK_M]
    w_ptrs = w_ptr + offs_nc[:, None] * stride_wn + offs_k[None, :]  # [BLOCK_N, BLOCK_K]
    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    for s in range(s_begin, s_end):
        live = (s * BLOCK_K + offs_k) < K
        xt = tl.load(x_ptrs + s * BLOCK_K, mask=live[:, None], other=0.0)
        w = tl.load(w_ptrs + s * BLOCK_K, mask=live[None, :], other=0.0, eviction_policy="evict_first")
        if DOT_FP32:  # Triton's interpreter multiplies 16-bit operands wrongly; the same values in fp32
            acc += tl.dot(w.to(tl.float32), xt.to(tl.float32), input_precision="ieee")
        else:
            acc += tl.dot(w, xt)
    w4a16._finish(acc, out_ptr, ws_ptr, cnt_ptr, bias_ptr, offs_n, offs_nc, n_ok, offs_m, m_ok, M, N,
                  stride_om, pid_k, split_k, pid_m * tl.num_programs(0) + pid_n, SPLIT, HAS_BIAS,
                  False)  # fmt: skip


# the GPU's multiprocessor count, which `config_for` sizes the split by
multiprocessors = w4a16.multiprocessors


def linear(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, cfg: Config | None = None
) -> torch.Tensor:
    """`F.linear(x, weight, bias)` for x [..., K] and weight [N, K] of one 16-bit dtype: up to 16 rows on the
    kernel (deterministic, M-invariant), more with `F.linear`. Split-K takes the W4A16 kernel's tile counters,
    which are allocated outside a CUDA graph capture: run it once before capturing it (LMDeploy's capture
    runs the model once first)."""
    if x.dtype not in (torch.bfloat16, torch.float16) or weight.dtype != x.dtype:
        raise TypeError(
            f"specq's skinny linear takes bf16 or fp16 x and weight alike, not {x.dtype} and {weight.dtype}"
        )
    lead = x.shape[:-1]
    x2 = x.reshape(-1, x.shape[-1])
    m, (n, k) = x2.shape[0], weight.shape
    if m > SMALL_M or m == 0:
        return F.linear(x, weight, bias)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    if weight.stride(-1) != 1:
        weight = weight.contiguous()
    if cfg is None:
        cfg = config_for(n, k, multiprocessors(x.device))
    steps = triton.cdiv(k, cfg.block_k)
    split = max(1, min(cfg.split_k, steps))
    grid = (triton.cdiv(n, cfg.block_n), split, 1)
    out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if split > 1:
        ws = torch.empty((split, m, n), dtype=torch.float32, device=x.device)
        cnt = w4a16._tile_counters(x.device, grid[0])
    else:
        ws = cnt = out  # not read
    _skinny_kernel[grid](
        x2, weight, bias if bias is not None else out, out, ws, cnt, m, n, k, x2.stride(0), weight.stride(0),
        out.stride(0), split, BLOCK_M=BLOCK_M, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, SPLIT=split > 1,
        HAS_BIAS=bias is not None, DOT_FP32=w4a16.INTERPRET, num_warps=cfg.num_warps, num_stages=1,
    )  # fmt: skip
    return out.reshape(*lead, n)
