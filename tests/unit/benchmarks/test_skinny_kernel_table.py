"""The skinny-kernel scenario's report, from injected figures (its GPU run is recorded in docs/w4a16.md)."""

from __future__ import annotations

from benchmarks.scenarios import skinny_kernel as B


def test_the_report_tables_each_kernel_and_the_steps_saving() -> None:
    us = {"F.linear": 6.0, "shipped": 4.5, "k256-split20": 5.0}
    checks = {"rel_error": 1e-3, "bf16_rounding": 1e-3, "deterministic": True, "m_invariant": True}
    result = {
        "gpu": "GPU",
        "date": "2026-12-07",
        "shapes": {
            "in_proj_ba": {
                "n": 96,
                "k": 5120,
                "shipped": {"block_n": 16, "block_k": 512, "split_k": 10, "num_warps": 4},
                "per_step": 48,
                "us": {"1": us, "16": {**us, "shipped": 4.75}},
                "checks": {"1": checks, "16": checks},
            }
        },
    }
    md = B.table(result)
    assert "| F.linear | 6.00 | 6.00 |" in md and "| shipped | 4.50 | 4.75 |" in md
    assert "| k256-split20 | 5.00 | 5.00 |" in md
    assert "0.072 ms less than F.linear (48 launches)" in md  # (6.0 - 4.5) µs × 48
    assert "- M=16: {'rel_error'" in md
