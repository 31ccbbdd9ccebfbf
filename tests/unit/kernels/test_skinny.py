"""specq's skinny linear (pipeline/kernels/skinny.py) on the CPU: its logic under Triton's interpreter
(skinny_interp_checks.py in a child process) and its configuration. Its speed on a GPU is recorded in
docs/w4a16.md."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from specq.pipeline.kernels import skinny as S

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def interp() -> dict[str, dict]:
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run(
        [sys.executable, str(HERE / "skinny_interp_checks.py")], env=env, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


CASES = ["bf16-one-row-split4", "bf16-5-rows-split3-bias", "fp16-16-rows-one-split", "bf16-7-steps-split5"]


@pytest.mark.parametrize("case", CASES)
def test_the_kernel_computes_the_product_within_the_dtypes_rounding(interp, case: str) -> None:
    r = interp[case]
    # numpy has no bf16, so the interpreter rounds bf16 by truncation: up to about twice round-to-nearest's
    bound = 1.25 if "fp16" in r["dtype"] else 2.5
    assert r["rel_error"] <= bound * r["rounding"] + 1e-5, r


@pytest.mark.parametrize("case", CASES)
def test_rows_are_the_same_bits_alone_or_among_others_and_runs_agree(interp, case: str) -> None:
    r = interp[case]
    assert r["m_invariant"] and r["deterministic"] and r["counters_zero"]


def test_shapes_dtypes_and_prefill(interp) -> None:
    assert interp["bf16-5-rows-split3-bias"]["shape"] == [5, 96]
    assert interp["fp16-16-rows-one-split"]["dtype"] == "torch.float16"
    assert interp["leading-dims"]["shape"] == [2, 3, 24]
    assert interp["prefill-20"]["is_f_linear"]


def test_the_split_fills_the_gpu_without_empty_steps() -> None:
    # in_proj_ba at 27B: 96 columns, 6 tiles; 5120 k, 10 steps of 512
    assert S.config_for(96, 5120, 132) == S.Config(split_k=10)
    assert S.config_for(96, 5120, 30) == S.Config(split_k=5)
    assert S.config_for(4096, 512, 132).split_k == 1


def test_mixed_or_32_bit_dtypes_are_refused() -> None:
    with pytest.raises(TypeError, match="bf16 or fp16"):
        S.linear(torch.randn(1, 64), torch.randn(16, 64))
    with pytest.raises(TypeError, match="bf16 or fp16"):
        S.linear(torch.randn(1, 64).to(torch.bfloat16), torch.randn(16, 64).to(torch.float16))
