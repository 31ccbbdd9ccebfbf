"""`make gpu-check`: prove specq's GPU paths on a CUDA machine, writing every report under one directory.

Steps (each a real `specq` command or a `tests/gpu` test, run in order; a failing step is recorded and the
next one runs): doctor → medium toy pair built on the GPU → embedded engine on CUDA, k = 0 and 3..6 →
LMDeploy PyTorch engine, plain decoding, benchmarked (client vs server counters, NVML, roofline) → the
LMDeploy speculative launch refused by preflight without FlashAttention-3 → plan vs measured peak →
DFlash drafter for the medium target trained on the GPU → the GPU tests. `summary.json` lists each step's
exit code, time and output files.

    python benchmarks/gpu_check.py --out gpu-check [--steps doctor,toy,...] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

STEPS = ("doctor", "toy", "embedded", "lmdeploy", "fa3", "draft", "tests")


def specq(*args: str) -> list[str]:
    return [sys.executable, "-m", "specq.cli", *args]


def run_step(name: str, cmd: list[str], out: Path, timeout: float) -> dict:
    print(f"== {name}: {' '.join(cmd)}", flush=True)
    t0 = time.perf_counter()
    with open(out / f"{name}.log", "w") as log:
        try:
            proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=log, text=True, timeout=timeout)
            code, stdout = proc.returncode, proc.stdout
        except subprocess.TimeoutExpired as e:
            code, stdout = (
                124,
                (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or ""),
            )
    (out / f"{name}.out").write_text(stdout)
    seconds = round(time.perf_counter() - t0, 1)
    print(f"   exit {code} in {seconds} s", flush=True)
    tail = (out / f"{name}.log").read_text().splitlines()[-3:]
    return {"step": name, "cmd": cmd, "exit": code, "seconds": seconds, "stderr_tail": tail}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("gpu-check"))
    ap.add_argument("--steps", default=",".join(STEPS))
    ap.add_argument("--quick", action="store_true", help="fewer requests and draft steps")
    args = ap.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    steps = args.steps.split(",")
    toy = out / "toy"
    requests, tokens = ("4", "64") if args.quick else ("8", "128")
    results = []

    def bench(*extra: str) -> list[str]:
        """`specq bench` of the medium toy target on the code suite: the workload every GPU run shares."""
        workload = ("--suite", "code", "--requests", requests, "--max-tokens", tokens, "--json")
        return specq("bench", str(toy / "target"), *extra, *workload)

    plan = {
        "doctor": (specq("doctor", "--json"), 120),
        "toy": (specq("toy", "build", str(toy), "--size", "medium", "--json"), 900),
        "embedded": (
            bench(
                "--draft-model",
                str(toy / "draft"),
                "--engine",
                "embedded",
                "--draft-tokens",
                "3..6",
                "--out",
                str(out / "bench-embedded"),
            ),
            900,
        ),
        "lmdeploy": (
            bench(
                "--engine",
                "lmdeploy",
                "--backend",
                "pytorch",
                "--draft-tokens",
                "0",
                "--out",
                str(out / "bench-lmdeploy"),
            ),
            900,
        ),
        "fa3": (
            specq(
                "serve",
                str(toy / "target"),
                "--engine",
                "lmdeploy",
                "--backend",
                "pytorch",
                "--method",
                "dflash",
                "--draft-model",
                str(out / "dflash"),
                "--draft-tokens",
                "4",
            ),
            300,
        ),
        "draft": (
            specq(
                "draft",
                "train",
                str(toy / "target"),
                "--out",
                str(out / "dflash"),
                "--device",
                "cuda",
                "--steps",
                "300" if args.quick else "1000",
                "--json",
            ),
            900,
        ),
        "tests": (
            [
                sys.executable,
                "-m",
                "pytest",
                "-m",
                "gpu",
                "tests/gpu",
                "-v",
                "-p",
                "no:cacheprovider",
                "--deselect",
                "tests/gpu/test_toy_medium.py",
                f"--junitxml={out / 'gpu-tests.xml'}",
            ],
            1200,
        ),
    }
    # the FA3 refusal needs a DFlash drafter to name: train it first when both are asked for
    order = [s for s in ("doctor", "toy", "embedded", "lmdeploy", "draft", "fa3", "tests") if s in steps]
    for name in order:
        cmd, timeout = plan[name]
        results.append(run_step(name, cmd, out, timeout))
        (out / "summary.json").write_text(json.dumps(results, indent=1))
    return 0 if all(r["exit"] == 0 or (r["step"] == "fa3" and r["exit"] == 4) for r in results) else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
