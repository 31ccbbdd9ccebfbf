"""`specq config show`: print the resolved configuration (preset < --config < SPECQ_* < flags)."""

from __future__ import annotations

from typing import Annotated

import typer

from specq.pipeline.config import STAGES, config_to_toml, preset_names, resolve_config
from specq.pipeline.errors import UsageError

from ._common import emit_json, out
from ._options import ConfigOpt, JsonOpt

config_app = typer.Typer(help="Inspect configuration.", no_args_is_help=True)


@config_app.command("show")
def show(
    config: ConfigOpt = None,
    stage: Annotated[
        str | None, typer.Option(help=f"Only one stage's sections: {', '.join(STAGES)}.")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Print the resolved configuration.

    Example: specq config show --config rtx3090-qwen3.5-27b-awq-dflash --stage serve
    """
    if stage is not None and stage not in STAGES:
        raise UsageError(f"--stage: unknown stage '{stage}'; choose one of {', '.join(STAGES)}")
    cfg = resolve_config(config)
    sections = STAGES[stage] if stage else None
    if as_json:
        data = cfg.model_dump(mode="json", by_alias=True)
        emit_json({k: v for k, v in data.items() if not sections or k in sections})
    else:
        out.print(config_to_toml(cfg, sections), highlight=False, markup=False)


@config_app.command("presets")
def presets(as_json: JsonOpt = False) -> None:
    """List the packaged presets (usable as --config NAME).

    Example: specq config presets
    """
    names = preset_names()
    if as_json:
        emit_json(names)
    else:
        for n in names:
            out.print(n, highlight=False)


def register(app: typer.Typer) -> None:
    app.add_typer(config_app, name="config")
