"""docs/cli.md is generated from the app: this fails when a command changes and `make docs` was not run."""

from __future__ import annotations

from pathlib import Path

from specq.cli._docs import render_cli_markdown

DOC = Path(__file__).resolve().parents[3] / "docs" / "cli.md"


def test_cli_reference_is_current() -> None:
    assert DOC.read_text(encoding="utf-8") == render_cli_markdown(), "docs/cli.md is stale: run `make docs`"


def test_reference_covers_every_command() -> None:
    """Every command the app registers (test_app checks those against the contract) has a section."""
    import typer.main

    from specq.cli.app import app

    text = render_cli_markdown()
    names = list(typer.main.get_command(app).commands)  # type: ignore[attr-defined]
    assert len(names) >= 11
    for name in names:
        assert f"`specq {name}" in text
