"""`specq serve MODEL [...]`, `specq serve status`, `specq serve stop`.

A click group cannot normally take both a positional MODEL and subcommands; `DefaultStartGroup` routes any
first token that is not a subcommand (a model path, or an option such as --config) to the hidden `start`
command, so `specq serve ./model --draft-tokens 4` and `specq serve status` both work."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup

from specq.pipeline.config import config_to_toml
from specq.pipeline.serve import run

from ._common import emit, progress, resolve_given
from ._fields import Given, arg, opt, takes
from ._options import ConfigOpt, JsonOpt


class DefaultStartGroup(TyperGroup):
    """A group whose first argument, when it is not a subcommand, goes to the `start` command (so
    `specq serve --help` shows the options of `specq serve MODEL`, which lists the subcommands too)."""

    default_command = "start"

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands:
            args = [self.default_command, *args]
        return list(super().parse_args(ctx, args))


class StartCommand(TyperCommand):
    """`start` is invisible to users: its usage line reads `specq serve MODEL [OPTIONS]`."""

    def get_usage(self, ctx: Any) -> str:
        return "Usage: specq serve [MODEL] [OPTIONS]  |  specq serve status  |  specq serve stop [--port P]"


serve_app = typer.Typer(
    cls=DefaultStartGroup,
    no_args_is_help=True,
    help="Serve a model with LMDeploy or the embedded engine, optionally with speculative decoding.\n\n"
    "Example: specq serve ./toy/target --draft-model ./toy/draft --draft-tokens 4 --engine embedded",
)


OPTIONS = [
    "model.draft_model_path", "speculative.method", "model.draft_tokens", "engine.engine", "engine.backend",
    "engine.host", "engine.port", "engine.device", "engine.dtype", "model.model_name", "engine.session_len",
    "engine.cache_max_entry_count", "engine.max_batch_size", "engine.tp",
    "engine.distributed_executor_backend", "engine.enable_prefix_caching", "engine.api_keys_env",
    "engine.api_keys_file",
]  # fmt: skip


@serve_app.command("start", hidden=True, cls=StartCommand)
@takes(
    arg("model.model_path", dest="model", help="Target model directory (or model.model_path)."),
    *map(opt, OPTIONS),
)
def start(
    given: Given,
    run_dir: Annotated[
        Path | None,
        typer.Option("--run-dir", help="Where the server log goes (default specq-out/serve/...)."),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the exact command and config; exit.")
    ] = False,
    detach: Annotated[
        bool, typer.Option("--detach", help="Leave the server running; see serve status|stop.")
    ] = False,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Serve MODEL with LMDeploy or the embedded engine, optionally with speculative decoding, until
    Ctrl-C (or leave it running with --detach; then `specq serve status` and `specq serve stop`).

    Example: specq serve ./qwen3.5-27b-awq --draft-model ./dflash-fp16 --draft-tokens 5 --backend pytorch
    """
    cfg = resolve_given(config, given)
    if dry_run:
        toml = config_to_toml(cfg, run.STAGES["serve"]).rstrip()
        emit(run.dry_run(cfg, run_dir, progress), as_json, lambda r: r.command_line, [toml])
        return
    if detach:
        result = run.serve_detached(cfg, run_dir, progress)
        _announce(result, as_json, detached=True)
        return
    run.serve_foreground(cfg, run_dir, progress, on_ready=lambda r: _announce(r, as_json, detached=False))


def _announce(result: run.ServeInfo, as_json: bool, *, detached: bool) -> None:
    spec = f", {result.method} K={result.draft_tokens}" if result.method else ""
    # progress lines (•), like every line before them: stderr's unmarked lines are for what went wrong
    progress(f"serving {result.model_name} with {result.engine}{spec} (pid {result.pid}; log {result.log})")
    progress("stop it with: specq serve stop" if detached else "press Ctrl-C to stop")
    emit(result, as_json, lambda r: f"{r.url}/v1 {r.model_name}")


@serve_app.command("status")
def status(as_json: JsonOpt = False) -> None:
    """List detached servers and whether they still run.

    Example: specq serve status --json
    """
    servers = run.status()
    lines = [
        "\t".join(
            (
                s.info.url,
                s.info.model_name,
                s.info.engine,
                f"pid {s.info.pid}",
                "running" if s.running else "gone",
            )
        )
        for s in servers
    ]
    emit(servers, as_json, lambda _: "\n".join(lines), [] if servers else ["no detached specq servers"])


@serve_app.command("stop")
def stop(
    port: Annotated[int | None, typer.Option("--port", help="Only the server on this port.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Stop detached servers (SIGTERM, then SIGKILL after a grace period).

    Example: specq serve stop --port 23333
    """
    stopped = run.stop(port, progress)
    emit(stopped, as_json, None, [] if stopped else ["no running detached specq server"])
