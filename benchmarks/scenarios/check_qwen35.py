"""The Qwen3.5-shaped toy on an H200, run detached with a budget (docs/verification.md). On
2026-12-01 21:48 UTC: FA3 129 s, drafter 91 s, the MTP bench 11 min for its 5 server starts (3 trials). At
23:50 UTC: FA3 148 s, probe 167 s, eval 127 s, the DFlash bench 633 s with `--trials 2`; MTP did not fit
after it. Half an hour holds one bench: pick it with `--methods`.

    python benchmarks/gpu.py check-qwen35 --root ROOT --fa3-source DIR [--out gpu-check-qwen35]
        [--awq-target DIR] [--prompts FILE] [--drafter DIR] [--draft-tokens 3..6]
        [--methods qwen3_5_mtp,dflash] [--trials 3] [--budget 570]

ROOT is a `specq toy build ROOT --arch qwen3.5` made on CPU and carried over (target/ about 10 MB). Steps, in
order, each recorded in `summary.json` (exit code, seconds, stderr tail) and skipped when the remaining budget
is below its reserve:
- fa3: `specq fa3 build --source DIR ROOT/target` — FlashAttention-3 for head dim 256 in bf16 (fp16 too when
  `--awq-target` is given: it is named as well).
- draft (unless `--drafter DIR` names one, e.g. trained on CPU where the toy was built): `specq draft train
  ROOT/target --device cuda --block-size 8`: a DFlash drafter for the hybrid target.
- probe (with `--awq-target`, an AWQ copy made on CPU by `specq quantize --for plain`):
  the `qwen35-load-probe` scenario's `make AWQ OUT --target ROOT/target` + `run` — LMDeploy launched on the
  AWQ copy (refused: AWQ runs in fp16, the Gated DeltaNet state in bf16), on the bf16 target with MTP (must
  load) and on copies broken the ways `specq convert` predicts it refuses, each outcome against the
  prediction (`probe/results.json`). There is no AWQ bench: specq refuses a quantized Qwen3.5 on the
  PyTorch engine up front (engines/qwen35.py). It runs before the benches: 2 minutes that decide verdicts.
- eval: `specq draft eval ROOT/target DRAFTER` on the benches' workload — the offline τ to set beside the
  served one.
- bench-mtp and bench-dflash, in `--methods` order: `specq bench ROOT/target --engine lmdeploy --backend
  pytorch --method qwen3_5_mtp` (the MTP head inside the target, no draft model) and `--method dflash
  --draft-model DRAFTER`, each `--draft-tokens 3..6` against its k = 0 baseline (8 requests × 128 tokens,
  warm-up to steady state, `--trials` trials). The workload: `--prompts FILE --mode completion` when given
  (`specq toy prompts FILE`, made where the toy was built: its held-out split is that machine's standard
  library), else the code suite's chats, which the toys answer with a loop (H200, 2026-12-01 21:48 UTC).

LMDeploy's PyTorch engine needs flash-linear-attention and tilelang (with z3-solver) for the Gated DeltaNet
layers on CUDA, at the versions lmdeploy's wheel requires (tilelang==0.1.11 for 0.18.0); a source tree
without metadata, as on the project's H200, gets neither. `specq bench` refuses up front without them or
at another version (H200 runs of 2026-12-01 06:33 and 10:55 UTC: docs/verification.md). `sweeps.md` holds
one Markdown table per sweep (benchmarks/scenarios/check.py's `sweep_table`)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from .check import budgeted_step, specq, sweep_table


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--root", type=Path, required=True, help="a CPU-built `specq toy build --arch qwen3.5`")
    ap.add_argument("--fa3-source", type=Path, help="a flash-attention checkout (the directory with hopper/)")
    ap.add_argument("--out", type=Path, default=Path("gpu-check-qwen35"))
    ap.add_argument("--awq-target", type=Path, help="an AWQ copy of ROOT/target (made on CPU), if any")
    ap.add_argument("--draft-tokens", default="3..6")
    ap.add_argument("--draft-steps", default="800")
    ap.add_argument("--methods", default="qwen3_5_mtp,dflash", help="benches to run, in this order")
    ap.add_argument("--prompts", type=Path, help="a `specq toy prompts` file: bench in completion mode")
    ap.add_argument("--drafter", type=Path, help="a DFlash drafter for ROOT/target (default: train one)")
    ap.add_argument("--trials", default="3")
    ap.add_argument("--budget", type=float, default=570.0, help="seconds for the whole script")
    args = ap.parse_args(argv)
    methods = args.methods.split(",")
    if unknown := [m for m in methods if m not in ("qwen3_5_mtp", "dflash")]:
        ap.error(f"--methods: unknown {', '.join(unknown)} (choose from qwen3_5_mtp, dflash)")
    workload = ["--suite", "code"]
    if args.prompts:
        workload = ["--prompts", str(args.prompts.resolve()), "--mode", "completion"]
    deadline = time.monotonic() + args.budget
    out: Path = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    target = args.root.resolve() / "target"
    drafter = args.drafter.resolve() if args.drafter else out / "dflash"
    results: list[dict] = []
    tables: list[str] = []

    def step(name: str, cmd: list[str], reserve: float) -> dict | None:
        res = budgeted_step(name, cmd, out, float("inf"), deadline, reserve, margin=5)
        results.append(res)
        (out / "summary.json").write_text(json.dumps(results, indent=1))
        return res

    def bench(name: str, model: Path, method: str, draft: Path | None, reserve: float) -> None:
        cmd = specq(
            "bench", str(model), "--engine", "lmdeploy", "--backend", "pytorch", "--method", method,
            *(["--draft-model", str(draft)] if draft else []), "--draft-tokens", args.draft_tokens,
            *workload, "--requests", "8", "--max-tokens", "128", "--trials", args.trials,
            "--temperature", "0", "--out", str(out / name), "--json",
        )  # fmt: skip
        res = step(name, cmd, reserve)
        try:
            report = json.loads((out / f"{name}.out").read_text())
        except (OSError, ValueError):
            return
        tables.extend([f"### {name} ({method})", "", *sweep_table(report), ""])
        if res is not None:
            res["complete"] = report.get("complete")

    if args.fa3_source:
        models = [str(target), *([str(args.awq_target)] if args.awq_target else [])]
        step("fa3", specq("fa3", "build", "--source", str(args.fa3_source), *models, "--json"), 200)
    if not drafter.exists():
        cmd = specq(
            "draft", "train", str(target), "--out", str(drafter), "--device", "cuda", "--block-size", "8",
            "--steps", args.draft_steps, "--json",
        )  # fmt: skip
        step("draft", cmd, 300)
    if args.awq_target:
        probe = [sys.executable, str(Path(__file__).resolve().parents[1] / "gpu.py"), "qwen35-load-probe"]
        make = [*probe, "make", str(args.awq_target), str(out / "probe"), "--target", str(target)]
        if step("probe-make", make, 30)["exit"] == 0:
            step("probe", [*probe, "run", str(out / "probe"), "--timeout", "150"], 170)
    if drafter.exists():  # the offline τ on the benches' prompts, to set beside the served τ
        cmd = specq(  # --suite alone decodes chats, as bench does
            "draft", "eval", str(target), str(drafter), *workload, "--requests", "8", "--max-tokens", "128",
            "--device", "cuda", "--json",
        )  # fmt: skip
        step("eval", cmd, 60)
    for method in methods:
        if method == "qwen3_5_mtp":
            bench("bench-mtp", target, method, None, 120)
        elif method == "dflash" and drafter.exists():
            bench("bench-dflash", target, method, drafter, 120)
    (out / "sweeps.md").write_text("\n".join(tables))
    print("\n".join(tables), flush=True)
    return 0 if all(r.get("exit") == 0 for r in results) else 1
