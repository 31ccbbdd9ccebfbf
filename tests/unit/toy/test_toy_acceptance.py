"""The acceptance replay (no torch): speculative decoding over precomputed draft/target matches."""

from __future__ import annotations

import pytest

from specq.pipeline.toy.acceptance import replay


def test_all_matching_accepts_every_draft_token() -> None:
    row = [True] * 20
    a = replay([row], k=4, horizon=10)
    # steps at t = 0, 5: each accepts 4 and emits 5 tokens
    assert a.steps == 2 and a.per_position == [1.0] * 4
    assert a.mean_accepted == 4 and a.acceptance_rate == 1 and a.tokens_per_step == 5


def test_no_match_emits_one_token_per_step() -> None:
    a = replay([[False] * 12], k=3, horizon=6)
    assert a.steps == 6 and a.mean_accepted == 0 and a.tokens_per_step == 1


def test_mixed_row_by_hand() -> None:
    row = [True, True, False, True, False, False, True, True, True, True]
    # k=2, horizon 6: t=0 accepts 2 (t->3); t=3 accepts 1 (t->5); t=5 accepts 0 (t->6)
    a = replay([row], k=2, horizon=6)
    assert a.steps == 3
    assert a.per_position == pytest.approx([2 / 3, 1 / 3], abs=1e-6)
    assert a.tokens_per_step == pytest.approx(2.0, abs=1e-6)
    assert a.acceptance_rate == pytest.approx(0.5, abs=1e-6)
