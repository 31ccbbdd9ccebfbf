"""GPU drafter run (an H200): train a DFlash drafter for the `medium` toy target on CUDA
and print its offline acceptance (τ). LMDeploy cannot speculate on that machine (no FlashAttention-3), so
the served speedup stays unmeasured; the printed speedups are the `specq.pipeline.speedup` prediction.

Usage: python benchmarks/gpu.py draft OUT_DIR [--steps 2000] [--size medium]"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from specq.pipeline.config.models import DraftSection
from specq.pipeline.draft import DraftTrainRequest, train_drafter
from specq.pipeline.toy import ToyRequest, build_toy_pair


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--size", default="medium")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--block-size", type=int, default=8)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    pair = build_toy_pair(ToyRequest(size=args.size, seed=0), progress=lambda m: print("toy:", m, flush=True))
    print(f"toy pair ({args.size}) ready in {time.perf_counter() - t0:.0f}s: {pair.target}", flush=True)
    cfg = DraftSection(
        steps=args.steps,
        block_size=args.block_size,
        device="cuda",
        samples=512,
        batch_size=16,
        anchors=32,
        gen_tokens=160,
        eval_prompts=32,
        eval_tokens=128,
    )
    request = DraftTrainRequest.from_config(cfg, target=pair.target, out=args.out)
    report = train_drafter(request, progress=lambda m: print(m, flush=True))
    ev = report.eval
    print(json.dumps(report.model_dump(mode="json"), indent=1))
    print(
        f"medium toy drafter: tau {ev.tau:.2f}, acceptance {ev.acceptance_by_position}, "
        f"train {report.train_seconds:.0f}s, total {report.total_seconds:.0f}s"
    )
