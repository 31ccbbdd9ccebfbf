"""Every option that more than one command takes, declared once as an `Annotated` alias (the way the `hf`
CLI's `_cli_utils` does it): one flag name, one type and one help text, whichever command it is on.

Choices made here, so that no command repeats or contradicts them:
- `--draft-tokens` / `-k` (short flag on every command that takes it) is text, parsed once by the config:
  one count K in 0..15 where the command serves or checks one setting (`serve`, `convert`, `plan`), a list
  of counts (`3..6`, `3,4,6`) where it sweeps (`bench`). An unparsable value is a config error that names
  the field, like any other.
- Paths are `Path`; `_common.resolve` turns them into the strings the config sections hold.
- The JSON switch is `as_json` in every signature (never `json`, which would shadow the module).
- `--backend` is LMDeploy's engine backend and `--method` the speculative method wherever they appear;
  quantize's own choices are `--quant-backend` and its `--method` is the quantization method (gptq | awq).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from specq.pipeline.config.models import Method

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

DraftModelOpt = Annotated[
    Path | None,
    typer.Option("--draft-model", help="Drafter directory (DFlash, EAGLE or a small draft model)."),
]
DraftTokensOpt = Annotated[
    str | None,
    typer.Option(
        "--draft-tokens",
        "-k",
        help="Draft tokens per step K, 0..15 (0 = no speculation); bench sweeps a list: 3..6 or 3,4,6 "
        "(bench default 3..6; DFlash: up to block size - 1).",
    ),
]
EngineOpt = Annotated[
    str | None,
    typer.Option("--engine", help="lmdeploy | embedded (default: auto; for plan, the memory model)."),
]
BackendOpt = Annotated[
    str | None, typer.Option("--backend", help="LMDeploy backend: turbomind | pytorch | auto.")
]
TpOpt = Annotated[
    int | None,
    typer.Option(
        "--tp",
        min=1,
        help="LMDeploy tensor parallelism: shard the model over N GPUs of this host (default 1).",
    ),
]
ExecutorOpt = Annotated[
    str | None,
    typer.Option(
        "--distributed-executor-backend",
        help="LMDeploy PyTorch engine's workers for --tp > 1: ray (LMDeploy's default) | mp.",
    ),
]
MethodOpt = Annotated[
    Method | None,
    typer.Option("--method", help="Speculative method (default: detected from the drafter)."),
]
OutOpt = Annotated[
    Path | None,
    typer.Option(
        "--out", "-o", help="Directory to write to (the command's description says what goes there)."
    ),
]
