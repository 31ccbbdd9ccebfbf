"""Where a speculative step's time goes on LMDeploy's PyTorch engine, and what launch options change it.

    python benchmarks/gpu.py spec-step-profile TARGET --draft-model DRAFTER --out DIR
        [--draft-tokens 0,15] [--options default,eager] [--profile default] [--requests 8 --max-tokens 128]

For every launch option set and every k it starts `specq serve` (k = 0: the plain baseline), measures it with
`specq bench --url` (warm-up to steady state, 3 trials; the JSON lands in DIR/bench-OPTION-kK.json), and, for
the option sets named by --profile, keeps sending the same requests until LMDeploy's own torch profiler
(LMDEPLOY_PROFILE_CPU/CUDA, started LMDEPLOY_PROFILE_DELAY seconds after the engine loop, for
LMDEPLOY_PROFILE_DURATION seconds) has written its Chrome trace, which is then summarised per decode step:
wall time, GPU busy time (union of kernel intervals), and the CPU time inside each of LMDeploy's own
`record_function` ranges (target forward, drafter forward, rejection sampling, scheduling, input building,
sampling, copies), and the GPU time a step of each kernel name (the 15 largest, the rest as one row).
DIR/summary.json holds every figure; DIR/steps.md the tables. Needs a CUDA machine with
LMDeploy (and FlashAttention-3 for k > 0).

Option sets: default (CUDA graphs, --max-batch-size 1: specq's defaults), eager (--eager-mode: no graphs),
mbs8 (--max-batch-size 8: graphs captured for batches up to 8), mp (LMDEPLOY_EXECUTOR_BACKEND=mp: the model
agent in a worker process of its own), step-patch (engine.step_patch: specq's spec-step patch of LMDeploy),
and any set of environment variables given with --env-option."""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from specq.pipeline.errors import ProcessFailed
from specq.pipeline.serve.process import ManagedProcess, free_port

from .w4a16_e2e import CACHE, SESSION_LEN  # w4a16-e2e's servers' KV cache share and session length

OPTIONS: dict[str, tuple[list[str], dict[str, str]]] = {
    "default": ([], {}),
    "eager": ([], {"SPECQ_ENGINE__EAGER_MODE": "1"}),
    "mbs8": (["--max-batch-size", "8"], {}),
    # LMDeploy runs the model agent in a worker process of its own instead of on the engine loop's thread
    # (lmdeploy/pytorch/engine/executor/__init__.py reads it before its one-GPU default, 'uni')
    "mp": ([], {"LMDEPLOY_EXECUTOR_BACKEND": "mp"}),
    # specq's spec-step patch through its compatibility layer (engines/lmdeploy_compat), as a user enables it
    "step-patch": ([], {"SPECQ_ENGINE__STEP_PATCH": "1"}),
}


def parse_env_option(text: str) -> tuple[str, dict[str, str]]:
    """`NAME:VAR=VALUE[,VAR=VALUE...]` -> (NAME, {VAR: VALUE}): an option set of environment variables given
    on the command line (e.g. `patched:PYTHONPATH=/tmp/site-patched:/tmp/site` for a patched LMDeploy)."""
    name, sep, rest = text.partition(":")
    pairs = [p.partition("=") for p in rest.split(",") if p] if sep else []
    if not name or not pairs or any(not var or not eq for var, eq, _ in pairs):
        raise ValueError(f"--env-option {text!r}: write NAME:VAR=VALUE[,VAR=VALUE...]")
    return name, {var: value for var, _, value in pairs}


# LMDeploy 0.18's record_function ranges (read from its source), grouped for the table
RANGES = {
    "target forward (graph)": ("forward_cudagraph",),
    "target/drafter forward (eager)": ("forward_eager",),
    "drafter forward": ("draft_model_forward",),
    "rejection sampling": ("spec_rejection_sampling", "rejection_sample"),
    "logits sampling": ("sampling_logits", "get_logits"),
    "scheduling": ("schedule_running", "schedule_prefill"),
    "input building": ("make_forward_inputs", "create_model_inputs", "create_model_inputs_delta",
                       "StepInputs.step_decode", "inputs_H2D", "fill_buffers_cudagraph"),
    "outputs": ("outputs_D2H", "make_infer_outputs", "stopping_criteria"),
}  # fmt: skip
STEP_MARKER = ("sampling_logits", "spec_rejection_sampling")


def specq(*args: str) -> list[str]:
    return [sys.executable, "-m", "specq.cli", *args]


def keep_busy(url: str, model: str, until: Path, limit_s: float, max_tokens: int) -> int:
    """Sequential chat requests (batch 1, like the bench) until `until` exists or `limit_s` passes."""
    prompt = "Write a Python function that merges overlapping intervals and explain it."
    body = {
        "model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
        "temperature": 0, "ignore_eos": True,
    }  # fmt: skip
    n, t0 = 0, time.perf_counter()
    with httpx.Client(timeout=60.0) as client:
        body["model"] = model or client.get(f"{url}/v1/models").json()["data"][0]["id"]
        while not until.exists() and time.perf_counter() - t0 < limit_s:
            client.post(f"{url}/v1/chat/completions", json=body)
            n += 1
    return n


def wait_complete(path: Path, limit_s: float, sleep=time.sleep) -> bool:
    """Whether `path` became a whole gzip or JSON document within `limit_s`: the profiler creates the file
    first and writes it for seconds after (a 7 MB trace was read half-written on the H200, 2026-12-03)."""
    opener = gzip.open if path.suffix == ".gz" else open
    for _ in range(max(1, int(limit_s))):
        try:
            with opener(path, "rt") as f:
                json.load(f)
            return True
        except (OSError, EOFError, ValueError):
            sleep(1.0)
    return False


def _union(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for s, e in sorted(intervals):
        if e <= end:
            continue
        total += e - max(s, end)
        end = e
    return total


def summarise_trace(path: Path, top: int = 15) -> dict[str, Any]:
    """Per-step figures from a torch-profiler Chrome trace of the engine's model agent."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        events = [e for e in json.load(f).get("traceEvents", []) if e.get("ph") == "X"]
    kernels = [(e["ts"], e["ts"] + e.get("dur", 0)) for e in events if e.get("cat") == "kernel"]
    annotations = [e for e in events if e.get("cat") in ("user_annotation", "cpu_op")]
    steps = [e for e in annotations if e.get("name") in STEP_MARKER]
    steps_per_name = {n: sum(1 for e in steps if e["name"] == n) for n in STEP_MARKER}
    n_steps = max(steps_per_name.values()) if steps else 0
    if not kernels or not n_steps:
        return {"trace": path.name, "steps": 0, "note": "no decode steps in the profiled window"}
    marker = max(steps_per_name, key=lambda n: steps_per_name[n])
    ts = sorted(e["ts"] for e in steps if e["name"] == marker)
    lo, hi = ts[0], ts[-1]  # whole steps between the first and the last marker
    n_steps = len(ts) - 1
    if n_steps < 1:
        return {"trace": path.name, "steps": 0, "note": "fewer than two decode steps profiled"}
    wall_ms = (hi - lo) / 1000.0
    in_win = [(max(s, lo), min(e, hi)) for s, e in kernels if e > lo and s < hi]
    gpu_ms = _union(in_win) / 1000.0
    ranges: dict[str, float] = {}
    for label, names in RANGES.items():
        dur = [e for e in annotations if e.get("name") in names and lo <= e["ts"] < hi]
        ranges[label] = round(sum(e.get("dur", 0) for e in dur) / 1000.0 / n_steps, 4)
    launches = sum(1 for e in events if e.get("cat") == "cuda_runtime" and lo <= e["ts"] < hi)
    by_kernel = kernel_groups(
        [e for e in events if e.get("cat") == "kernel" and lo <= e["ts"] < hi], n_steps, top=top
    )
    return {
        "trace": path.name, "steps": n_steps, "step_marker": marker,
        "step_ms": round(wall_ms / n_steps, 4), "gpu_busy_ms": round(gpu_ms / n_steps, 4),
        "gpu_busy_share": round(gpu_ms / wall_ms, 3) if wall_ms else None,
        "kernels_per_step": round(len(in_win) / n_steps, 1),
        "runtime_calls_per_step": round(launches / n_steps, 1),
        "cpu_ranges_ms_per_step": ranges,
        "kernels_ms_per_step": by_kernel,
    }  # fmt: skip


def kernel_groups(kernels: list[dict[str, Any]], n_steps: int, top: int = 15) -> list[dict[str, Any]]:
    """GPU time a step by kernel name, largest first: the `top` names, then the rest as one row. Names are
    cut at their first '<' or '(' (templated CUDA kernels carry their whole signature)."""
    totals: dict[str, list[float]] = {}
    for e in kernels:
        name = re.split(r"[<(]", e.get("name", ""), maxsplit=1)[0].strip() or e.get("name") or "?"
        t = totals.setdefault(name, [0.0, 0])
        t[0] += e.get("dur", 0)
        t[1] += 1
    ranked = sorted(totals.items(), key=lambda kv: -kv[1][0])
    rows = [
        {"kernel": n, "ms": round(d / 1000.0 / n_steps, 4), "launches": round(c / n_steps, 1)}
        for n, (d, c) in ranked[:top]
    ]
    rest = ranked[top:]
    if rest:
        ms, launches = sum(d for _, (d, _) in rest), sum(c for _, (_, c) in rest)
        rows.append({"kernel": f"({len(rest)} others)", "ms": round(ms / 1000.0 / n_steps, 4),
                     "launches": round(launches / n_steps, 1)})  # fmt: skip
    return rows


def run_one(args: argparse.Namespace, option: str, k: int, profile: bool) -> dict[str, Any]:
    flags, env_extra = OPTIONS[option]
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    name = f"{option}-k{k}"
    prof_dir = args.out / f"prof-{name}"
    env = dict(os.environ, **env_extra)
    if profile:
        prof_dir.mkdir(parents=True, exist_ok=True)
        env.update(
            LMDEPLOY_PROFILE_CPU="1", LMDEPLOY_PROFILE_CUDA="1",
            LMDEPLOY_PROFILE_DELAY=str(args.profile_delay),
            LMDEPLOY_PROFILE_DURATION=str(args.profile_duration), LMDEPLOY_PROFILE_USE_GZIP="1",
            LMDEPLOY_PROFILE_OUT_PREFIX=str(prof_dir / "trace_"),
        )  # fmt: skip
    # the server's own log (LMDeploy's output, compat.log) kept beside the results
    cmd = specq(
        "serve", str(args.target), "--engine", "lmdeploy", "--backend", "pytorch", "--port", str(port),
        "--run-dir", str(args.out / f"run-{name}"), "--session-len", SESSION_LEN,
        "--cache-max-entry-count", CACHE,
    )  # fmt: skip
    cmd += flags
    if k > 0:
        cmd += ["--draft-model", str(args.draft_model), "--method", "dflash", "--draft-tokens", str(k)]
    # specq's own process handling: its own session, readiness on /v1/models, and SIGTERM to the server when
    # this script dies in any way (seen on the H200 before it was used here: a server orphaned by a timeout
    # held 80 % of the GPU memory through the next call's measurements)
    server = ManagedProcess(cmd, args.out / f"serve-{name}.log", env=env, name=name, die_with_parent=True)
    t_launch = time.perf_counter()
    server.start()
    res: dict[str, Any] = {"option": option, "k": k, "cmd": cmd[3:]}
    try:
        server.wait_ready(f"{url}/v1/models", timeout_s=args.ready_timeout)
        res["ready_s"] = round(time.perf_counter() - t_launch, 1)
        bench = subprocess.run(
            specq("bench", str(args.target), "--url", url, "--draft-tokens", str(k), "--suite", "code",
                  "--requests", str(args.requests), "--max-tokens", str(args.max_tokens), "--trials",
                  str(args.trials),
                  "--json"),
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        (args.out / f"bench-{name}.json").write_text(bench.stdout)
        res["bench_exit"] = bench.returncode
        res.update(_bench_figures(bench.stdout))
        if profile:
            trace = prof_dir / "trace_0.json.gz"
            limit = args.profile_delay + args.profile_duration + 30 - (time.perf_counter() - t_launch) + 60
            res["profile_requests"] = keep_busy(url, "", trace, max(limit, 10), args.max_tokens)
            if not trace.exists():
                res["profile"] = {"note": "no trace written"}
            elif not wait_complete(trace, 120.0):
                res["profile"] = {"note": "the trace was not complete after 120 s"}
            else:
                res["profile"] = summarise_trace(trace)
    except (ProcessFailed, subprocess.TimeoutExpired, httpx.HTTPError) as e:
        res["error"] = str(e)
    finally:
        server.stop(grace_s=60.0)
    print(json.dumps(res), flush=True)
    return res


def _bench_figures(stdout: str) -> dict[str, Any]:
    try:
        rep = json.loads(stdout)
    except ValueError:
        return {"bench_note": "no JSON report"}
    run = next((r for r in rep.get("runs", []) if r.get("status") == "ok"), None)
    if run is None:
        return {"bench_note": "no ok run"}
    srv, acc = run.get("server") or {}, run.get("acceptance") or {}
    return {
        "tok_s": (run.get("aggregate") or {}).get("output_tokens_per_s"),
        "server_decode_tok_s": srv.get("server_decode_tokens_per_s"),
        "tau": acc.get("acceptance_length"), "flags": run.get("flags"),
    }  # fmt: skip


def table(results: list[dict[str, Any]]) -> list[str]:
    rows = [
        "| option | k | server decode tok/s | decode-rate speedup | τ | step cost (plain steps) | ready s |",
        "|---|---|---|---|---|---|---|",
    ]

    def fmt(x: float | None, spec: str, suffix: str = "") -> str:
        return f"{x:{spec}}{suffix}" if x else "–"

    for r in results:
        base = next((b for b in results if b["option"] == r["option"] and b["k"] == 0), None)
        dec, bdec, tau = r.get("server_decode_tok_s"), (base or {}).get("server_decode_tok_s"), r.get("tau")
        sp = dec / bdec if dec and bdec and r["k"] else None
        cost = tau / sp if sp and tau else None
        if "error" in r or "bench_note" in r:
            rows.append(f"| {r['option']} | {r['k']} | {r.get('error') or r.get('bench_note')} | | | | |")
            continue
        rows.append(
            f"| {r['option']} | {r['k']} | {fmt(dec, '.1f')} | {fmt(sp, '.2f', '×')} | {fmt(tau, '.2f')} | "
            f"{fmt(cost, '.2f')} | {r.get('ready_s', '–')} |"
        )
    prof = [r for r in results if r.get("profile", {}).get("steps")]
    if prof:
        labels = list(RANGES)
        rows += [
            "",
            "| option | k | step ms | GPU busy ms | GPU share | kernels/step | " + " | ".join(labels) + " |",
        ]
        rows += ["|---" * (6 + len(labels)) + "|"]
        for r in prof:
            p = r["profile"]
            cells = " | ".join(f"{p['cpu_ranges_ms_per_step'][x]:.3f}" for x in labels)
            rows.append(
                f"| {r['option']} | {r['k']} | {p['step_ms']:.3f} | {p['gpu_busy_ms']:.3f} | "
                f"{p['gpu_busy_share']:.0%} | {p['kernels_per_step']} | {cells} |"
            )
        for r in prof:
            rows += ["", f"GPU time a step by kernel, {r['option']} k = {r['k']}:", "",
                     "| kernel | ms a step | launches a step |", "|---|---|---|"]  # fmt: skip
            rows += [
                f"| `{g['kernel']}` | {g['ms']:.3f} | {g['launches']} |"
                for g in r["profile"].get("kernels_ms_per_step", [])
            ]
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("target", type=Path)
    ap.add_argument("--draft-model", type=Path, required=True)
    ap.add_argument("--out", type=Path, default=Path("step-profile"))
    ap.add_argument("--draft-tokens", default="0,15")
    ap.add_argument("--options", default="default,eager")
    ap.add_argument("--profile", default="default", help="option sets whose servers are profiled")
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument(
        "--ready-timeout", type=float, default=600.0,
        help="seconds a server may take to answer (a first start on a fresh machine compiles kernels)",
    )  # fmt: skip
    ap.add_argument("--profile-delay", type=int, default=40)
    ap.add_argument("--profile-duration", type=int, default=2)
    ap.add_argument("--trace", type=Path, help="only summarise this trace file and exit")
    ap.add_argument(
        "--env-option", action="append", default=[], metavar="NAME:VAR=VALUE[,VAR=VALUE]",
        help="an option set of environment variables (repeatable), named in --options like the built-in ones",
    )  # fmt: skip
    args = ap.parse_args(argv)
    for text in args.env_option:
        name, env = parse_env_option(text)
        OPTIONS[name] = ([], env)
    if args.trace:
        print(json.dumps(summarise_trace(args.trace), indent=1))
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    results = []
    for option in args.options.split(","):
        for k in (int(x) for x in args.draft_tokens.split(",")):
            results.append(run_one(args, option, k, option in args.profile.split(",")))
            (args.out / "summary.json").write_text(json.dumps(results, indent=1))
    rows = table(results)
    (args.out / "steps.md").write_text("\n".join(rows) + "\n")
    print("\n".join(rows))
    return 0 if all("error" not in r for r in results) else 1
