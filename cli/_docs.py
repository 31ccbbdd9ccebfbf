"""Generate `docs/cli.md` from the Typer app itself, so the reference cannot drift from the code
(`python -m specq.cli._docs > docs/cli.md`; a test fails when the file is stale)."""

from __future__ import annotations

from typing import Any

import typer.main

from ._fields import Flag, flags_of, packaged_defaults, shown
from .app import app


def _config_default(flag: Flag | None) -> tuple[bool, Any]:
    """(found, value) of a field option's key in the packaged default configuration."""
    if flag is None or flag.section is None:
        return False, None
    return True, getattr(getattr(packaged_defaults(), flag.section), flag.field)


def _default_cell(p: Any, flag: Flag | None) -> str:
    """The option's default as a user meets it: the flag's own default, else the default configuration's
    value, else "required" or "not set" (the command decides, as its help says)."""
    if getattr(p, "param_type_name", "") == "argument":
        return "required" if p.required else "not set"
    default = p.default
    if callable(default):
        return "not set"
    if default is None or default == ():
        found, value = _config_default(flag)
        if found and value is not None and value != []:
            return shown(value)
        return "required" if p.required else "not set"
    return shown(default)


def _param_row(p: Any, flag: Flag | None) -> str:
    secondary = getattr(p, "secondary_opts", [])
    longs = [o for o in p.opts if o.startswith("--")]
    if secondary and longs:  # a boolean pair: --eval/--no-eval
        names = ", ".join([f"`{longs[0]}/{secondary[0]}`", *(f"`{o}`" for o in p.opts if o not in longs)])
    else:
        names = ", ".join(f"`{o}`" for o in p.opts)
    if getattr(p, "param_type_name", "") == "argument":
        names = f"`{p.name.upper()}`"
    help_text = " ".join((getattr(p, "help", None) or "").split())
    return f"| {names} | {help_text} | {_default_cell(p, flag)} |"


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
        flags = {f.name: f for f in flags_of(cmd.callback)}
        out.extend(_param_row(p, flags.get(p.name)) for p in params)
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
