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
