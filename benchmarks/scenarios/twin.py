"""Scale twins on one GPU (written for an H200): `specq plan` for a 24 GB card against the NVML peak of a
Qwen3.5-27B-AWQ twin with its MTP layer, with a 5-layer DFlash drafter and with that drafter in 4 bit, and the
speculative step-cost curve on twins from 0.45 B parameters to the 27B-AWQ (and the 27B-AWQ's step cost with
its 4-bit drafter against the bf16 one's), all through specq's own commands. Needs LMDeploy 0.18
(PyTorch engine, with tilelang and flash-linear-attention for Qwen3.5) and FlashAttention-3 installed by the
caller (`specq fa3 build`; bf16 head dims 256 for the 27B, 128 for the Qwen3 twins).

    python benchmarks/gpu.py twin --out /tmp/twin-gpu --report-dir "$OUT" [--budget 1500] [--gpu-memory 24GiB]
        [--session-len 8192] [--mtp-tokens 3] [--dflash-tokens 7] [--waves '27b:0,1,3,7,15;...']
        [--steps twins,memory-mtp,memory-dflash,memory-dflash4,curve]

--out holds the twins (about 45 GB with the default waves: keep it off a directory whose files are fetched);
--report-dir receives only the small files (summary, tables, each step's stdout and stderr, bench reports).

Steps, in order; each is recorded in OUT/summary.json (exit code, seconds, stderr tail) as it ends, and a step
is skipped when less of the budget is left than it needs (summary.json then says so):
- twins: `specq twin tests/fixtures/twin/qwen3_5-27b-config.json --quant awq --drafter mtp --drafter dflash
  --draft-layers 5 --draft-quant bf16 --draft-quant awq --device cuda` (19.5 GB written; the 5-layer DFlash
  drafter in bf16 in TWIN/dflash and in 4-bit AWQ gemm in TWIN/dflash-awq), and a bf16 Qwen3 twin with a
  5-layer DFlash drafter for every other size the waves name (real layer shapes of Qwen3-0.6B / 1.7B / 8B
  ..., a 2048-token vocabulary).
- memory-mtp, memory-dflash, memory-dflash4 (MTP, the bf16 DFlash drafter, the 4-bit one; each server alone
  on the GPU: the NVML peak is the device's): `specq plan TWIN --gpu-memory 24GiB --draft-tokens K
  --session-len S` gives the 24 GB card's KV cache; `specq plan TWIN` on this GPU the memory free after
  weights here; their ratio is the `--cache-max-entry-count` that leaves the 24 GB card's KV cache on this
  GPU (the memory fraction that emulates 24 GB). `specq plan` at that ratio, then `specq bench TWIN --method
  qwen3_5_mtp --draft-tokens K` (or `--method dflash --draft-model TWIN/dflash`, `TWIN/dflash-awq`) at the
  same ratio, session length and the card's prefill budget, with no baseline run, on three short prompts
  and one that fills the prefill budget (where the plan's logits reserve and activations peak), and the
  NVML peak of the run against the plan's peak.
- curve: waves of servers. A wave `SIZE:K,K,...[+SIZE:K,...]` starts one `specq serve --detach` per (size, k)
  at once (k = 0: plain decoding; k > 0: the twin's random 5-layer DFlash drafter, so τ ≈ 1 and a run's decode
  rate isolates the step cost; size `27b-awqd`: the 27B twin with its 4-bit drafter, set against the `27b`
  k = 0 server of the same wave, e.g. `27b:0,7,15+27b-awqd:7,15`), each with `--cache-max-entry-count
  0.01`, then measures them one after the other with `specq bench --url` (4 requests × 128 tokens, warm-up
  to steady state, 1 trial) while the others sit idle, and stops them; the largest k of the wave's last size
  is measured once more after the others have stopped (how much the idle servers cost it). Starting servers
  together saves their start-up (one to two minutes each), which is most of a sequential sweep's time. A
  point's step cost is τ ÷ (its decode rate ÷ its size's k = 0 decode rate), the servers' own counters where
  both runs have them (as `specq bench`); twin_gpu.md sets the 4-bit drafter's against the bf16 one's.

Outputs: OUT/summary.json (every step, and `results`: plan vs NVML, the curve), OUT/step_cost_curve.json (the
measured curve in `specq.pipeline.speedup.StepCostCurve` form: `SPECQ_STEP_COST_CURVE=FILE` makes bench and
draft eval predict with it; or paste its points into `STEP_COST_CURVE`), OUT/twin_gpu.md (the tables). Exit 0
when every step that ran succeeded."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from specq.pipeline.bench.telemetry import TelemetrySampler

from .check import budgeted_step, specq

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "twin" / "qwen3_5-27b-config.json"
STEPS = ("twins", "memory-mtp", "memory-dflash", "memory-dflash4", "curve")
# wave sizes that are another size's target with another drafter: (that size, the twin's drafter directory)
DRAFTER_VARIANTS = {"27b-awqd": ("27b", "dflash-awq")}
WAVES = "27b:0,1,3,7,15+1.7b:0,1,3,7,15;8b:0,1,3,7,15+0.6b:0,1,3,7,15"
WAVE_PORT = 24100
WAVE_CACHE = "0.01"

# Qwen3 layer shapes (hidden, layers, heads, kv heads, intermediate) of the public configs; head dim 128
QWEN3_SHAPES = {
    "0.6b": (1024, 28, 16, 8, 3072),
    "1.7b": (2048, 28, 16, 8, 6144),
    "4b": (2560, 36, 32, 8, 9728),
    "8b": (4096, 36, 32, 8, 12288),
    "14b": (5120, 40, 40, 8, 17408),
}
CURVE_VOCAB = 2048


def twin27_flags(device: str) -> list[str]:
    """`specq twin` flags of the 27B-AWQ twin: its MTP layer, and the 5-layer DFlash drafter in bf16
    (TWIN/dflash) and in 4-bit AWQ gemm (TWIN/dflash-awq)."""
    flags = "--quant awq --drafter mtp --drafter dflash --draft-layers 5".split()
    return [*flags, "--draft-quant", "bf16", "--draft-quant", "awq", "--device", device, "--json"]


def twin_size(size: str) -> str:
    """The twin a wave size serves (a drafter variant's target twin)."""
    return DRAFTER_VARIANTS.get(size, (size, ""))[0]


def drafter_name(size: str) -> str:
    """The twin's drafter directory a wave size speculates with."""
    return DRAFTER_VARIANTS.get(size, (size, "dflash"))[1]


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


class MemoryTimeline(TelemetrySampler):
    """NVML in a background thread for the whole of a memory step (server start to stop), every `interval_s`:
    the device's used memory and each compute process's own, so the peak can be split into what each process
    holds (a second CUDA context shows up as a second process) and into phases (weights, KV cache, warm-up,
    prefill). `samples`: [seconds, device used bytes, {pid: used bytes}]. bench's NVML sampler with another
    sample: its set-up, thread and stop are the same; no NVML, no samples."""

    def __init__(self, interval_s: float = 0.25, gpu: int = 0):
        super().__init__(interval_s, gpus=[gpu])
        self.samples: list[list[Any]] = []

    def _sample(self) -> None:
        nv, (_, h) = self._nv, self._handles[0]
        mem = self._q(nv.nvmlDeviceGetMemoryInfo, h)
        procs = self._q(nv.nvmlDeviceGetComputeRunningProcesses, h) or []
        if mem is not None:
            used = {str(p.pid): int(p.usedGpuMemory or 0) for p in procs}
            self.samples.append([round(time.perf_counter() - self._t0, 2), int(mem.used), used])

    def summary(self) -> dict[str, Any]:
        """The device's first and peak used memory and each process's peak (bytes)."""
        if not self.samples:
            return {}
        per: dict[str, int] = {}
        for _, _, procs in self.samples:
            for pid, used in procs.items():
                per[pid] = max(per.get(pid, 0), used)
        return {
            "samples": len(self.samples),
            "device_first_bytes": self.samples[0][1],
            "device_peak_bytes": max(s[1] for s in self.samples),
            "process_peak_bytes": per,
        }


PLAN_TERMS = (
    "driver_reserved_bytes", "cuda_context_bytes", "load_overhead_bytes", "weights_bytes",
    "state_cache_bytes", "runtime_reserve_bytes", "kv_cache_bytes", "activation_bytes", "cuda_graph_bytes",
    "peak_bytes", "max_prefill_token_num", "kv_cache_tokens",
)  # fmt: skip


def plan_terms(plan: dict[str, Any]) -> dict[str, Any]:
    """The plan's terms, to set beside the measured timeline."""
    return {key: plan.get(key) for key in PLAN_TERMS}


def long_prompt_tokens(prefill: int) -> int:
    """The long prompt's length for a prefill budget of `prefill` tokens: the budget less room for the chat
    framing and the generated tokens' first step (256 of 4096; 16 of a 256-token budget, which the 24 GB
    card's plan for the 27B + DFlash gets). The H200 run of 2026-12-03 had sent an empty prompt there
    (256 - 256), and the engine died."""
    return prefill - max(16, min(256, prefill // 16))


def write_prompts(tokenizer_dir: Path, long_tokens: int, path: Path) -> int:
    """Three short completion prompts and one of about `long_tokens` tokens of the twin's tokenizer (the
    prefill budget, where LMDeploy's logits reserve and the activations peak); returns the long one's
    length in tokens."""
    from transformers import AutoTokenizer

    if long_tokens < 1:
        raise ValueError(f"a long prompt of {long_tokens} tokens: give at least one")
    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    words = " ".join(f"item{i} value{i % 97}" for i in range(long_tokens))
    ids = tok(words, add_special_tokens=False)["input_ids"][:long_tokens]
    long = tok.decode(ids)
    rows = [{"prompt": f"def function_{i}(x):\n    return"} for i in range(3)] + [{"prompt": long}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return len(tok(long, add_special_tokens=False)["input_ids"])


def parse_waves(text: str) -> list[list[tuple[str, list[int]]]]:
    """`27b:0,1,3;1.7b:0,7+8b:0,7` -> [[("27b", [0, 1, 3])], [("1.7b", [0, 7]), ("8b", [0, 7])]]: waves split
    by `;`, the sizes of one wave by `+`, each size with the draft-token counts of its servers."""
    waves = []
    for wave in filter(None, (w.strip() for w in text.split(";"))):
        sizes = []
        for part in wave.split("+"):
            size, _, ks = part.strip().partition(":")
            values = sorted({int(k) for k in ks.split(",") if k.strip()})
            if size != "27b" and size not in QWEN3_SHAPES and size not in DRAFTER_VARIANTS:
                known = ", ".join([*QWEN3_SHAPES, *DRAFTER_VARIANTS])
                raise ValueError(f"unknown size {size!r} (27b or one of {known})")
            if not values or values[0] < 0 or values[-1] > 15:
                raise ValueError(f"{part!r}: give draft-token counts 0..15")
            sizes.append((size, values))
        waves.append(sizes)
    return waves


def wave_points(
    label: str, weight_bytes: int, reports: dict[int, dict[str, Any]], base: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """The step-cost points of one size's wave reports (`specq bench --url` JSON by k): each k > 0 run
    against the k = 0 run of the same size (or `base`, the plain server of the same target for a drafter
    variant), computed by specq's own `step_cost` (servers' decode rates when both have them, else the
    clients'; τ from the server's counters)."""
    from specq.pipeline.bench.analysis import step_cost
    from specq.pipeline.report.models import Run

    def run_of(report: dict[str, Any]) -> Run | None:
        runs = report.get("runs") or []
        return Run.model_validate(runs[0]) if runs and runs[0].get("status") == "ok" else None

    plain = run_of(reports[0]) if 0 in reports else run_of(base) if base else None
    out: list[dict[str, Any]] = []
    if plain is None:
        return out
    for k in sorted(k for k in reports if k > 0):
        run = run_of(reports[k])
        if run is None:
            continue
        step_cost(plain, run)
        if run.step_cost_ratio:
            tau = run.acceptance.acceptance_length if run.acceptance else None
            out.append(
                {"label": label, "weight_bytes": weight_bytes, "k": k, "cost": round(run.step_cost_ratio, 4),
                 "tau": round(tau, 4) if tau else None, "decode_speedup": round(run.decode_speedup or 0, 4),
                 "source": run.step_cost_source}
            )  # fmt: skip
    return out


def decode_rate(report: dict[str, Any] | None) -> float | None:
    """A `--url` report's decode rate as `step_cost` takes it (the server's, else the client's)."""
    from specq.pipeline.bench.analysis import client_decode_rate, server_trial_rate
    from specq.pipeline.report.models import Run

    runs = (report or {}).get("runs") or []
    if not runs:
        return None
    run = Run.model_validate(runs[0])
    return server_trial_rate(run) or client_decode_rate(run.requests)


def curve_document(points: list[dict[str, Any]], hardware: str, commit: str) -> dict[str, Any]:
    return {
        "curve": {
            "hardware": hardware,
            "engine": "LMDeploy PyTorch engine, CUDA graphs",
            "date": dt.date.today().isoformat(),
            "commit": commit,
            "method": "dflash",
            "note": "benchmarks/gpu.py twin: random-weight twins, random 5-layer DFlash drafter (τ ≈ 1), "
            "servers of a wave started together and measured one at a time",
            "points": [  # the bf16 drafter's: a 4-bit drafter's step is another curve (drafter_comparison)
                {key: p[key] for key in ("label", "params", "weight_bytes", "k", "cost") if p.get(key)}
                for p in points
                if p.get("drafter", "bf16") == "bf16"
            ],
        }
    }


def drafter_comparison(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The step cost at each k measured with both the bf16 and the 4-bit drafter of the same target: the
    cost of each and their ratio (4-bit ÷ bf16; below 1: the 4-bit drafter's step is cheaper)."""
    by: dict[tuple[int, int], dict[str, float]] = {}
    for p in points:
        by.setdefault((p["weight_bytes"], p["k"]), {})[p.get("drafter", "bf16")] = p["cost"]
    rows = []
    for (weight, k), costs in sorted(by.items()):
        if "bf16" in costs and "awq" in costs:
            rows.append({"weight_bytes": weight, "k": k, "bf16_cost": costs["bf16"], "awq_cost": costs["awq"],
                         "ratio": round(costs["awq"] / costs["bf16"], 4)})  # fmt: skip
    return rows


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
        tl = mem.get("timeline") or {}
        if tl.get("samples"):
            procs = ", ".join(f"pid {p} {_gib(b)}" for p, b in sorted(tl["process_peak_bytes"].items()))
            lines += [
                "",
                f"NVML timeline ({tl['samples']} samples): device {_gib(tl['device_first_bytes'])} GiB used "
                f"before the server, peak {_gib(tl['device_peak_bytes'])} GiB; process peaks: {procs or '–'}",
            ]
        lines.append("")
    pts = results.get("curve") or []
    if pts:
        lines += [
            "## Step cost (speculative step ÷ plain step)",
            "",
            "| twin | weight GB | plain decode tok/s | k | τ | decode-rate speedup | step cost |",
            "|---|---|---|---|---|---|---|",
        ]

        def num(v: Any, f: str) -> str:
            return format(v, f) if isinstance(v, (int, float)) else "–"

        lines += [
            f"| {p['label']} | {p['weight_bytes'] / 1e9:.2f} | {num(p.get('base_decode_rate'), '.1f')} | "
            f"{p['k']} | {num(p.get('tau'), '.3f')} | {num(p.get('decode_speedup'), '.3f')} | "
            f"{p['cost']:.2f} |"
            for p in pts
        ]
        lines.append("")
    rows = drafter_comparison(pts)
    if rows:
        lines += [
            "## Step cost: 4-bit DFlash drafter against the bf16 one (same target)",
            "",
            "| target GB | k | bf16 drafter | 4-bit drafter | 4-bit ÷ bf16 |",
            "|---|---|---|---|---|",
        ]
        lines += [
            f"| {r['weight_bytes'] / 1e9:.2f} | {r['k']} | {r['bf16_cost']:.2f} | {r['awq_cost']:.2f} | "
            f"{r['ratio']:.3f} |"
            for r in rows
        ]
        lines.append("")
    for w in results.get("waves") or []:
        lines.append(
            f"Wave {w['wave']}: {w['servers']} servers started together in {w['start_s']} s; {w['check']} "
            f"decoded at {w.get('decode_rate_with_others')} tok/s beside the idle others, "
            f"{w.get('decode_rate_alone')} tok/s alone."
        )
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("twin-gpu"))
    ap.add_argument("--budget", type=float, default=1500.0, help="seconds for the whole run")
    ap.add_argument("--steps", default=",".join(STEPS))
    ap.add_argument("--config", type=Path, default=FIXTURE, help="the 27B config.json")
    ap.add_argument("--gpu-memory", default="24GiB", help="the card to emulate")
    ap.add_argument("--session-len", default="8192")
    ap.add_argument("--mtp-tokens", default="3")
    ap.add_argument("--dflash-tokens", default="7")
    ap.add_argument("--waves", default=WAVES, help="SIZE:K,K[+SIZE:K,...][;...] (27b or a Qwen3 size)")
    ap.add_argument("--device", default="cuda", help="where the twins are generated")
    ap.add_argument("--engine", default="lmdeploy", help="the waves' engine (embedded: a CPU check)")
    ap.add_argument(
        "--report-dir", type=Path, help="also copy the summary, tables and step outputs here (e.g. $OUT)"
    )
    args = ap.parse_args(argv)
    out: Path = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    steps = args.steps.split(",")
    waves = parse_waves(args.waves)
    deadline = time.monotonic() + args.budget
    log: list[dict[str, Any]] = []
    results: dict[str, Any] = {
        "hardware": _hardware(),
        "date": dt.date.today().isoformat(),
        "commit": _commit(),
        "budget_s": args.budget,
        "memory": {},
        "curve": [],
        "waves": [],
    }

    def save() -> None:
        (out / "summary.json").write_text(json.dumps({"steps": log, "results": results}, indent=1))
        (out / "twin_gpu.md").write_text(markdown(results))
        if results["curve"]:
            doc = curve_document(results["curve"], results["hardware"], results["commit"])
            (out / "step_cost_curve.json").write_text(json.dumps(doc, indent=1))
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
    twin27 = out / "twin27-awq"

    def twin_dir(size: str) -> Path:
        return twin27 if twin_size(size) == "27b" else out / f"twin-qwen3-{size}"

    save()
    if "twins" in steps:
        if not twin27.exists():
            step(
                "twin27",
                specq("twin", str(args.config), "--out", str(twin27), *twin27_flags(args.device)),
                300,
                60,
            )
        for size in dict.fromkeys(s for wave in waves for s, _ in wave if twin_size(s) != "27b"):
            src = out / f"qwen3-{size}-config.json"
            src.write_text(json.dumps(qwen3_config(size), indent=1))
            if not twin_dir(size).exists():
                flags = ["--drafter", "dflash", "--draft-layers", "5", "--device", args.device, "--json"]
                step(f"twin-{size}", specq("twin", str(src), "--out", str(twin_dir(size)), *flags), 180, 30)
    target = twin27 / "target"

    def memory(name: str, k: str, method: str, drafter: list[str]) -> int | None:
        """plan for the card, plan here, the emulated ratio, plan at it, the bench (k only, no baseline),
        NVML vs plan. `plan` takes the method and backend from the environment (it has no flags for them)."""
        penv = dict(os.environ, SPECQ_SPECULATIVE__METHOD=method, SPECQ_ENGINE__BACKEND="pytorch")
        common = ["--engine", "lmdeploy", "--session-len", args.session_len, *drafter, "--draft-tokens", k]
        card_cmd = specq("plan", str(target), "--gpu-memory", args.gpu_memory, *common, "--json")
        if step(f"plan-{name}-card", card_cmd, 60, 20, penv)["exit"] != 0:
            return None
        step(f"plan-{name}-here", specq("plan", str(target), *common, "--json"), 60, 20, penv)
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
        # the card's prefill budget: LMDeploy reserves logits for it and a prompt that long needs its
        # activations, so the plan here and the server get the card's, and one prompt fills it
        prefill = str(card.get("max_prefill_token_num") or 4096)
        penv["SPECQ_PLAN__MAX_PREFILL_TOKEN_NUM"] = prefill
        cmd = specq("plan", str(target), *common, "--cache-max-entry-count", str(ratio), "--json")
        step(f"plan-{name}-emulated", cmd, 60, 20, penv)
        plan = read(f"plan-{name}-emulated") or {}
        env = dict(
            penv, SPECQ_ENGINE__CACHE_MAX_ENTRY_COUNT=str(ratio), SPECQ_ENGINE__SESSION_LEN=args.session_len,
            SPECQ_BENCH__BASELINE="false", SPECQ_ENGINE__MAX_PREFILL_TOKEN_NUM=prefill,
            SPECQ_BENCH__WARMUP_PASSES="1",  # memory only: one warm-up pass, then the measured one
        )  # fmt: skip
        prompts = out / f"prompts-{name}.jsonl"
        entry["long_prompt_tokens"] = write_prompts(target, long_prompt_tokens(int(prefill)), prompts)
        flags = ["--backend", "pytorch", "--method", method, *drafter, "--draft-tokens", k]
        cmd = specq("bench", str(target), "--engine", "lmdeploy", *flags, *bench_common, "--prompts",
                    str(prompts), "--mode", "completion", "--out", str(out / f"bench-{name}"))  # fmt: skip
        with MemoryTimeline() as timeline:
            res = step(f"bench-{name}", cmd, 420, 120, env)
        (out / f"timeline-{name}.json").write_text(json.dumps(timeline.samples))
        entry["timeline"] = timeline.summary()
        entry["plan_terms"] = plan_terms(plan)
        report = read(f"bench-{name}")
        if report:
            entry["rows"] = peaks_vs_plan(plan, report, int(k))
            entry["emulated_plan_peak_bytes"] = plan.get("peak_bytes")
            save()
        return res["exit"]

    if "memory-mtp" in steps and target.exists():
        memory("27b-awq-mtp", args.mtp_tokens, "qwen3_5_mtp", [])
    if "memory-dflash" in steps and target.exists():
        memory("27b-awq-dflash", args.dflash_tokens, "dflash", ["--draft-model", str(twin27 / "dflash")])
    if "memory-dflash4" in steps and (twin27 / "dflash-awq").exists():
        draft4 = ["--draft-model", str(twin27 / "dflash-awq")]  # the 4-bit drafter, the same card settings
        memory("27b-awq-dflash4", args.dflash_tokens, "dflash", draft4)
    if "curve" in steps:
        for n, wave in enumerate(waves):
            run_wave(n, wave, twin_dir, out, deadline, log, results, save, args.engine)
    save()
    print((out / "twin_gpu.md").read_text(), flush=True)
    ran = [r for r in log if r.get("exit") is not None]
    failed = [r for r in ran if r["exit"] != 0]
    return 0 if ran and not failed else 1


def run_wave(
    n: int, wave: list[tuple[str, list[int]]], twin_dir: Any, out: Path, deadline: float,
    log: list[dict[str, Any]], results: dict[str, Any], save: Any, engine: str = "lmdeploy",
) -> None:  # fmt: skip
    """Start every server of the wave at once (`specq serve --detach`), bench them one by one with `specq
    bench --url`, measure the first size's last server again alone, stop them all, and add the points."""
    servers: list[dict[str, Any]] = []
    for size, ks in wave:
        d = twin_dir(size)
        if not (d / "target").exists():
            log.append({"step": f"wave{n}-{size}", "exit": None, "skipped": f"no twin in {d}"})
            continue
        for k in ks:
            port = WAVE_PORT + len(servers) + 20 * n
            flags = ["--draft-model", str(d / drafter_name(size)), "--method", "dflash"] if k else []
            cmd = specq(
                "serve", str(d / "target"), "--engine", engine,
                *(["--backend", "pytorch"] if engine == "lmdeploy" else []), *flags,
                "--draft-tokens", str(k), "--port", str(port), "--cache-max-entry-count", WAVE_CACHE,
                "--session-len", "4096", "--run-dir", str(out / f"serve-w{n}-{size}-k{k}"), "--detach",
                "--json",
            )  # fmt: skip
            servers.append({"size": size, "k": k, "port": port, "cmd": cmd, "dir": d})
    if not servers:
        return
    left = deadline - time.monotonic()
    need = 150 + 25 * (len(servers) + 1)
    if left < need:
        log.append({"step": f"wave{n}", "exit": None, "skipped": f"{left:.0f} s left < {need} s"})
        save()
        return
    t0 = time.monotonic()
    print(f"== wave{n}: starting {len(servers)} servers", flush=True)
    procs = []
    for s in servers:
        name = f"w{n}-serve-{s['size']}-k{s['k']}"
        procs.append((s, name, subprocess.Popen(
            s["cmd"], stdout=open(out / f"{name}.out", "w"), stderr=open(out / f"{name}.log", "w")
        )))  # fmt: skip
    start_timeout = min(600.0, deadline - time.monotonic() - 25 * len(servers))
    for s, _name, p in procs:
        try:
            s["start_exit"] = p.wait(timeout=max(start_timeout - (time.monotonic() - t0), 1))
        except subprocess.TimeoutExpired:
            p.kill()
            s["start_exit"] = 124
    started = round(time.monotonic() - t0, 1)
    ok = all(s["start_exit"] == 0 for s in servers)
    states = [(s["size"], s["k"], s["start_exit"]) for s in servers]
    log.append({"step": f"wave{n}-start", "exit": 0 if ok else 1, "seconds": started, "servers": states})
    save()
    reports: dict[str, dict[int, dict[str, Any]]] = {}

    def bench_url(s: dict[str, Any], name: str) -> dict[str, Any] | None:
        cmd = specq(
            "bench", "--url", f"http://127.0.0.1:{s['port']}", "--draft-tokens", str(s["k"]), "--tokenizer",
            str(s["dir"] / "target"), "--requests", "4", "--max-tokens", "128", "--ignore-eos", "--json",
            "--out", str(out / name),
        )  # fmt: skip
        res = budgeted_step(name, cmd, out, 180, deadline, 20, margin=5)
        log.append(res)
        save()
        try:
            return json.loads((out / f"{name}.out").read_text())
        except (OSError, ValueError):
            return None

    for s in servers:
        if s["start_exit"] != 0:
            continue
        report = bench_url(s, f"w{n}-bench-{s['size']}-k{s['k']}")
        if report:
            reports.setdefault(s["size"], {})[s["k"]] = report
    last = [s for s in servers if s["size"] == servers[-1]["size"] and s["start_exit"] == 0]
    if last:  # the last size's largest k once more, alone on the GPU (put the most host-bound size last)
        keep = last[-1]
        for s in servers:
            if s is not keep and s["start_exit"] == 0:
                subprocess.run(specq("serve", "stop", "--port", str(s["port"])), capture_output=True)
        alone = bench_url(keep, f"w{n}-bench-{keep['size']}-k{keep['k']}-alone")
        before = reports.get(keep["size"], {}).get(keep["k"])
        results["waves"].append({
            "wave": n, "servers": len(servers), "start_s": started, "check": f"{keep['size']} k={keep['k']}",
            "decode_rate_with_others": decode_rate(before), "decode_rate_alone": decode_rate(alone),
        })  # fmt: skip
    subprocess.run(specq("serve", "stop"), capture_output=True)
    for size, by_k in reports.items():
        info = json.loads((twin_dir(size) / "twin_report.json").read_text())
        params = int(info["target"]["params"])
        label = (
            "Qwen3.5-27B AWQ twin" if twin_size(size) == "27b" else f"Qwen3-{size} layers bf16"
        ) + f" ({params / 1e9:.2f} B)"
        drafter = "awq" if drafter_name(size).endswith("-awq") else "bf16"
        if drafter == "awq":
            label += ", 4-bit DFlash drafter"
        plain = reports.get(twin_size(size), {}).get(0)  # a drafter variant's plain server: its target's
        pts = wave_points(label, int(info["target"]["weight_bytes"]), by_k, base=plain)
        for pt in pts:
            pt["params"] = params
            pt["drafter"] = drafter
            pt["base_decode_rate"] = decode_rate(by_k.get(0) or plain)
        results["curve"] += pts
    save()
