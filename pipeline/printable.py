"""Text from outside specq (a report file, a model id, a server's error message, a path) made safe to print
on a terminal: control characters, which could move the cursor, recolour or retitle the terminal, or hide
text (ESC sequences, C1 codes, bidirectional overrides), are shown escaped (`\\x1b`) instead of acting.
The CLI applies this once, where data and messages leave for stdout and stderr."""

from __future__ import annotations

import re

# C0 controls (tab, newline and carriage return included), DEL, C1 controls, and the Unicode bidirectional
# embeddings, overrides and isolates (U+202A..U+202E, U+2066..U+2069) that reorder what a reader sees.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_CONTROL_BUT_NEWLINE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escape(m: re.Match[str]) -> str:
    c = m.group(0)
    return _NAMED.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")


def printable(text: str, *, newlines: bool = False) -> str:
    """`text` with every control character escaped; with `newlines`, line breaks are kept (a rendered
    table, a multi-line report) and only the rest is escaped."""
    return (_CONTROL_BUT_NEWLINE if newlines else _CONTROL).sub(_escape, text)
