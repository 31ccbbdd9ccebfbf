"""The Qwen3.5-27B-AWQ twin served by LMDeploy's PyTorch engine with each W4A16 kernel, through specq's own
commands: plain decoding with specq's kernel and with LMDeploy's Triton kernel, and speculative decoding
(`qwen3_5_mtp`, DFlash) with specq's, side by side on one GPU. Needs LMDeploy 0.18 (PyTorch engine, tilelang
and flash-linear-attention for Qwen3.5) and, for speculation, FlashAttention-3 (`specq fa3 build`).

    python benchmarks/gpu.py w4a16-e2e --out /tmp/w4e2e --report-dir "$OUT" [--budget 540]
        [--waves 'plain:specq,plain:lmdeploy;mtp1,mtp2,mtp3;dflash3,dflash7,dflash15'] [--bf16] [--alt DIR]
        [--prompts 8]

--out holds the twin (about 20 GB; kept off the fetched directory); --report-dir the small files.

- twin: `specq twin tests/fixtures/twin/qwen3_5-27b-config.json --quant awq --drafter mtp --drafter dflash
  --draft-layers 5 --device cuda` (skipped when --out has it); `--bf16` also builds the bf16 twin and adds a
  plain server on it to the first wave, unless `--waves` names `bf16` in a wave of its own choosing (a card
  of 80 GB holds the bf16 twin alone): the reference the AWQ figures are set against.
- waves: the servers of a wave start together (`specq serve --detach`, cache 0.01 of the GPU each, session
  4096), then `specq bench --url` measures them one after the other (the same completion prompts, --prompts
  of them (8), 128 greedy tokens each, `--ignore-eos`, warm-up to steady state, 2 trials of a plain server,
  1 of a speculative one) while the others sit idle, and they stop. A server is `plain:KERNEL` (k = 0 with
  engine.w4a16_kernel = KERNEL), `mtpK` or `dflashK` (specq's kernel, K draft tokens), or `alt`: plain with
  specq's kernel, run by another build of specq, the directory --alt first on the server's PYTHONPATH (it
  holds that build's `specq` package), so that two builds start together and are benched alike (an A/B of a
  change to the kernel or the compatibility patch). A `+silu` after a server's name (`plain:specq+silu`,
  `mtp3+silu`) starts it with SPECQ_W4A16_FUSE_SILU=1: specq's gate_up linears store silu(gate) * up, and
  LMDeploy's activation kernel is not run. A server named again in a run is named `-2`, `-3`… after:
  `plain:specq,plain:specq+silu,plain:specq` is an A/B/A, whose two A's give the run's own spread.

Outputs in --report-dir: e2e.json (whether FlashAttention-3 imports where the servers run, which LMDeploy
then uses for attention in plain decoding too; every server's start time, decode rate, τ and step cost
against the plain specq server, and the text checks: a server's two trials against each other, every
speculative server's outputs against the plain specq server's) and e2e.md (the tables), plus each bench
report and log."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from specq.pipeline import hardware
from specq.pipeline.kernels import FUSE_SILU_ENV

from .check import budgeted_step, specq
from .twin import decode_rate

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "twin" / "qwen3_5-27b-config.json"
WAVES = "plain:specq,plain:lmdeploy,mtp1,mtp3;mtp2,dflash3,dflash7,dflash15"
PORT = 24300
CACHE = "0.01"  # the servers' KV cache share and session length (spec-step-profile starts the same ones)
SESSION_LEN = "4096"


def parse_server(item: str) -> dict[str, Any]:
    """`plain:KERNEL`, `bf16`, `alt`, `mtpK` or `dflashK`, each but bf16 with `+silu` or not -> what to
    launch."""
    item = item.strip()
    if item.endswith("+silu") and item != "bf16+silu":
        server = parse_server(item.removesuffix("+silu"))
        return {**server, "name": server["name"] + "-silu", "silu": True}
    if item.startswith("plain:"):
        return {"name": item.replace(":", "-"), "kind": "plain", "k": 0, "kernel": item.split(":", 1)[1]}
    if item == "bf16":
        return {"name": "bf16", "kind": "bf16", "k": 0, "kernel": None}
    if item == "alt":
        return {"name": "alt", "kind": "plain", "k": 0, "kernel": "specq", "alt": True}
    for kind in ("mtp", "dflash"):
        if item.startswith(kind) and item[len(kind) :].isdigit():
            return {"name": item, "kind": kind, "k": int(item[len(kind) :]), "kernel": "specq"}
    raise ValueError(f"unknown server {item!r}: plain:KERNEL, bf16, alt, mtpK or dflashK")


def parse_waves(text: str) -> list[list[dict[str, Any]]]:
    """`;` between waves, `,` between a wave's servers. A server named again gets `-2`, `-3`… after its name
    (`plain:specq,plain:specq+silu,plain:specq`: an A/B/A, the two A's telling the run's own spread)."""
    waves = [
        [parse_server(s) for s in wave.split(",") if s.strip()] for wave in text.split(";") if wave.strip()
    ]
    seen: dict[str, int] = {}
    for s in (s for wave in waves for s in wave):
        seen[s["name"]] = seen.get(s["name"], 0) + 1
        if seen[s["name"]] > 1:
            s["name"] = f"{s['name']}-{seen[s['name']]}"
    return waves


def serve_cmd(s: dict[str, Any], twin: Path, bf16: Path, port: int, run_dir: Path) -> list[str]:
    target = bf16 if s["kind"] == "bf16" else twin / "target"
    flags: list[str] = []
    if s["kind"] == "mtp":
        flags = ["--method", "qwen3_5_mtp"]
    elif s["kind"] == "dflash":
        flags = ["--method", "dflash", "--draft-model", str(twin / "dflash")]
    return specq(
        "serve", str(target), "--engine", "lmdeploy", "--backend", "pytorch", *flags,
        "--draft-tokens", str(s["k"]), "--port", str(port), "--cache-max-entry-count", CACHE,
        "--session-len", SESSION_LEN, "--run-dir", str(run_dir), "--detach", "--json",
    )  # fmt: skip


def outputs(report: dict[str, Any] | None) -> list[list[str]]:
    """Per trial, the output texts in prompt order (a --url report has one run)."""
    runs = (report or {}).get("runs") or []
    trials: dict[int, list[tuple[str, int, str]]] = {}
    for run in runs[:1]:
        for rec in run.get("requests") or []:
            trials.setdefault(int(rec.get("trial") or 0), []).append(
                (str(rec.get("id")), int(rec.get("repeat") or 0), rec.get("output_text") or "")
            )
    return [[t for _, _, t in sorted(v)] for _, v in sorted(trials.items())]


def tau(report: dict[str, Any] | None) -> float | None:
    runs = (report or {}).get("runs") or []
    acc = (runs[0].get("acceptance") or {}) if runs else {}
    return acc.get("acceptance_length")


def compare(a: list[str], b: list[str]) -> dict[str, Any]:
    pairs = list(zip(a, b, strict=False))
    equal = sum(x == y for x, y in pairs)
    first = [
        next((i for i, (p, q) in enumerate(zip(x, y, strict=False)) if p != q), min(len(x), len(y)))
        for x, y in pairs
             if x != y]  # fmt: skip
    return {"equal": equal, "of": len(pairs), "first_divergence_chars": first}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--report-dir", type=Path, required=True)
    ap.add_argument("--budget", type=float, default=540.0)
    ap.add_argument("--waves", default=WAVES)
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--trials", type=int, default=2)
    ap.add_argument("--prompts", type=int, default=8, help="completion prompts a bench, 128 tokens each")
    ap.add_argument(
        "--alt", type=Path, help="the `alt` server's specq: a directory holding a `specq` package"
    )
    args = ap.parse_args(argv)
    if args.prompts < 1:
        ap.error("--prompts must be 1 or more")
    waves = parse_waves(args.waves)
    if any(s.get("alt") for wave in waves for s in wave) and not (args.alt and (args.alt / "specq").is_dir()):
        ap.error("the `alt` server needs --alt DIR, a directory with another build's `specq` package in it")
    deadline = time.monotonic() + args.budget
    out, rep = args.out, args.report_dir
    out.mkdir(parents=True, exist_ok=True)
    rep.mkdir(parents=True, exist_ok=True)
    log: list[dict[str, Any]] = []
    results: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "servers": []}
    # LMDeploy runs attention through FlashAttention-3 whenever it imports, plain decoding too: a plain rate
    # is only comparable with this said (the servers inherit this process's environment)
    results["fa3"] = hardware.flash_attention_3() is None

    def save() -> None:
        (rep / "e2e.json").write_text(json.dumps({"steps": log, **results}, indent=1), encoding="utf-8")

    twin = out / "twin27"
    bf16 = out / "twin27-bf16" / "target"
    if not (twin / "target").exists():
        res = budgeted_step("twin", specq(
            "twin", str(FIXTURE), "--quant", "awq", "--drafter", "mtp", "--drafter", "dflash",
            "--draft-layers", "5", "--device", "cuda", "--out", str(twin), "--json",
        ), rep, 300, deadline, 60)  # fmt: skip
        log.append(res)
        save()
    if args.bf16:
        if not bf16.exists():
            log.append(budgeted_step("twin-bf16", specq(
                "twin", str(FIXTURE), "--device", "cuda", "--out", str(bf16.parent), "--json",
            ), rep, 300, deadline, 60))  # fmt: skip
        if not any(s["kind"] == "bf16" for wave in waves for s in wave):  # else where --waves puts it
            waves[0].append(parse_server("bf16"))
    prompts = rep / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"def function_{i}(x):\n    return"}) + "\n"
                               for i in range(args.prompts)), encoding="utf-8")  # fmt: skip
    base: dict[str, Any] = {}
    for n, wave in enumerate(waves):
        left = deadline - time.monotonic()
        if left < 150 + 40 * len(wave):
            log.append({"step": f"wave{n}", "exit": None, "skipped": f"{left:.0f} s left"})
            break
        procs = []
        t0 = time.monotonic()
        for i, s in enumerate(wave):
            s["port"] = PORT + 10 * n + i
            env = dict(os.environ)
            if s["kernel"]:
                env["SPECQ_ENGINE__W4A16_KERNEL"] = s["kernel"]
            # the gate_up linears store silu(gate) * up (pipeline/kernels/lmdeploy_w4a16.py)
            if s.get("silu"):
                env[FUSE_SILU_ENV] = "1"
            if s.get("alt"):
                env["PYTHONPATH"] = os.pathsep.join(
                    p for p in (str(args.alt.resolve()), env.get("PYTHONPATH")) if p
                )
            cmd = serve_cmd(s, twin, bf16, s["port"], out / f"serve-{s['name']}")
            procs.append(
                (
                    s,
                    subprocess.Popen(
                        cmd,
                        stdout=open(rep / f"serve-{s['name']}.out", "w"),
                        stderr=open(rep / f"serve-{s['name']}.log", "w"),
                        env=env,
                    ),
                )
            )
        for s, p in procs:
            try:
                s["start_exit"] = p.wait(timeout=max(deadline - time.monotonic() - 30, 1))
            except subprocess.TimeoutExpired:
                p.kill()
                s["start_exit"] = 124
            s["ready_s"] = round(time.monotonic() - t0, 1)
        for s, _ in procs:
            if s["start_exit"] != 0:
                results["servers"].append(s)
                continue
            name = f"bench-{s['name']}"
            cmd = specq(
                "bench", "--url", f"http://127.0.0.1:{s['port']}", "--draft-tokens", str(s["k"]),
                "--tokenizer",
                str(twin / "target"), "--prompts", str(prompts), "--mode", "completion",
                "--requests", str(args.prompts),
                "--max-tokens", "128", "--ignore-eos", "--trials", str(args.trials if not s["k"] else 1),
                "--json",
                "--out", str(rep / name),
            )  # fmt: skip
            res = budgeted_step(name, cmd, rep, 240, deadline, 25, margin=5)
            log.append(res)
            try:
                report = json.loads((rep / name / "report.json").read_text())
            except (OSError, ValueError):
                report = None
            texts = outputs(report)
            s.update({"decode_tok_s": decode_rate(report), "tau": tau(report), "trials": len(texts)})
            if len(texts) >= 2:
                s["trials_agree"] = compare(texts[0], texts[1])
            if s["name"] == "plain-specq" and texts:
                base = {"texts": texts[0], "rate": s["decode_tok_s"]}
            elif base and texts and s["kind"] in ("mtp", "dflash", "plain"):
                s["vs_plain_specq"] = compare(base["texts"], texts[0])
            if base.get("rate") and s.get("decode_tok_s") and s["k"]:
                speed = s["decode_tok_s"] / base["rate"]
                s["speedup"] = round(speed, 3)
                if s.get("tau"):
                    s["step_cost"] = round(s["tau"] / speed, 3)
            results["servers"].append(s)
            save()
        subprocess.run(specq("serve", "stop"), capture_output=True)
        log.append({"step": f"wave{n}", "exit": 0, "seconds": round(time.monotonic() - t0, 1)})
        save()
    for s in results["servers"]:
        s.pop("cmd", None)
    save()
    md = [
        f"FlashAttention-3 on the servers' path: {'yes' if results['fa3'] else 'no'}",
        "",
        "| server | kernel | k | ready s | decode tok/s | τ | speedup | step cost | trials agree "
        "| = plain specq |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in results["servers"]:
        agree = s.get("trials_agree") or {}
        vs = s.get("vs_plain_specq") or {}
        md.append(
            f"| {s['name']} | {s.get('kernel')} | {s['k']} | {s.get('ready_s')} | {s.get('decode_tok_s')} | "
            f"{s.get('tau')} | {s.get('speedup')} | {s.get('step_cost')} | "
            f"{agree.get('equal')}/{agree.get('of')} | {vs.get('equal')}/{vs.get('of')} |"
        )
    (rep / "e2e.md").write_text("\n".join(md) + "\n", encoding="utf-8")
    print("\n".join(md), flush=True)
    shutil.rmtree(out / "scratch", ignore_errors=True)
    return 0
