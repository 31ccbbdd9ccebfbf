"""The 4-bit Qwen3.5 toy speculating on LMDeploy 0.18.0 through specq's compatibility patch, on an H200, run
detached in two phases with a budget (docs/verification.md).

    python benchmarks/gpu.py check-qwen35-awq prep  --root ROOT --awq AWQ --fa3-source DIR --out OUT
    python benchmarks/gpu.py check-qwen35-awq bench --root ROOT --awq AWQ --prompts FILE --out OUT
        [--mtp-tokens 1..4] [--dflash-tokens 3..7] [--trials 2] [--budget 1200]

ROOT/target is the bf16 Qwen3.5-shaped toy (`specq toy build --arch qwen3.5`), AWQ its copy made on the CPU
machine by `specq quantize ROOT/target --method awq --for speculative --quant-backend gptqmodel`, FILE the
toy's held-out code prefixes (`specq toy prompts`). Every step runs a specq command (or, for the margins, a
plain HTTP client against `specq serve`) and is recorded in OUT/summary-PHASE.json (exit code, seconds,
stderr tail); a step is skipped when the budget left is below its reserve.

- prep: `specq fa3 build --source DIR ROOT/target AWQ` (bf16 head dim 256: the AWQ target runs in bf16 with
  the patch) and, at the same time, `specq draft train ROOT/target --device cuda --block-size 8` (the DFlash
  drafter, bf16, taught by the bf16 target; SPECQ_DRAFT__SAMPLES sets its sequences).
- bench (LMDeploy's PyTorch engine needs tilelang & co. installed by then): `specq doctor --json` (the
  compatibility patch's state), `specq draft eval` on the benches' prompts (offline τ against the bf16
  teacher), `specq bench AWQ --method qwen3_5_mtp --draft-tokens 1..4` and `--method dflash --draft-model
  DRAFTER --draft-tokens 3..7` (8 requests x 128 greedy tokens, completion mode, warm-up to steady state,
  `--trials`), each against its own k = 0 baseline of the AWQ target; then `compat.json`: every line the
  import hook wrote into the servers' `compat.log` (which module it patched, in which process), beside the
  servers' own pids from their logs; last, `margins.json`: the AWQ target served plain by `specq serve`, each
  prompt sent once more with `logprobs: 2`, so the top-2 log-probability margin at every position of the
  greedy continuation is the engine's own (for classifying where speculative text leaves plain text)."""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

from .check import budgeted_step, specq, sweep_table


def _record(out: Path, phase: str, results: list[dict]) -> None:
    (out / f"summary-{phase}.json").write_text(json.dumps(results, indent=1))


def prep(args: argparse.Namespace, out: Path, deadline: float) -> list[dict]:
    target, awq = args.root.resolve() / "target", args.awq.resolve()
    results: list[dict] = []
    drafter = out / "dflash"
    train = None
    if not drafter.exists():  # on the GPU while FA3 compiles on the CPU cores
        cmd = specq(
            "draft", "train", str(target), "--out", str(drafter), "--device", "cuda", "--block-size", "8",
            "--steps", args.draft_steps, "--json",
        )  # fmt: skip
        env = {**os.environ, "SPECQ_DRAFT__SAMPLES": args.draft_samples}
        log = open(out / "draft.log", "w")  # noqa: SIM115 (closed below)
        t0 = time.monotonic()
        train = (subprocess.Popen(cmd, stdout=open(out / "draft.out", "w"), stderr=log, env=env), t0, log)
    fa3 = specq("fa3", "build", "--source", str(args.fa3_source), str(target), str(awq), "--json")
    results.append(budgeted_step("fa3", fa3, out, float("inf"), deadline, 150, margin=5))
    _record(out, "prep", results)
    if train is not None:
        proc, t0, log = train
        try:
            code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            code = None
        log.close()
        results.append({"step": "draft", "exit": code, "seconds": round(time.monotonic() - t0, 1)})
    _record(out, "prep", results)
    return results


def _pids(log: Path) -> list[int]:
    """The process ids LMDeploy's log names (its `Started server process [PID]` and per-process prefixes)."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return []
    return sorted({int(m) for m in re.findall(r"(?:process|pid)[ =\[]+(\d+)", text, flags=re.I)})


def compat_proof(out: Path) -> dict:
    """What the import hook wrote in each server's run directory, next to the pids in that server's log."""
    proof: dict[str, dict] = {}
    for log in sorted(out.glob("bench-*/servers/*/compat.log")):
        lines = log.read_text().splitlines()
        pids = sorted({int(m.group(1)) for ln in lines if (m := re.search(r"pid=(\d+)", ln))})
        proof[str(log.relative_to(out))] = {
            "lines": lines,
            "patched_processes": pids,
            "server_log_pids": _pids(log.parent / "lmdeploy.log"),
        }
    return proof


def margins(args: argparse.Namespace, out: Path, deadline: float) -> dict:
    """Serve the AWQ target plain and ask each prompt again with logprobs (top 2) at temperature 0."""
    import httpx

    port = 23391
    left = deadline - time.monotonic()
    if left < 150:
        return {"skipped": f"{left:.0f} s left"}
    cmd = specq(
        "serve", str(args.awq.resolve()), "--engine", "lmdeploy", "--backend", "pytorch", "--port", str(port),
    )  # fmt: skip
    log = open(out / "margins-serve.log", "w")  # noqa: SIM115
    env = {**os.environ, "SPECQ_ENGINE__LOGPROBS_MODE": "raw_logprobs"}  # else LMDeploy answers HTTP 400
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    result: dict = {"prompts": []}
    try:
        url = f"http://127.0.0.1:{port}"
        with httpx.Client(timeout=30.0, trust_env=False) as client:
            while time.monotonic() < deadline - 30:
                try:
                    if client.get(f"{url}/v1/models").status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if proc.poll() is not None:
                    result["error"] = f"server exited {proc.returncode}"
                    return result
                time.sleep(2)
            model = client.get(f"{url}/v1/models").json()["data"][0]["id"]
            for line in args.prompts.read_text().splitlines()[:8]:
                prompt = json.loads(line)["prompt"]
                body = {"model": model, "prompt": prompt, "max_tokens": 128, "temperature": 0.0,
                        "logprobs": 2, "stream": False}  # fmt: skip
                r = client.post(f"{url}/v1/completions", json=body, timeout=120)
                result["prompts"].append({"status": r.status_code, "response": r.json()})
    except Exception as e:  # a GPU record: keep what came back, say what broke
        result["error"] = f"{type(e).__name__}: {e}"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()
    return result


def bench(args: argparse.Namespace, out: Path, deadline: float) -> list[dict]:
    target, awq = args.root.resolve() / "target", args.awq.resolve()
    drafter = out / "dflash"
    workload = ["--prompts", str(args.prompts.resolve()), "--mode", "completion"]
    results: list[dict] = []
    tables: list[str] = []

    def step(name: str, cmd: list[str], reserve: float) -> dict:
        res = budgeted_step(name, cmd, out, float("inf"), deadline, reserve, margin=5)
        results.append(res)
        _record(out, "bench", results)
        return res

    step("doctor", specq("doctor", "--json"), 10)
    if drafter.exists():
        step("eval", specq("draft", "eval", str(target), str(drafter), *workload, "--requests", "8",
                           "--max-tokens", "128", "--device", "cuda", "--json"), 60)  # fmt: skip
    runs = [("bench-mtp", "qwen3_5_mtp", None, args.mtp_tokens)]
    if drafter.exists():
        runs.append(("bench-dflash", "dflash", drafter, args.dflash_tokens))
    for name, method, draft, tokens in runs:
        cmd = specq(
            "bench", str(awq), "--engine", "lmdeploy", "--backend", "pytorch", "--method", method,
            *(["--draft-model", str(draft)] if draft else []), "--draft-tokens", tokens, *workload,
            "--requests", "8", "--max-tokens", "128", "--trials", args.trials, "--temperature", "0",
            "--out", str(out / name), "--json",
        )  # fmt: skip
        res = step(name, cmd, 240)
        try:
            report = json.loads((out / f"{name}.out").read_text())
        except (OSError, ValueError):
            continue
        tables.extend([f"### {name} ({method}, AWQ target)", "", *sweep_table(report), ""])
        res["complete"] = report.get("complete")
    (out / "sweeps.md").write_text("\n".join(tables))
    (out / "compat.json").write_text(json.dumps(compat_proof(out), indent=1))
    t0 = time.monotonic()
    (out / "margins.json").write_text(json.dumps(margins(args, out, deadline), indent=1))
    results.append({"step": "margins", "seconds": round(time.monotonic() - t0, 1)})
    _record(out, "bench", results)
    print("\n".join(tables), flush=True)
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("phase", choices=("prep", "bench"))
    ap.add_argument("--root", type=Path, required=True, help="a `specq toy build --arch qwen3.5` (target/)")
    ap.add_argument(
        "--awq", type=Path, required=True, help="its AWQ copy (`specq quantize --for speculative`)"
    )
    ap.add_argument("--fa3-source", type=Path, help="a flash-attention checkout (prep)")
    ap.add_argument("--prompts", type=Path, help="a `specq toy prompts` file (bench)")
    ap.add_argument("--out", type=Path, default=Path("gpu-check-qwen35-awq"))
    ap.add_argument("--mtp-tokens", default="1..4")
    ap.add_argument("--dflash-tokens", default="3..7")
    ap.add_argument("--draft-steps", default="1500")
    ap.add_argument("--draft-samples", default="1024")
    ap.add_argument("--trials", default="2")
    ap.add_argument("--budget", type=float, default=1200.0, help="seconds for the phase")
    args = ap.parse_args(argv)
    out: Path = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + args.budget
    if args.phase == "prep":
        if args.fa3_source is None:
            ap.error("prep needs --fa3-source")
        results = prep(args, out, deadline)
    else:
        if args.prompts is None:
            ap.error("bench needs --prompts")
        results = bench(args, out, deadline)
    return 0 if all(r.get("exit") in (0, None) for r in results) else 1
