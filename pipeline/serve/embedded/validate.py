"""The embedded server's request checks, done before any work: every field it reads has the type and range
the OpenAI API gives it (`max_tokens` ≥ 1, `temperature` in [0, 2], `top_p` in (0, 1], ...), so a bad
request gets HTTP 400 with OpenAI's error shape instead of a 500 or an error inside a 200 stream. A value
that is absent or null takes its default; a value that is present and wrong is refused, never replaced."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
SEED_RANGE = (-(2**63), 2**64 - 1)  # what torch.manual_seed accepts


class BadRequest(ValueError):
    """A request field that is missing, of the wrong type or out of range: its message names the field."""


@dataclass(frozen=True)
class Sampling:
    max_new_tokens: int
    temperature: float
    top_p: float
    top_k: int | None
    repetition_penalty: float
    min_new_tokens: int
    ignore_eos: bool
    seed: int | None
    stream: bool
    include_usage: bool


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and abs(v) != float("inf")


def _int(body: dict[str, Any], key: str, default: int | None, lo: int, hi: int | None = None) -> int | None:
    v = body.get(key)
    if v is None:
        return default
    if not _is_int(v) or v < lo or (hi is not None and v > hi):
        bound = f"an integer ≥ {lo}" if hi is None else f"an integer in [{lo}, {hi}]"
        raise BadRequest(f"'{key}' must be {bound}, not {v!r}"[:200])
    return int(v)


def _num(
    body: dict[str, Any], key: str, default: float, lo: float, hi: float, lo_open: bool = False
) -> float:
    v = body.get(key)
    if v is None:
        return default
    if not _is_num(v) or v > hi or (v <= lo if lo_open else v < lo):
        raise BadRequest(
            f"'{key}' must be a number in {'(' if lo_open else '['}{lo:g}, {hi:g}], not {v!r}"[:200]
        )
    return float(v)


def _bool(body: dict[str, Any], key: str) -> bool:
    v = body.get(key)
    if v is None:
        return False
    if not isinstance(v, bool):
        raise BadRequest(f"'{key}' must be true or false, not {v!r}"[:200])
    return v


def sampling(body: dict[str, Any], default_max_tokens: int) -> Sampling:
    """The generation settings of a request, each checked as the OpenAI API checks it."""
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise BadRequest(f"'model' must be a string, not {model!r}"[:200])
    n = _int(body, "n", 1, 1)
    if n != 1:
        raise BadRequest("n > 1 is not supported by the embedded engine")
    if body.get("stop"):
        raise BadRequest("'stop' is not supported by the embedded engine")
    for key in ("presence_penalty", "frequency_penalty"):
        _num(body, key, 0.0, -2.0, 2.0)
    key = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    max_new = _int(body, key, default_max_tokens, 1)
    assert max_new is not None
    min_key = "min_new_tokens" if body.get("min_new_tokens") is not None else "min_tokens"
    min_new = _int(body, min_key, 0, 0, max_new)
    top_k = _int(body, "top_k", None, 0)
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise BadRequest(f"'stream_options' must be an object, not {options!r}"[:200])
    stream = _bool(body, "stream")
    include_usage = _bool(options or {}, "include_usage")
    return Sampling(
        max_new_tokens=max_new,
        temperature=_num(body, "temperature", 0.0, 0.0, 2.0),
        top_p=_num(body, "top_p", 1.0, 0.0, 1.0, lo_open=True),
        top_k=top_k or None,
        repetition_penalty=_num(body, "repetition_penalty", 1.0, 0.0, 10.0, lo_open=True),
        min_new_tokens=min_new or 0,
        ignore_eos=_bool(body, "ignore_eos"),
        seed=_int(body, "seed", None, *SEED_RANGE),
        stream=stream,
        include_usage=include_usage,
    )


def messages_of(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The chat messages: a non-empty list of objects with a known role and string (or text-part) content."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty list")
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise BadRequest(f"'messages[{i}]' must be an object with 'role' and 'content', not {m!r}"[:200])
        role = m.get("role")
        if role not in ROLES:
            raise BadRequest(
                f"'messages[{i}].role' must be one of {', '.join(sorted(ROLES))}, not {role!r}"[:200]
            )
        content = m.get("content")
        if content is None and role == "assistant":
            continue
        if isinstance(content, list):
            for j, part in enumerate(content):
                if not (
                    isinstance(part, dict)
                    and part.get("type") == "text"
                    and isinstance(part.get("text"), str)
                ):
                    raise BadRequest(f"'messages[{i}].content[{j}]' must be a text part {{type: text, text}}")
        elif not isinstance(content, str):
            raise BadRequest(f"'messages[{i}].content' must be a string or a list of text parts")
    return messages


def prompt_of(body: dict[str, Any], vocab_size: int | None) -> str | list[int]:
    """A completion prompt: a string, a one-string list, or token ids below the vocabulary size."""
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and prompt and all(_is_int(t) for t in prompt):
        bad = [t for t in prompt if t < 0 or (vocab_size is not None and t >= vocab_size)]
        if bad:
            raise BadRequest(
                f"'prompt' token id {bad[0]} is out of range (the vocabulary has {vocab_size} tokens)"
            )
        return [int(t) for t in prompt]
    raise BadRequest("'prompt' must be a string (or a list of token ids)")
