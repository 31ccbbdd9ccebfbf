"""Full CPU drafter run for the docs: the small toy target, default settings (300 steps, block 8, 1 layer),
trained and evaluated offline; prints the report as JSON. Usage: python benchmarks/draft_cpu.py OUT_DIR
[--threads N] [--steps N]."""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from specq.pipeline.config.models import DraftSection
from specq.pipeline.draft import DraftTrainRequest, train_drafter
from specq.pipeline.toy import ToyRequest, build_toy_pair


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--size", default="small")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    t0 = time.perf_counter()
    pair = build_toy_pair(ToyRequest(size=args.size, seed=0), progress=lambda m: print("toy:", m, flush=True))
    print(f"toy pair ready in {time.perf_counter() - t0:.0f}s: {pair.target}", flush=True)
    load = os.getloadavg()
    cfg = DraftSection(steps=args.steps, threads=args.threads, device=args.device)
    request = DraftTrainRequest.from_config(cfg, target=pair.target, out=args.out)
    report = train_drafter(request, progress=lambda m: print(m, flush=True))
    print(
        json.dumps(
            {
                "loadavg_before": load,
                "loadavg_after": os.getloadavg(),
                "report": report.model_dump(mode="json"),
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
