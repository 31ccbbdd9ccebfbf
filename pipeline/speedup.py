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
    def fit(cls, points: Sequence[tuple[int, float]], prior: StepCost | None = None) -> StepCost:
        """Least-squares line through measured (k, relative step cost) points. No point: `prior` (default:
        the model's defaults); points at one k fix `fixed` through their mean, with `prior`'s slope."""
        pts = [(float(k), c) for k, c in points if k > 0 and c > 0]
        default = prior or cls()
        if not pts:
            return default
        if len({k for k, _ in pts}) == 1:
            k = pts[0][0]
            c = sum(c for _, c in pts) / len(pts)
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


# ---- the measured step-cost curve -------------------------------------------------------------------------


class CurvePoint(BaseModel):
    """One measured speculative step cost (spec step time / plain step time) of a target of a given size."""

    label: str
    params: int | None = None
    weight_bytes: int = Field(gt=0, description="bytes of weights the target reads per decode step")
    k: int = Field(gt=0)
    cost: float = Field(gt=0)


class StepCostCurve(BaseModel):
    """Speculative step cost against target size, measured on one GPU with one engine: what a speculative
    step costs where no measurement of the user's own model exists yet (`draft eval`'s prediction) and the
    slope in k where `bench` measured one k only."""

    hardware: str
    engine: str
    date: str
    commit: str
    method: str
    note: str
    points: list[CurvePoint]

    def sizes(self) -> list[int]:
        return sorted({p.weight_bytes for p in self.points})

    def _fit_at(self, weight_bytes: int) -> StepCost:
        return StepCost.fit([(p.k, p.cost) for p in self.points if p.weight_bytes == weight_bytes])

    def at(self, weight_bytes: int | None) -> StepCost:
        """The step cost at `weight_bytes`: each measured size's line fixed + per_token·k, interpolated
        linearly in log(bytes) between the two nearest sizes, held at the ends (no extrapolation). None (the
        size is unknown): the largest measured size, the one closest to the models specq is for."""
        import math

        sizes = self.sizes()
        if weight_bytes is None or weight_bytes >= sizes[-1]:
            return self._fit_at(sizes[-1])
        if weight_bytes <= sizes[0]:
            return self._fit_at(sizes[0])
        hi = next(s for s in sizes if s >= weight_bytes)
        lo = max(s for s in sizes if s < hi)
        a, b = self._fit_at(lo), self._fit_at(hi)
        t = (math.log(weight_bytes) - math.log(lo)) / (math.log(hi) - math.log(lo))
        return StepCost(
            fixed=round(a.fixed + t * (b.fixed - a.fixed), 4),
            per_token=round(a.per_token + t * (b.per_token - a.per_token), 4),
        )

    def describe(self, weight_bytes: int | None) -> str:
        size = "size unknown" if weight_bytes is None else f"{weight_bytes / 1e9:.2f} GB of weights"
        lo, hi = self.sizes()[0], self.sizes()[-1]
        where = ""
        if weight_bytes is not None and weight_bytes > hi:
            where = f", held at the largest measured size {hi / 1e9:.1f} GB"
        elif weight_bytes is not None and weight_bytes < lo:
            where = ", held at the smallest measured size"
        return (
            f"step-cost curve at {size}{where} ({self.hardware}, {self.engine}, {self.date} at {self.commit})"
        )


# Measured on one NVIDIA H200 on 2026-12-02 with `specq bench` (4 requests × 128 tokens, LMDeploy 0.18's
# PyTorch engine, CUDA graphs) against random-weight twins at real shapes with a random 5-layer DFlash
# drafter, so τ = 1 and a speculative run's decode rate isolates the step cost:
# - at commit 7b45bbd, each server alone on the GPU: bf16 Qwen3 layers with the toy tokenizer (baseline
#   decode 208.2 tok/s at 6.96 B, 130.5 / 123.2 at k = 7 / 15; 319.8, 162.0 / 129.3 at 1.42 B); the toy
#   point is the small AWQ toy with a trained drafter at k = 15 (docs/verification.md, the launch options);
# - at commit 3acbfe7 (`benchmarks/twin_gpu.py`, 20:09-20:20 UTC): the Qwen3.5-27B-AWQ twin (248,320-token
#   vocabulary, the compatibility layer, bf16 activations), its servers started together with four others
#   and measured one at a time: plain 45.6 tok/s, k = 3 / 7 / 15 at 39.9 / 38.1 / 33.5 tok/s, the GPU 94-96 %
#   busy. The same wave's 1.42 B servers gave 2.65 / 2.58 at k = 7 / 15 against the alone figures' 1.97 /
#   2.48 (GPU 34-54 % busy, so the idle servers' host load may count there): those stay out of the curve
#   until a run measures them alone (docs/performance.md).
# The 27B-AWQ point was measured again on 2026-12-05 18:32-18:40 UTC with specq's W4A16 kernel as it stands
# (one-launch split-K, register caps, the H200 table of b5bf60f), each `specq bench` alone on the GPU (8
# prompts x 128 tokens, 2 trials, steady): DFlash k = 7 with the 4-bit drafter at 81.2 tok/s over a plain
# 121.8 (τ 1.00): 1.50. One DFlash k, so the slope in k is the model's default. The same hour's
# `qwen3_5_mtp` k = 3 costs 1.52 (80.2 over 121.7), another method, so not a point of this curve. Before:
# 1.58 at k = 7 with the bf16 drafter over 119.7 tok/s (8798806, two idle servers beside it), 1.40 / 1.66 at
# k = 7 / 15 over 80.5 (the kernel's first version, 54974bb) and 1.14 / 1.20 / 1.36 at k = 3 / 7 / 15 over
# 45.6 (LMDeploy's Triton kernel, 3acbfe7): the faster the plain step, the more the speculative step's other
# work shows. On 2026-12-06 02:44-02:55 UTC (the same H200 kind, the kernel and table of dfa5d7a,
# `benchmarks/gpu.py w4a16-e2e`: servers started in waves, each benched alone with `specq bench --url`, 4
# prompts x 128 tokens) DFlash with the bf16 drafter cost 1.44 at k = 3 (87.7 tok/s) and 2.03 at k = 15
# (62.0), both over the plain 125.9 of the wave before on the same machine: the 27B's points at k = 3 and 15,
# so its line has a measured slope (1.23 + 0.052 k through the three; the 4-bit drafter of the k = 7 point
# cost 0.96 of the bf16 one's on 2026-12-05). `qwen3_5_mtp` k = 1 / 2 in the same run: 1.23 / 1.39.
STEP_COST_CURVE = StepCostCurve(
    hardware="NVIDIA H200",
    engine="LMDeploy 0.18 PyTorch engine, CUDA graphs",
    date="2026-12-02, 2026-12-05, 2026-12-06",
    commit="7b45bbd, b5bf60f, dfa5d7a",
    method="dflash",
    note="random-weight twins at real shapes and a random 5-layer DFlash drafter (τ = 1): Qwen3 layers in "
    "bf16 (7b45bbd), the Qwen3.5-27B-AWQ twin with specq's W4A16 kernel and a 4-bit drafter at k = 7 "
    "(b5bf60f), a bf16 drafter at k = 3 and 15 (dfa5d7a); the "
    "toy point: the small AWQ toy at k = 15",
    points=[
        CurvePoint(label="toy (small, AWQ)", weight_bytes=4_000_000, k=15, cost=2.05),
        CurvePoint(
            label="Qwen3 1.42 B bf16", params=1_420_000_000, weight_bytes=2_840_000_000, k=7, cost=1.97
        ),
        CurvePoint(
            label="Qwen3 1.42 B bf16", params=1_420_000_000, weight_bytes=2_840_000_000, k=15, cost=2.48
        ),
        CurvePoint(
            label="Qwen3 6.96 B bf16", params=6_960_000_000, weight_bytes=13_920_000_000, k=7, cost=1.61
        ),
        CurvePoint(
            label="Qwen3 6.96 B bf16", params=6_960_000_000, weight_bytes=13_920_000_000, k=15, cost=1.69
        ),
        CurvePoint(
            label="Qwen3.5-27B AWQ twin, 4-bit drafter",
            params=27_781_427_952,
            weight_bytes=19_547_547_104,
            k=7,
            cost=1.50,
        ),
        CurvePoint(
            label="Qwen3.5-27B AWQ twin, bf16 drafter",
            params=27_781_427_952,
            weight_bytes=19_547_547_104,
            k=3,
            cost=1.44,
        ),
        CurvePoint(
            label="Qwen3.5-27B AWQ twin, bf16 drafter",
            params=27_781_427_952,
            weight_bytes=19_547_547_104,
            k=15,
            cost=2.03,
        ),
    ],
)


def load_curve(path: str | None = None) -> StepCostCurve:
    """The curve specq predicts with: `path` (a JSON file written by `benchmarks/scenarios/twin.py`, or the
    SPECQ_STEP_COST_CURVE environment variable naming one) when given, else the built-in `STEP_COST_CURVE`."""
    import json
    import os
    from pathlib import Path

    from .errors import InputError

    path = path or os.environ.get("SPECQ_STEP_COST_CURVE") or None
    if not path:
        return STEP_COST_CURVE
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        return StepCostCurve.model_validate(data.get("curve", data))
    except (OSError, ValueError, AttributeError) as e:
        raise InputError(
            f"{path}: not a readable step-cost curve ({type(e).__name__}); fix or unset it"
        ) from None
