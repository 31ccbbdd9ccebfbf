"""W4A16 GEMM at Qwen3.5-27B's linear shapes on one GPU: specq's kernel (`specq.pipeline.kernels.w4a16`)
against LMDeploy 0.18's Triton AWQ kernel (as its PyTorch engine calls it, casts included), torch's tinygemm
(`_weight_int4pack_mm`), gemlite's A16W4, Marlin (vLLM's kernel from gptqmodel's sources, `_marlin`) and
bf16 `F.linear`, at M = 1, 2, 4, 8, 16 rows; and, with `--against FILE`, another revision of specq's kernel
module (`git show REV:pipeline/kernels/w4a16.py > FILE`) at the same configurations, checked bitwise. `silu`
in `--kernels` times specq's kernel on gate_up packed as the MLP's gate/up, storing silu(gate) * up, and
checks it bitwise against specq's gate_up followed by LMDeploy's `silu_and_mul` kernel.

    python benchmarks/gpu.py w4a16-kernel --out DIR [--shapes gate_up,down,...] [--rows 1,2,4,8,16]
        [--tune] [--candidates all|quick] [--iters 20] [--kernels ...,marlin --marlin-sdist FILE]
        [--against FILE] [--families [all|balanced]]

Timing: each measurement is a CUDA graph that runs the op once on each of R copies of the weights (R so
that the copies total at least 256 MB, more than the L2 can hold), replayed `--iters` times after a warm-up
of replays (300 ms before a kernel's first M at a shape, 20 ms before the others: an idle GPU runs slow for a
while); the figure is the median replay over R, in µs. Effective bandwidth counts the bytes of the AWQ
checkpoint's tensors (4-bit weights, fp16 scales, 4-bit zeros) over that time, for every 4-bit kernel alike.

Checks, for specq's kernel, on fresh random inputs: the relative error against the fp32 dequantized reference
(‖out − ref‖ / ‖ref‖), bitwise equality of two runs (deterministic), of each row computed alone and among M
rows
(M-invariant: row i at M = 1 and M = 16), of the inline-PTX and pure-Triton dequantization, of the chosen
configuration with and without a register cap, and of 50 launches at split-K 8 (the last block's sum). For
Marlin, when it is timed: its error, two runs and its rows alone against M = 16, the same way. For the
`--against` revision ("against" in the tables): its outputs against specq's, bitwise, at M = 1 to 16, each
with the configuration specq runs for that shape.

`--families` times every family of the quick search (prefetch level, groups an iteration, register cap) at
each split-K the shape divides into, and the balanced kernel's families (equal runs of groups a block), at
M = 1 and 16, with each configuration's bits checked against the first family's at the same split (or the
same blocks a multiprocessor), and tables each family's best split per shape (DIR/w4a16_families.json, and
a section of the tables). `--families balanced` times only the shape's own configuration (the shipped or
cached one) and the balanced families: the short comparison.

`--tune` times every candidate configuration per shape first (`w4a16.tune`, 16 rows) and writes the choices to
the kernel's cache file (and DIR/w4a16-tuned.json). Outputs: DIR/w4a16_kernel.json (every figure) and
DIR/w4a16_kernel.md (the tables). Needs a CUDA GPU; LMDeploy, gemlite and tinygemm are optional (a missing
one is reported, not fatal; Marlin is compiled first, a minute or two)."""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from specq.pipeline.kernels import w4a16 as W

# (N, K) of Qwen3.5-27B's 4-bit linears and how many of each a decode step runs (64 layers: 48 Gated
# DeltaNet, 16 full attention; every layer's MLP)
SHAPES: dict[str, tuple[int, int, int]] = {
    "gate_up": (34816, 5120, 64),
    "down": (5120, 17408, 64),
    "in_proj_qkv": (10240, 5120, 48),
    "in_proj_z": (6144, 5120, 48),
    "out_proj/o_proj": (5120, 6144, 64),
    "qkv_proj": (14336, 5120, 16),
    "in_proj_qkvz": (16384, 5120, 48),  # in_proj_qkv and in_proj_z as one linear (specq's w4a16-specq patch)
}
# a step's linears as specq serves a dense Qwen3.5 on one GPU (the Gated DeltaNet's in_proj_qkv and in_proj_z
# as one linear) and as stock LMDeploy builds them (two)
STEPS: dict[str, tuple[str, ...]] = {
    "fused": ("gate_up", "down", "in_proj_qkvz", "out_proj/o_proj", "qkv_proj"),
    "separate": ("gate_up", "down", "in_proj_qkv", "in_proj_z", "out_proj/o_proj", "qkv_proj"),
}
GROUP = 128


def awq_bytes(n: int, k: int, group: int = GROUP) -> int:
    return k * n // 2 + (k // group) * n * 2 + (k // group) * n // 2


def rand_awq(n: int, k: int, device: str, group: int = GROUP) -> tuple[torch.Tensor, ...]:
    q = torch.randint(0, 16, (k, n), dtype=torch.uint8, device=device)
    z = torch.randint(0, 16, (k // group, n), dtype=torch.uint8, device=device)
    s = (torch.rand(k // group, n, device=device) * 0.02 + 0.002).to(torch.float16)
    return W.pack_awq(q), W.pack_awq(z), s


def load_revision(path: Path) -> Any:
    """Another revision of specq's kernel module, from a file (its own tables and cache are not read: it runs
    the configuration specq runs)."""
    spec = importlib.util.spec_from_file_location("specq_w4a16_against", path)
    if spec is None or spec.loader is None:
        raise ValueError(f"{path}: not a Python module")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    for name in ("Config", "pack", "linear"):
        if not hasattr(mod, name):
            raise ValueError(f"{path}: not a revision of specq's W4A16 kernel module (no {name})")
    return mod


def revision_op(mod: Any, n: int, k: int, device: torch.device) -> tuple[Callable[..., torch.Tensor], Any]:
    """(linear(x, packed), pack) of revision `mod` at the configuration specq runs for (n, k)."""
    cfg = mod.Config(**asdict(W.config_for(n, k, device)))
    return (lambda x, p: mod.linear(x, p, cfg=cfg)), mod.pack


def against_checks(mod: Any, n: int, k: int, dtype: torch.dtype, device: str = "cuda") -> dict[str, Any]:
    """The revision's outputs against specq's, bitwise, for the first m of 16 rows, m = 1, 2, 4, 8, 16."""
    qw, qz, s = rand_awq(n, k, device)
    op, pack = revision_op(mod, n, k, torch.device(device))
    p, q = W.pack(qw, qz, s), pack(qw, qz, s)
    x = torch.randn(16, k, device=device, dtype=dtype)
    same = {m: bool(torch.equal(W.linear(x[:m], p), op(x[:m], q))) for m in (1, 2, 4, 8, 16)}
    return {"bitwise_equal": all(same.values()), "rows": same}


class Kernels:
    """Each candidate's set-up for one shape: `prepare(copies)` then `op(copy, x)`."""

    def __init__(
        self, n: int, k: int, awq: list[tuple[torch.Tensor, ...]], dtype: torch.dtype, marlin_ops: Any = None,
        revision: Any = None,
    ) -> None:  # fmt: skip
        self.n, self.k, self.awq, self.dtype = n, k, awq, dtype
        self.marlin_ops = marlin_ops
        self.revision = revision
        self.errors: dict[str, str] = {}

    def specq(self) -> Callable[[int, torch.Tensor], torch.Tensor]:
        packed = [W.pack(qw, qz, s) for qw, qz, s in self.awq]
        return lambda i, x: W.linear(x, packed[i])

    def silu(self) -> Callable[[int, torch.Tensor], torch.Tensor]:
        """specq's kernel on the layer packed as an MLP's gate/up, storing silu(gate) * up (N / 2 wide)."""
        packed = [W.pack(qw, qz, s, silu_mul=True) for qw, qz, s in self.awq]
        return lambda i, x: W.linear(x, packed[i])

    def lmdeploy(self) -> Callable[[int, torch.Tensor], torch.Tensor]:
        from lmdeploy.pytorch.backends.cuda.awq_modules import wq_gemm_forward

        return lambda i, x: wq_gemm_forward(
            x, self.awq[i][0], self.awq[i][1], self.awq[i][2], 4, GROUP, None, self.n
        )

    def tinygemm(self) -> Callable[[int, torch.Tensor], torch.Tensor]:
        packed = []
        for qw, qz, s in self.awq:
            q = W.unpack_awq(qw).t().contiguous()  # [N, K] 0..15
            q8 = (q[:, 1::2] << 4 | q[:, ::2]).contiguous()  # [N, K/2] uint8, as torch >= 2.5 takes it
            wp = torch._convert_weight_to_int4pack(q8, 8)
            z = W.unpack_awq(qz).to(torch.float32)  # [G, N]
            sf = s.to(torch.float32)
            # tinygemm: w = (q - 8) * scale + zero  ->  zero = (8 - z) * scale
            sz = torch.stack([sf, (8 - z) * sf], dim=-1).to(torch.bfloat16).contiguous()  # [G, N, 2]
            packed.append((wp, sz))
        return lambda i, x: torch._weight_int4pack_mm(x, packed[i][0], GROUP, packed[i][1])

    def gemlite(self) -> Callable[[int, torch.Tensor], torch.Tensor]:
        from gemlite.helper import A16Wn

        layers = []
        for qw, qz, s in self.awq:
            q = W.unpack_awq(qw).t().contiguous()  # [N, K]
            z = W.unpack_awq(qz).t().to(self.dtype).contiguous()  # [N, G]
            layers.append(
                A16Wn(device="cuda", dtype=self.dtype).from_weights(
                    q, s.t().to(self.dtype).contiguous(), z, W_nbits=4, group_size=GROUP
                )
            )
        return lambda i, x: layers[i](x)

    def marlin(self) -> Callable[[int, torch.Tensor], torch.Tensor]:
        from benchmarks.scenarios._marlin import MarlinAWQ

        if self.marlin_ops is None:
            raise RuntimeError("Marlin was not built (--marlin-sdist FILE)")
        if self.dtype != torch.bfloat16:
            raise RuntimeError("this Marlin build takes bf16 activations only")
        layers = [MarlinAWQ(self.marlin_ops, qw, qz, s) for qw, qz, s in self.awq]
        return lambda i, x: layers[i](x)

    def against(self) -> Callable[[int, torch.Tensor], torch.Tensor]:
        if self.revision is None:
            raise RuntimeError("no revision to time against (--against FILE)")
        op, pack = revision_op(self.revision, self.n, self.k, torch.device("cuda"))
        packed = [pack(qw, qz, s) for qw, qz, s in self.awq]
        return lambda i, x: op(x, packed[i])

    def bf16(self) -> Callable[[int, torch.Tensor], torch.Tensor]:
        ws = [torch.randn(self.n, self.k, device="cuda", dtype=self.dtype) * 0.02 for _ in self.awq]
        return lambda i, x: torch.nn.functional.linear(x, ws[i])


def checks(n: int, k: int, dtype: torch.dtype) -> dict[str, Any]:
    """Accuracy, determinism, M-invariance and asm == pure on fresh random inputs of one shape."""
    qw, qz, s = rand_awq(n, k, "cuda")
    p = W.pack(qw, qz, s)
    ref_w = W.dequantize(p)
    z = W.unpack_awq(qz).float().repeat_interleave(GROUP, 0)
    awq_w = (W.unpack_awq(qw).float() - z) * s.float().repeat_interleave(GROUP, 0)
    assert torch.equal(ref_w, awq_w), "the repack is not lossless"
    x = torch.randn(16, k, device="cuda", dtype=dtype)
    out = {}
    y16 = W.linear(x, p)
    ref = x.float() @ ref_w
    out["rel_error"] = ((y16.float() - ref).norm() / ref.norm()).item()
    out["rel_error_bf16_rounding"] = ((ref.to(dtype).float() - ref).norm() / ref.norm()).item()
    out["deterministic"] = bool(torch.equal(y16, W.linear(x, p)))
    invariant = True
    for m in (1, 2, 3, 4, 5, 8, 15):
        ym = W.linear(x[:m], p)
        invariant &= bool(torch.equal(ym, y16[:m]))
    for i in (0, 7, 15):
        invariant &= bool(torch.equal(W.linear(x[i : i + 1], p)[0], y16[i]))
    out["m_invariant"] = invariant
    out["asm_equals_pure"] = bool(torch.equal(y16, W.linear(x, p, dequant=W.DEQUANT_PURE)))
    out["asm_equals_pairs"] = bool(torch.equal(y16, W.linear(x, p, dequant=W.DEQUANT_PAIRS)))
    cfg = W.config_for(n, k, x.device)
    capped = W.Config(**{**asdict(cfg), "maxnreg": 0 if cfg.maxnreg else 96})
    out["register_cap_same_bits"] = bool(torch.equal(y16, W.linear(x, p, cfg=capped)))
    # split-K's last block adds the partial sums: 50 launches at 8 splits give one result, near the reference
    split = W.Config(**{**asdict(cfg), "split_k": 8})
    ys = [W.linear(x, p, cfg=split) for _ in range(50)]
    out["split8_deterministic"] = all(bool(torch.equal(ys[0], y)) for y in ys[1:])
    out["split8_rel_error"] = ((ys[0].float() - ref).norm() / ref.norm()).item()
    x64 = torch.randn(80, k, device="cuda", dtype=dtype)
    y64 = W.linear(x64, p)
    ref64 = x64.float() @ ref_w
    out["rel_error_m80"] = ((y64.float() - ref64).norm() / ref64.norm()).item()
    return out


def silu_checks(n: int, k: int, dtype: torch.dtype) -> dict[str, Any]:
    """The layer packed as an MLP's gate/up (`silu_mul`): its answers against specq's plain answers followed
    by LMDeploy's own `silu_and_mul` kernel, bitwise, for the first m of 16 rows; two runs; rows alone."""
    from lmdeploy.pytorch.kernels.cuda.activation import silu_and_mul

    qw, qz, s = rand_awq(n, k, "cuda")
    plain, fused = W.pack(qw, qz, s), W.pack(qw, qz, s, silu_mul=True)
    x = torch.randn(16, k, device="cuda", dtype=dtype)
    y16 = W.linear(x, fused)
    return {
        "same_bits_as_lmdeploys_activation": {
            m: bool(torch.equal(W.linear(x[:m], fused), silu_and_mul(W.linear(x[:m], plain))))
            for m in (1, 2, 4, 8, 16)
        },
        "deterministic": bool(torch.equal(y16, W.linear(x, fused))),
        "m_invariant": all(bool(torch.equal(W.linear(x[i : i + 1], fused)[0], y16[i])) for i in (0, 7, 15)),
    }


def marlin_checks(ops: Any, n: int, k: int) -> dict[str, Any]:
    """Marlin's error against the fp32 dequantized reference, determinism and M-invariance (bf16)."""
    from benchmarks.scenarios._marlin import MarlinAWQ

    qw, qz, s = rand_awq(n, k, "cuda")
    layer = MarlinAWQ(ops, qw, qz, s)
    ref_w = W.dequantize(W.pack(qw, qz, s))
    x = torch.randn(16, k, device="cuda", dtype=torch.bfloat16)
    y16 = layer(x)
    ref = x.float() @ ref_w
    out: dict[str, Any] = {"rel_error": ((y16.float() - ref).norm() / ref.norm()).item()}
    out["deterministic"] = all(bool(torch.equal(y16, layer(x))) for _ in range(20))
    out["rows_equal_m16"] = {m: bool(torch.equal(layer(x[:m]), y16[:m])) for m in (1, 2, 4, 8, 9, 15)}
    out["m_invariant"] = all(out["rows_equal_m16"].values())
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--rows", default="1,2,4,8,16")
    ap.add_argument("--kernels", default="specq,lmdeploy,tinygemm,gemlite,bf16")
    ap.add_argument("--tune", action="store_true")
    ap.add_argument("--candidates", choices=("all", "quick"), default="all")
    ap.add_argument("--dtype", choices=("bfloat16", "float16"), default="bfloat16")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--budget", type=float, default=1e9, help="seconds: later kernels and shapes are skipped")
    ap.add_argument("--marlin-sdist", type=Path, help="a gptqmodel source distribution (Marlin's sources)")
    ap.add_argument("--marlin-build", type=Path, default=Path("/tmp/specq-marlin"))
    ap.add_argument("--against", type=Path, help="another revision of the kernel module, timed beside")
    ap.add_argument(
        "--families",
        nargs="?",
        const="all",
        choices=("all", "balanced"),
        help="each family of the quick search at every split and the balanced ones (balanced: those and the "
        "shape's own configuration only)",
    )
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    dtype = getattr(torch, args.dtype)
    rows = [int(r) for r in args.rows.split(",")]
    names = [s for s in args.shapes.split(",") if s]
    kernels = [k for k in args.kernels.split(",") if k]
    revision = load_revision(args.against) if args.against else None
    if revision is not None and "against" not in kernels:
        kernels.insert(kernels.index("specq") + 1 if "specq" in kernels else 0, "against")
    result: dict[str, Any] = {
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "dtype": args.dtype,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "shapes": {},
        "tuned": {},
        "errors": {},
    }
    try:
        import triton

        result["triton"] = triton.__version__
    except ImportError:
        pass
    marlin_ops = None
    if "marlin" in kernels and args.marlin_sdist:
        from benchmarks.scenarios._marlin import build

        t = time.time()
        try:
            marlin_ops = build(args.marlin_sdist, args.marlin_build)
            result["marlin_build_s"] = round(time.time() - t, 1)
        except Exception as e:  # recorded; the other kernels still run
            result["errors"]["marlin/build"] = f"{type(e).__name__}: {str(e)[-2000:]}"
        print(f"marlin build: {time.time() - t:.0f} s", file=sys.stderr, flush=True)
    t0 = time.time()
    for name in names:
        n, k, per_step = SHAPES[name]
        copies = W.copies_to_rotate(awq_bytes(n, k), least=2)
        awq = [rand_awq(n, k, "cuda") for _ in range(copies)]
        if args.families and time.time() - t0 > args.budget:
            result["errors"][f"{name}/families"] = "skipped: out of budget"
        elif args.families:
            t = time.time()
            packed = W.pack(*awq[0])
            result.setdefault("families", {})[name] = family_sweep(packed, dtype, args.iters, args.families)
            # written after each shape, so that a run stopped part-way keeps the shapes it swept
            families = json.dumps(result["families"], indent=1)
            (args.out / "w4a16_families.json").write_text(families, encoding="utf-8")
            table = "\n".join(family_table({name: result["families"][name]}))
            print(f"families {name}: {time.time() - t:.0f} s\n{table}", file=sys.stderr, flush=True)
        if args.tune and "specq" in kernels:
            cands = W.CANDIDATES if args.candidates == "all" else W.QUICK_CANDIDATES
            t = time.time()
            cfg = W.tune(W.pack(*awq[0]), dtype=dtype, candidates=cands, force=True)
            result["tuned"][name] = {"config": cfg.key(), "seconds": round(time.time() - t, 1)}
            print(f"tuned {name}: {cfg.key()} ({time.time() - t:.0f} s)", file=sys.stderr, flush=True)
        entry: dict[str, Any] = {
            "n": n,
            "k": k,
            "per_step": per_step,
            "bytes": awq_bytes(n, k),
            "copies": copies,
            "us": {},
        }
        if "specq" in kernels:
            try:
                entry["checks"] = checks(n, k, dtype)
            except Exception as e:  # recorded, the timings still run
                entry["checks"] = {"error": f"{type(e).__name__}: {e}"}
        if marlin_ops is not None:
            try:
                entry["marlin_checks"] = marlin_checks(marlin_ops, n, k)
            except Exception as e:
                entry["marlin_checks"] = {"error": f"{type(e).__name__}: {e}"}
        if "silu" in kernels and name == "gate_up":
            try:
                entry["silu_checks"] = silu_checks(n, k, dtype)
            except Exception as e:
                entry["silu_checks"] = {"error": f"{type(e).__name__}: {e}"}
        if revision is not None:
            try:
                entry["against_checks"] = against_checks(revision, n, k, dtype)
            except Exception as e:
                entry["against_checks"] = {"error": f"{type(e).__name__}: {e}"}
        kit = Kernels(n, k, awq, dtype, marlin_ops, revision)
        for kern in kernels:
            if kern == "silu" and name != "gate_up":  # the MLP's activation: only gate_up has one
                continue
            if time.time() - t0 > args.budget:
                result["errors"][f"{name}/{kern}"] = "skipped: out of budget"
                continue
            try:
                op = getattr(kit, kern)()
            except Exception as e:
                result["errors"][f"{name}/{kern}"] = f"{type(e).__name__}: {e}"
                continue
            entry["us"][kern] = {}
            for j, m in enumerate(rows):
                x = torch.randn(m, k, device="cuda", dtype=dtype)
                ops = [lambda i=i, op=op, x=x: op(i, x) for i in range(copies)]
                try:  # the first M of a kernel after the checks: warmed up for longer (W.COLD_MS)
                    us = W.graph_us(ops, args.iters, warm_ms=W.COLD_MS if j == 0 else W.WARM_MS)
                except Exception as e:
                    result["errors"][f"{name}/{kern}/m{m}"] = f"{type(e).__name__}: {e}"
                    traceback.print_exc(limit=2)
                    continue
                entry["us"][kern][str(m)] = round(us, 2)
        result["shapes"][name] = entry
        del kit, awq
        torch.cuda.empty_cache()
        print(
            f"{name}: {json.dumps(entry['us'])} checks {entry.get('checks')} ({time.time() - t0:.0f} s)",
            file=sys.stderr,
            flush=True,
        )
    (args.out / "w4a16_kernel.json").write_text(json.dumps(result, indent=1), encoding="utf-8")
    if args.tune:
        cache = W.cache_file(torch.device("cuda"))
        if cache.exists():
            (args.out / "w4a16-tuned.json").write_text(cache.read_text(encoding="utf-8"), encoding="utf-8")
    md = tables(result, rows, kernels)
    (args.out / "w4a16_kernel.md").write_text(md, encoding="utf-8")
    print(md)
    return 0


def family(cfg: W.Config) -> str:
    """A configuration less its split: prefetch level, groups an iteration, register cap (0: none), and the
    balanced kernel's blocks a multiprocessor."""
    return f"p{cfg.prefetch}-g{cfg.gpi}-r{cfg.maxnreg}" + (f"-b{cfg.balanced}" if cfg.balanced else "")


def sweep_configs(
    n: int, k: int, device: torch.device, which: str = "all", group: int = GROUP
) -> list[W.Config]:
    """The configurations `--families` times at a shape: the quick search's whose split divides the layer's
    groups and the balanced families (`all`), or the shape's own configuration on this GPU and the balanced
    families (`balanced`)."""
    if which == "balanced":
        return [W.config_for(n, k, device, group), *W.BALANCED_CANDIDATES]
    return [c for c in W.QUICK_CANDIDATES + W.BALANCED_CANDIDATES if (k // group) % c.split_k == 0]


def family_sweep(p: W.PackedW4, dtype: torch.dtype, iters: int, which: str = "all") -> list[dict[str, Any]]:
    """Each of `sweep_configs` timed at M = 1 and 16 over copies of `p` that outsize the L2
    (`w4a16.rotating_copies`); `same_bits`: its outputs equal the first family's at that split, or with the
    same blocks a multiprocessor (prefetch, groups an iteration and register cap change no bit), and its row
    0 alone equals row 0 of 16."""
    copies = W.rotating_copies(p)
    xs = {m: torch.randn(m, p.k, device="cuda", dtype=dtype) for m in (1, 16)}
    first: dict[tuple[int, int, int], torch.Tensor] = {}
    out: list[dict[str, Any]] = []
    for cfg in sweep_configs(p.n, p.k, p.qweight.device, which, p.group):
        row: dict[str, Any] = {"family": family(cfg), "split": cfg.split_k, "same_bits": True}
        for m, x in xs.items():
            y = W.linear(x, p, cfg=cfg)
            row["same_bits"] &= bool(torch.equal(y, first.setdefault((cfg.split_k, cfg.balanced, m), y)))
            if m > 1:
                row["same_bits"] &= bool(torch.equal(W.linear(x[:1].contiguous(), p, cfg=cfg), y[:1]))
            ops = [lambda c=c, cfg=cfg, x=x: W.linear(x, c, cfg=cfg) for c in copies]
            row[f"us_m{m}"] = round(W.graph_us(ops, iters, warm_ms=W.WARM_MS if out else W.COLD_MS), 2)
        out.append(row)
    return out


def family_table(families: dict[str, list[dict[str, Any]]]) -> list[str]:
    """Per shape, each family's best split (least M = 1 + M = 16 time), fastest family first; a family with
    any configuration whose bits differed is marked."""
    lines = ["| shape | family | split | M=1 µs | M=16 µs | same bits |", "|---|---|---|---|---|---|"]
    for name, rows in families.items():
        by_family: dict[str, list[dict[str, Any]]] = {}
        for r in rows:
            by_family.setdefault(r["family"], []).append(r)
        best = [
            (min(rs, key=lambda r: r["us_m1"] + r["us_m16"]), all(r["same_bits"] for r in rs))
            for rs in by_family.values()
        ]
        for r, same in sorted(best, key=lambda b: b[0]["us_m1"] + b[0]["us_m16"]):
            lines.append(
                f"| {name} | {r['family']} | {r['split']} | {r['us_m1']:.2f} | {r['us_m16']:.2f} | "
                f"{'yes' if same else '**no**'} |"
            )
    return lines


def step_totals(shapes: dict[str, Any], kern: str, rows: list[int]) -> dict[str, dict[int, float]]:
    """µs a step's linears take with `kern`, for each layout of STEPS whose every shape was timed at every row
    (shapes × their count per step)."""
    out = {}
    for label, names in STEPS.items():
        timed = [(shapes[n]["us"].get(kern, {}), shapes[n]["per_step"]) for n in names if n in shapes]
        if len(timed) == len(names) and all(us.get(str(m)) for us, _ in timed for m in rows):
            out[label] = {m: sum(us[str(m)] * per_step for us, per_step in timed) for m in rows}
    return out


def tables(result: dict[str, Any], rows: list[int], kernels: list[str]) -> str:
    lines = [f"# W4A16 at Qwen3.5-27B's shapes ({result['gpu']}, {result['date']}, {result['dtype']})", ""]
    lines.append(
        "| shape (N×K) | kernel | " + " | ".join(f"M={m} µs" for m in rows) + " | TB/s M=1 | TB/s M=16 |"
    )
    lines.append("|---|---|" + "---|" * (len(rows) + 2))
    for name, e in result["shapes"].items():
        for kern, us in e["us"].items():
            cells = [us.get(str(m)) for m in rows]
            bw = [e["bytes"] / (u * 1e-6) / 1e12 if u else None for u in (us.get("1"), us.get("16"))]
            if kern == "bf16":
                bw = [
                    e["n"] * e["k"] * 2 / (u * 1e-6) / 1e12 if u else None
                    for u in (us.get("1"), us.get("16"))
                ]
            lines.append(
                f"| {name} {e['n']}×{e['k']} | {kern} | "
                + " | ".join(f"{c:.1f}" if c else "–" for c in cells)
                + " | "
                + " | ".join(f"{b:.2f}" if b else "–" for b in bw)
                + " |"
            )
    lines += [
        "",
        "Whole step's 4-bit linears (shapes × their count per step), ms; fused: in_proj_qkv and in_proj_z as "
        "one linear, as specq serves a dense Qwen3.5 on one GPU; separate: as stock LMDeploy builds them:",
        "",
        "| kernel | step | " + " | ".join(f"M={m}" for m in rows) + " |",
        "|---|---|" + "---|" * len(rows),
    ]
    for kern in kernels:
        for label, totals in step_totals(result["shapes"], kern, rows).items():
            lines.append(f"| {kern} | {label} | " + " | ".join(f"{totals[m] / 1e3:.2f}" for m in rows) + " |")
    lines += ["", "Checks (specq):", ""]
    for name, e in result["shapes"].items():
        lines.append(f"- {name}: {e.get('checks')}")
        if e.get("marlin_checks"):
            lines.append(f"- {name} (Marlin): {e['marlin_checks']}")
        if e.get("against_checks"):
            lines.append(f"- {name} (against): {e['against_checks']}")
        if e.get("silu_checks"):
            lines.append(f"- {name} (silu): {e['silu_checks']}")
    if result.get("families"):
        lines += ["", "Each family's best split (`--families`):", "", *family_table(result["families"])]
    if result.get("tuned"):
        lines += ["", f"Tuned: {result['tuned']}"]
    if result.get("errors"):
        lines += ["", f"Errors: {result['errors']}"]
    return "\n".join(lines) + "\n"
