"""The progress callback every long pipeline function takes (the CLI passes one that prints to stderr)."""

from __future__ import annotations

from collections.abc import Callable

Progress = Callable[[str], None]


def null_progress(message: str) -> None:
    """Default: stay silent (library use, tests)."""
