"""Draft/target compatibility as `specq convert` judges it: what kind of drafter a checkpoint is, which
LMDeploy speculative method that means, and whether it fits the target (DFlash: `num_target_layers`,
`target_layer_ids` in range and never the last layer, `block_size` ≥ K + 1, hidden size and vocabulary;
EAGLE/EAGLE-3: hidden size and vocabulary; a plain model: the same vocabulary, embedded engine only).

`check_draft_pair` implements the checks the serve stage names `check_draft`; it lives here until the serve
branch provides `specq.pipeline.serve.compat.check_draft`, when one of the two should call the other."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from specq.pipeline.checkpoint import Checkpoint

from .verdict import DraftReport

MAX_DRAFT_TOKENS = 15  # LMDeploy's --speculative-num-draft-tokens range used across specq (1..15)
METHOD_OF_KIND = {"dflash": "dflash", "eagle3": "eagle3", "eagle": "eagle", "mtp": "qwen3_5_mtp"}


def target_has_mtp(target: Checkpoint) -> bool:
    """Qwen3.5 checkpoints carry their own MTP head (`mtp_num_hidden_layers` > 0): `qwen3_5_mtp` needs no
    draft checkpoint."""
    tc = target.text_config
    return int(tc.get("mtp_num_hidden_layers") or 0) > 0 or any(
        n.startswith("mtp.") for n in _tensor_names(target)
    )


def _tensor_names(ckpt: Checkpoint) -> list[str]:
    try:
        return list(ckpt.tensors)
    except Exception:  # no safetensors: nothing to learn from names
        return []


def max_draft_tokens(draft: Checkpoint | None) -> int:
    if draft is not None and draft.draft_kind == "dflash":
        block = int((draft.config.get("dflash_config") or {}).get("block_size") or 0)
        if block > 1:
            return min(MAX_DRAFT_TOKENS, block - 1)
    return MAX_DRAFT_TOKENS


def _vocab(cfg: dict[str, Any]) -> int | None:
    v = cfg.get("vocab_size")
    return int(v) if v is not None else None


def _tokenizer_vocab(path: Path) -> dict[str, int] | None:
    f = path / "tokenizer.json"
    if not f.is_file():
        return None
    try:
        vocab = json.loads(f.read_text(encoding="utf-8")).get("model", {}).get("vocab")
    except (OSError, json.JSONDecodeError):
        return None
    return vocab if isinstance(vocab, dict) else None


def check_draft_pair(target: Checkpoint, draft: Checkpoint, draft_tokens: int | None) -> list[str]:
    """Problems that would make LMDeploy (or the embedded engine) reject the pair; empty when it fits."""
    problems: list[str] = []
    kind = draft.draft_kind
    tc, dc = target.text_config, draft.text_config
    t_layers = int(tc.get("num_hidden_layers") or 0)
    t_hidden, d_hidden = tc.get("hidden_size"), dc.get("hidden_size")
    t_vocab, d_vocab = _vocab(tc), _vocab(dc)
    if draft_tokens is not None and not 1 <= draft_tokens <= MAX_DRAFT_TOKENS:
        problems.append(f"--draft-tokens {draft_tokens} is outside 1..{MAX_DRAFT_TOKENS}")
    if kind == "unknown":
        problems.append(f"{draft.path}: not a recognised drafter (architectures {draft.architectures})")
        return problems
    if t_vocab is not None and d_vocab is not None and t_vocab != d_vocab:
        problems.append(f"vocabulary sizes differ: target {t_vocab}, draft {d_vocab}")
    if kind == "dflash":
        dfc = draft.config.get("dflash_config") or {}
        n_target = draft.config.get("num_target_layers")
        if n_target is not None and int(n_target) != t_layers:
            problems.append(f"DFlash num_target_layers {n_target} != the target's {t_layers} layers")
        ids = list(dfc.get("target_layer_ids") or [])
        if not ids:
            problems.append("DFlash dflash_config.target_layer_ids is missing or empty")
        elif any(not isinstance(i, int) or not 0 <= i < t_layers - 1 for i in ids):
            problems.append(
                f"DFlash target_layer_ids {ids} must lie in 0..{t_layers - 2} (the target has {t_layers}"
                " layers and its last layer cannot be used)"
            )
        elif any(b <= a for a, b in zip(ids, ids[1:], strict=False)):
            problems.append(f"DFlash target_layer_ids {ids} must be strictly increasing")
        block = dfc.get("block_size")
        if block is None:
            problems.append("DFlash dflash_config.block_size is missing")
        elif draft_tokens is not None and int(block) < draft_tokens + 1:
            problems.append(
                f"DFlash block_size {block} < draft tokens {draft_tokens} + 1; use --draft-tokens"
                f" {int(block) - 1} or fewer"
            )
        if t_hidden is not None and d_hidden is not None and t_hidden != d_hidden:
            problems.append(f"DFlash hidden_size {d_hidden} != the target's {t_hidden}")
    elif kind in ("eagle3", "eagle"):
        if t_hidden is not None and d_hidden is not None and t_hidden != d_hidden:
            problems.append(f"{kind.upper()} hidden_size {d_hidden} != the target's {t_hidden}")
    elif kind == "model":
        tv, dv = _tokenizer_vocab(target.path), _tokenizer_vocab(draft.path)
        if tv is not None and dv is not None and tv != dv:
            problems.append("the draft model's tokenizer differs from the target's (they must share it)")
    return problems


def draft_report(
    target: Checkpoint, draft: Checkpoint | None, draft_tokens: int | None
) -> DraftReport | None:
    if draft is None:
        if target_has_mtp(target):
            return DraftReport(kind="mtp", method="qwen3_5_mtp")
        return None
    kind = draft.draft_kind
    return DraftReport(
        path=str(draft.path),
        kind=kind,
        method=METHOD_OF_KIND.get(kind),
        dtype=draft.torch_dtype,
        problems=check_draft_pair(target, draft, draft_tokens),
    )
