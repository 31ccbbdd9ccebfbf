"""The speculative-decoding speedup model shared by `specq bench` (best-k recommendation) and
`specq draft eval` (offline prediction).

With `a[i]` the fraction of draft steps in which draft position i+1 was accepted (LMDeploy's
`num_accepted_tokens_per_pos / num_drafts`, monotone non-increasing), one draft+verify step with k draft
tokens yields `1 + sum(a[:k])` tokens on average (the accepted prefix plus the target's own token). If that
step costs `cost(k)` times an autoregressive step, the predicted speedup over plain decoding is
`(1 + sum(a[:k])) / cost(k)`. `cost(k) = fixed + per_token * k`, fitted from measured step times."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, Field


class StepCost(BaseModel):
    """Cost of one draft+verify step relative to one autoregressive step: fixed + per_token * k."""

    fixed: float = Field(1.0, gt=0, description="verify pass plus overheads, in AR steps")
    per_token: float = Field(0.05, ge=0, description="drafting and verifying one more token, in AR steps")

    def __call__(self, k: int) -> float:
        return self.fixed + self.per_token * k

    @classmethod
    def fit(cls, points: Sequence[tuple[int, float]]) -> StepCost:
        """Least-squares line through measured (k, relative step cost) points; one point fixes `fixed`."""
        pts = [(float(k), c) for k, c in points if k > 0 and c > 0]
        if not pts:
            return cls()
        if len({k for k, _ in pts}) == 1:
            k, c = pts[0]
            default = cls()
            return cls(fixed=max(c - default.per_token * k, 1e-6), per_token=default.per_token)
        n = len(pts)
        mk = sum(k for k, _ in pts) / n
        mc = sum(c for _, c in pts) / n
        slope = sum((k - mk) * (c - mc) for k, c in pts) / sum((k - mk) ** 2 for k, _ in pts)
        slope = max(slope, 0.0)
        return cls(fixed=max(mc - slope * mk, 1e-6), per_token=slope)


def expected_tokens_per_step(acceptance_by_position: Sequence[float], k: int) -> float:
    """Mean tokens produced per draft+verify step with k draft tokens (the mean acceptance length τ)."""
    rates = list(acceptance_by_position)[:k]
    rates += [0.0] * (k - len(rates))
    return 1.0 + sum(rates)


def predict_speedup(acceptance_by_position: Sequence[float], k: int, cost: StepCost) -> float:
    if k == 0:
        return 1.0
    return expected_tokens_per_step(acceptance_by_position, k) / cost(k)


def best_k(acceptance_by_position: Sequence[float], ks: Sequence[int], cost: StepCost) -> tuple[int, float]:
    """The draft-token count with the highest predicted speedup, and that speedup."""
    scored = [(predict_speedup(acceptance_by_position, k, cost), k) for k in ks if k > 0]
    if not scored:
        return 0, 1.0
    speed, k = max(scored)
    return k, speed
