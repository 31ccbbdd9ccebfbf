"""`walk_tau`: tokens per verification step along the path a lossless engine takes through a greedy
sequence, from the accepted length of the block anchored at each generated position."""

from __future__ import annotations

import pytest

from specq.pipeline.draft.eval import walk_tau


def test_walk_jumps_past_what_each_step_accepted() -> None:
    # anchors 0..5: step 1 at 0 accepts 2 (+ bonus) → next anchor 3 accepts 0 → anchor 4 accepts 3,
    # capped at k = 2 → jumps to 7, past the end. 3 + 1 + 3 tokens in 3 steps.
    assert walk_tau([[2, 9, 9, 0, 3, 9]], 2) == pytest.approx(7 / 3)


def test_walk_visits_only_the_anchors_a_server_drafts_from() -> None:
    # Every anchor but the first accepts nothing. The mean over anchors would say τ = 1 + 7/8, but a server
    # that accepts 7 at the first anchor jumps past all of them: 8 tokens in one step.
    assert walk_tau([[7, 0, 0, 0, 0, 0, 0, 0]], 7) == 8.0
    assert walk_tau([[0] * 8], 7) == 1.0


def test_walk_pools_sequences_and_grows_with_k() -> None:
    seqs = [[3, 1, 0, 2, 2, 0], [1, 1, 1, 1]]
    taus = [walk_tau(seqs, k) for k in range(1, 5)]
    assert taus == sorted(taus) and taus[0] > 1.0
    assert walk_tau([], 3) == 1.0


def test_the_text_figure_leaves_out_the_sequences_whose_continuation_loops():
    from specq.pipeline.draft.eval import without_loops

    loop, code, short = (
        "#\n" * 64,
        "def area(r):\n    return 3.14159 * r * r\n\nclass Shape:\n    pass\n",
        "x",
    )
    lengths = [[7, 7, 7, 7], [0, 1, 0, 2], [3, 0, 0, 0]]
    kept, loops = without_loops(lengths, [loop, code, short])
    assert loops == 1 and kept == [[0, 1, 0, 2], [3, 0, 0, 0]]  # too short to judge counts as text
    assert walk_tau(kept, 7) < walk_tau(lengths, 7)
    with pytest.raises(ValueError):  # one text per sequence
        without_loops(lengths, [loop, code])
