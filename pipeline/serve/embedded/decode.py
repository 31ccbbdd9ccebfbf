"""The embedded engine's own greedy decode loop: plain decoding (one target forward per token) and
speculative decoding with a draft model (k draft forwards, one target forward over `[last, d1..dk]`, the
longest prefix of the drafts equal to the target's greedy tokens kept plus the target's own next token, both
KV caches cropped to what was kept) are the same loop, so what a sweep measures against its k = 0 baseline
is what speculation buys.

Why not transformers' `generate`: on a 2-core CPU its per-token host work (logits processors, stopping
criteria, cache bookkeeping) cost about 2 ms on the toy target (measured 2026-12-04, `benchmarks/
toy_step_cost.py`), twice a toy forward, and assisted generation runs a whole `generate` of the draft model
per step, paying that again for every draft token: a draft token cost about as much as a target step, so no
drafter could pay. This loop spends its host time on the forwards, as LMDeploy's engine does.

It serves what it reproduces exactly: greedy requests (temperature 0) without a repetition penalty or
logprobs, on a model whose generation config adds no logits processor (`eligible`); `min_new_tokens` masks
the end-of-sequence ids as transformers' `MinNewTokensLengthLogitsProcessor` does. Everything else goes to
`generate` as before. Imports torch; runs only inside the server child process."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

# generation_config fields that make transformers' generate add a logits processor or change what greedy
# picks (their defaults: off). A model whose config sets one is decoded by generate, not by this loop.
_PROCESSOR_FIELDS: dict[str, Any] = {
    "repetition_penalty": 1.0,
    "encoder_repetition_penalty": 1.0,
    "no_repeat_ngram_size": 0,
    "encoder_no_repeat_ngram_size": 0,
    "bad_words_ids": None,
    "suppress_tokens": None,
    "begin_suppress_tokens": None,
    "forced_bos_token_id": None,
    "forced_eos_token_id": None,
    "sequence_bias": None,
    "exponential_decay_length_penalty": None,
    "min_length": 0,
    "guidance_scale": None,
    "watermarking_config": None,
}


def eligible(model: Any) -> bool:
    """Whether greedy decoding of `model` by this loop picks what transformers' greedy `generate` picks: a
    decoder-only model whose generation config adds no logits processor."""
    gc = getattr(model, "generation_config", None)
    for field, off in _PROCESSOR_FIELDS.items():
        value = getattr(gc, field, None)
        if value is not None and value != off and value != []:
            return False
    return not getattr(model.config, "is_encoder_decoder", False)


def greedy_decode(
    target: Any,
    prompt_ids: Sequence[int],
    *,
    max_new_tokens: int,
    emit: Callable[[list[int]], None],
    draft: Any = None,
    draft_tokens: int = 0,
    min_new_tokens: int = 0,
    eos_ids: Sequence[int] = (),
    on_verification: Callable[[int, int], None] | None = None,
    cancelled: Callable[[], bool] = lambda: False,
) -> list[int]:
    """Decode greedily up to `max_new_tokens` tokens after `prompt_ids`, handing each step's new tokens to
    `emit` as they are decided (the first right after the prefill), and each verification step's (drafted,
    accepted) to `on_verification`. Stops after an end-of-sequence id (not before `min_new_tokens`), at
    `max_new_tokens`, or when `cancelled()`. With `draft` and `draft_tokens` > 0 each step drafts
    min(k, tokens left - 1) tokens. Returns the generated ids."""
    import torch

    eos = [int(e) for e in eos_ids]
    device = target.device
    generated: list[int] = []

    def pick(logits: Any, first: int) -> list[int]:
        """Greedy ids of logits rows [n, vocab]; row j is generated token number first + j."""
        masked = max(0, min(len(logits), min_new_tokens - first))
        if masked and eos:
            logits = logits.clone()
            logits[:masked, eos] = float("-inf")
        return [int(t) for t in logits.argmax(-1).tolist()]

    def take(new: list[int]) -> bool:
        """Append and emit `new` up to the first end-of-sequence id or the token limit; True when done."""
        done = False
        for i, t in enumerate(new):
            index = len(generated) + i
            if index + 1 >= max_new_tokens or (t in eos and index >= min_new_tokens):
                new, done = new[: i + 1], True
                break
        generated.extend(new)
        emit(new)
        return done

    k_max = draft_tokens if draft is not None else 0
    with torch.inference_mode():
        prompt = torch.tensor([list(prompt_ids)], device=device)
        out = target(input_ids=prompt, use_cache=True, logits_to_keep=1)
        cache = out.past_key_values
        context = [*prompt_ids, pick(out.logits[0, -1:], 0)[0]]  # the last token is not in `cache` yet
        if max_new_tokens <= 0 or take(context[-1:]):
            return generated
        d_cache, d_seen = None, 0  # the draft's cache and how many tokens of `context` it holds
        while not cancelled():
            k = min(k_max, max_new_tokens - len(generated) - 1)
            drafts: list[int] = []
            if k > 0:
                feed = context[d_seen:]
                for _ in range(k):
                    ids = torch.tensor([feed], device=device)
                    o = draft(input_ids=ids, past_key_values=d_cache, use_cache=True, logits_to_keep=1)
                    d_cache, d_seen = o.past_key_values, d_seen + len(feed)
                    feed = [int(o.logits[0, -1].argmax())]
                    drafts.append(feed[0])
            o = target(
                input_ids=torch.tensor([[context[-1], *drafts]], device=device), past_key_values=cache,
                use_cache=True,
            )  # fmt: skip
            greedy = pick(o.logits[0], len(generated))
            n = 0
            while n < k and drafts[n] == greedy[n]:
                n += 1
            if k > 0 and on_verification is not None:
                on_verification(k, n)
            keep = len(context) + n  # prompt, every token decided so far and the accepted drafts
            _crop(cache, keep)
            if d_cache is not None and d_seen > keep:
                _crop(d_cache, keep)
                d_seen = keep
            new = [*drafts[:n], greedy[n]]
            context += new
            if take(new):
                break
    return generated


def _crop(cache: Any, length: int) -> None:
    """Cut a KV cache back to its first `length` tokens."""
    extra = cache.get_seq_length() - length
    if extra > 0:
        cache.crop(-extra)
