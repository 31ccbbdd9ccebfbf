"""specq's skinny linear (pipeline/kernels/skinny.py) against `F.linear` at the Qwen3.5-27B Gated DeltaNet's
gate projection `in_proj_ba` (96 × 5120, bf16): µs at 1-16 rows from CUDA graphs over weight copies that
outsize the L2 (`w4a16.graph_us`), the shipped configuration beside a few others, and the checks: error
against an fp32 reference next to that reference's own bf16 rounding, 20 runs equal, each row the same bits
alone and among the others. Writes skinny_kernel.json and skinny_kernel.md to --out."""

from __future__ import annotations

import argparse
import datetime as dt
import json
from pathlib import Path
from typing import Any

# (N, K, launches a step of the 27B)
SHAPES: dict[str, tuple[int, int, int]] = {"in_proj_ba": (96, 5120, 48)}
OTHERS = {  # the shipped choice's neighbours: smaller k steps, more splits, fewer warps
    "k256-split20": {"block_k": 256, "split_k": 20},
    "k512-split5": {"block_k": 512, "split_k": 5},
    "k512-1-warp": {"block_k": 512, "split_k": 10, "num_warps": 1},
}


def measure(name: str, n: int, k: int, rows: list[int]) -> dict[str, Any]:
    import torch
    import torch.nn.functional as F

    from specq.pipeline.kernels import skinny as S
    from specq.pipeline.kernels import w4a16 as W

    dev = torch.device("cuda")
    torch.manual_seed(0)
    count = W.copies_to_rotate(n * k * 2)  # bf16 copies that outsize the L2
    copies = [(torch.randn(n, k, device=dev) * 0.02).bfloat16() for _ in range(count)]
    w = copies[0]
    shipped = S.config_for(n, k, S.multiprocessors(dev))
    configs = {"shipped": shipped, **{label: S.Config(**kw) for label, kw in OTHERS.items()}}
    out: dict[str, Any] = {"n": n, "k": k, "shipped": vars(shipped), "us": {}, "checks": {}}
    for m in rows:
        x = torch.randn(m, k, device=dev).bfloat16()
        us = {"F.linear": W.graph_us([lambda c=c, x=x: F.linear(x, c) for c in copies])}
        for label, cfg in configs.items():
            us[label] = W.graph_us([lambda c=c, cfg=cfg, x=x: S.linear(x, c, cfg=cfg) for c in copies])
        out["us"][str(m)] = us
        ref = x.float() @ w.float().T
        y = S.linear(x, w)
        out["checks"][str(m)] = {
            "rel_error": ((y.float() - ref).norm() / ref.norm()).item(),
            "bf16_rounding": ((ref.bfloat16().float() - ref).norm() / ref.norm()).item(),
            "deterministic": all(torch.equal(y, S.linear(x, w)) for _ in range(20)),
            "m_invariant": all(torch.equal(S.linear(x[j : j + 1], w)[0], y[j]) for j in range(m)),
        }
        print(name, m, {label: round(v, 2) for label, v in us.items()}, out["checks"][str(m)], flush=True)
    return out


def table(result: dict[str, Any]) -> str:
    """The Markdown report of a run's figures."""
    lines = [f"# The skinny linear at Qwen3.5-27B's gate projection ({result['gpu']}, {result['date']})", ""]
    for name, e in result["shapes"].items():
        rows = list(e["us"])
        labels = list(e["us"][rows[0]])
        lines += [
            f"{name} ({e['n']}×{e['k']}, bf16), µs; shipped: {e['shipped']}",
            "",
            "| kernel | " + " | ".join(f"M={m}" for m in rows) + " |",
            "|---|" + "---|" * len(rows),
        ]
        lines += [f"| {lab} | " + " | ".join(f"{e['us'][m][lab]:.2f}" for m in rows) + " |" for lab in labels]
        first = rows[0]
        saved = (e["us"][first]["F.linear"] - e["us"][first]["shipped"]) * e["per_step"] / 1e3
        lines += [
            "",
            f"A step of the 27B at M={first}: {saved:.3f} ms less than F.linear ({e['per_step']} launches).",
            "",
        ]
        lines += [f"- M={m}: {c}" for m, c in e["checks"].items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--rows", default="1,2,4,8,16")
    args = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("skinny-kernel needs a CUDA GPU")
    rows = [int(r) for r in args.rows.split(",")]
    result: dict[str, Any] = {
        "gpu": torch.cuda.get_device_name(),
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "shapes": {},
    }
    for name, (n, k, per_step) in SHAPES.items():
        result["shapes"][name] = {**measure(name, n, k, rows), "per_step": per_step}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "skinny_kernel.json").write_text(json.dumps(result, indent=1))
    (args.out / "skinny_kernel.md").write_text(table(result))
    print(table(result))
    ok = all(
        c["deterministic"] and c["m_invariant"]
        for e in result["shapes"].values()
        for c in e["checks"].values()
    )
    return 0 if ok else 1
