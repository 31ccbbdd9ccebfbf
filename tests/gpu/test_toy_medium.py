"""The medium toy pair trains on the GPU in minutes and its draft is accepted often enough to pay off."""

from __future__ import annotations

import time

import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.slow]


def test_medium_pair_builds_on_gpu(tmp_path) -> None:
    from specq.pipeline.toy import ToyRequest, build_toy_pair, load_pair

    started = time.monotonic()
    pair = build_toy_pair(ToyRequest(size="medium", seed=0, cache_dir=str(tmp_path)))
    seconds = time.monotonic() - started
    report = pair.load_report()
    assert report.device == "cuda"
    assert 10_000_000 <= report.target.params <= 100_000_000
    assert seconds < 600, f"medium build took {seconds:.0f}s"
    assert report.target.heldout_perplexity < report.draft.heldout_perplexity
    assert report.acceptance_at(4).acceptance_rate >= 0.5, report.acceptance_at(4)
    tokenizer, target, draft = load_pair(pair)
    assert target.config.vocab_size == draft.config.vocab_size
