"""`specq serve`."""

from __future__ import annotations

import typer

from ._stub import stub

serve_app = typer.Typer(
    help="Serve a model (LMDeploy or the embedded engine), optionally with speculative decoding.",
    no_args_is_help=True,
)


def register(app: typer.Typer) -> None:
    stub(
        serve_app,
        "status",
        "Serve a model (LMDeploy or the embedded engine), optionally with speculative decoding.",
    )
    stub(
        serve_app,
        "stop",
        "Serve a model (LMDeploy or the embedded engine), optionally with speculative decoding.",
    )
    app.add_typer(serve_app, name="serve")
