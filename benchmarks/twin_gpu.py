"""Scale twins on one GPU (written for an H200, one run of about 7 minutes): `specq plan` for a 24 GB card
against the NVML peak of a Qwen3.5-27B-AWQ twin, and the speculative step-cost curve on twins of several
sizes, all through specq's own commands. Needs LMDeploy 0.18 (PyTorch engine) and FlashAttention-3 installed
by the caller (`specq fa3 build`; the 27B twin's head dim is 256, the curve twins' 128).

    python benchmarks/twin_gpu.py --out /tmp/twin-gpu --report-dir "$OUT" [--budget 420] [--gpu-memory 24GiB]
        [--session-len 8192] [--mtp-tokens 3] [--curve-sizes 1.7b,8b] [--curve-k 7,15]
        [--steps twin27,memory,curve,dflash27]

--out holds the twins (about 40 GB with the default sizes: keep it off a directory whose files are fetched);
--report-dir receives only the small files (summary, tables, each step's stdout and stderr, bench reports).

Steps, in order; each is recorded in OUT/summary.json (exit code, seconds, stderr tail) as it ends, and a step
is skipped when less of the budget is left than it needs (summary.json then says so):
- twin27: `specq twin tests/fixtures/twin/qwen3_5-27b-config.json --quant awq --drafter mtp --drafter dflash
  --draft-layers 5 --device cuda` (about 19.5 GB written).
- memory: `specq plan TWIN --gpu-memory 24GiB --draft-tokens K --session-len S` (K: `--mtp-tokens`, the MTP
  layer drafts) gives the 24 GB card's KV cache; `specq plan TWIN` on this GPU gives the memory free after
  weights here; their ratio is the `--cache-max-entry-count` that leaves the 24 GB card's KV cache on this
  GPU (the memory fraction that emulates 24 GB). `specq plan` at that ratio, then `specq bench TWIN --method
  qwen3_5_mtp --draft-tokens K` with the same ratio, session length and prefill chunk, and the NVML peak of
  each run (baseline and K) against the plan's peak. specq refuses a quantized Qwen3.5 on the PyTorch engine
  (engines/qwen35.py: AWQ runs in fp16, the Gated DeltaNet state in bf16): the refusal is recorded and the
  baseline is measured on TurboMind instead (`--backend turbomind --draft-tokens 0`) against its plan.
- curve: per size, a bf16 Qwen3 twin (real layer shapes of Qwen3-1.7B / 8B ..., a 2048-token vocabulary so
  the step is the layers') with a random 5-layer DFlash drafter (τ ≈ 1, so a run's decode rate isolates the
  step cost), `specq bench --method dflash --draft-tokens 0,K...` (4 requests × 128 tokens, 1 trial); each
  run's step cost (τ ÷ decode-rate speedup) is a point.
- dflash27: the 27B twin with its DFlash drafter, the point of the curve at the 27B-AWQ's bytes (refused like
  the MTP bench while specq refuses AWQ Qwen3.5 on the PyTorch engine).

Outputs: OUT/summary.json (every step, and `results`: plan vs NVML, the curve), OUT/step_cost_curve.json (the
measured curve in `specq.pipeline.speedup.StepCostCurve` form: `SPECQ_STEP_COST_CURVE=FILE` makes bench and
draft eval predict with it; or paste its points into `STEP_COST_CURVE`), OUT/twin_gpu.md (the tables). Exit 0
when every step that ran succeeded (a recorded refusal followed by its fallback counts as success)."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_check import budgeted_step, specq  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "twin" / "qwen3_5-27b-config.json"
STEPS = ("twin27", "memory", "curve", "dflash27")

# Qwen3 layer shapes (hidden, layers, heads, kv heads, intermediate) of the public configs; head dim 128
QWEN3_SHAPES = {
    "0.6b": (1024, 28, 16, 8, 3072),
    "1.7b": (2048, 28, 16, 8, 6144),
    "4b": (2560, 36, 32, 8, 9728),
    "8b": (4096, 36, 32, 8, 12288),
    "14b": (5120, 40, 40, 8, 17408),
}
CURVE_VOCAB = 2048


def qwen3_config(size: str) -> dict[str, Any]:
    h, layers, heads, kv, inter = QWEN3_SHAPES[size]
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "hidden_size": h,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "head_dim": 128,
        "intermediate_size": inter,
        "vocab_size": CURVE_VOCAB,
        "max_position_embeddings": 40960,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "tie_word_embeddings": False,
        "eos_token_id": 2000,
        "pad_token_id": 2000,
        "bos_token_id": 2000,
        "torch_dtype": "bfloat16",
    }


def emulated_ratio(plan_card: dict[str, Any], plan_here: dict[str, Any]) -> float | None:
    """The `cache_max_entry_count` that gives this GPU the card's KV cache: LMDeploy sizes the cache as that
    fraction of the memory free after the weights, which the plans model for both GPUs."""
    kv, free = plan_card.get("kv_cache_bytes"), plan_here.get("free_after_weights_bytes")
    if not kv or not free or free <= 0:
        return None
    return round(min(max(kv / free, 0.01), 0.99), 4)


def peaks_vs_plan(plan: dict[str, Any], report: dict[str, Any], draft_tokens: int) -> list[dict[str, Any]]:
    """The NVML peak (the device, every process) of the runs at `draft_tokens` against the plan made for that
    count (the MTP layer's state and weights only count with k > 0)."""
    planned = plan.get("peak_bytes")
    rows = []
    for r in report.get("runs") or []:
        if r.get("draft_tokens") != draft_tokens:
            continue
        measured = ((r.get("telemetry") or {}).get("mem_peak_bytes")) or None
        rel = (planned - measured) / measured if planned and measured else None
        rows.append(
            {
                "run": r.get("label"),
                "draft_tokens": r.get("draft_tokens"),
                "status": r.get("status"),
                "nvml_peak_bytes": measured,
                "planned_peak_bytes": planned,
                "rel_diff": round(rel, 4) if rel is not None else None,
            }
        )
    return rows


def curve_points(label: str, weight_bytes: int, report: dict[str, Any]) -> list[dict[str, Any]]:
    """The step-cost points of one bench report (speculative runs that measured a step cost)."""
    out = []
    for r in report.get("runs") or []:
        k, cost = r.get("draft_tokens"), r.get("step_cost_ratio")
        if k and cost and r.get("status") == "ok":
            out.append({"label": label, "weight_bytes": weight_bytes, "k": k, "cost": round(cost, 4)})
    return out


def curve_document(points: list[dict[str, Any]], hardware: str, commit: str) -> dict[str, Any]:
    return {
        "curve": {
            "hardware": hardware,
            "engine": "LMDeploy PyTorch engine, CUDA graphs",
            "date": dt.date.today().isoformat(),
            "commit": commit,
            "method": "dflash",
            "note": "benchmarks/twin_gpu.py: random-weight twins, random 5-layer DFlash drafter (τ ≈ 1)",
            "points": points,
        }
    }


def _gib(n: int | None) -> str:
    return f"{n / 2**30:.2f}" if n else "–"


def markdown(results: dict[str, Any]) -> str:
    lines = [
        "# Scale twins on the GPU",
        "",
        f"{results.get('hardware')}, {results.get('date')}, commit {results.get('commit')}",
        "",
    ]
    for name, mem in (results.get("memory") or {}).items():
        lines += [
            f"## Memory: {name}",
            "",
            f"emulated ratio {mem.get('ratio')} (plan for "
            f"{mem.get('gpu_memory')}: peak {_gib(mem.get('card_peak_bytes'))} GiB)",
            "",
            "| run | k | status | NVML peak GiB | plan peak GiB | plan vs NVML |",
            "|---|---|---|---|---|---|",
        ]
        for r in mem.get("rows") or []:
            rel = f"{r['rel_diff']:+.1%}" if r.get("rel_diff") is not None else "–"
            lines.append(
                f"| {r['run']} | {r['draft_tokens']} | {r['status']} | {_gib(r['nvml_peak_bytes'])} | "
                f"{_gib(r['planned_peak_bytes'])} | {rel} |"
            )
        lines.append("")
    pts = results.get("curve") or []
    if pts:
        lines += [
            "## Step cost (speculative step ÷ plain step)",
            "",
            "| twin | weight GB | k | step cost |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {p['label']} | {p['weight_bytes'] / 1e9:.2f} | {p['k']} | {p['cost']:.2f} |" for p in pts
        ]
        lines.append("")
    return "\n".join(lines)


def _hardware() -> str:
    try:
        from specq.pipeline.hardware import list_gpus

        gpus = list_gpus()
        return str(gpus[0].name) if gpus else "unknown GPU"
    except Exception:  # the record must be written whatever NVML says
        return "unknown GPU"


def _commit() -> str:
    try:
        res = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
        )
        return res.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("twin-gpu"))
    ap.add_argument("--budget", type=float, default=420.0, help="seconds for the whole run")
    ap.add_argument("--steps", default=",".join(STEPS))
    ap.add_argument("--config", type=Path, default=FIXTURE, help="the 27B config.json")
    ap.add_argument("--gpu-memory", default="24GiB", help="the card to emulate")
    ap.add_argument("--session-len", default="8192")
    ap.add_argument("--mtp-tokens", default="3")
    ap.add_argument("--dflash-tokens", default="7")
    ap.add_argument("--curve-sizes", default="1.7b,8b", help=f"of {', '.join(QWEN3_SHAPES)}")
    ap.add_argument("--curve-k", default="7,15")
    ap.add_argument(
        "--report-dir", type=Path, help="also copy the summary, tables and step outputs here (e.g. $OUT)"
    )
    args = ap.parse_args()
    out: Path = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    steps = args.steps.split(",")
    deadline = time.monotonic() + args.budget
    log: list[dict[str, Any]] = []
    results: dict[str, Any] = {
        "hardware": _hardware(),
        "date": dt.date.today().isoformat(),
        "commit": _commit(),
        "budget_s": args.budget,
        "memory": {},
        "curve": [],
    }

    def save() -> None:
        (out / "summary.json").write_text(json.dumps({"steps": log, "results": results}, indent=1))
        (out / "twin_gpu.md").write_text(markdown(results))
        if args.report_dir:  # the small files only: the twins (tens of GB) stay in --out
            args.report_dir.mkdir(parents=True, exist_ok=True)
            for f in out.iterdir():
                if f.is_file() and f.suffix in (".json", ".md", ".out", ".log"):
                    shutil.copy2(f, args.report_dir / f.name)

    def step(
        name: str, cmd: list[str], timeout: float, reserve: float, env: dict[str, str] | None = None
    ) -> dict:
        res = budgeted_step(name, cmd, out, timeout, deadline, reserve, margin=5, env=env)
        log.append(res)
        save()
        return res

    def read(name: str) -> dict[str, Any] | None:
        try:
            return json.loads((out / f"{name}.out").read_text())
        except (OSError, ValueError):
            return None

    bench_common = ["--requests", "4", "--max-tokens", "128", "--trials", "1", "--ignore-eos", "--json"]

    def bench(model: Path, name: str, *flags: str) -> list[str]:
        return specq(
            "bench", str(model), "--engine", "lmdeploy", *flags, *bench_common, "--out", str(out / name)
        )

    def dflash_bench(twin_dir: Path, name: str, ks: str) -> list[str]:
        flags = ("--backend", "pytorch", "--method", "dflash", "--draft-tokens", ks)
        return bench(twin_dir / "target", name, "--draft-model", str(twin_dir / "dflash"), *flags)

    twin27 = out / "twin27-awq"
    save()
    if "twin27" in steps and not twin27.exists():
        flags = "--quant awq --drafter mtp --drafter dflash --draft-layers 5 --device cuda --json".split()
        step("twin27", specq("twin", str(args.config), "--out", str(twin27), *flags), 240, 60)
    target = twin27 / "target"

    def memory(name: str, k: str, extra: list[str], env_extra: dict[str, str]) -> int | None:
        """plan for the card, plan here, the emulated ratio, plan at it (k = 0 and K), the bench, NVML vs
        plan. `plan` takes the method and backend from the environment (it has no flags for them)."""
        penv = dict(os.environ, **env_extra)
        common = ["--engine", "lmdeploy", "--session-len", args.session_len]
        card_cmd = specq(
            "plan", str(target), "--gpu-memory", args.gpu_memory, *common, "--draft-tokens", k, "--json"
        )
        if step(f"plan-{name}-card", card_cmd, 60, 20, penv)["exit"] != 0:
            return None
        step(
            f"plan-{name}-here",
            specq("plan", str(target), *common, "--draft-tokens", k, "--json"),
            60,
            20,
            penv,
        )
        card, here = read(f"plan-{name}-card") or {}, read(f"plan-{name}-here") or {}
        ratio = emulated_ratio(card, here)
        entry = results["memory"][name] = {
            "gpu_memory": args.gpu_memory,
            "ratio": ratio,
            "card_peak_bytes": card.get("peak_bytes"),
            "card_fits": card.get("fits"),
        }
        if ratio is None:
            return None
        plans: dict[int, dict[str, Any]] = {}
        for kk in sorted({0, int(k)}):
            cmd = specq(
                "plan",
                str(target),
                *common,
                "--draft-tokens",
                str(kk),
                "--cache-max-entry-count",
                str(ratio),
                "--json",
            )
            step(f"plan-{name}-emulated-k{kk}", cmd, 60, 20, penv)
            plans[kk] = read(f"plan-{name}-emulated-k{kk}") or {}
        env = dict(
            penv, SPECQ_ENGINE__CACHE_MAX_ENTRY_COUNT=str(ratio), SPECQ_ENGINE__SESSION_LEN=args.session_len
        )
        if plans[int(k)].get("max_prefill_token_num"):
            env["SPECQ_ENGINE__MAX_PREFILL_TOKEN_NUM"] = str(plans[int(k)]["max_prefill_token_num"])
        res = step(
            f"bench-{name}", bench(target, f"bench-{name}", "--draft-tokens", k, *extra), 300, 120, env
        )
        report = read(f"bench-{name}")
        if report:
            entry["rows"] = [row for kk, plan in plans.items() for row in peaks_vs_plan(plan, report, kk)]
            entry["emulated_plan_peak_bytes"] = {kk: plan.get("peak_bytes") for kk, plan in plans.items()}
            save()
        return res["exit"]

    refused = False  # specq refuses the AWQ Qwen3.5 twin on the PyTorch engine (engines/qwen35.py)
    if "memory" in steps and target.exists():
        mtp_env = {"SPECQ_SPECULATIVE__METHOD": "qwen3_5_mtp", "SPECQ_ENGINE__BACKEND": "pytorch"}
        flags = ["--backend", "pytorch", "--method", "qwen3_5_mtp"]
        code = memory("27b-awq-mtp", args.mtp_tokens, flags, mtp_env)
        if code == 2:  # refused up front (quantized Qwen3.5, PyTorch engine): TurboMind's baseline instead
            log[-1]["refused_then_fallback"] = refused = True
            tm_env = {"SPECQ_ENGINE__BACKEND": "turbomind"}
            memory("27b-awq-turbomind", "0", ["--backend", "turbomind"], tm_env)
    if "curve" in steps:
        for size in args.curve_sizes.split(","):
            if size not in QWEN3_SHAPES:
                log.append({"step": f"curve-{size}", "exit": 2, "skipped": f"unknown size {size}"})
                continue
            src = out / f"qwen3-{size}-config.json"
            src.write_text(json.dumps(qwen3_config(size), indent=1))
            twin = out / f"twin-qwen3-{size}"
            if not twin.exists():
                flags = ("--drafter", "dflash", "--draft-layers", "5", "--device", "cuda", "--json")
                built = step(f"twin-{size}", specq("twin", str(src), "--out", str(twin), *flags), 120, 150)
                if built["exit"] != 0:
                    continue
            info = json.loads((twin / "twin_report.json").read_text())
            res = step(f"curve-{size}", dflash_bench(twin, f"bench-curve-{size}", args.curve_k), 300, 120)
            report = read(f"curve-{size}")
            if report:
                label = f"Qwen3-{size} layers bf16 ({info['target']['params'] / 1e9:.2f} B)"
                results["curve"] += curve_points(label, int(info["target"]["weight_bytes"]), report)
                res["points"] = len(results["curve"])
                save()
    if "dflash27" in steps and target.exists() and refused:
        why = "specq refused the AWQ Qwen3.5 twin on the PyTorch engine in the memory step"
        log.append({"step": "curve-27b-awq", "exit": None, "skipped": why})
    elif "dflash27" in steps and target.exists():
        info = json.loads((twin27 / "twin_report.json").read_text())
        step("curve-27b-awq", dflash_bench(twin27, "bench-curve-27b", args.dflash_tokens), 300, 150)
        report = read("curve-27b-awq")
        if report:
            results["curve"] += curve_points(
                "Qwen3.5-27B AWQ twin", int(info["target"]["weight_bytes"]), report
            )
    if results["curve"]:
        doc = curve_document(results["curve"], results["hardware"], results["commit"])
        (out / "step_cost_curve.json").write_text(json.dumps(doc, indent=1))
    save()
    print((out / "twin_gpu.md").read_text(), flush=True)
    ran = [r for r in log if r.get("exit") is not None]
    failed = [r for r in ran if r["exit"] != 0 and not r.get("refused_then_fallback")]
    return 0 if ran and not failed else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
