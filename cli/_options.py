"""The options that are no setting of a stage, declared once as `Annotated` aliases (the way the `hf`
CLI's `_cli_utils` does it): where a command reads its config from, how it prints, where it writes. Options
that set a config key or a request field are made from that field (cli/_fields.py), so they too have one
name, one type and one help text, whichever command they are on.

Choices made here, so that no command repeats or contradicts them:
- Paths are `Path`; `_common.resolve` turns them into the strings the config sections hold.
- The JSON switch is `as_json` in every signature (never `json`, which would shadow the module).
- `--backend` is LMDeploy's engine backend and `--method` the speculative method wherever they appear;
  quantize's own choices are `--quant-backend` and its `--method` is the quantization method (gptq | awq).
- `--draft-tokens` / `-k` is text the config parses: one count K in 0..15 (`model.draft_tokens`) where the
  command serves or checks one setting, the counts to sweep (`3..6`, `3,4,6`: `bench.draft_tokens`) in
  bench. An unparsable value is a config error that names the field, like any other.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

ConfigOpt = Annotated[
    Path | None,
    typer.Option("--config", "-c", help="TOML or tutorial-style INI file, or the name of a packaged preset."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]
WideOpt = Annotated[
    bool,
    typer.Option("--wide", help="Show every column of the bench table (default: fit the terminal, COLUMNS)."),
]
VerboseOpt = Annotated[bool, typer.Option("--verbose", "-v", help="More diagnostics on stderr.")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="Only errors on stderr.")]

OutOpt = Annotated[
    Path | None,
    typer.Option(
        "--out", "-o", help="Directory to write to (the command's description says what goes there)."
    ),
]
