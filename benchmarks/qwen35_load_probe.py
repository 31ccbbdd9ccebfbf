"""`specq convert`'s Qwen3.5 verdicts against LMDeploy itself: copies of an AWQ Qwen3.5 checkpoint broken the
ways `specq.pipeline.engines.qwen35` predicts LMDeploy 0.18 refuses, each launched with LMDeploy's own
`api_server`, and the error it dies with compared with the finding's `expect`.

    python benchmarks/qwen35_load_probe.py make AWQ_DIR OUT      # CPU: OUT/<case>/ and OUT/cases.json
    python benchmarks/qwen35_load_probe.py run OUT [--cases a,b] [--results results.json]
                                                                # GPU: OUT/<case>.log and OUT/results.json

`make` writes each broken copy and what `specq convert` says of it (status, rule, expected error); `accepted`
is the AWQ checkpoint itself (it must load), `turbomind` the same checkpoint on TurboMind (refused for the
toy's vision head dim). `run` launches every case at once (small KV cache: they are load probes, not
benchmarks), waits until each is ready, dies, or times out, and records whether the outcome is the predicted
one. The MTP cases need FlashAttention-3 (LMDeploy's speculative path); the others do not."""

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
    config["quantization_config"] = {
        "quant_method": "compressed-tensors", "format": "pack-quantized",
        "config_groups": {"group_0": {"format": "pack-quantized", "targets": ["Linear"],
                                      "weights": {"num_bits": 4, "type": "int", "group_size": 32}}},
    }  # fmt: skip


# case -> (the rule it breaks, the edit, the LMDeploy method it needs to reach the broken module)
BREAKS: dict[str, tuple[str, Callable[[dict, dict], None], str | None]] = {
    "gate_quantized": ("qwen3_5.linear_attn_gates_unquantized", _gate_quantized, None),
    "qkv_unquantized": ("qwen3_5.linear_attn_projections_quantized", _qkv_unquantized, None),
    "mtp_unmarked": ("qwen3_5.mtp_projections_stored_as_built", _mtp_unmarked, "qwen3_5_mtp"),
    "no_mtp": ("qwen3_5.mtp_weights_present", _no_mtp, "qwen3_5_mtp"),
    "compressed_tensors": ("qwen3_5.compressed_tensors", _compressed_tensors, None),
}


def make_broken(src: Path, dst: Path, case: str) -> Path:
    """A copy of the AWQ checkpoint `src` at `dst`, broken as `case` says."""
    from safetensors.torch import load_file, save_file

    shutil.copytree(src, dst)
    tensors = load_file(str(dst / "model.safetensors"))
    config = json.loads((dst / "config.json").read_text())
    BREAKS[case][1](tensors, config)
    save_file(tensors, str(dst / "model.safetensors"), metadata={"format": "pt"})
    (dst / "config.json").write_text(json.dumps(config))
    return dst


def predicted(path: Path, engine: str, rule: str | None) -> dict[str, Any]:
    """What `specq convert` says of `path` for `engine`: the verdict and, for `rule`, the expected error."""
    from specq.pipeline.convert import check_readiness

    v = check_readiness(path, write_manifest=False).verdict(engine)
    f = next((x for x in v.findings if x.rule == rule), None) if rule else None
    failed = [x for x in v.findings if not x.passed]
    expect = (f.expect if f else None) or (failed[0].expect if failed else READY)
    return {"status": v.status, "rule": rule or (failed[0].rule if failed else None), "expect": expect}


def make(awq: Path, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    cases: dict[str, dict] = {}
    for case, (rule, _, method) in BREAKS.items():
        path = make_broken(awq, out / case, case) if not (out / case).exists() else out / case
        cases[case] = {
            "path": case,
            "backend": "pytorch",
            "method": method,
            **predicted(path, "pytorch", rule),
        }
    rel = os.path.relpath(awq.resolve(), out.resolve())  # paths relative to OUT: the pair travels together
    cases["accepted"] = {"path": rel, "backend": "pytorch", "method": "qwen3_5_mtp",
                         **predicted(awq, "pytorch", None)}  # fmt: skip
    cases["turbomind"] = {"path": rel, "backend": "turbomind", "method": None,
                          **predicted(awq, "turbomind", "qwen3_5.turbomind_vit_head_dim")}  # fmt: skip
    (out / "cases.json").write_text(json.dumps(cases, indent=1))
    for case, c in cases.items():
        print(f"{case}: {c['status']} ({c['rule']}): {c['expect']}")


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
        path = out / c["path"]
        port = _port()
        argv = [sys.executable, "-m", "lmdeploy", "serve", "api_server", str(path), "--backend", c["backend"],
                "--server-name", "127.0.0.1", "--server-port", str(port), "--cache-max-entry-count", "0.05",
                "--max-batch-size", "1"]  # fmt: skip
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
            errors = [ln.strip() for ln in text.splitlines() if "Error" in ln][-3:]
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


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("awq", type=Path)
    m.add_argument("out", type=Path)
    r = sub.add_parser("run")
    r.add_argument("out", type=Path)
    r.add_argument("--cases", help="comma list (default: all)")
    r.add_argument("--timeout", type=float, default=240.0)
    r.add_argument("--results", default="results.json", help="file under OUT for the outcomes")
    args = ap.parse_args()
    if args.cmd == "make":
        make(args.awq, args.out)
        return 0
    return run(args.out, args.cases.split(",") if args.cases else None, args.timeout, args.results)


if __name__ == "__main__":
    sys.exit(main())
