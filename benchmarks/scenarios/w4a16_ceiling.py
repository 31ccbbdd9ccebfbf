"""How much of the W4A16 kernel's time is reading: at Qwen3.5-27B's large shapes, the shipped configuration
(pipeline/kernels/w4a16.py) beside a probe that launches the same grid and reads the same words in the same
order with no dequantization, no dot and no split-K reduction (each block XORs the words it reads and writes
one word a column), and beside torch's own max over the words (a plain read of the same bytes). µs at M = 1
from CUDA graphs over weight copies that outsize the L2 (`w4a16.graph_us`), and the kernel replaying one copy
(from the L2 where the layer fits there: its time without the memory). If the probe reads at the card's
bandwidth and the kernel does not, the arithmetic around the loads is what holds the kernel; if the probe is
as slow as the kernel, the grid and its loads are. Writes w4a16_ceiling.json and w4a16_ceiling.md to --out."""

from __future__ import annotations

import argparse
import datetime as dt
import json
from pathlib import Path
from typing import Any

import torch
import triton
import triton.language as tl

from specq.pipeline.kernels import w4a16 as W

from .w4a16_kernel import SHAPES, awq_bytes, rand_awq

DEFAULT_SHAPES = "gate_up,down,in_proj_qkv,in_proj_qkvz"
# probe variants beside the shipped grid: (label, block_n, num_warps, groups an iteration (0: the shipped
# configuration's), split-K factor over the shipped one, with the zero points and scales)
PROBES: tuple[tuple[str, int, int, int, int, bool], ...] = (
    ("words", 64, 4, 0, 1, False),
    ("words, zeros, scales", 64, 4, 0, 1, True),
    ("words, 1 group an iteration", 64, 4, 1, 1, False),
    ("words, 4 groups an iteration", 64, 4, 4, 1, False),
    ("words, 128 columns, 8 warps", 128, 8, 0, 1, False),
    ("words, twice the splits", 64, 4, 0, 2, False),
)


@triton.jit
def _probe_kernel(qw_ptr, s_ptr, z_ptr, out_ptr, N, K, split_k, GROUP: tl.constexpr, BLOCK_N: tl.constexpr,
                  GPI: tl.constexpr, ZS: tl.constexpr, EVEN: tl.constexpr):  # fmt: skip
    """The W4A16 kernel's walk over its split of the groups, words [groups, N, GROUP / 8] read with the same
    hint, GPI groups an iteration, XORed instead of multiplied; out[pid_k * N + n] = XOR of column n's words
    of the split (plus the integer part of Σ z·s when ZS reads the zero points and scales too)."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    KW: tl.constexpr = GROUP // 8
    groups = K // GROUP
    g_begin, g_end = W._split(pid_k, groups, split_k)  # the kernel's own split
    rows = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rows = tl.where(rows < N, rows, 0)
    cw = tl.arange(0, KW)
    ptrs = qw_ptr + rows[:, None] * KW + cw[None, :]
    acc = tl.zeros((BLOCK_N, KW), dtype=tl.int32)
    zs = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for g in range(g_begin, g_end, GPI):
        for i in tl.static_range(GPI):
            if EVEN:
                w = tl.load(ptrs + (g + i) * N * KW, eviction_policy="evict_first")
            else:
                live = (cw[None, :] * 0 + g + i) < g_end
                w = tl.load(ptrs + (g + i) * N * KW, mask=live, other=0, eviction_policy="evict_first")
            acc ^= w
            if ZS:
                gz = tl.minimum(g + i, g_end - 1)
                z = tl.load(z_ptr + gz * N + rows).to(tl.float32)
                s = tl.load(s_ptr + gz * N + rows).to(tl.float32)
                zs += z * s
    n_ok = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) < N
    tl.store(out_ptr + pid_k * N + rows, tl.xor_sum(acc, axis=1) + zs.to(tl.int32), mask=n_ok)


def probe(p: Any, split_k: int, block_n: int, num_warps: int, gpi: int, zs: bool) -> Any:
    """One probe launch over the packed layer `p` (`w4a16.PackedW4`): int32 [split_k, N], each column's
    words of each split XORed (and, with zs, Σ z·s of its groups added)."""
    n = p.n
    split, even = W.splits(p.qweight.shape[0], split_k, gpi)  # the kernel's own splits
    out = torch.empty((split, n), dtype=torch.int32, device=p.qweight.device)
    _probe_kernel[(triton.cdiv(n, block_n), split)](
        p.qweight, p.scales, p.zeros, out, n, p.k, split, GROUP=p.group, BLOCK_N=block_n, GPI=gpi, ZS=zs,
        EVEN=even, num_warps=num_warps,
    )  # fmt: skip
    return out


def measure(name: str, n: int, k: int) -> dict[str, Any]:
    dev = torch.device("cuda")
    torch.manual_seed(0)
    qweight, qzeros, scales = rand_awq(n, k, "cuda")
    p = W.pack(qweight, qzeros, scales.to(torch.bfloat16))
    cfg = W.prepare(p)
    copies = W.rotating_copies(p)
    x = torch.randn(1, k, device=dev, dtype=torch.bfloat16)
    us: dict[str, float] = {}
    kernel = [lambda c=c: W.linear(x, c, cfg=cfg) for c in copies]
    W.graph_us(kernel, warm_ms=W.COLD_MS)
    us["kernel (shipped)"] = W.graph_us(kernel)
    # one copy replayed: from the L2 where the layer fits it, so what is left is the kernel's own work
    us["kernel, one copy replayed"] = W.graph_us([lambda: W.linear(x, p, cfg=cfg)] * len(copies))
    for label, block_n, warps, gpi, factor, zs in PROBES:
        split, groups = cfg.split_k * factor, gpi or cfg.gpi
        ops = [
            lambda c=c, s=split, b=block_n, w=warps, g=groups, zs=zs: probe(c, s, b, w, g, zs) for c in copies
        ]
        us[f"probe: {label}"] = W.graph_us(ops)
    us["torch amax of the words"] = W.graph_us([lambda c=c: c.qweight.amax() for c in copies])
    out = {"n": n, "k": k, "bytes": awq_bytes(n, k), "config": cfg.key(), "us": us}
    print(name, cfg.key(), {label: round(v, 2) for label, v in us.items()}, flush=True)
    return out


def table(result: dict[str, Any]) -> str:
    """The Markdown report: µs and effective TB/s (the layer's 4-bit weights, zero points and scales over the
    time) of each launch at each shape."""
    lines = [
        f"# How much of the W4A16 kernel's time is reading ({result['gpu']}, {result['date']})",
        "",
        f"L2: {result['l2_mb']:.0f} MiB. The one copy replayed reads its weights from the L2 where the layer "
        "fits there; the other launches rotate over copies that outsize it.",
        "",
    ]
    for name, e in result["shapes"].items():
        lines += [
            f"{name} ({e['n']}×{e['k']}, {e['bytes'] / 1e6:.1f} MB), "
            f"shipped configuration {e['config']}, M = 1",
            "",
            "| launch | µs | TB/s |",
            "|---|---|---|",
        ]
        lines += [f"| {lab} | {v:.2f} | {e['bytes'] / v / 1e6:.2f} |" for lab, v in e["us"].items()]
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--shapes", default=DEFAULT_SHAPES, help=f"of {', '.join(SHAPES)}")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("w4a16-ceiling needs a CUDA GPU")
    names = [s.strip() for s in args.shapes.split(",") if s.strip()]
    unknown = [s for s in names if s not in SHAPES]
    if unknown:
        raise SystemExit(f"unknown shape(s) {', '.join(unknown)}: choose from {', '.join(SHAPES)}")
    result: dict[str, Any] = {
        "gpu": torch.cuda.get_device_name(),
        "l2_mb": torch.cuda.get_device_properties(0).L2_cache_size / 2**20,
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "shapes": {},
    }
    for name in names:
        n, k, _ = SHAPES[name]
        result["shapes"][name] = measure(name, n, k)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "w4a16_ceiling.json").write_text(json.dumps(result, indent=1))
    (args.out / "w4a16_ceiling.md").write_text(table(result))
    print(table(result))
    return 0
