"""JSON Lines input shared by the stages that read user files (bench workloads, calibration data): one JSON
object per non-blank line, and a bad line is an `InputError` naming the source and the line number."""

from __future__ import annotations

import json
from typing import Any

from .errors import InputError


def read_records(text: str, source: str) -> list[dict[str, Any]]:
    """The objects of `text`, one per non-blank line; `source` names the file in errors."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        rec = read_record(line, source, n)
        if rec is not None:
            out.append(rec)
    return out


def read_record(line: str, source: str, n: int) -> dict[str, Any] | None:
    """The object on line `n` of `source`; None for a blank line."""
    if not line.strip():
        return None
    try:
        rec = json.loads(line)
    except (json.JSONDecodeError, RecursionError) as e:
        why = e.msg if isinstance(e, json.JSONDecodeError) else "nested too deeply"
        raise InputError(f"{source}:{n}: not valid JSON ({why})") from None
    if not isinstance(rec, dict):
        raise InputError(f"{source}:{n}: expected a JSON object per line, got a {type(rec).__name__}")
    return rec
