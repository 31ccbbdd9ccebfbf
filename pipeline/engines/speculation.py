"""Speculative decoding's rules, for `specq serve` (and `--dry-run`), `specq convert` and the config: which
methods each server runs, the draft-token range (defined here only), and every reason a drafter cannot
speculate for a target — what would otherwise fail minutes into a GPU launch, or silently produce garbage.
Reads config.json and tokenizer files only (no torch). Each problem is one line; callers raise them as
exit-2 errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..checkpoint import Checkpoint

MTP_METHODS = ("qwen3_5_mtp", "deepseek_mtp", "hy3_mtp")
DRAFT_METHODS = ("dflash", "eagle3", "eagle", "draft")  # methods that need a separate draft checkpoint
LMDEPLOY_METHODS = ("dflash", "eagle3", "eagle", *MTP_METHODS)
EMBEDDED_METHODS = ("draft",)
MAX_DRAFT_TOKENS = 15  # draft tokens per step: 0 (no speculation) .. 15, as LMDeploy 0.18 allows


def target_has_mtp(target: Checkpoint) -> bool:
    """Qwen3.5 checkpoints carry their own MTP head (`mtp_num_hidden_layers` > 0): `qwen3_5_mtp` needs no
    draft checkpoint."""
    return int(target.text_config.get("mtp_num_hidden_layers") or 0) > 0


def draft_tokens_limit(block_size: int | None) -> int:
    """The largest draft-token count a method allows: a DFlash drafter's `block_size` − 1 (its block holds
    the last accepted token and the drafts), else MAX_DRAFT_TOKENS."""
    if block_size is not None and block_size > 1:
        return min(MAX_DRAFT_TOKENS, block_size - 1)
    return MAX_DRAFT_TOKENS


# What each drafter kind (Checkpoint.draft_kind) is served with.
KIND_TO_METHOD = {"dflash": "dflash", "eagle3": "eagle3", "eagle": "eagle", "model": "draft"}


def _layers(ckpt: Checkpoint) -> int | None:
    n = ckpt.text_config.get("num_hidden_layers")
    return int(n) if n is not None else None


def _hidden(ckpt: Checkpoint) -> int | None:
    h = ckpt.text_config.get("hidden_size")
    return int(h) if h is not None else None


def _vocab(ckpt: Checkpoint) -> int | None:
    v = ckpt.text_config.get("vocab_size")
    return int(v) if v is not None else None


def tokenizer_vocab(path: Path) -> dict[str, int] | None:
    """The token → id map of a checkpoint's tokenizer (tokenizer.json, else vocab.json), or None."""
    tj = path / "tokenizer.json"
    try:
        if tj.is_file():
            data: dict[str, Any] = json.loads(tj.read_text(encoding="utf-8"))
            vocab = dict((data.get("model") or {}).get("vocab") or {})
            if isinstance(vocab, dict) and vocab:
                for t in data.get("added_tokens") or []:
                    vocab[t["content"]] = t["id"]
                return vocab
        vj = path / "vocab.json"
        if vj.is_file():
            return dict(json.loads(vj.read_text(encoding="utf-8")))
    except (OSError, json.JSONDecodeError, KeyError, TypeError):
        return None
    return None


def check_draft(
    target: Checkpoint,
    draft: Checkpoint | None,
    method: str | None,
    draft_tokens: int,
    engine: str,
) -> list[str]:
    """Every reason `draft` cannot speculate for `target` with `method` and K = `draft_tokens` on `engine`
    ("lmdeploy" or "embedded"). An empty list means compatible. `method` None with K = 0 is plain decoding."""
    problems: list[str] = []
    if method is None and draft is not None:
        method = KIND_TO_METHOD.get(draft.draft_kind)
        if method is None:
            return [f"{draft.path}: cannot tell what kind of drafter this is (architectures "
                    f"{draft.architectures}); pass --method"]  # fmt: skip
    if method is None:
        if draft_tokens > 0:
            problems.append(
                f"{draft_tokens} draft tokens asked for but no draft model and no method; pass --draft-model "
                "DRAFT, or --method qwen3_5_mtp / deepseek_mtp for a target with its own MTP head"
            )
        return problems

    problems += _method_problems(method, draft_tokens, engine)
    if method in DRAFT_METHODS and draft is None:
        problems.append(f"method '{method}' needs a draft model: pass --draft-model DRAFT")
        return problems
    if method == "qwen3_5_mtp" and engine == "lmdeploy":
        from .qwen35 import failed, mtp_findings  # the target's own MTP tensors, as LMDeploy loads them

        problems += failed(mtp_findings(target))
    if method in MTP_METHODS or draft is None:
        return problems

    kind = draft.draft_kind
    expected = {"dflash": "dflash", "eagle3": "eagle3", "eagle": "eagle", "draft": "model"}[method]
    if kind != expected:
        problems.append(f"{draft.path} is a '{kind}' checkpoint, not a {method} drafter; check --method")
        return problems

    t_vocab, d_vocab = _vocab(target), _vocab(draft)
    if t_vocab is not None and d_vocab is not None and t_vocab != d_vocab:
        problems.append(f"vocabulary sizes differ: target {t_vocab}, draft {d_vocab}")
    if method == "dflash" and engine == "lmdeploy":
        problems += _dflash_target_problems(target)
    if engine == "lmdeploy" and draft.quantization is not None:
        from .pytorch import quantized_drafter_problems  # a 4-bit drafter: its layout and run dtype

        problems += quantized_drafter_problems(target, draft)
    return problems + _PAIR_CHECKS[method](target, draft, draft_tokens)


def _dflash_target_problems(target: Checkpoint) -> list[str]:
    """LMDeploy 0.18's DFlash is `qwen3_dflash`: specq serves it beside Qwen3-family targets only (a Llama
    target's drafter, which `specq draft train` also writes, is for offline evaluation)."""
    family = target.model_type
    if family.startswith("qwen3"):
        return []
    arch = (target.architectures or [family or "unknown"])[0]
    return [
        f"{target.path}: a {arch} target; specq serves DFlash drafters on LMDeploy 0.18 only beside"
        " Qwen3-family targets (qwen3_dflash); score this drafter offline with specq draft eval TARGET DRAFT"
    ]


def _method_problems(method: str, draft_tokens: int, engine: str) -> list[str]:
    """The draft-token range, and whether `engine` runs `method` at all."""
    problems: list[str] = []
    if not 1 <= draft_tokens <= MAX_DRAFT_TOKENS:
        problems.append(
            f"--draft-tokens must be in 1..{MAX_DRAFT_TOKENS} for speculative decoding, got {draft_tokens}"
        )
    if engine == "lmdeploy" and method not in LMDEPLOY_METHODS:
        problems.append(
            f"LMDeploy 0.18 has no '{method}' method (it cannot use an arbitrary small LLM as a draft); use "
            "--engine embedded for a plain draft model, or a DFlash/EAGLE-3 drafter or an MTP method"
        )
    if engine == "embedded" and method not in EMBEDDED_METHODS:
        problems.append(
            f"the embedded engine speculates only with a plain draft model (method 'draft'), not '{method}'; "
            "use --engine lmdeploy --backend pytorch"
        )
    return problems


def _dflash_problems(target: Checkpoint, draft: Checkpoint, draft_tokens: int) -> list[str]:
    """A DFlash drafter reads the target's hidden states at fixed layers and drafts a block at a time."""
    problems: list[str] = []
    t_layers, t_hidden = _layers(target), _hidden(target)
    cfg = draft.config
    n_target = cfg.get("num_target_layers")
    if n_target is not None and t_layers is not None and int(n_target) != t_layers:
        problems.append(
            f"DFlash drafter was trained for a {n_target}-layer target, but the target has {t_layers} layers"
        )
    dcfg = cfg.get("dflash_config") or {}
    ids = dcfg.get("target_layer_ids")
    if ids is not None and t_layers is not None:
        bad = [i for i in ids if not 0 <= int(i) < t_layers]
        if bad:
            problems.append(f"DFlash target_layer_ids {bad} out of range for a {t_layers}-layer target")
        elif list(ids) != sorted(set(ids)):
            problems.append(f"DFlash target_layer_ids {ids} must be strictly increasing")
        elif t_layers - 1 in [int(i) for i in ids]:
            # transformers returns the last layer post-norm, LMDeploy feeds it pre-norm: never use it
            problems.append(
                f"DFlash target_layer_ids {ids} include the target's last layer ({t_layers - 1}),"
                " which LMDeploy feeds pre-norm and the drafter was trained on post-norm"
            )
    block = draft.dflash_block_size
    if block is not None and draft_tokens + 1 > block:
        problems.append(
            f"DFlash block_size {block} allows at most {block - 1} draft tokens, asked for {draft_tokens}"
        )
    d_hidden = cfg.get("target_hidden_size") or _hidden(draft)
    if t_hidden is not None and d_hidden is not None and int(d_hidden) != t_hidden:
        problems.append(f"DFlash drafter expects hidden size {d_hidden}, the target has {t_hidden}")
    return problems


def _eagle_problems(target: Checkpoint, draft: Checkpoint, draft_tokens: int) -> list[str]:
    """An EAGLE/EAGLE-3 drafter reads the target's hidden states: the sizes must match."""
    t_hidden = _hidden(target)
    d_hidden = draft.config.get("target_hidden_size") or _hidden(draft)
    if t_hidden is not None and d_hidden is not None and int(d_hidden) != t_hidden:
        return [f"EAGLE drafter hidden size {d_hidden} does not match the target's {t_hidden}"]
    return []


# Layer types whose attention is a KV cache that a verifier can cut back to the accepted prefix.
_KV_LAYER_TYPES = frozenset({"full_attention", "sliding_attention", "chunked_attention"})


def recurrent_layer_types(target: Checkpoint) -> list[str]:
    """The target's layer types that keep a recurrent state (Qwen3.5's `linear_attention`: Gated DeltaNet)."""
    types = target.text_config.get("layer_types")
    if not isinstance(types, list):
        return []
    return sorted({str(t) for t in types} - _KV_LAYER_TYPES)


def _draft_model_problems(target: Checkpoint, draft: Checkpoint, draft_tokens: int) -> list[str]:
    """A plain draft model proposes token ids: it must share the target's tokenizer; and the embedded
    engine verifies with transformers' assisted generation, which refuses stateful targets."""
    recurrent = recurrent_layer_types(target)
    if recurrent:
        # transformers 5.17 GenerationMixin._validate_assistant: "assisted generation is not supported with
        # stateful models, such as Qwen3_5ForCausalLM" (a recurrent state cannot drop rejected tokens).
        return [
            f"{target.path} has {'/'.join(recurrent)} layers with a recurrent state, and transformers' "
            "assisted generation (the embedded engine's speculation) refuses stateful models; serve it "
            "without --draft-model, or speculate with --engine lmdeploy --backend pytorch (--method "
            "qwen3_5_mtp, or a DFlash drafter)"
        ]
    tv, dv = tokenizer_vocab(target.path), tokenizer_vocab(draft.path)
    if tv is None or dv is None:
        missing = target.path if tv is None else draft.path
        return [f"{missing}: no tokenizer.json/vocab.json to check that draft and target share a tokenizer"]
    if tv != dv:
        n_diff = len(set(tv.items()) ^ set(dv.items()))
        return [
            f"draft and target tokenizers differ ({n_diff} token/id pairs differ); "
            "a plain draft model must share the target's tokenizer"
        ]
    return []


# The checks of a drafter against its target, by method (after the kind and vocabulary size match).
_PAIR_CHECKS = {
    "dflash": _dflash_problems,
    "eagle3": _eagle_problems,
    "eagle": _eagle_problems,
    "draft": _draft_model_problems,
}
