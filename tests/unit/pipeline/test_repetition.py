"""Telling a loop from real text (`specq.pipeline.repetition`), on a real H200 output and on real code."""

from __future__ import annotations

from pathlib import Path

import pytest

from specq.pipeline.repetition import distinct_fraction, looping, partly_looping

LOOP = "#\n" * 64  # the Qwen3.5 toy's answer to every code-suite prompt on the H200 (2026-12-01)
CODE = Path(__file__).read_text()[:600]


def test_distinct_fraction_is_near_zero_for_a_loop_and_near_one_for_code():
    assert distinct_fraction(LOOP) == pytest.approx(2 / 121)
    assert (distinct_fraction(CODE) or 0) > 0.8
    assert distinct_fraction("short") is None  # under 2n characters: too short to judge


def test_the_median_output_decides():
    note = looping([LOOP, LOOP, CODE])
    assert note is not None and note.startswith("the outputs loop (median distinct 8-gram fraction 0.02")
    assert "e.g. '#\\n#\\n" in note
    # one loop among real answers is the model's business, not the benchmark's
    assert looping([LOOP, CODE, CODE]) is None
    assert looping([]) is None and looping(["ab"]) is None


def test_a_phrase_loop_counts_as_well():
    phrase = " 'day'," * 30  # a loop longer than the n-gram: still few distinct 8-grams
    assert (distinct_fraction(phrase) or 1) < 0.2 and looping([phrase]) is not None


def test_some_loops_among_real_text_are_counted_not_flagged():
    assert (
        partly_looping([LOOP, CODE, CODE])
        == "1/3 outputs loop (e.g. '#\\n#\\n#\\n#\\n#\\n#\\n#\\n#\\n#\\n#\\n#\\n#\\n')"
    )
    assert partly_looping([CODE, CODE]) is None
    assert partly_looping([LOOP, LOOP, CODE]) is None  # the median loops: `looping` says so instead
    assert partly_looping(["ab", LOOP[:10]]) is None  # too short to judge


def test_one_output_is_judged_by_the_same_floor():
    from specq.pipeline.repetition import is_loop

    assert is_loop("#\n" * 64) and not is_loop("def area(r):\n    return 3.14159 * r * r\n")
    assert not is_loop("#\n")  # too short to judge
