"""The README is what a newcomer meets first: at most 120 lines, and every `specq …` command it shows names a
real command with options that command has (so the walkthrough cannot drift from the CLI)."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

README = Path(__file__).resolve().parents[3] / "README.md"


def readme_commands() -> list[list[str]]:
    """Each `specq …` line of the README's indented code blocks, continuation lines joined, comments cut."""
    lines, commands, current = README.read_text(encoding="utf-8").splitlines(), [], ""
    for line in lines:
        text = line.strip()
        if current:
            current += " " + text
        elif line.startswith("    specq "):
            current = text
        else:
            continue
        if current.endswith("\\"):
            current = current[:-1]
            continue
        commands.append(shlex.split(current.split(" # ")[0].split("   #")[0]))
        current = ""
    return commands


def resolve(argv: list[str]) -> tuple[Any, list[str]]:
    import typer.main

    from specq.cli.app import app

    cmd: Any = typer.main.get_command(app)
    rest = argv[1:]
    while getattr(cmd, "commands", None):
        if rest and rest[0] in cmd.commands:
            cmd, rest = cmd.commands[rest[0]], rest[1:]
        elif getattr(cmd, "default_command", None):  # `specq serve MODEL …` goes to serve's start
            cmd = cmd.commands[cmd.default_command]
        else:
            raise AssertionError(f"{' '.join(argv)}: no such command")
    return cmd, rest


def test_the_readme_is_short() -> None:
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 120


def unknown_options(argv: list[str]) -> list[str]:
    cmd, rest = resolve(argv)
    options = {o for p in cmd.params for o in [*p.opts, *getattr(p, "secondary_opts", [])]}
    flags = [
        t.split("=")[0] for t in rest if t.startswith("-") and not t.lstrip("-").replace(".", "").isdigit()
    ]
    return [f for f in flags if f not in options]


def test_every_readme_command_and_option_exists() -> None:
    commands = readme_commands()
    names = {" ".join(c[:2]) for c in commands}
    assert {
        "specq quantize",
        "specq convert",
        "specq draft",
        "specq plan",
        "specq serve",
        "specq bench",
    } <= names
    for argv in commands:
        assert unknown_options(argv) == [], " ".join(argv)
    assert unknown_options(["specq", "serve", "./m", "--draft-model", "d", "--num-draft-tokens", "5"]) == [
        "--num-draft-tokens"
    ]
