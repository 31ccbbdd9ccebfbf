"""The FA3 numerical self-check (what `specq fa3 build` runs before installing) against whatever
FlashAttention-3 is importable here: every head dim and dtype its flash_attn_config says it was built with,
through LMDeploy's two calls (varlen prefill, paged multi-token decode), within fp16/bf16 tolerance of torch's
SDPA. Skips without CUDA or without an FA3."""

from __future__ import annotations

import pytest

from specq.pipeline import hardware
from specq.pipeline.fa3.installed import installed_coverage
from specq.pipeline.fa3.selfcheck import run_cases

pytestmark = pytest.mark.gpu


def test_installed_fa3_matches_torch_sdpa() -> None:
    if hardware.flash_attention_3() is not None:
        pytest.skip("no importable FlashAttention-3 (build one with `specq fa3 build`)")
    cov = installed_coverage()
    head_dims = [h for h in (64, 128, 256) if cov is None or cov.covers_head_dim(h)][:2] or [64]
    dtypes = ["bf16"] + (["fp16"] if cov is None or cov.fp16 else [])
    results = run_cases(dtypes, head_dims)
    for r in results:
        print(f"{r.name}: max abs err {r.max_abs_err} (tolerance {r.tolerance}) {r.error or ''}")
    assert len(results) == 3 * len(dtypes) * len(head_dims)
    assert all(r.ok for r in results), [r for r in results if not r.ok]
