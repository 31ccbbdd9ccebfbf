"""Placeholder for commands whose issue has not landed: a clear error with exit code 2, never a pretence."""

from __future__ import annotations

import typer

from specq.pipeline.errors import NotImplementedYet

CTX = {"allow_extra_args": True, "ignore_unknown_options": True}


def stub(app: typer.Typer, name: str, help_text: str) -> None:
    def command(ctx: typer.Context) -> None:
        raise NotImplementedYet(f"'specq {name}' is not implemented yet in this version")

    command.__doc__ = f"{help_text} (not implemented yet)\n\nExample: specq {name} --help"
    app.command(name, context_settings=CTX)(command)
