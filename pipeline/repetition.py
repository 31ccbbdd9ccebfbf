"""Whether generated text loops. A drafter predicts a loop almost perfectly, so acceptance, τ and speedup
measured on looping outputs overstate what real text gets: a Qwen3.5 toy that answered every code prompt
with `'#\\n#\\n…'` was accepted 100 % on the H200 (2026-12-01). Shared by `specq bench` (the baseline's
outputs) and `specq draft eval` (the target's greedy continuations)."""

from __future__ import annotations

from collections.abc import Sequence

N = 8  # characters per n-gram
FLOOR = 0.2  # outputs whose median has fewer distinct n-grams than this loop


def distinct_fraction(text: str, n: int = N) -> float | None:
    """Distinct character n-grams over all n-grams of one output: near 1 for prose or code, near 0 for a loop
    (`'#\\n' * 64` has 2 distinct 8-grams in 121). None for an output shorter than 2n characters."""
    if len(text) < 2 * n:
        return None
    grams = [text[i : i + n] for i in range(len(text) - n + 1)]
    return len(set(grams)) / len(grams)


def is_loop(text: str, floor: float = FLOOR) -> bool:
    """Whether one output loops: its distinct n-gram fraction is below `floor` (one too short to judge
    does not)."""
    f = distinct_fraction(text)
    return f is not None and f < floor


def _scored(texts: Sequence[str]) -> list[tuple[float, str]]:
    """(distinct fraction, text) of every output long enough to judge, most repetitive first."""
    return sorted(((f, t) for t in texts if (f := distinct_fraction(t)) is not None), key=lambda x: x[0])


def _median_loops(scored: list[tuple[float, str]], floor: float) -> bool:
    return bool(scored) and scored[len(scored) // 2][0] < floor


def looping(texts: Sequence[str], floor: float = FLOOR) -> str | None:
    """'the outputs loop (median …, e.g. …)' when the median output's distinct n-gram fraction is below
    `floor`; None otherwise, or when no output is long enough to judge. The median decides: one loop among
    real answers is the model's business."""
    scored = _scored(texts)
    if not _median_loops(scored, floor):
        return None
    median, worst = scored[len(scored) // 2][0], scored[0][1]
    return f"the outputs loop (median distinct {N}-gram fraction {median:.2f}, e.g. {worst[:24]!r})"


def partly_looping(texts: Sequence[str], floor: float = FLOOR) -> str | None:
    """'3/8 outputs loop (e.g. …)' when some outputs loop but not the median one (which `looping` reports);
    None otherwise. Those outputs are accepted almost perfectly, so they lift τ above what the rest gets."""
    scored = _scored(texts)
    loops = [t for f, t in scored if f < floor]
    if not loops or _median_loops(scored, floor):
        return None
    return f"{len(loops)}/{len(scored)} outputs loop (e.g. {loops[0][:24]!r})"
