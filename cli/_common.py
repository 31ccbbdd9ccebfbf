"""What several commands share: the two consoles (data on stdout, diagnostics on stderr), config resolution
from typed flags, and `emit`, the one output path (`--json` or the text a formatter renders). The shared
options themselves are declared in `_options`."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from rich.console import Console
from rich.text import Text

from specq.pipeline.config import SpecqConfig, resolve_config
from specq.pipeline.printable import printable

from ._fields import Given

# Never read strings as rich markup: they carry paths and pip extras such as specq[quant]. Colour is given
# explicitly (Text, style=) where it is wanted.
out = Console(soft_wrap=True, markup=False)  # data
err = Console(stderr=True, soft_wrap=True, markup=False)  # progress, logs, hints


class State:
    verbose = False
    quiet = False


def info(msg: str | Text) -> None:
    """A diagnostic on stderr; a plain string has its control characters escaped (it may quote a report,
    a path or a server's reply); a Text is built from strings escaped already."""
    if not State.quiet:
        err.print(printable(msg, newlines=True) if isinstance(msg, str) else msg, highlight=False)


def note(msg: str) -> None:
    info(Text.assemble(("note", "yellow"), f": {printable(msg, newlines=True)}"))


def progress(msg: str) -> None:
    """The progress callback handed to pipeline functions."""
    info(Text.assemble(("•", "cyan"), f" {printable(msg, newlines=True)}"))


def typed(**options: Any) -> dict[str, Any]:
    """Keep only the options the user actually typed (Typer defaults are None); paths become the strings
    the config sections hold."""
    return {k: str(v) if isinstance(v, Path) else v for k, v in options.items() if v is not None}


def resolve_given(config: Path | None, given: Given, **sections: dict[str, Any]) -> SpecqConfig:
    """The resolved config with the field options typed (`given`) and a command's own values (`sections`)
    as the flags layer."""
    return resolve_config(config, flags=given.sections(**{k: typed(**v) for k, v in sections.items()}))


def emit_json(data: Any) -> None:
    sys.stdout.write(json.dumps(jsonable(data), indent=2, default=str) + "\n")
    sys.stdout.flush()


def jsonable(data: Any) -> Any:
    """A result (a pydantic model, or lists and dicts of them) as plain JSON data."""
    if isinstance(data, BaseModel):
        return data.model_dump(mode="json")
    if isinstance(data, list | tuple):
        return [jsonable(x) for x in data]
    if isinstance(data, dict):
        return {k: jsonable(v) for k, v in data.items()}
    return data


def emit(
    result: Any,
    as_json: bool,
    text: Callable[[Any], str] | None = None,
    diagnostics: Iterable[str] = (),
) -> None:
    """The one output path of every command: with --json the result as one JSON document on stdout;
    otherwise the diagnostics on stderr and the result rendered by `text` (a formatter) on stdout."""
    if as_json:
        emit_json(result)
        return
    for line in diagnostics:
        info(line)
    rendered = printable(text(result), newlines=True) if text is not None else ""
    if rendered:
        end = "" if rendered.endswith("\n") else "\n"
        out.print(rendered, end=end, highlight=False, markup=False, soft_wrap=True)
