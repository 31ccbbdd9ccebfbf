"""Generate `docs/cli.md` from the Typer app itself, so the reference cannot drift from the code
(`python -m specq.cli._docs > docs/cli.md`; a test fails when the file is stale)."""

from __future__ import annotations

from enum import Enum
from functools import cache
from typing import Any

import typer.main

from .app import app

# Where a command's options land in the configuration, when the option's name is not the key's: the
# default column shows the packaged default preset's value for them (flags typed win over it).
SECTIONS = {"serve": ("model", "engine", "speculative"), "bench": ("bench", "model", "engine", "speculative")}
KEYS = {
    "timeout": "request_timeout_s", "served_model": "served_model_name",
    "gpu_bandwidth": "gpu_bandwidth_gbps", "quant_backend": "backend", "out_dir": "out",
}  # fmt: skip


@cache
def _defaults() -> dict[str, dict[str, Any]]:
    from specq.pipeline.config import resolve_config

    cfg = resolve_config(None)
    return {
        name: section.model_dump(by_alias=False) for name, section in cfg if hasattr(section, "model_dump")
    }


def _config_default(command: str, name: str) -> tuple[bool, Any]:
    """(found, value) of the option `name` of `command` in the default configuration."""
    top = command.removeprefix("specq ").split(" ")[0]
    defaults = _defaults()
    sections = SECTIONS.get(top, (top, "model", "speculative") if top in defaults else ())
    key = KEYS.get(name, name)
    for section in sections:
        values = defaults.get(section, {})
        if key in values:
            return True, values[key]
    return False, None


def _shown(value: Any) -> str:
    if isinstance(value, Enum):
        value = value.value
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, list | tuple):
        return f"`{','.join(map(str, value))}`"
    return f"`{value}`"


def _default_cell(command: str, p: Any) -> str:
    """The option's default as a user meets it: the flag's own default, else the default configuration's
    value, else "required" or "not set" (the command decides, as its help says)."""
    if getattr(p, "param_type_name", "") == "argument":
        return "required" if p.required else "not set"
    default = p.default
    if callable(default):
        return "not set"
    if default is None or default == ():
        found, value = _config_default(command, p.name)
        if found and value is not None:
            return _shown(value)
        return "required" if p.required else "not set"
    return _shown(default)


def _param_row(command: str, p: Any) -> str:
    secondary = getattr(p, "secondary_opts", [])
    longs = [o for o in p.opts if o.startswith("--")]
    if secondary and longs:  # a boolean pair: --eval/--no-eval
        names = ", ".join([f"`{longs[0]}/{secondary[0]}`", *(f"`{o}`" for o in p.opts if o not in longs)])
    else:
        names = ", ".join(f"`{o}`" for o in p.opts)
    if getattr(p, "param_type_name", "") == "argument":
        names = f"`{p.name.upper()}`"
    help_text = " ".join((getattr(p, "help", None) or "").split())
    return f"| {names} | {help_text} | {_default_cell(command, p)} |"


def _command_md(path: str, cmd: Any, out: list[str]) -> None:
    subcommands = getattr(cmd, "commands", None)
    if subcommands:
        if path:
            out.append(f"## `{path}`\n")
            if cmd.help:
                out.append(cmd.help.strip() + "\n")
        for name in subcommands:
            _command_md(f"{path} {name}".strip(), subcommands[name], out)
        return
    level = "###" if " " in path.removeprefix("specq ") else "##"
    out.append(f"{level} `{path}`\n")
    if cmd.help:
        out.append(cmd.help.strip() + "\n")
    params = [p for p in cmd.params if p.name not in ("help", "ctx")]
    if params:
        out.append("| option | meaning | default |\n|---|---|---|")
        out.extend(_param_row(path, p) for p in params)
        out.append("")


def render_cli_markdown() -> str:
    root = typer.main.get_command(app)
    lines = [
        "# specq command reference",
        "",
        "Generated from the CLI by `make docs` (`python -m specq.cli._docs`); do not edit by hand.",
        "",
        "Global options: `--verbose/-v`, `--quiet/-q`, `--version`. Exit codes are in the README.",
        "",
    ]
    commands = getattr(root, "commands", {})
    for name in commands:
        _command_md(f"specq {name}", commands[name], lines)
    return "\n".join(lines).rstrip() + "\n"


if __name__ == "__main__":
    print(render_cli_markdown(), end="")
