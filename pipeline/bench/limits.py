"""Requests that cannot fit the model are refused before any is sent: every prompt's tokens plus
`--max-tokens` must fit the target's positions (`max_position_embeddings`). Without this, a 1 MB prompt is
sent as is and a server spends minutes (and gigabytes) on a request that can only fail."""

from __future__ import annotations

from pathlib import Path

from ..checkpoint import Checkpoint
from ..errors import InputError, SpecqError
from ..workload import Workload
from .client import TokenCounter

CHAT_TEMPLATE_MARGIN = 16  # role markers and the generation prompt a chat template adds per request


def max_positions(model_path: str | None) -> int | None:
    """The target's context length from its config.json, or None when unknown (no local model)."""
    if not model_path or not Path(model_path).is_dir():
        return None
    try:
        value = Checkpoint(model_path).text_config.get("max_position_embeddings")
    except SpecqError:
        return None
    return value if isinstance(value, int) and value > 0 else None


def check_prompt_lengths(
    workload: Workload, counter: TokenCounter | None, max_tokens: int, model_path: str | None, mode: str
) -> None:
    """Raise InputError (exit 2) naming the first prompt whose tokens + max_tokens exceed the positions.
    Without a tokenizer nothing is counted here (the embedded server still answers 400 per request)."""
    limit = max_positions(model_path)
    if limit is None:
        return
    if max_tokens >= limit:
        raise InputError(
            f"--max-tokens {max_tokens} leaves no room for a prompt in the model's {limit} positions"
        )
    if counter is None:
        return
    margin = CHAT_TEMPLATE_MARGIN if mode == "chat" else 0
    for p in workload.prompts:
        if mode == "completion":
            text = p.as_text()
        else:
            text = "\n".join(m.get("content", "") for m in p.as_messages())
        n = len(counter.encode(text))
        if n + margin + max_tokens > limit:
            raise InputError(
                f"prompt '{p.id}' has {n} tokens; with --max-tokens {max_tokens} that exceeds the"
                f" model's {limit} positions (max_position_embeddings); shorten it or lower --max-tokens"
            )
