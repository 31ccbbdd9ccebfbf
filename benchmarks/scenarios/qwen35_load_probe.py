"""`specq convert`'s Qwen3.5 verdicts against LMDeploy itself: copies of a Qwen3.5 checkpoint broken the ways
`specq.pipeline.engines.qwen35` predicts LMDeploy 0.18 refuses, each launched with LMDeploy's own
`api_server`, and the error it dies with compared with the finding's `expect`.

    python benchmarks/gpu.py qwen35-load-probe make AWQ_DIR OUT [--target BF16_DIR]
                                                     # CPU: OUT/<case>/ and OUT/cases.json
    python benchmarks/gpu.py qwen35-load-probe run OUT [--cases a,b] [--results results.json]
                                                     # GPU: OUT/<case>.log and OUT/results.json

`make` writes each broken copy and what `specq convert` says of it (status, rule, expected error, and the
`--dtype` specq serve would pass). `awq` is the AWQ checkpoint itself (refused: LMDeploy runs AWQ in fp16 and
the Gated DeltaNet state in bf16; the H200 run of 2026-12-01 08:19 UTC died so at the first prefill), `bf16`
the unquantized target with `--dtype bfloat16` and `qwen3_5_mtp` (accepted: it must become ready), `no_mtp`
that target without its `mtp.*` tensors (LMDeploy loads it; the head runs uninitialised), `turbomind` the AWQ
checkpoint on TurboMind (refused for the toy's vision head dim; skipped where this LMDeploy has no TurboMind
build: LMDeploy would fall back to the PyTorch engine). Without `--target` the two target cases
are left out. `run` launches every case at once (small KV cache: they are load probes, not benchmarks),
waits until each is ready, dies, or times out, and records whether the outcome is the predicted one. The
MTP cases need FlashAttention-3 (LMDeploy's speculative path); the others do not."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

L0 = "model.language_model.layers.0.linear_attn"
READY = "loads without error"


def _quantize_like(tensors: dict, prefix: str, like: str) -> None:
    """Store `prefix` the way `like` (an AWQ linear) is stored: qweight/qzeros/scales instead of weight."""
    del tensors[f"{prefix}.weight"]
    for suffix in ("qweight", "qzeros", "scales"):
        tensors[f"{prefix}.{suffix}"] = tensors[f"{like}.{suffix}"].clone()


def _gate_quantized(t: dict, config: dict) -> None:
    _quantize_like(t, f"{L0}.in_proj_a", f"{L0}.in_proj_z")


def _qkv_unquantized(t: dict, config: dict) -> None:
    import torch

    qweight = t[f"{L0}.in_proj_qkv.qweight"]  # AWQ: [in, out / 8] int32
    for suffix in ("qweight", "qzeros", "scales"):
        del t[f"{L0}.in_proj_qkv.{suffix}"]
    t[f"{L0}.in_proj_qkv.weight"] = torch.zeros(qweight.shape[1] * 8, qweight.shape[0], dtype=torch.float16)


def _mtp_unmarked(t: dict, config: dict) -> None:
    del config["quantization_config"]["modules_to_not_convert"]


def _no_mtp(t: dict, config: dict) -> None:
    for name in [n for n in t if n.startswith("mtp.")]:
        del t[name]


def _compressed_tensors(t: dict, config: dict) -> None:
    # every field LMDeploy 0.18's `pytorch/config.py` validates before it dispatches a module (the status,
    # and group_0's weights: strategy "group", symmetric, static; the H200 run of 2026-12-01 stopped at the
    # missing strategy), so the launch reaches the Qwen3.5 dispatch the rule is about
    config["quantization_config"] = {
        "quant_method": "compressed-tensors", "format": "pack-quantized", "quantization_status": "compressed",
        "config_groups": {"group_0": {"format": "pack-quantized", "targets": ["Linear"],
                                      "weights": {"num_bits": 4, "type": "int", "group_size": 32,
                                                  "strategy": "group", "symmetric": True, "dynamic": False}}},
    }  # fmt: skip


# case -> (the rule it breaks, the edit, the LMDeploy method it needs to reach the broken module, the copy it
# edits: "awq" or the unquantized "target"). The AWQ copies fail at load, before the state-dtype failure.
BREAKS: dict[str, tuple[str, Callable[[dict, dict], None], str | None, str]] = {
    "gate_quantized": ("qwen3_5.linear_attn_gates_unquantized", _gate_quantized, None, "awq"),
    "qkv_unquantized": ("qwen3_5.linear_attn_projections_quantized", _qkv_unquantized, None, "awq"),
    "mtp_unmarked": ("qwen3_5.mtp_projections_stored_as_built", _mtp_unmarked, "qwen3_5_mtp", "awq"),
    "no_mtp": ("qwen3_5.mtp_weights_present", _no_mtp, "qwen3_5_mtp", "target"),
    "compressed_tensors": ("qwen3_5.compressed_tensors", _compressed_tensors, None, "awq"),
}


def make_broken(src: Path, dst: Path, case: str) -> Path:
    """A copy of the checkpoint `src` at `dst`, broken as `case` says."""
    from safetensors.torch import load_file, save_file

    shutil.copytree(src, dst)
    tensors = load_file(str(dst / "model.safetensors"))
    config = json.loads((dst / "config.json").read_text())
    BREAKS[case][1](tensors, config)
    save_file(tensors, str(dst / "model.safetensors"), metadata={"format": "pt"})
    (dst / "config.json").write_text(json.dumps(config))
    return dst


def predicted(path: Path, engine: str, rule: str | None) -> dict[str, Any]:
    """What `specq convert` says of `path` for `engine`: the verdict, for `rule` the expected error, and the
    `--dtype` specq serve launches the PyTorch engine with (None: LMDeploy's auto)."""
    from specq.pipeline.checkpoint import Checkpoint
    from specq.pipeline.convert import check_readiness
    from specq.pipeline.engines.qwen35 import serve_dtype

    v = check_readiness(path, write_manifest=False).verdict(engine)
    f = next((x for x in v.findings if x.rule == rule), None) if rule else None
    failed = [x for x in v.findings if not x.passed]
    expect = (f.expect if f else None) or (failed[0].expect if failed else READY)
    dtype = serve_dtype(Checkpoint(path)) if engine == "pytorch" else None
    return {"status": v.status, "rule": rule or (failed[0].rule if failed else None), "expect": expect,
            "dtype": dtype}  # fmt: skip


def make(awq: Path, out: Path, target: Path | None = None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    sources = {"awq": awq, "target": target}
    cases: dict[str, dict] = {}
    for case, (rule, _, method, source) in BREAKS.items():
        src = sources[source]
        if src is None:
            continue
        path = make_broken(src, out / case, case) if not (out / case).exists() else out / case
        cases[case] = {
            "path": case,
            "backend": "pytorch",
            "method": method,
            **predicted(path, "pytorch", rule),
        }

    def rel(p: Path) -> str:  # paths relative to OUT: the pair travels together
        return os.path.relpath(p.resolve(), out.resolve())

    cases["awq"] = {"path": rel(awq), "backend": "pytorch", "method": None,
                    **predicted(awq, "pytorch", "qwen3_5.state_dtype")}  # fmt: skip
    if target is not None:
        cases["bf16"] = {"path": rel(target), "backend": "pytorch", "method": "qwen3_5_mtp",
                         **predicted(target, "pytorch", None)}  # fmt: skip
    cases["turbomind"] = {"path": rel(awq), "backend": "turbomind", "method": None,
                          **predicted(awq, "turbomind", "qwen3_5.turbomind_vit_head_dim")}  # fmt: skip
    (out / "cases.json").write_text(json.dumps(cases, indent=1))
    for case, c in cases.items():
        print(f"{case}: {c['status']} ({c['rule']}): {c['expect']}")


def _has_turbomind() -> bool:
    """Whether this LMDeploy has its TurboMind build (without it `--backend turbomind` runs the PyTorch
    engine instead, so a TurboMind case would prove nothing)."""
    import importlib.util

    try:
        return importlib.util.find_spec("lmdeploy.lib._turbomind") is not None
    except ModuleNotFoundError:
        return False


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def run(out: Path, only: list[str] | None, timeout: float, name: str) -> int:
    cases = json.loads((out / "cases.json").read_text())
    procs: dict[str, tuple[subprocess.Popen, int, Any]] = {}
    for case, c in cases.items():
        if only and case not in only:
            continue
        if c["backend"] == "turbomind" and not _has_turbomind():
            print(f"{case}: skipped (this LMDeploy has no TurboMind build)", flush=True)
            continue
        path = out / c["path"]
        port = _port()
        argv = [sys.executable, "-m", "lmdeploy", "serve", "api_server", str(path), "--backend", c["backend"],
                "--server-name", "127.0.0.1", "--server-port", str(port), "--cache-max-entry-count", "0.05",
                "--max-batch-size", "1"]  # fmt: skip
        if c.get("dtype"):
            argv += ["--dtype", c["dtype"]]
        if c["method"]:
            argv += ["--speculative-algorithm", c["method"], "--speculative-num-draft-tokens", "3"]
        log = open(out / f"{case}.log", "w")  # noqa: SIM115 - closed below
        procs[case] = (subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT), port, log)
    t0, results = time.monotonic(), {}
    while procs:
        for case in list(procs):
            proc, port, log = procs[case]
            outcome = None
            if proc.poll() is not None:
                outcome = f"exited {proc.returncode}"
            elif _ready(port):
                outcome = "ready"
            elif time.monotonic() - t0 > timeout:
                outcome = "timeout"
            if outcome is None:
                continue
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    proc.kill()
            log.close()
            text = (out / f"{case}.log").read_text(errors="replace")
            c = cases[case]
            want_ready = c["expect"].startswith(READY)
            seen = next((ln.strip() for ln in text.splitlines() if c["expect"] in ln), None)
            ok = outcome == "ready" if want_ready else (outcome.startswith("exited") and seen is not None)
            # the engine's own error first: LMDeploy's RPCServerDeadError only says the engine process died
            lines = [ln.strip() for ln in text.splitlines() if "Error" in ln]
            errors = [ln for ln in lines if "RPCServerDead" not in ln][-3:] or lines[-3:]
            results[case] = {**c, "outcome": outcome, "seconds": round(time.monotonic() - t0, 1),
                             "matched_line": seen, "last_errors": errors, "as_predicted": ok}  # fmt: skip
            verdict = "AS PREDICTED" if ok else "NOT as predicted"
            said = seen or (errors[-1] if errors else "-")
            print(
                f"{case}: {outcome} in {results[case]['seconds']} s; {c['status']}: {verdict} ({said})",
                flush=True,
            )
            del procs[case]
        time.sleep(1)
    (out / name).write_text(json.dumps(results, indent=1))
    return 0 if all(r["as_predicted"] for r in results.values()) else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("awq", type=Path)
    m.add_argument("out", type=Path)
    m.add_argument("--target", type=Path, help="the unquantized (bf16/fp32) target: cases bf16 and no_mtp")
    r = sub.add_parser("run")
    r.add_argument("out", type=Path)
    r.add_argument("--cases", help="comma list (default: all)")
    r.add_argument("--timeout", type=float, default=240.0)
    r.add_argument("--results", default="results.json", help="file under OUT for the outcomes")
    args = ap.parse_args(argv)
    if args.cmd == "make":
        make(args.awq, args.out, args.target)
        return 0
    return run(args.out, args.cases.split(",") if args.cases else None, args.timeout, args.results)
