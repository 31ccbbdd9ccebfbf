"""The drafter side of `specq convert`: what kind of drafter a checkpoint is, which LMDeploy speculative
method that means, whether it fits the target, and the largest draft-token count the pair allows.

The compatibility checks themselves are `engines.speculation.check_draft` (DFlash
`num_target_layers`, `target_layer_ids`, `block_size` ≥ K + 1, hidden size, vocabulary; EAGLE hidden size; a
plain draft model's tokenizer), so `specq convert` and `specq serve` give the same answers. One rule is added
here: a DFlash drafter must not read the target's last layer (transformers returns it post-norm,
LMDeploy uses it pre-norm)."""

from __future__ import annotations

from ..checkpoint import Checkpoint
from ..engines import ServerName
from ..engines.speculation import (
    KIND_TO_METHOD,
    MAX_DRAFT_TOKENS,
    check_draft,
    draft_tokens_limit,
    target_has_mtp,
)
from .verdict import DraftReport


def max_draft_tokens(draft: Checkpoint | None) -> int:
    if draft is not None and draft.draft_kind == "dflash":
        return draft_tokens_limit(draft.dflash_block_size or 0)
    return MAX_DRAFT_TOKENS


def pair_problems(
    target: Checkpoint, draft: Checkpoint | None, draft_tokens: int | None, engine: ServerName
) -> list[str]:
    """Why `draft` (None: the target's MTP head) cannot speculate for `target` on `engine`."""
    k = draft_tokens if draft_tokens is not None else 1  # without K, only K-independent checks bite
    if draft is None:
        return check_draft(target, None, "qwen3_5_mtp", k, engine)
    return check_draft(target, draft, None, k, engine)


def draft_report(
    target: Checkpoint, draft: Checkpoint | None, draft_tokens: int | None
) -> DraftReport | None:
    if draft is None:
        if target_has_mtp(target):
            return DraftReport(
                kind="mtp",
                method="qwen3_5_mtp",
                problems=pair_problems(target, None, draft_tokens, "lmdeploy"),
            )
        return None
    kind = draft.draft_kind
    engine: ServerName = "embedded" if kind == "model" else "lmdeploy"
    return DraftReport(
        path=str(draft.path),
        kind=kind,
        method=None if kind == "model" else KIND_TO_METHOD.get(kind),
        dtype=draft.torch_dtype,
        problems=pair_problems(target, draft, draft_tokens, engine),
    )
