"""The quality figures `specq quantize` reports beside perplexity: top-1 agreement, and the group-size
refusal that names divisors which actually fit the model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specq.pipeline.checkpoint import Checkpoint
from specq.pipeline.errors import UsageError
from specq.pipeline.quantize import check_group_size


def test_top1_agreement_counts_positions_not_chunks() -> None:
    torch = pytest.importorskip("torch")
    from specq.pipeline.quantize.quality import top1_agreement

    ref = [torch.tensor([1, 2, 3, 4]), torch.tensor([5, 6])]
    assert top1_agreement(ref, [torch.tensor([1, 2, 3, 4]), torch.tensor([5, 6])]) == 1.0
    assert top1_agreement(ref, [torch.tensor([1, 0, 3, 0]), torch.tensor([0, 6])]) == pytest.approx(3 / 6)
    assert top1_agreement([], []) is None


def test_score_returns_perplexity_and_greedy_tokens() -> None:
    torch = pytest.importorskip("torch")
    from specq.pipeline.quantize.quality import score

    class Uniform(torch.nn.Module):  # equal logits over 8 tokens, but token 3 a little ahead
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(1))

        def forward(self, input_ids):
            logits = torch.zeros(*input_ids.shape, 8)
            logits[..., 3] = 1e-6
            return type("Out", (), {"logits": logits})()

    ppl, top = score(Uniform(), [[0, 1, 2, 5], [7]])  # the 1-token chunk has nothing to score
    assert ppl == pytest.approx(8.0, rel=1e-4)
    assert [t.tolist() for t in top] == [[3, 3, 3]]


def test_group_size_refusal_suggests_divisors_of_this_model(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 576, "intermediate_size": 1536}))
    with pytest.raises(UsageError) as e:
        check_group_size(Checkpoint(tmp_path), 128)
    assert "hidden_size 576" in str(e.value) and "such as 64, 32, 16" in str(e.value)
    check_group_size(Checkpoint(tmp_path), 64)  # fits
