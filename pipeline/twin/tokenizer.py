"""A synthetic byte-level BPE tokenizer of exactly the model's vocabulary size, so a twin's embeddings and LM
head are real size and every id the model can emit decodes: the 256 byte symbols, then every two-byte pair,
then three-byte tokens (pair + byte) until the vocabulary is full, each with its merge. The special tokens
sit at the ids the config names (`eos_token_id`, `pad_token_id`, `bos_token_id`, Qwen3.5's vision
placeholders), ChatML's three at the end-of-text id and the two after it (Qwen's order), with a ChatML chat
template so an OpenAI-compatible server can format chats. Built in seconds, no training, no download."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..toy.tokenizer import CHAT_TEMPLATE, END_OF_TEXT, IM_END, IM_START

VISION_IDS = {
    "vision_start_token_id": "<|vision_start|>",
    "vision_end_token_id": "<|vision_end|>",
    "image_token_id": "<|image_pad|>",
    "video_token_id": "<|video_pad|>",
}


def _ids(value: Any) -> list[int]:
    if isinstance(value, int):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, int)]
    return []


def special_tokens(config: dict[str, Any], vocab_size: int) -> dict[int, str]:
    """id -> special token for every id the config names (both the top level and `text_config`)."""
    tc = dict(config.get("text_config") or {})
    scopes = [config, tc]
    out: dict[int, str] = {}
    for key, tok in VISION_IDS.items():
        for scope in scopes:
            for i in _ids(scope.get(key)):
                out[i] = tok
    named = sorted({i for s in scopes for k in ("pad_token_id", "eos_token_id") for i in _ids(s.get(k))})
    eot = named[0] if named else vocab_size - 3
    for offset, tok in enumerate((END_OF_TEXT, IM_START, IM_END)):
        i = eot + offset
        if i < vocab_size and i not in out:
            out[i] = tok
    for s in scopes:
        for k in ("bos_token_id", "eos_token_id", "pad_token_id"):
            for i in _ids(s.get(k)):
                out.setdefault(i, f"<|specq_special_{i}|>")
    bad = [i for i in out if not 0 <= i < vocab_size]
    if bad:
        from ..errors import InputError

        raise InputError(f"config.json names token id {bad[0]} outside the vocabulary of {vocab_size}")
    return out


def _regular(alphabet: list[str]) -> Iterator[tuple[str, tuple[str, str] | None]]:
    for a in alphabet:
        yield a, None
    for a in alphabet:
        for b in alphabet:
            yield a + b, (a, b)
    for a in alphabet:
        for b in alphabet:
            for c in alphabet:
                yield a + b + c, (a + b, c)


def build_tokenizer(config: dict[str, Any], vocab_size: int, max_length: int = 8192) -> Any:
    """A `PreTrainedTokenizerFast` whose `len()` is `vocab_size`."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = special_tokens(config, vocab_size)
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab: dict[str, int] = {}
    merges: list[tuple[str, str]] = []
    regular = _regular(alphabet)
    for i in range(vocab_size):
        if i in specials:
            vocab[specials[i]] = i
            continue
        token, merge = next(regular)
        vocab[token] = i
        if merge:
            merges.append(merge)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(
        [AddedToken(t, special=True, normalized=False) for t in sorted(set(specials.values()))]
    )
    tc = dict(config.get("text_config") or config)
    eos_ids = _ids(tc.get("eos_token_id")) or _ids(config.get("eos_token_id"))
    pad_ids = _ids(tc.get("pad_token_id")) or _ids(config.get("pad_token_id")) or eos_ids
    bos_ids = _ids(tc.get("bos_token_id")) or _ids(config.get("bos_token_id"))
    kwargs: dict[str, Any] = {}
    if eos_ids:
        kwargs["eos_token"] = specials[eos_ids[0]]
    if pad_ids:
        kwargs["pad_token"] = specials[pad_ids[0]]
    if bos_ids:
        kwargs["bos_token"] = specials[bos_ids[0]]
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, model_max_length=max_length, **kwargs)
    fast.chat_template = CHAT_TEMPLATE
    return fast


def write_tokenizer(config: dict[str, Any], vocab_size: int, out: Path) -> int:
    """Write the tokenizer files into `out`; returns its size (= `vocab_size`)."""
    fast = build_tokenizer(config, vocab_size)
    fast.save_pretrained(out)
    return len(fast)
