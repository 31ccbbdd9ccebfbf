"""specq's W4A16 kernel (pipeline/kernels/w4a16.py) on the CPU: the layouts in torch, the kernels' logic under
Triton's interpreter (interp_checks.py in a child process), the configuration cache. Its speed and its
bitwise checks on a GPU are recorded in docs/w4a16.md (benchmarks/scenarios/w4a16_kernel.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest
import torch

from specq.pipeline.kernels import w4a16 as W

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def interp() -> dict[str, dict]:
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run(
        [sys.executable, str(HERE / "interp_checks.py")], env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


CASES = [
    "bf16-one-row",
    "bf16-split3-gpi4-ragged-n",
    "fp16-16-rows-g64",
    "bf16-split4-gpi2-tail-and-empty-split",
    "bf16-balanced-cut-tiles",
    "fp16-balanced-one-group-a-run",
    "bf16-prefill-20",
    "bf16-prefill-70",
]


@pytest.mark.parametrize("case", CASES)
def test_the_kernel_computes_the_dequantized_product_within_the_dtypes_rounding(interp, case: str) -> None:
    r = interp[case]
    # The kernel's own error is the output's rounding to the activation dtype (on the H200 the two agreed to 3
    # digits, docs/w4a16.md). numpy has no bf16, so the interpreter rounds bf16 by truncation: up to about
    # twice round-to-nearest's error there.
    bound = 1.25 if "fp16" in r["dtype"] else 2.5
    assert r["rel_error"] <= bound * r["rounding"] + 1e-5, r
    assert r["lossless_repack"] and r["deterministic"]


@pytest.mark.parametrize("case", CASES)
def test_dequantizing_pairs_of_nibbles_gives_the_plain_dequantizations_bits(interp, case: str) -> None:
    assert interp[case]["pairs_equal_pure"]


@pytest.mark.parametrize("case", [c for c in CASES if "prefill" not in c])
def test_every_row_is_the_same_bits_whether_computed_alone_or_among_m_rows(interp, case: str) -> None:
    assert interp[case]["m_invariant"]


@pytest.mark.parametrize("case", [c for c in CASES if "prefill" not in c])
def test_mma_syncs_k_order_relabels_the_same_values(interp, case: str) -> None:
    assert interp[case]["mma_order_same_bits"]


@pytest.mark.parametrize("case", [c for c in CASES if "prefill" not in c])
def test_groups_an_iteration_and_prefetch_change_speed_not_bits(interp, case: str) -> None:
    assert interp[case]["same_bits_other_gpi_and_prefetch"]


def test_split_k_leaves_its_tile_counters_at_zero_for_the_next_launch(interp) -> None:
    # the split-K case ran five times (and other configurations after it) and stayed within bf16 rounding
    assert interp["bf16-split3-gpi4-ragged-n"]["split_counters_zero"]


@pytest.mark.parametrize("case", ["bf16-balanced-cut-tiles", "fp16-balanced-one-group-a-run"])
def test_the_balanced_kernel_leaves_its_tile_counters_at_zero(interp, case: str) -> None:
    assert interp[case]["split_counters_zero"]


def test_the_balanced_kernel_gives_the_split_k_grids_bits_where_its_runs_are_whole_splits(interp) -> None:
    assert interp["balanced-as-split-k"]["same_bits"]


@pytest.mark.parametrize(
    "case", ["bf16-split3-bias", "fp16-one-split-16-rows", "bf16-balanced-cut-tiles", "bf16-prefill-20"]
)
def test_a_gate_up_layer_stores_lmdeploys_silu_of_gate_times_up(interp, case: str) -> None:
    r = interp["silu-mul"][case]
    # the bits of the plain layer's gate_up followed by LMDeploy's activation kernel, half as wide
    assert r["same_bits_as_lmdeploys_activation"] and r["weights_reordered"], r
    m, n = r["half_of"]
    assert r["shape"] == [m, n // 2]
    assert r.get("m_invariant", True)


def test_silu_mul_columns_put_gate_and_up_in_turns_of_eight() -> None:
    cols = W.silu_mul_columns(48)
    assert sorted(cols.tolist()) == list(range(48))
    # packed columns 16a .. 16a + 15: gate columns 8a .. 8a + 7, then the same up columns (gate 24 wide)
    assert cols[:16].tolist() == [*range(8), *range(24, 32)]
    assert cols[16:32].tolist() == [*range(8, 16), *range(32, 40)]
    with pytest.raises(ValueError, match="divisible by 16"):
        W.silu_mul_columns(40)


def test_shapes_and_dtypes(interp) -> None:
    assert interp["bf16-split3-gpi4-ragged-n"]["shape"] == [5, 96]
    assert interp["fp16-16-rows-g64"]["dtype"] == "torch.float16"
    assert interp["leading-dims"]["shape"] == [2, 3, 64]


def test_awq_packing_round_trips_and_matches_autoawqs_order() -> None:
    q = torch.randint(0, 16, (24, 32), dtype=torch.uint8)
    packed = W.pack_awq(q)
    assert packed.shape == (24, 4) and torch.equal(W.unpack_awq(packed), q)
    # AutoAWQ's pack: nibble i of word w holds column 8w + (0, 2, 4, 6, 1, 3, 5, 7)[i]
    one = torch.zeros(1, 8, dtype=torch.uint8)
    one[0, 2] = 0xF
    assert int(W.pack_awq(one)[0, 0]) == 0xF << 4


@pytest.mark.parametrize("order", [W.ORDER_WGMMA, W.ORDER_MMA], ids=["wgmma", "mma"])
def test_repack_is_group_major_and_lossless(order: int) -> None:
    k, n, group = 512, 48, 128
    q = torch.randint(0, 16, (k, n), dtype=torch.uint8)
    z = torch.randint(0, 16, (k // group, n), dtype=torch.uint8)
    s = torch.rand(k // group, n).half()
    p = W.pack(W.pack_awq(q), W.pack_awq(z), s, order=order)
    assert p.qweight.shape == (k // group, n, group // 8) and (p.n, p.k, p.group) == (n, k, group)
    assert p.order == order
    assert torch.equal(p.zeros, z) and torch.equal(p.scales, s)
    ref = (q.float() - z.float().repeat_interleave(group, 0)) * s.float().repeat_interleave(group, 0)
    assert torch.equal(W.dequantize(p), ref)


@pytest.mark.parametrize("group", [32, 128])
@pytest.mark.parametrize("order", [W.ORDER_WGMMA, W.ORDER_MMA], ids=["wgmma", "mma"])
def test_each_value_sits_where_its_tensor_core_fragment_wants_it(group: int, order: int) -> None:
    # lane c of a fragment's four (rows g and g + 8) reads word c * group/32 + wi of its column; nibble
    # e * 4 + tlo * 2 + h holds k = 16 (2 wi + tlo) + 8 h + 2 c + e for wgmma (Hopper), and
    # k = 32 wi + 8 c + 4 tlo + 2 h + e for mma.sync, whose operand holds 8 k in a row (two values of a
    # word, k and k + 1, become one bf16x2 register: nibbles p and p + 4)
    n, wpc = 8, group // 32
    for k in range(group):
        q = torch.zeros(group, n, dtype=torch.uint8)
        q[k, 3] = 9
        p = W.pack(W.pack_awq(q), torch.zeros(1, 1, dtype=torch.int32), torch.ones(1, n).half(), order=order)
        if order == W.ORDER_WGMMA:
            t, rest = divmod(k, 16)
            h, rest = divmod(rest, 8)
            c, e = divmod(rest, 2)
            wi, tlo = divmod(t, 2)
        else:
            wi, rest = divmod(k, 32)
            c, rest = divmod(rest, 8)
            tlo, rest = divmod(rest, 4)
            h, e = divmod(rest, 2)
        words = p.qweight[0]  # [N, group/8]
        assert torch.count_nonzero(words) == 1
        assert int(words[3, c * wpc + wi]) & 0xFFFFFFFF == 9 << (4 * (e * 4 + tlo * 2 + h)), k


@pytest.mark.parametrize(
    ("qw", "qz", "s", "why"),
    [
        ((256, 8), (2, 8), (2, 60), "inconsistent AWQ shapes"),
        ((256, 8), (3, 8), (3, 64), "inconsistent AWQ shapes"),
        ((256, 8), (32, 8), (32, 64), "group size divisible by 32"),
        ((256, 8), (16, 8), (16, 64), "group size divisible by 32"),
    ],
)
def test_shapes_the_kernel_cannot_run_are_refused(qw, qz, s, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        W.pack(torch.zeros(qw, dtype=torch.int32), torch.zeros(qz, dtype=torch.int32), torch.zeros(s).half())


def test_off_the_gpu_the_words_take_wgmmas_order() -> None:
    assert W.fragment_order(torch.device("cpu")) == W.ORDER_WGMMA
    p = W.pack(
        torch.zeros(128, 8, dtype=torch.int32), torch.zeros(1, 8, dtype=torch.int32), torch.ones(1, 64).half()
    )
    assert p.order == W.ORDER_WGMMA


def test_float32_activations_are_refused() -> None:
    p = W.pack(
        torch.zeros(128, 8, dtype=torch.int32),
        torch.zeros(1, 8, dtype=torch.int32),
        torch.zeros(1, 64).half(),
    )
    with pytest.raises(TypeError, match="bf16 or fp16"):
        W.linear(torch.zeros(1, 128), p)


def test_the_chosen_configuration_comes_from_the_cache_file_then_the_shipped_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPECQ_W4A16_CACHE", str(tmp_path))
    monkeypatch.setattr(W, "_chosen", {})
    cpu = torch.device("cpu")
    assert W.config_for(10, 128, cpu) == W.DEFAULT  # nothing known: the default
    chosen = W.Config(block_n=256, split_k=8, num_warps=8, prefetch=False, gpi=4)
    W._write_cache(cpu, W._shape_key(20, 256), chosen, 12.5)
    assert json.loads((tmp_path / "cpu.json").read_text())["20x256-g128"]["us"] == 12.5
    monkeypatch.setattr(W, "_chosen", {})
    assert W.config_for(20, 256, cpu) == chosen


def test_the_shipped_table_names_valid_configurations() -> None:
    table = json.loads(W.SHIPPED.read_text(encoding="utf-8"))
    assert table, "no GPU in the shipped table"
    fields = set(asdict(W.DEFAULT))
    for gpu, entries in table.items():
        for key, entry in entries.items():
            cfg = W.Config(**{f: entry[f] for f in fields if f in entry})  # a block not whole warps raises
            assert cfg in W.CANDIDATES, (gpu, key)
            assert key.endswith("-g128")


def test_a_configuration_whose_block_is_not_whole_warps_is_refused() -> None:
    assert W.Config(block_n=128, num_warps=4).rows_per_warp == 2
    with pytest.raises(ValueError, match="multiple of 16 num_warps"):
        W.Config(block_n=64, num_warps=8)
    with pytest.raises(ValueError, match="gpi"):
        W.Config(gpi=3)
    with pytest.raises(ValueError, match="maxnreg"):
        W.Config(maxnreg=512)
    with pytest.raises(ValueError, match="prefetch 0-3"):
        W.Config(prefetch=4)
    with pytest.raises(ValueError, match="balanced"):
        W.Config(balanced=-1)


def test_a_cached_boolean_prefetch_reads_as_its_level() -> None:
    # tables written before the prefetch levels hold true / false: the words only, or nothing
    assert W.Config(prefetch=True) == W.Config(prefetch=1)
    assert W.Config(prefetch=True).key().endswith("-p1-g2")
    assert W.Config(prefetch=False).prefetch == 0


def test_timed_copies_outsize_the_l2_together_and_not_by_more_than_one_copy(monkeypatch) -> None:
    for nbytes in (96 * 5120 * 2, 27 << 20, W.ROTATE_BYTES, W.ROTATE_BYTES + 1, 3 * W.ROTATE_BYTES):
        count = W.copies_to_rotate(nbytes)
        assert count * nbytes >= W.ROTATE_BYTES
        assert count == 1 or (count - 1) * nbytes < W.ROTATE_BYTES
    assert W.copies_to_rotate(3 * W.ROTATE_BYTES, least=2) == 2
    monkeypatch.setattr(W, "ROTATE_BYTES", 100_000)  # a layer's worth of copies, not 256 MB's
    k, n, group = 256, 64, 128
    q = torch.randint(0, 16, (k, n), dtype=torch.uint8)
    z = torch.randint(0, 16, (k // group, n), dtype=torch.uint8)
    p = W.pack(W.pack_awq(q), W.pack_awq(z), torch.rand(k // group, n).half())
    copies = W.rotating_copies(p)
    assert len(copies) == W.copies_to_rotate(p.qweight.numel() * 4 + p.scales.numel() * 2 + p.zeros.numel())
