"""Every command-line option is declared once. This walks the Typer app and the models its options are
made from (cli/_fields.py), and fails on an option whose help or default is written a second time: a help
that is not its field's description, a default of its own beside the field's, a help text that stands in
the source twice, a help that spells out its default, or a command option that duplicates a field."""

from __future__ import annotations

import ast
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer.main

from specq.cli._fields import Flag, flags_of, packaged_defaults
from specq.cli.app import app

ROOT = Path(__file__).resolve().parents[3]
# The options a command declares itself because no model field holds them (a secret, where output goes,
# how to print, what to do instead of the work). Everything else comes from a field.
OWN = {
    "*": {"config", "as_json", "wide", "out_dir"},
    "specq bench": {"api_key"},
    "specq serve start": {"run_dir", "dry_run", "detach"},
    "specq serve stop": {"port"},
    "specq twin": {"shard_gib"},
    "specq fa3 build": {"dry_run"},
    "specq plan": {"check"},
    "specq demo": {"quick"},
    "specq toy build": {"drafter"},
    "specq toy prompts": {"out_file", "count", "chars"},
    "specq toy fetch": {"name", "wheel", "force"},
    "specq report show": {"run", "fmt"},
    "specq report compare": {"a", "b"},
    "specq config show": {"stage"},
}


def commands() -> Iterator[tuple[str, Any]]:
    def walk(path: str, cmd: Any) -> Iterator[tuple[str, Any]]:
        subs = getattr(cmd, "commands", None)
        if subs:
            for name, sub in subs.items():
                yield from walk(f"{path} {name}", sub)
        else:
            yield path, cmd

    yield from walk("specq", typer.main.get_command(app))


def params() -> Iterator[tuple[str, Any, Flag | None]]:
    for path, cmd in commands():
        flags = {f.name: f for f in flags_of(cmd.callback)}
        for p in cmd.params:
            yield path, p, flags.get(p.name)


def _words(text: str) -> str:
    return " ".join(text.split())


def source_strings() -> Counter[str]:
    """Every string constant of the CLI and the pipeline (implicit concatenations joined, as Python joins
    them), whitespace folded."""
    counts: Counter[str] = Counter()
    for tree in ("cli", "pipeline"):
        for path in sorted((ROOT / tree).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value) > 3:
                    counts[_words(node.value)] += 1
    return counts


def default_of(p: Any, flag: Flag | None) -> Any:
    if flag is not None and flag.section is not None:
        return getattr(getattr(packaged_defaults(), flag.section), flag.field)
    return p.default


def restates(help_text: str, default: Any) -> bool:
    """Whether a help spells out the default the option has anyway (`(default 128)`, `Default off.`)."""
    if default is None or default == [] or default == () or callable(default):
        return False
    if isinstance(default, bool):
        words = ["on", "true"] if default else ["off", "false"]
    elif isinstance(default, list | tuple):
        words = [",".join(map(str, default))]
    else:
        words = [str(getattr(default, "value", default))]
    return any(
        re.search(
            rf"\bdefault:?\s*{re.escape(w)}(?!\w|\.\d)|(?<![\w.]){re.escape(w)}\s*\(default\b",
            help_text,
            re.I,
        )
        for w in words
    )


def test_every_option_comes_from_a_field_or_is_the_commands_own() -> None:
    seen = set()
    for path, p, flag in params():
        seen.add(path)
        if flag is None:
            own = OWN["*"] | OWN.get(path, set())
            assert p.name in own, f"{path} {p.opts}: declared in the command, not made from a model field"
    assert len(seen) > 15


def test_a_field_option_takes_its_help_and_default_from_the_field() -> None:
    checked = 0
    for path, p, flag in params():
        if flag is None:
            continue
        checked += 1
        assert p.help == flag.help, f"{path} {p.opts}: help is not the field's description"
        if flag.argument:
            continue
        if flag.section is not None:
            assert p.default is None, f"{path} {p.opts}: a config key's option has a default of its own"
        elif flag.info.is_required():
            assert p.required, f"{path} {p.opts}: {flag.key} is required, the option is not"
        else:
            assert p.default == flag.default, f"{path} {p.opts}: default differs from {flag.key}'s"
    assert checked > 30


def test_no_option_help_stands_in_the_source_twice() -> None:
    counts = source_strings()
    twice = sorted(
        f"{path} {p.opts}: {_words(p.help)!r}"
        for path, p, _ in params()
        if p.help and counts[_words(p.help)] > 1
    )
    assert not twice, (
        "help written twice (declare it once: a field's description or one alias):\n" + "\n".join(twice)
    )


def test_no_option_help_spells_out_its_default() -> None:
    said = [
        f"{path} {p.opts}: {p.help!r}"
        for path, p, flag in params()
        if p.help and restates(p.help, default_of(p, flag))
    ]
    assert not said, "the default is shown beside the help; do not write it twice:\n" + "\n".join(said)


@pytest.mark.parametrize(
    ("help_text", "default", "expected"),
    [
        ("Calibration samples (default 128).", 128, True),
        ("Default off.", False, True),
        ("Prompts per warm-up pass: N, all (default) or 0 (off).", None, False),
        ("decode (default, no TTFT) | e2e", "decode", True),
        ("Port (default: a free one).", None, False),
        ("auto | cpu (default: auto)", "auto", True),
        ("draft tokens (default 3..6)", [1], False),
        ("size 128 (default)", 128, True),
        ("size 1280 (default 12800)", 128, False),
    ],
)
def test_restates_reads_defaults_in_help(help_text: str, default: Any, expected: bool) -> None:
    assert restates(help_text, default) is expected
