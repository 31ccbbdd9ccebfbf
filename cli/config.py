"""`specq config show`: print the resolved configuration (preset < --config < SPECQ_* < flags)."""

from __future__ import annotations

from typing import Annotated

import typer

from specq.pipeline.config import STAGES, config_to_toml, preset_names, resolve_config
from specq.pipeline.errors import UsageError

from ._common import emit
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
    data = {
        k: v for k, v in cfg.model_dump(mode="json", by_alias=True).items() if not sections or k in sections
    }
    emit(data, as_json, lambda _: config_to_toml(cfg, sections))


@config_app.command("presets")
def presets(as_json: JsonOpt = False) -> None:
    """List the packaged presets (usable as --config NAME).

    Example: specq config presets
    """
    emit(preset_names(), as_json, lambda names: "\n".join(names))
