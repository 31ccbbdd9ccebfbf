"""Greedy acceptance of a draft against its target, measured offline the way speculative decoding
verifies drafts.

Definition. For each held-out prompt the target decodes `new_tokens` tokens greedily (plus `max_k` more, so
the last steps can draft a full k). Speculative decoding with k draft tokens is then replayed over that
continuation: at position t the draft proposes k tokens greedily; the accepted count n is the length of the
longest prefix of the proposal that equals the target's greedy continuation from t; the step emits n + 1
tokens (the accepted ones plus the target's own), so t advances by n + 1, until t reaches `new_tokens`.
Per-position acceptance a[i] is the fraction of steps in which draft position i+1 was accepted (LMDeploy's
`num_accepted_tokens_per_pos / num_drafts`); mean accepted per step is sum(a[:k]), the acceptance rate is
that over k, and tokens per step is `expected_tokens_per_step(a, k)` = 1 + sum(a[:k]).

Because the draft's i-th proposal only matters when all earlier ones matched the target, its context is
then exactly the target's continuation: one teacher-forced draft pass over prompt + continuation gives every
proposal that can be accepted."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from ..speedup import expected_tokens_per_step


class AcceptanceAtK(BaseModel):
    k: int
    steps: int
    mean_accepted: float  # draft tokens accepted per draft+verify step
    acceptance_rate: float  # mean_accepted / k
    tokens_per_step: float  # 1 + mean_accepted
    per_position: list[float]  # a[0..k-1]


def heldout_prompts(tokenizer: Any, texts: list[str], count: int, length: int) -> list[list[int]]:
    """`count` prompts of `length` tokens, each starting a third of the way into a held-out file (past the
    license header and docstring), taken from files in sorted order, skipping those that are too short."""
    prompts: list[list[int]] = []
    for text in texts:
        ids = tokenizer.backend_tokenizer.encode(text, add_special_tokens=False).ids
        if len(ids) < 3 * length:
            continue
        start = len(ids) // 3
        prompts.append(ids[start : start + length])
        if len(prompts) == count:
            break
    return prompts


def greedy_continuations(model: Any, prompts: list[list[int]], new_tokens: int, device: str = "cpu") -> Any:
    """The target's greedy continuation of each prompt (all prompts have the same length); ignores EOS so
    every continuation has exactly `new_tokens` tokens."""
    import torch

    ids = torch.tensor(prompts, dtype=torch.long, device=device)
    model.eval()
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True)
        past = out.past_key_values
        nxt = out.logits[:, -1].argmax(-1, keepdim=True)
        generated = [nxt]
        for _ in range(new_tokens - 1):
            out = model(input_ids=nxt, past_key_values=past, use_cache=True)
            past = out.past_key_values
            nxt = out.logits[:, -1].argmax(-1, keepdim=True)
            generated.append(nxt)
    return torch.cat(generated, dim=1).cpu()


def draft_matches(draft: Any, prompts: list[list[int]], continuation: Any, device: str = "cpu") -> Any:
    """Boolean [prompts, new_tokens]: does the draft's greedy token at continuation position t equal the
    target's, given the prompt and the target's continuation before t."""
    import torch

    prompt = torch.tensor(prompts, dtype=torch.long)
    full = torch.cat([prompt, continuation], dim=1).to(device)
    with torch.no_grad():
        logits = draft(input_ids=full[:, :-1]).logits
    p = prompt.size(1)
    guesses = logits[:, p - 1 :].argmax(-1).cpu()
    return guesses == continuation


def replay(matches: list[list[bool]], k: int, horizon: int) -> AcceptanceAtK:
    """Replay speculative decoding with k draft tokens over each row of matches (see module docstring)."""
    return replay_chain([[row[t : t + k] for t in range(len(row))] for row in matches], k, horizon)


def replay_chain(rows: list[list[list[bool]]], k: int, horizon: int) -> AcceptanceAtK:
    """The same replay when a proposal depends on its depth in the chain (an MTP head drafting from its own
    outputs): `rows[r][t][d]` says whether the (d+1)-th draft token proposed at position t matches."""
    accepted_at = [0] * k
    steps = 0
    for row in rows:
        t = 0
        while t < horizon:
            n = 0
            hits = row[t] if t < len(row) else []
            while n < k and n < len(hits) and hits[n]:
                n += 1
            for i in range(n):
                accepted_at[i] += 1
            steps += 1
            t += n + 1
    rates = [a / steps if steps else 0.0 for a in accepted_at]
    mean = sum(rates)
    return AcceptanceAtK(
        k=k,
        steps=steps,
        mean_accepted=round(mean, 6),
        acceptance_rate=round(mean / k, 6),
        tokens_per_step=round(expected_tokens_per_step(rates, k), 6),
        per_position=[round(r, 6) for r in rates],
    )


def measure_acceptance(
    target: Any,
    draft: Any,
    prompts: list[list[int]],
    *,
    new_tokens: int,
    max_k: int = 6,
    device: str = "cpu",
) -> list[AcceptanceAtK]:
    """Acceptance of `draft` against `target` for k = 1..max_k (models already loaded, in eval mode)."""
    continuation = greedy_continuations(target, prompts, new_tokens + max_k, device)
    matches = draft_matches(draft, prompts, continuation, device).tolist()
    return [replay(matches, k, new_tokens) for k in range(1, max_k + 1)]
