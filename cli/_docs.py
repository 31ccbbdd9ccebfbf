"""Generate `docs/cli.md` from the Typer app itself, so the reference cannot drift from the code
(`python -m specq.cli._docs > docs/cli.md`; a test fails when the file is stale)."""

from __future__ import annotations

from typing import Any

import typer.main

from .app import app


def _param_row(p: Any) -> str:
    names = ", ".join(f"`{o}`" for o in [*p.opts, *getattr(p, "secondary_opts", [])])
    if getattr(p, "param_type_name", "") == "argument":
        names = f"`{p.name.upper()}`"
    default = p.default
    shown = "" if default in (None, False, ()) or callable(default) else f"`{default}`"
    help_text = " ".join((getattr(p, "help", None) or "").split())
    return f"| {names} | {help_text} | {shown} |"


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
        out.extend(_param_row(p) for p in params)
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
