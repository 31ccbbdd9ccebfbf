"""The speedup model: tokens per step, cost fitting, best-k choice."""

from __future__ import annotations

import pytest

from specq.pipeline.speedup import StepCost, best_k, expected_tokens_per_step, predict_speedup


def test_tokens_per_step_is_one_plus_accepted() -> None:
    a = [0.8, 0.6, 0.4]
    assert expected_tokens_per_step(a, 2) == pytest.approx(2.4)
    assert expected_tokens_per_step(a, 5) == pytest.approx(2.8)  # positions past the data count as 0
    assert expected_tokens_per_step(a, 0) == 1.0


def test_fit_recovers_a_line() -> None:
    cost = StepCost.fit([(2, 1.3), (4, 1.5), (6, 1.7)])
    assert cost.fixed == pytest.approx(1.1)
    assert cost.per_token == pytest.approx(0.1)


def test_best_k_trades_acceptance_against_cost() -> None:
    a = [0.9, 0.8, 0.5, 0.1, 0.05, 0.01]
    cost = StepCost(fixed=1.1, per_token=0.1)
    k, speed = best_k(a, [1, 2, 3, 4, 5, 6], cost)
    assert k == 3
    assert speed == pytest.approx(predict_speedup(a, 3, cost))
    assert predict_speedup(a, 6, cost) < speed


# ---- the measured step-cost curve ------------------------------------------------------------------------

from specq.pipeline.speedup import STEP_COST_CURVE, CurvePoint, StepCostCurve, load_curve  # noqa: E402


def test_curve_holds_the_measured_figures_at_their_sizes() -> None:
    c = STEP_COST_CURVE
    assert (c.date, c.commit, c.hardware) == (
        "2026-12-02, 2026-12-05, 2026-12-06",
        "7b45bbd, b5bf60f, dfa5d7a",
        "NVIDIA H200",
    )
    small = c.at(2_840_000_000)  # the 1.42 B target: 1.97 at k = 7, 2.48 at k = 15
    assert small(7) == pytest.approx(1.97, abs=1e-3) and small(15) == pytest.approx(2.48, abs=1e-3)
    big = c.at(13_920_000_000)  # the 6.96 B target: 1.61 / 1.69
    assert big(7) == pytest.approx(1.61, abs=1e-3) and big(15) == pytest.approx(1.69, abs=1e-3)
    assert c.at(4_000_000)(15) == pytest.approx(2.05)
    awq27 = c.at(19_547_547_104)  # the Qwen3.5-27B-AWQ twin, specq's W4A16 kernel: 1.44 / 1.50 / 2.03
    # at k = 3 / 7 / 15: the least-squares line through them, its slope measured, not the default
    assert awq27.per_token == pytest.approx(3.8533 / 74.6667, abs=1e-3)
    assert awq27(3) == pytest.approx(1.44, abs=0.06) and awq27(15) == pytest.approx(2.03, abs=0.06)
    assert awq27(7) == pytest.approx(1.50, abs=0.1)


def test_curve_interpolates_in_log_bytes_and_holds_at_the_ends() -> None:
    c = STEP_COST_CURVE
    lo, hi = c.at(2_840_000_000), c.at(13_920_000_000)
    mid = c.at(int((2_840_000_000 * 13_920_000_000) ** 0.5))  # halfway in log(bytes)
    assert mid(15) == pytest.approx((lo(15) + hi(15)) / 2, abs=2e-3)
    assert hi(15) < c.at(8_000_000_000)(15) < lo(15)
    top = c.at(19_547_547_104)
    assert c.at(60_000_000_000) == top  # a 27B in bf16: the largest measured size, no extrapolation
    assert c.at(None) == top
    assert "held at the largest measured size" in c.describe(60_000_000_000)


def test_load_curve_reads_a_measured_file(tmp_path, monkeypatch) -> None:
    curve = StepCostCurve(
        hardware="GPU X", engine="e", date="2027-01-01", commit="abc", method="dflash", note="n",
        points=[CurvePoint(label="a", weight_bytes=10**9, k=4, cost=1.2),
                CurvePoint(label="a", weight_bytes=10**9, k=8, cost=1.4)],
    )  # fmt: skip
    path = tmp_path / "curve.json"
    path.write_text('{"curve": ' + curve.model_dump_json() + "}")
    monkeypatch.setenv("SPECQ_STEP_COST_CURVE", str(path))
    got = load_curve()
    assert got.hardware == "GPU X" and got.at(5 * 10**9)(8) == pytest.approx(1.4)
    monkeypatch.setenv("SPECQ_STEP_COST_CURVE", str(tmp_path / "missing.json"))
    from specq.pipeline.errors import InputError

    with pytest.raises(InputError, match="not a readable step-cost curve"):
        load_curve()
