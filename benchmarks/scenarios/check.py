"""`make gpu-check`: the seed's pipeline on a CUDA machine, run by specq's own commands, every report under
one directory.

    python benchmarks/gpu.py check --out gpu-check --fa3-source DIR [--small-root ROOT] [--sizes small,medium]
        [--steps toy,fa3,doctor,awq,draft,bench,plan,tests] [--draft-tokens 3,5,7,11,15]
        [--bench-targets small-awq] [--workload heldout|code] [--trials N] [--budget SECONDS] [--quick]

Steps, in order (a failing step is recorded and the next one runs; `summary.json` lists each step's exit code,
time and output; `sweeps.md` the tables):
- toy: the targets. small: `ROOT/model` from `--small-root` (the CPU-built toy target that
  `benchmarks/scenarios/gptq_toy.py ROOT` also quantized to `ROOT/gptq`), else `specq toy build`; medium:
  `specq toy build --size medium` on the GPU.
- fa3: `specq fa3 build --source DIR TARGETS` — FlashAttention-3 for the served models' head dims and dtypes,
  self-checked against torch's attention, installed into this environment. Without `--fa3-source` the step
  is skipped and the speculative steps need an FA3 that is already installed.
- doctor: `specq doctor --json` (after fa3, so its FlashAttention-3 entry names what was built).
- awq: `specq convert ROOT/gptq --to awq` — the GPTQ checkpoint (gptqmodel, own calibration data, made on
  CPU because the GPU machine has no quantization backend) repacked for LMDeploy's PyTorch engine.
- quant: `specq quantize MEDIUM --method awq --quant-backend autoawq --device cuda --calib FILE` — the medium
  toy cannot be trained on the CPU machine, so its AWQ target is made here, on specq's own calibration file
  (`--calib`, default ROOT/calib.jsonl), with autoawq (pure Python: carried as source with `datasets`).
- draft: `specq draft train TARGET --device cuda --block-size 16` per size, on 8192 self-distilled
  sequences (half of them framed as chat turns: `draft.chat_fraction`). An AWQ target's bench reuses its
  size's drafter (serve writes the fp16 copy LMDeploy needs).
- bench: `specq bench … --engine lmdeploy --backend pytorch --method dflash --draft-tokens LIST` for every
  target (bf16 per size, and the AWQ targets) against its k = 0 baseline. The workload (`--workload heldout`,
  the default): the toy's held-out code prefixes in completion mode (`specq toy prompts`), made where the toy
  was built — ROOT/heldout.jsonl for `--small-root` (`scenarios/gptq_toy.py` writes it), made here for toys
  built here. The toys learnt raw code, and on chat prompts their greedy answers loop (H200,
  2026-12-01 23:50 UTC, docs/verification.md); `--workload code` benches the code suite's chats as
  before 2026-12-02.
- eval: `specq draft eval TARGET DRAFTER` on the bench's workload (same prompts, mode, requests and tokens)
  for every target benched: the offline τ along the served path (`walk_tau`), next to the served τ in
  `sweeps.md` (the goal: the offline figure should predict the served one within 10 %). The eval step,
  `--trials` and `--budget` were added on 2026-12-02 and have not run on a GPU yet (the pairing is tested on
  the outputs of the H200 run of 2026-12-01 23:50 UTC, `tests/unit/benchmarks/test_gpu_check.py`).
- plan: `specq plan … --engine lmdeploy --cache-max-entry-count R` (R: the ratio the bench's servers ran with,
  specq serve's 0.8 unless SPECQ_ENGINE__CACHE_MAX_ENTRY_COUNT says otherwise) against the NVML peak each
  bench baseline recorded.
- tests: `pytest -m gpu tests/gpu/test_spec_lmdeploy.py` (lossless, and specq's acceptance against the raw
  counters read by the test) on the small target and its drafter.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

STEPS = ("toy", "fa3", "doctor", "awq", "quant", "draft", "bench", "eval", "plan", "tests")


def specq(*args: str) -> list[str]:
    return [sys.executable, "-m", "specq.cli", *args]


def run_step(name: str, cmd: list[str], out: Path, timeout: float, env: dict[str, str] | None = None) -> dict:
    print(f"== {name}: {' '.join(cmd)}", flush=True)
    t0 = time.perf_counter()
    with open(out / f"{name}.log", "w") as log:
        try:
            proc = subprocess.run(
                cmd, stdout=subprocess.PIPE, stderr=log, text=True, timeout=timeout, env=env
            )
            code, stdout = proc.returncode, proc.stdout
        except subprocess.TimeoutExpired as e:
            raw = e.stdout or ""
            code, stdout = 124, raw.decode() if isinstance(raw, bytes) else raw
    (out / f"{name}.out").write_text(stdout)
    seconds = round(time.perf_counter() - t0, 1)
    print(f"   exit {code} in {seconds} s", flush=True)
    tail = (out / f"{name}.log").read_text(errors="replace").splitlines()[-3:]
    return {"step": name, "cmd": cmd, "exit": code, "seconds": seconds, "stderr_tail": tail}


def budgeted_step(
    name: str,
    cmd: list[str],
    out: Path,
    timeout: float,
    deadline: float | None,
    reserve: float,
    margin: float = 0.0,
    env: dict[str, str] | None = None,
) -> dict:
    """run_step within a deadline (time.monotonic()): skipped (exit None) when fewer than `reserve` seconds
    are left, else given at most the time left less `margin`."""
    if deadline is not None:
        left = deadline - time.monotonic()
        if left < reserve:
            res = {"step": name, "cmd": cmd, "exit": None, "seconds": 0,
                   "skipped": f"{left:.0f} s left < {reserve:.0f} s"}  # fmt: skip
            print(f"== {name}: skipped ({res['skipped']})", flush=True)
            return res
        timeout = min(timeout, left - margin)
    return run_step(name, cmd, out, timeout, env)


def serve_ratio() -> float:
    from specq.pipeline.config.models import EngineSection

    return EngineSection().cache_max_entry_count


def sweep_table(report: dict[str, Any]) -> list[str]:
    """Markdown rows of one bench report: the figures the verification record asks for — the headline
    (client decode-rate) speedup next to the server's decode-rate speedup on the same basis (the median of
    the trials' own counters) and how far apart they are (the goal: within 5 % for every k), and the
    end-to-end figure beside them."""
    rows = [
        "| k | decode tok/s (client) | speedup (headline, decode rate) | e2e tok/s | e2e speedup "
        "| server decode tok/s | server decode-rate speedup | headline vs server | τ "
        "| acceptance by position | lossless | J/token |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    runs = [r for r in report["runs"] if r.get("status") == "ok"]
    base = next((r for r in runs if r["draft_tokens"] == 0), None)
    base_dec = ((base or {}).get("server") or {}).get("server_decode_tokens_per_s")

    def x(v: float | None, low: float | None = None, high: float | None = None) -> str:
        if not v:
            return "–"
        return f"{v:.2f}×" + (f" ({low:.2f}-{high:.2f}×)" if low and high else "")

    for r in runs:
        agg, srv, acc = r.get("aggregate") or {}, r.get("server") or {}, r.get("acceptance") or {}
        dec = srv.get("server_decode_tokens_per_s")
        server_x = dec / base_dec if dec and base_dec and r is not base else None
        if r.get("step_cost_source") == "server":  # the report's: medians of the trials' counters, as the
            server_x = r.get("decode_speedup")  # headline takes the client's (whole-run ratio: older reports)
        head = r.get("decode_rate_speedup")
        apart = f"{head / server_x - 1:+.1%}" if head and server_x else "–"
        pp = " / ".join(f"{p:.2f}" for p in acc.get("per_position") or []) or "–"
        loss = (r.get("lossless") or {}).get("exact_match_rate")
        jpt = (r.get("telemetry") or {}).get("joules_per_output_token")
        tau = f"{acc['acceptance_length']:.2f}" if acc.get("acceptance_length") else "–"
        lossless = f"{loss:.0%}" if loss is not None else "–"
        joules = f"{jpt:.3f}" if jpt else "–"
        rows.append(
            f"| {r['draft_tokens']} | {agg.get('decode_rate_tokens_per_s') or 0:.1f} | "
            f"{x(head, r.get('decode_rate_speedup_low'), r.get('decode_rate_speedup_high'))} | "
            f"{agg.get('output_tokens_per_s') or 0:.1f} | {x(r.get('e2e_speedup'))} | {dec or 0:.1f} | "
            f"{x(server_x)} | {apart} | {tau} | {pp} | {lossless} | {joules} |"
        )
    failed = [r for r in report["runs"] if r.get("status") != "ok"]
    rows += [f"| {r['draft_tokens']} | {r['status']}: {r.get('reason')} |" for r in failed]
    return rows


def offline_vs_served(offline: dict[str, Any], report: dict[str, Any]) -> list[dict[str, Any]]:
    """`specq draft eval`'s τ along the served path (`walk_tau`, index k − 1) against the τ each bench run
    served at that k, on the same prompts."""
    walk, text = offline.get("walk_tau") or [], offline.get("walk_tau_text") or []
    rows = []
    for r in report["runs"]:
        k, served = r["draft_tokens"], ((r.get("acceptance") or {}).get("acceptance_length"))
        if r.get("status") == "ok" and k and served and k <= len(walk):
            rows.append({"k": k, "offline_tau": walk[k - 1], "served_tau": served,
                         "rel_diff": round(walk[k - 1] / served - 1, 4),
                         "offline_tau_text": text[k - 1] if k <= len(text) else None})  # fmt: skip
    return rows


def tau_table(rows: list[dict[str, Any]]) -> list[str]:
    """The offline and served τ side by side, and the offline τ without the looping continuations (what
    text alone gets; reports from before 2026-12-02 lack it)."""
    out = [
        "| k | offline τ (`draft eval`, served path) | served τ | offline vs served | offline τ, text only |",
        "|---|---|---|---|---|",
    ]
    return out + [
        f"| {r['k']} | {r['offline_tau']:.2f} | {r['served_tau']:.2f} | {r['rel_diff']:+.1%} | "
        + (f"{t:.2f}" if (t := r.get("offline_tau_text")) is not None else "–")
        + " |"
        for r in rows
    ]


def plan_vs_measured(plan: dict[str, Any], report: dict[str, Any]) -> dict[str, Any]:
    """The plan's device peak against the NVML peak the baseline run sampled (whole device, all processes)."""
    base = next((r for r in report["runs"] if r["draft_tokens"] == 0 and r.get("status") == "ok"), None)
    measured = ((base or {}).get("telemetry") or {}).get("mem_peak_bytes")
    planned = plan.get("peak_bytes")
    rel = (planned - measured) / measured if planned and measured else None
    return {"planned_peak_bytes": planned, "nvml_peak_bytes": measured, "rel_diff": rel}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("gpu-check"))
    ap.add_argument("--steps", default=",".join(STEPS))
    ap.add_argument("--sizes", default="small,medium")
    ap.add_argument(
        "--fa3-source", type=Path, help="a flash-attention checkout (the directory holding hopper/)"
    )
    ap.add_argument("--small-root", type=Path, help="ROOT/model and ROOT/gptq from the gptq-toy scenario")
    ap.add_argument("--calib", type=Path, help="calibration JSONL for quant (default: ROOT/calib.jsonl)")
    ap.add_argument("--draft-tokens", default="3,5,7,11,15")
    ap.add_argument("--bench-targets", help="bench only these targets (e.g. small-awq); default: all")
    ap.add_argument("--workload", choices=("heldout", "code"), default="heldout", help="what bench sends")
    ap.add_argument("--trials", type=int, help="bench's --trials (default: bench's)")
    ap.add_argument(
        "--budget", type=float, help="seconds for the whole script: a step gets what is left, none once spent"
    )
    ap.add_argument("--quick", action="store_true", help="fewer requests and draft steps")
    ap.add_argument("--summary", default="summary.json", help="file under --out that step results append to")
    args = ap.parse_args(argv)
    out: Path = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    steps, sizes = args.steps.split(","), args.sizes.split(",")
    requests, tokens = ("4", "64") if args.quick else ("8", "128")
    summary = out / args.summary  # appended to: several invocations may share one --out
    results: list[dict] = json.loads(summary.read_text()) if summary.exists() else []

    deadline = time.monotonic() + args.budget if args.budget else None

    def record(res: dict) -> dict:
        results.append(res)
        summary.write_text(json.dumps(results, indent=1))
        return res

    def step(name: str, cmd: list[str], timeout: float, env: dict[str, str] | None = None) -> dict:
        """A step gets at most the time left of the budget, and none once less than 30 s is."""
        return record(budgeted_step(name, cmd, out, timeout, deadline, 30, env=env))

    targets: dict[str, Path] = {}
    for size in sizes:
        if size == "small" and args.small_root:
            targets["small"] = args.small_root / "model"
        else:
            targets[size] = out / f"toy-{size}" / "target"
    if "small" in sizes and args.small_root:
        targets["small-awq"] = out / "small-awq"
    if "medium" in sizes:
        targets["medium-awq"] = out / "medium-awq"
    drafters = {name: out / f"dflash-{name.split('-')[0]}" for name in targets}

    def workload(name: str) -> list[str]:
        """bench's workload flags for a target: its toy's held-out prefixes (completion mode), else the code
        suite (asked for, or no prompts file where the toy was built)."""
        if args.workload == "code":
            return ["--suite", "code"]
        built_elsewhere = args.small_root is not None and name.startswith("small")
        prompts = args.small_root / "heldout.jsonl" if built_elsewhere else out / "heldout-here.jsonl"
        if not built_elsewhere and not prompts.exists():
            step("prompts", specq("toy", "prompts", str(prompts), "--json"), 120)
        if not prompts.exists():
            print(f"== {name}: no {prompts}: benching the code suite (chat prompts the toys loop on)")
            return ["--suite", "code"]
        return ["--prompts", str(prompts), "--mode", "completion"]

    if "toy" in steps:
        for size in sizes:
            if not targets[size].exists():
                cmd = specq("toy", "build", str(targets[size].parent), "--size", size, "--json")
                step(f"toy-{size}", cmd, 900)
    if "fa3" in steps and args.fa3_source:
        models = [str(p) for name, p in targets.items() if not name.endswith("-awq") and p.exists()]
        # the AWQ target runs in fp16: name the GPTQ source so the build covers fp16 too
        if args.small_root and (args.small_root / "gptq").exists():
            models.append(str(args.small_root / "gptq"))
        step("fa3", specq("fa3", "build", "--source", str(args.fa3_source), *models, "--json"), 900)
    if "doctor" in steps:  # after the FA3 build, so its entry shows what was installed
        step("doctor", specq("doctor", "--json"), 120)
    if "awq" in steps and args.small_root:
        cmd = specq(
            "convert", str(args.small_root / "gptq"), "--to", "awq", "--out", str(targets["small-awq"])
        )
        if not targets["small-awq"].exists():
            step("awq", cmd, 300)
    calib = args.calib or (args.small_root / "calib.jsonl" if args.small_root else None)
    if "quant" in steps and "medium-awq" in targets and calib and not targets["medium-awq"].exists():
        cmd = specq(
            "quantize", str(targets["medium"]), "--method", "awq", "--quant-backend", "autoawq",
            "--device", "cuda", "--calib", str(calib), "--out", str(targets["medium-awq"]), "--json",
            "--no-eval",  # the quality check loads AWQ through gptqmodel, which the GPU machine lacks
        )  # fmt: skip
        step("quant-medium", cmd, 600)
    if "draft" in steps:
        for size in sizes:
            if drafters[size].exists():
                continue
            # far more than the default 128 sequences: on 48 of the small toy's held-out prefixes 8192 instead
            # of 2048 lifted the offline τ on text at k = 7 by about a fifth (2.28/2.06 -> 2.74/2.49, two
            # seeds; CPU, docs/draft.md); the caller's SPECQ_DRAFT__* environment wins
            env = dict(os.environ)
            env.setdefault("SPECQ_DRAFT__SAMPLES", "8192")
            if size == "small":
                env.setdefault("SPECQ_DRAFT__STEPS", "600" if args.quick else "3000")
            else:
                env.setdefault("SPECQ_DRAFT__BATCH_SIZE", "16")
                env.setdefault("SPECQ_DRAFT__STEPS", "1500" if args.quick else "5000")
            cmd = specq(
                "draft", "train", str(targets[size]), "--out", str(drafters[size]), "--device", "cuda",
                "--block-size", "16", "--json",
            )  # fmt: skip
            step(f"draft-{size}", cmd, 900, env)
    tables: list[str] = []
    if "bench" in steps:
        chosen = args.bench_targets.split(",") if args.bench_targets else list(targets)
        for name, target in ((n, t) for n, t in targets.items() if n in chosen):
            bench_out = out / f"bench-{name}"
            cmd = specq(
                "bench", str(target), "--draft-model", str(drafters[name]), "--engine", "lmdeploy",
                "--backend", "pytorch", "--method", "dflash", "--draft-tokens", args.draft_tokens,
                *workload(name), "--requests", requests, "--max-tokens", tokens, "--out", str(bench_out),
                *(["--trials", str(args.trials)] if args.trials else []), "--json",
            )  # fmt: skip
            res = step(f"bench-{name}", cmd, 1800)
            try:
                report = json.loads((out / f"bench-{name}.out").read_text())
            except (OSError, ValueError):
                continue
            tables += [f"### {name}", "", *sweep_table(report), ""]
            if "eval" in steps and not name.endswith("-awq"):  # transformers cannot run AWQ here
                eval_cmd = specq(
                    "draft", "eval", str(target), str(drafters[name]), *workload(name), "--requests",
                    requests, "--max-tokens", tokens, "--device", "cuda", "--json",
                )  # fmt: skip
                if step(f"eval-{name}", eval_cmd, 600)["exit"] == 0:
                    offline = json.loads((out / f"eval-{name}.out").read_text())
                    res["offline_vs_served"] = cmp = offline_vs_served(offline, report)
                    tables += [*tau_table(cmp), ""]
            if "plan" in steps:
                # the plan evaluates the ratio the servers ran with (specq serve's engine default), not
                # the one it would recommend: compared with the recommendation, a 0.8 server read 18 % low
                ratio = os.environ.get("SPECQ_ENGINE__CACHE_MAX_ENTRY_COUNT") or str(serve_ratio())
                plan_cmd = specq(
                    "plan", str(target), "--draft-model", str(drafters[name]), "--engine", "lmdeploy",
                    "--cache-max-entry-count", ratio, "--json",
                )  # fmt: skip
                pres = step(f"plan-{name}", plan_cmd, 120)
                if pres["exit"] == 0:
                    plan = json.loads((out / f"plan-{name}.out").read_text())
                    res["plan_vs_nvml"] = cmp = plan_vs_measured(plan, report)
                    tables += [f"plan vs NVML peak ({name}): {json.dumps(cmp)}", ""]
        (out / "sweeps.md").write_text("\n".join(tables))
        print("\n".join(tables), flush=True)
    if "tests" in steps and "small" in targets:
        env = dict(os.environ, SPECQ_GPU_SPEC_TARGET=str(targets["small"]))
        if drafters["small"].exists():
            env["SPECQ_GPU_SPEC_DRAFTER"] = str(drafters["small"])
        cmd = [
            sys.executable, "-m", "pytest", "-m", "gpu", "tests/gpu/test_spec_lmdeploy.py", "-v", "-s",
            "-p", "no:cacheprovider", f"--junitxml={out / 'gpu-tests.xml'}",
        ]  # fmt: skip
        step("tests", cmd, 900, env)
    summary.write_text(json.dumps(results, indent=1))
    return 0 if all(r["exit"] == 0 for r in results) else 1
