"""Why a speculative run's greedy output leaves the baseline's: at the first differing token, the baseline's
top-2 logprob margin from its reference pass (the untimed request per prompt that asks for `logprobs` and
`top_logprobs: 2`). A logprob difference is a logit difference (the softmax normaliser cancels), so the
margin says how close the baseline's own choice was. Below `NEAR_TIE_MARGIN` the two tokens are a near-tie
that the verification step's different numerics (a batch of k + 1 positions through other kernels, bf16 or
fp16 rounding of every layer) can flip; at or above it the speculative engine chose a token the target did
not nearly prefer: a real mismatch. Without a logprob at that token the divergence is unexplained. When the
baseline's own trials disagree (a plain engine that is not deterministic) nothing is judged against it: the
verdict is `baseline-not-reproducible`, whatever the margin. docs/bench.md justifies the bound. Pure
Python: the lossless check (`analysis.lossless`) calls it."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ..report.models import RequestRecord, TokenScore

# One bf16 spacing for logits of magnitude 32-64 (two for 16-32): bf16 keeps 8 significant bits, so a logit
# z is stored to a multiple of 2^(floor(log2 |z|) - 7), and rounding both top logits moves their difference
# by up to one spacing before any difference in how the layers below were computed.
NEAR_TIE_MARGIN = 0.25

Verdict = Literal["near-tie", "mismatch", "unexplained", "baseline-not-reproducible"]


def top2_margin(score: TokenScore) -> float | None:
    """The chosen distribution's top-1 minus top-2 logprob (= logit difference); None with fewer than two
    alternatives."""
    if len(score.top) < 2:
        return None
    return float(score.top[0][1] - score.top[1][1])


def classify(margin: float | None, bound: float = NEAR_TIE_MARGIN) -> Verdict:
    if margin is None:
        return "unexplained"
    return "near-tie" if margin < bound else "mismatch"


@dataclass
class Divergence:
    """The first token where a run's output leaves the baseline's, and what the baseline's scores say."""

    position: int  # index in the compared unit (token, or char without a tokenizer)
    baseline_token: dict[str, Any] | None  # {id, text}; None where the baseline ended
    run_token: dict[str, Any] | None
    margin: float | None
    runner_up: bool | None  # the run took the baseline's second choice there
    verdict: Verdict
    why: str | None = None  # set when unexplained

    def as_dict(self) -> dict[str, Any]:
        return {
            "baseline_token": self.baseline_token,
            "run_token": self.run_token,
            "margin": None if self.margin is None else round(self.margin, 6),
            "runner_up": self.runner_up,
            "verdict": self.verdict,
            "why": self.why,
        }


def common_prefix(a: Sequence[object], b: Sequence[object]) -> int:
    """How many leading items `a` and `b` share (token ids, or characters)."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _reference_index(
    ref: RequestRecord,
    base_text: str,
    char: int,
    piece: Callable[[str], str] | None = None,
    decode: Callable[[Sequence[int]], str] | None = None,
) -> int | None:
    """The index of the reference token at character `char` of the baseline's output, when the reference's
    text agrees with the baseline's through `char`: the token whose string covers it when the token strings
    spell the text (as they are, or — LMDeploy's byte-level vocabulary entries — turned into text by the
    tokenizer's `piece`); else, from the reference's token ids and the tokenizer's `decode`, the first token
    after the last prefix that decodes to whole characters before `char` (a token that ends inside a UTF-8
    character spells nothing alone, so the divergent character starts there); else None."""
    if ref.output_text[: char + 1] != base_text[: char + 1]:
        return None
    scores = ref.scores or []
    texts = [s.token for s in scores]
    if "".join(texts) != ref.output_text and piece is not None:
        texts = [piece(t) for t in texts]
    if "".join(texts) == ref.output_text:
        end = 0
        for i, text in enumerate(texts):
            end += len(text)
            if end > char:
                return i
        return None
    ids = ref.token_ids or []
    if decode is None:
        return None
    want, before = base_text[: char + 1], base_text[:char]
    start = None
    for n in range(len(ids) + 1):
        text = decode(ids[:n])
        if text[: char + 1] == want:
            return start if start is not None and start < len(ids) else None
        if before.startswith(text):
            start = n
    return None


def explain(
    base: RequestRecord,
    run: RequestRecord,
    position: int,
    ids: bool,
    ref: RequestRecord | None,
    decode: Callable[[Sequence[int]], str] | None = None,
    bound: float = NEAR_TIE_MARGIN,
    piece: Callable[[str], str] | None = None,
) -> Divergence:
    """Explain the divergence at `position` of the compared sequences: the servers' token ids (`ids`), else
    re-tokenized text or characters (then the reference token is found by character offset). `decode`
    (ids → text) and `piece` (a vocabulary entry → text) come from the local tokenizer when there is one."""
    a, b = base.output_text, run.output_text
    if ids:
        sa, sb = base.token_ids or [], run.token_ids or []

        def token(seq: list[int], i: int) -> dict[str, Any] | None:
            if i >= len(seq):
                return None
            return {"id": seq[i], "text": decode([seq[i]]) if decode is not None else None}

        base_tok, run_tok = token(sa, position), token(sb, position)
    else:
        char = common_prefix(a, b)
        base_tok = {"id": None, "text": a[char : char + 12]} if char < len(a) else None
        run_tok = {"id": None, "text": b[char : char + 12]} if char < len(b) else None
    if ref is None or not ref.scores:
        why = "no reference pass" if ref is None else "the reference pass returned no logprobs"
        return Divergence(position, base_tok, run_tok, None, None, "unexplained", why)
    index: int | None
    if ids and ref.token_ids is not None and len(ref.scores) == len(ref.token_ids):
        sa = base.token_ids or []
        same = ref.token_ids[: position + 1] == sa[: position + 1] and position < len(sa)
        index = position if same else None
    else:
        index = _reference_index(ref, a, common_prefix(a, b), piece, decode)
    if index is None or index >= len(ref.scores):
        why = "the reference pass's output leaves the timed baseline's before this token"
        return Divergence(position, base_tok, run_tok, None, None, "unexplained", why)
    score = ref.scores[index]
    margin = top2_margin(score)
    if base_tok is not None and base_tok.get("text") is None:
        base_tok["text"] = score.token
    runner_up = None
    if len(score.top) >= 2 and run_tok is not None and run_tok.get("text") is not None:
        seconds = {score.top[1][0]} | ({piece(score.top[1][0])} if piece is not None else set())
        text = str(run_tok["text"])
        runner_up = text in seconds if ids else any(text.startswith(s) for s in seconds if s)
    short = None if margin is not None else "the reference pass returned fewer than 2 alternatives"
    return Divergence(position, base_tok, run_tok, margin, runner_up, classify(margin, bound), short)


def not_judged(d: Divergence, why: str) -> Divergence:
    """`d` left unjudged because the baseline is not reproducible; its margin and tokens stay recorded."""
    return dataclasses.replace(d, verdict="baseline-not-reproducible", why=why)


def summary(
    compared: int, equal: int, verdicts: Sequence[Divergence], baseline_reproducible: bool | None = None
) -> str:
    """'lossless: 14/16 equal, 2 near-ties (margin 0.03, 0.01), 0 mismatches' (+ unexplained when any);
    with a baseline that is not reproducible, 'lossless: not judged: …' instead."""
    if baseline_reproducible is False:
        if equal == compared:
            return f"lossless: {equal}/{compared} equal (though the baseline's own trials differ)"
        return (
            f"lossless: not judged, the baseline is not reproducible (its own trials differ); "
            f"{equal}/{compared} equal to its first trial"
        )
    ties = [d for d in verdicts if d.verdict == "near-tie"]
    real = [d for d in verdicts if d.verdict == "mismatch"]
    lost = [d for d in verdicts if d.verdict == "unexplained"]

    def margins(ds: list[Divergence]) -> str:
        return f" (margin {', '.join(f'{d.margin:.2f}' for d in ds)})" if ds else ""

    text = (
        f"lossless: {equal}/{compared} equal, {len(ties)} near-tie{'s' if len(ties) != 1 else ''}"
        f"{margins(ties)}, {len(real)} mismatch{'es' if len(real) != 1 else ''}{margins(real)}"
    )
    if lost:
        text += f", {len(lost)} unexplained ({lost[0].why})"
    return text
