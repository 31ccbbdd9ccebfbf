"""Prepare the GPTQ checkpoint that `tests/gpu/test_convert_gpu.py` loads on a GPU machine without gptqmodel:
the small toy target (built or taken from the toy cache), or `--model DIR`, quantized to symmetric 4-bit GPTQ
(group 128, no act-order) here on CPU with gptqmodel. Writes ROOT/model and ROOT/gptq, and for the toy
ROOT/heldout.jsonl (`specq toy prompts`: its held-out code prefixes, made here because the held-out split is
this interpreter's standard library), which `benchmarks/scenarios/check.py --small-root ROOT` benches on.

    python benchmarks/gpu.py gptq-toy .device/quant [--model DIR]
    # then, on the GPU machine: SPECQ_GPU_QUANT_ROOT=.device/quant pytest -m gpu tests/gpu/test_convert_gpu.py
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root", type=Path, nargs="?", default=Path(".device/quant"))
    ap.add_argument("--model", type=Path, help="unquantized model directory (default: the small toy target)")
    args = ap.parse_args(argv)

    from tests.integration.convert.conftest import quantize_gptq

    root: Path = args.root
    if root.exists():
        raise SystemExit(f"{root} already exists; remove it or choose another directory")
    model = args.model
    if model is None:
        from specq.pipeline.toy import ToyRequest, build_toy_pair
        from specq.pipeline.toy.corpus import load_corpus, write_completion_prompts

        model = build_toy_pair(ToyRequest(size="small", seed=0)).target
        write_completion_prompts(root / "heldout.jsonl", load_corpus())
    shutil.copytree(model, root / "model")
    quantize_gptq(root / "model", root, "cpu")
    print(f"wrote {root / 'model'} and {root / 'gptq'}")
