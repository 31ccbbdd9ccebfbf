"""The W4A16 kernel's logic under Triton's interpreter (`TRITON_INTERPRET=1`, CPU tensors): run as a script by
tests/unit/kernels/test_w4a16.py, so that the interpreter mode (chosen when Triton's decorators run) stays
out of the test process. Prints one JSON document: for each case, the relative error against the fp32
dequantized reference and that of the reference itself rounded to the activation dtype, and the bitwise
checks (M-invariance, determinism, the pairs-of-nibbles dequantization against the plain one, one
configuration's bits against another's, split-K's counters back at zero after a launch), and a gate/up layer
packed for silu(gate) * up against LMDeploy's activation kernel."""

from __future__ import annotations

import json
import os
import sys

os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from specq.pipeline.kernels import w4a16 as W  # noqa: E402

# (name, K, N, M, dtype, group, config, bias)
CASES = [
    ("bf16-one-row", 256, 64, 1, torch.bfloat16, 128, W.Config(block_n=64, gpi=2), False),
    (
        "bf16-split3-gpi4-ragged-n",
        768,
        96,
        5,
        torch.bfloat16,
        128,
        W.Config(block_n=64, split_k=3, gpi=4),
        True,
    ),
    (
        "fp16-16-rows-g64",
        256,
        64,
        16,
        torch.float16,
        64,
        W.Config(block_n=32, num_warps=2, prefetch=False, gpi=4),
        False,
    ),
    (  # 5 groups in splits of 2, 2, 1 and none: whole iterations, a last group alone, and an empty split
        "bf16-split4-gpi2-tail-and-empty-split",
        640,
        64,
        3,
        torch.bfloat16,
        128,
        W.Config(block_n=64, split_k=4, gpi=2, prefetch=0),
        False,
    ),
    (  # 3 tiles x 5 groups dealt into 8 runs (8 multiprocessors off the GPU): tiles cut between runs
        "bf16-balanced-cut-tiles",
        640,
        96,
        3,
        torch.bfloat16,
        128,
        W.Config(block_n=32, num_warps=2, gpi=2, prefetch=0, balanced=1),
        True,
    ),
    (  # 16 runs asked for, 15 groups in all: one group a run
        "fp16-balanced-one-group-a-run",
        640,
        96,
        2,
        torch.float16,
        128,
        W.Config(block_n=32, num_warps=2, gpi=4, balanced=2),
        False,
    ),
    ("bf16-prefill-20", 256, 64, 20, torch.bfloat16, 32, W.Config(block_n=64, split_k=2, gpi=1), False),
    ("bf16-prefill-70", 256, 48, 70, torch.bfloat16, 128, W.Config(block_n=64), True),
]


# a gate/up layer packed for silu(gate) * up: (name, K, N, M, dtype, config, bias)
SILU_MUL_CASES = [
    (
        "bf16-split3-bias",
        768,
        96,
        5,
        torch.bfloat16,
        W.Config(block_n=32, num_warps=2, split_k=3, gpi=2),
        True,
    ),
    ("fp16-one-split-16-rows", 256, 128, 16, torch.float16, W.Config(block_n=64, gpi=2, prefetch=0), False),
    (
        "bf16-balanced-cut-tiles",
        640,
        96,
        3,
        torch.bfloat16,
        W.Config(block_n=32, num_warps=2, gpi=2, prefetch=0, balanced=1),
        False,
    ),
    ("bf16-prefill-20", 256, 64, 20, torch.bfloat16, W.Config(block_n=64), True),
]


@triton.jit
def _silu_and_mul(gu_ptr, out_ptr, N: tl.constexpr, BLOCK: tl.constexpr):
    """LMDeploy 0.18's `_silu_and_mul_kernel` (lmdeploy/pytorch/kernels/cuda/activation.py) for one row: gate
    to fp32, gate / (1 + exp(-gate)) back to the 16-bit dtype, times up (the 16-bit product taken in fp32,
    where it is exact, and rounded once: Triton's interpreter multiplies 16-bit values wrongly)."""
    m = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    ok = offs < N
    gate = tl.load(gu_ptr + m * 2 * N + offs, mask=ok).to(tl.float32)
    up = tl.load(gu_ptr + m * 2 * N + N + offs, mask=ok)
    gate = (gate / (1 + tl.exp(-gate))).to(gu_ptr.dtype.element_ty)
    tl.store(out_ptr + m * N + offs, (gate.to(tl.float32) * up.to(tl.float32)).to(up.dtype), mask=ok)


def silu_and_mul(gate_up: torch.Tensor) -> torch.Tensor:
    m, n = gate_up.shape[0], gate_up.shape[1] // 2
    out = torch.empty((m, n), dtype=gate_up.dtype)
    _silu_and_mul[(m,)](gate_up, out, n, triton.next_power_of_2(n))
    return out


def silu_mul_checks() -> dict[str, dict]:
    """Each case's layer packed twice, as a plain linear and for silu(gate) * up: the second's answer against
    LMDeploy's activation kernel applied to the first's, bitwise; its width, rows alone against among M, and
    its weights (the first's, columns reordered)."""
    out = {}
    for i, (name, k, n, m, dtype, cfg, with_bias) in enumerate(SILU_MUL_CASES):
        qw, qz, s, q, z = rand_awq(k, n, 128, seed=40 + i)
        x = torch.randn(m, k, generator=torch.Generator().manual_seed(140 + i)).to(dtype)
        bias = torch.randn(n).to(dtype) if with_bias else None
        plain, fused = W.pack(qw, qz, s), W.pack(qw, qz, s, silu_mul=True)
        cols = W.silu_mul_columns(n)
        fused_bias = None if bias is None else bias[cols]
        y = W.linear(x, fused, fused_bias, cfg=cfg)
        r = {
            "shape": list(y.shape),
            "half_of": [m, n],
            "same_bits_as_lmdeploys_activation": bool(
                torch.equal(y, silu_and_mul(W.linear(x, plain, bias, cfg=cfg)))
            ),
            "weights_reordered": bool(torch.equal(W.dequantize(fused), W.dequantize(plain)[:, cols])),
        }
        if m <= W.SMALL_M:
            r["m_invariant"] = all(
                bool(torch.equal(W.linear(x[j : j + 1], fused, fused_bias, cfg=cfg)[0], y[j]))
                for j in range(m)
            )
        out[name] = r
    return out


def rand_awq(k: int, n: int, group: int, seed: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    q = torch.randint(0, 16, (k, n), dtype=torch.uint8, generator=g)
    z = torch.randint(0, 16, (k // group, n), dtype=torch.uint8, generator=g)
    s = (torch.rand(k // group, n, generator=g) * 0.02 + 0.001).to(torch.float16)
    return W.pack_awq(q), W.pack_awq(z), s, q, z


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b).norm() / b.norm()).item()


def main() -> int:
    out: dict[str, dict] = {}
    for i, (name, k, n, m, dtype, group, cfg, with_bias) in enumerate(CASES):
        qw, qz, s, q, z = rand_awq(k, n, group, seed=i)
        p = W.pack(qw, qz, s)
        x = torch.randn(m, k, generator=torch.Generator().manual_seed(100 + i)).to(dtype)
        bias = torch.randn(n).to(dtype) if with_bias else None
        y = W.linear(x, p, bias, cfg=cfg)
        ref = x.float() @ (
            (q.float() - z.float().repeat_interleave(group, 0)) * s.float().repeat_interleave(group, 0)
        )
        if bias is not None:
            ref = ref + bias.float()
        r: dict = {
            "shape": list(y.shape),
            "dtype": str(y.dtype),
            "rel_error": rel(y, ref),
            "rounding": rel(ref.to(dtype), ref),
            "lossless_repack": bool(torch.equal(W.dequantize(p), W.dequantize(W.pack(qw, qz, s)))),
            "deterministic": bool(torch.equal(y, W.linear(x, p, bias, cfg=cfg))),
            "pairs_equal_pure": bool(torch.equal(y, W.linear(x, p, bias, cfg=cfg, dequant=W.DEQUANT_PURE))),
        }
        if (cfg.split_k > 1 or cfg.balanced) and m <= W.SMALL_M:  # each tile's last block reset its counter
            r["split_counters_zero"] = bool((W._tile_counters(x.device, 1) == 0).all())
        if m <= W.SMALL_M:
            r["m_invariant"] = all(
                bool(torch.equal(W.linear(x[:j], p, bias, cfg=cfg), y[:j])) for j in range(1, m + 1)
            ) and all(bool(torch.equal(W.linear(x[j : j + 1], p, bias, cfg=cfg)[0], y[j])) for j in range(m))
            others = [  # every prefetch level (0: none .. 3: every input), with other groups an iteration
                W.Config(
                    block_n=cfg.block_n,
                    split_k=cfg.split_k,
                    num_warps=cfg.num_warps,
                    gpi=(1, 2, 4)[(pf + (cfg.gpi == 1)) % 3],
                    prefetch=pf,
                    balanced=cfg.balanced,
                )
                for pf in range(4)
                if pf != cfg.prefetch
            ]
            r["same_bits_other_gpi_and_prefetch"] = all(
                bool(torch.equal(W.linear(x, p, bias, cfg=other), y)) for other in others
            )
        out[name] = r
    # mma.sync's k order (GPUs before Hopper) relabels the same values: the interpreter gives the same bits
    for i, (name, k, n, m, dtype, group, cfg, with_bias) in enumerate(CASES):
        if m > W.SMALL_M:
            continue
        qw, qz, s, q, z = rand_awq(k, n, group, seed=i)
        x = torch.randn(m, k, generator=torch.Generator().manual_seed(100 + i)).to(dtype)
        bias = torch.randn(n).to(dtype) if with_bias else None
        y = W.linear(x, W.pack(qw, qz, s, order=W.ORDER_WGMMA), bias, cfg=cfg)
        p = W.pack(qw, qz, s, order=W.ORDER_MMA)
        out[name]["mma_order_same_bits"] = bool(torch.equal(W.linear(x, p, bias, cfg=cfg), y)) and bool(
            torch.equal(W.linear(x, p, bias, cfg=cfg, dequant=W.DEQUANT_PURE), y)
        )
    # where the balanced kernel's runs are whole splits of whole tiles, it adds the same sums in the same
    # order as the split-K grid does: 8 tiles of 4 groups in 8 runs (split 1), 4 tiles in 8 runs (split 2)
    same = []
    for n, split in ((256, 1), (128, 2)):
        qw, qz, s, q, z = rand_awq(512, n, 128, seed=11)
        p = W.pack(qw, qz, s)
        x = torch.randn(3, 512, generator=torch.Generator().manual_seed(12)).to(torch.bfloat16)
        grid = W.linear(x, p, cfg=W.Config(block_n=32, num_warps=2, split_k=split))
        balanced = W.linear(x, p, cfg=W.Config(block_n=32, num_warps=2, balanced=1))
        same.append(bool(torch.equal(balanced, grid)))
    out["balanced-as-split-k"] = {"same_bits": all(same)}
    x3 = torch.randn(2, 3, 256).to(torch.bfloat16)
    qw, qz, s, q, z = rand_awq(256, 64, 128, seed=9)
    y3 = W.linear(x3, W.pack(qw, qz, s))
    out["leading-dims"] = {"shape": list(y3.shape)}
    out["silu-mul"] = silu_mul_checks()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
