"""What `specq quantize` costs on top of its backend: the same model, data and settings quantized (a) by
`specq quantize --no-eval` and (b) by a plain script that calls gptqmodel directly (read the JSONL, tokenize,
pack, load, quantize, save). Each run is a fresh process, so both include start-up and imports; runs
alternate to share the machine's noise. Prints wall times and the overhead in percent.

    python benchmarks/quantize_overhead.py [--model DIR --calib FILE] [--method gptq|awq] [--repeats 2]

Without --model it builds the tests' tiny Qwen3 in a temporary directory."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def direct(model: str, calib: str, out: str, method: str, samples: int, seqlen: int) -> None:
    """The baseline: what a user would write against gptqmodel with the same packing."""
    os.environ.setdefault("GPTQMODEL_CPU_WORKERS", "2")
    import random

    import torch
    from gptqmodel import BACKEND, GPTQModel
    from gptqmodel.quantization.config import AWQConfig, GPTQConfig
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model)
    texts = [json.loads(line)["text"] for line in open(calib, encoding="utf-8") if line.strip()]
    random.Random(0).shuffle(texts)
    stream: list[int] = []
    for ids in tok(texts, add_special_tokens=False)["input_ids"]:
        stream += ids + [tok.eos_token_id]
    rows = [stream[i : i + seqlen] for i in range(0, samples * seqlen, seqlen)]
    data = [
        {"input_ids": torch.tensor([r]), "attention_mask": torch.ones(1, len(r), dtype=torch.long)}
        for r in rows
    ]
    if method == "gptq":
        qc, backend = GPTQConfig(bits=4, group_size=128, sym=True, desc_act=False), BACKEND.AUTO
    else:
        qc, backend = AWQConfig(bits=4, group_size=128, sym=False), BACKEND.AWQ_TORCH
    m = GPTQModel.load(model, qc, device="cpu")
    m.quantize(data, batch_size=1, backend=backend, calibration_data_min_length=1)
    m.save(out)


def timed(cmd: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model")
    ap.add_argument("--calib")
    ap.add_argument("--method", default="gptq", choices=["gptq", "awq"])
    ap.add_argument("--samples", type=int, default=16)
    ap.add_argument("--seqlen", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--direct", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.direct:
        direct(a.model, a.calib, a.out, a.method, a.samples, a.seqlen)
        return
    work = Path(tempfile.mkdtemp(prefix="specq-bench-"))
    if not a.model:
        sys.path.insert(0, str(ROOT))
        from tests.tinymodel import build_tiny_model, calibration_rows, write_jsonl

        a.model = str(build_tiny_model(work / "model"))
        a.calib = str(write_jsonl(work / "calib.jsonl", calibration_rows(1500)))
    common = ["--samples", str(a.samples), "--seqlen", str(a.seqlen)]
    exe = Path(sys.executable).parent / "specq"
    specq = [str(exe)] if exe.exists() else [shutil.which("specq") or "specq"]
    times: dict[str, list[float]] = {"direct gptqmodel": [], "specq quantize": []}
    for i in range(a.repeats):
        d = [
            sys.executable,
            __file__,
            "--direct",
            "--model",
            a.model,
            "--calib",
            a.calib,
            "--method",
            a.method,
        ]
        times["direct gptqmodel"].append(timed(d + common + ["--out", str(work / f"direct{i}")]))
        s = specq + ["quantize", a.model, "--calib", a.calib, "--method", a.method, "--for", "plain"]
        times["specq quantize"].append(
            timed(s + common + ["--no-eval", "--device", "cpu", "--out", str(work / f"specq{i}")])
        )
    base = statistics.median(times["direct gptqmodel"])
    mine = statistics.median(times["specq quantize"])
    for name, ts in times.items():
        print(f"{name:18s} median {statistics.median(ts):7.2f} s  runs {', '.join(f'{t:.2f}' for t in ts)}")
    print(
        f"overhead {100 * (mine - base) / base:+.1f} % "
        f"({a.method}, {a.samples} x {a.seqlen} tokens, {a.repeats} runs)"
    )


if __name__ == "__main__":
    main()
