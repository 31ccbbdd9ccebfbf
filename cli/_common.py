"""What several commands share: the two consoles (data on stdout, diagnostics on stderr), config resolution
from typed flags, and JSON output. The shared options themselves are declared in `_options`."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.text import Text

from specq.pipeline.config import SpecqConfig, resolve_config

# Never read strings as rich markup: they carry paths and pip extras such as specq[quant]. Colour is given
# explicitly (Text, style=) where it is wanted.
out = Console(soft_wrap=True, markup=False)  # data
err = Console(stderr=True, soft_wrap=True, markup=False)  # progress, logs, hints


class State:
    verbose = False
    quiet = False


def info(msg: str | Text) -> None:
    if not State.quiet:
        err.print(msg, highlight=False)


def note(msg: str) -> None:
    info(Text.assemble(("note", "yellow"), f": {msg}"))


def debug(msg: str) -> None:
    if State.verbose and not State.quiet:
        err.print(msg, style="dim", highlight=False)


def progress(msg: str) -> None:
    """The progress callback handed to pipeline functions."""
    info(Text.assemble(("•", "cyan"), f" {msg}"))


def status_text(status: str) -> Text:
    """A verdict or check status in its colour."""
    colour = {"accepted": "green", "ok": "green", "fixable": "yellow", "warn": "yellow"}.get(status, "red")
    return Text(status, style=colour)


def typed(**options: Any) -> dict[str, Any]:
    """Keep only the options the user actually typed (Typer defaults are None); paths become the strings
    the config sections hold."""
    return {k: str(v) if isinstance(v, Path) else v for k, v in options.items() if v is not None}


def resolve(config: Path | None, **sections: dict[str, Any]) -> SpecqConfig:
    return resolve_config(config, flags={k: typed(**v) for k, v in sections.items()})


def emit_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
    sys.stdout.flush()
