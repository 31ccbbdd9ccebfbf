"""benchmarks/scenarios/w4a16_kernel.py's step totals: a step's linears summed over the shapes of each layout
(in_proj_qkv and in_proj_z apart, as LMDeploy builds them, or as one linear), from recorded timings; the
families table; the configurations `--families` sweeps."""

from __future__ import annotations

import torch

from benchmarks.scenarios import w4a16_kernel as B


def _shapes(us_by_name: dict[str, dict[str, float]]) -> dict:
    return {
        name: {"n": B.SHAPES[name][0], "k": B.SHAPES[name][1], "per_step": B.SHAPES[name][2],
               "bytes": B.awq_bytes(*B.SHAPES[name][:2]), "us": {"specq": us}}
        for name, us in us_by_name.items()
    }  # fmt: skip


def test_each_layout_sums_its_own_shapes_and_only_when_all_were_timed():
    us = {name: {"1": 10.0, "16": 20.0} for name in B.SHAPES}
    us["in_proj_qkvz"] = {"1": 19.0, "16": 30.0}
    totals = B.step_totals(_shapes(us), "specq", [1, 16])
    # fused: 64 + 64 + 48 (qkvz) + 64 + 16 launches; separate: 48 + 48 in place of the 48 fused ones
    assert totals["fused"] == {1: 208 * 10.0 + 48 * 19.0, 16: 208 * 20.0 + 48 * 30.0}
    assert totals["separate"] == {1: 304 * 10.0, 16: 304 * 20.0}
    del us["in_proj_qkvz"]
    assert set(B.step_totals(_shapes(us), "specq", [1, 16])) == {"separate"}
    us["down"] = {"1": 10.0}  # M = 16 not timed: no total at all
    assert B.step_totals(_shapes(us), "specq", [1, 16]) == {}


def test_the_table_prints_both_layouts():
    us = {name: {"1": 10.0} for name in B.SHAPES}
    md = B.tables({"gpu": "G", "date": "D", "dtype": "bfloat16", "shapes": _shapes(us)}, [1], ["specq"])
    assert "| specq | fused | 2.56 |" in md and "| specq | separate | 3.04 |" in md


def test_gate_ups_stored_activation_gets_a_row_and_no_step_total():
    shapes = _shapes({name: {"1": 10.0} for name in B.SHAPES})
    shapes["gate_up"]["us"]["silu"] = {"1": 10.5}  # timed on gate_up alone, the one MLP shape
    shapes["gate_up"]["silu_checks"] = {"deterministic": True}
    md = B.tables({"gpu": "G", "date": "D", "dtype": "bfloat16", "shapes": shapes}, [1], ["specq", "silu"])
    assert "| gate_up 34816×5120 | silu | 10.5 |" in md
    assert "- gate_up (silu): {'deterministic': True}" in md
    assert not any(line.startswith("| silu | ") for line in md.splitlines())  # not a whole step's linears


def test_the_family_table_keeps_each_familys_best_split_and_marks_changed_bits():
    rows = [  # recorded-style figures of two families at two splits
        {"family": "p0-g2-r96", "split": 1, "same_bits": True, "us_m1": 39.4, "us_m16": 40.6},
        {"family": "p0-g2-r96", "split": 4, "same_bits": True, "us_m1": 39.6, "us_m16": 41.1},
        {"family": "p0-g1-r72", "split": 1, "same_bits": False, "us_m1": 45.0, "us_m16": 46.0},
        {"family": "p0-g1-r72", "split": 4, "same_bits": True, "us_m1": 40.3, "us_m16": 42.4},
    ]
    lines = B.family_table({"gate_up": rows})
    assert lines[2:] == [
        "| gate_up | p0-g2-r96 | 1 | 39.40 | 40.60 | yes |",
        "| gate_up | p0-g1-r72 | 4 | 40.30 | 42.40 | **no** |",  # its split 1 changed bits: marked
    ]


def test_a_family_is_a_configuration_less_its_split():
    import specq.pipeline.kernels.w4a16 as W

    assert B.family(W.Config(block_n=64, split_k=8, prefetch=2, gpi=1, maxnreg=80)) == "p2-g1-r80"
    assert len({B.family(c) for c in W.QUICK_CANDIDATES}) * 5 == len(W.QUICK_CANDIDATES)  # 5 splits each
    assert B.family(W.Config(gpi=1, maxnreg=72, prefetch=0, balanced=7)) == "p0-g1-r72-b7"
    assert len({B.family(c) for c in W.BALANCED_CANDIDATES}) == len(W.BALANCED_CANDIDATES)


def test_families_sweep_the_quick_search_and_the_balanced_kernel_or_the_shapes_own_and_the_balanced(
    monkeypatch, tmp_path
):
    import specq.pipeline.kernels.w4a16 as W

    monkeypatch.setenv("SPECQ_W4A16_CACHE", str(tmp_path))
    monkeypatch.setattr(W, "_chosen", {})
    cpu = torch.device("cpu")
    every = B.sweep_configs(5120, 17408, cpu)  # 136 groups: splits 1, 2, 4 and 8 divide them, 16 does not
    assert {c.split_k for c in every if not c.balanced} == {1, 2, 4, 8}
    assert [c for c in every if c.balanced] == list(W.BALANCED_CANDIDATES)
    own = W.Config(block_n=64, split_k=8, maxnreg=96, prefetch=0)
    W._write_cache(cpu, W._shape_key(5120, 17408), own, 21.0)
    assert B.sweep_configs(5120, 17408, cpu, "balanced") == [own, *W.BALANCED_CANDIDATES]
