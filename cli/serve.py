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
from specq.pipeline.errors import UsageError
from specq.pipeline.serve import run

from ._common import emit, progress, resolve
from ._options import (
    BackendOpt,
    ConfigOpt,
    DraftModelOpt,
    DraftTokensOpt,
    EngineOpt,
    ExecutorOpt,
    JsonOpt,
    MethodOpt,
    TpOpt,
)


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


@serve_app.command("start", hidden=True, cls=StartCommand)
def start(
    model: Annotated[str | None, typer.Argument(help="Target model directory (or model.model_path).")] = None,
    draft_model: DraftModelOpt = None,
    method: MethodOpt = None,
    draft_tokens: DraftTokensOpt = None,
    engine: EngineOpt = None,
    backend: BackendOpt = None,
    host: Annotated[
        str | None, typer.Option("--host", help="Address to listen on (default 127.0.0.1).")
    ] = None,
    port: Annotated[int | None, typer.Option("--port", help="Port (default: a free one).")] = None,
    device: Annotated[
        str | None, typer.Option("--device", help="Embedded engine: auto | cpu | cuda.")
    ] = None,
    dtype: Annotated[str | None, typer.Option("--dtype", help="auto | float16 | bfloat16 | float32.")] = None,
    model_name: Annotated[
        str | None, typer.Option("--model-name", help="Name announced at /v1/models.")
    ] = None,
    session_len: Annotated[int | None, typer.Option("--session-len", help="LMDeploy session length.")] = None,
    cache_max_entry_count: Annotated[
        float | None, typer.Option("--cache-max-entry-count", help="LMDeploy KV-cache share of free memory.")
    ] = None,
    max_batch_size: Annotated[int | None, typer.Option("--max-batch-size")] = None,
    tp: TpOpt = None,
    executor: ExecutorOpt = None,
    enable_prefix_caching: Annotated[
        bool | None,
        typer.Option("--enable-prefix-caching/--no-prefix-caching", help="LMDeploy prefix cache."),
    ] = None,
    api_keys_env: Annotated[
        str | None, typer.Option("--api-keys-env", help="Environment variable holding the API key(s).")
    ] = None,
    api_keys_file: Annotated[
        str | None, typer.Option("--api-keys-file", help="File with one API key a line.")
    ] = None,
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
    cfg = resolve(
        config,
        model={"model_path": model, "draft_model_path": draft_model, "draft_tokens": draft_tokens,
               "model_name": model_name},
        engine={"engine": engine, "backend": backend, "host": host, "port": port, "device": device,
                "dtype": dtype, "session_len": session_len, "cache_max_entry_count": cache_max_entry_count,
                "max_batch_size": max_batch_size, "enable_prefix_caching": enable_prefix_caching,
                "tp": tp, "distributed_executor_backend": executor,
                "api_keys_env": api_keys_env, "api_keys_file": api_keys_file},
        speculative={"method": method},
    )  # fmt: skip
    asked = cfg.model.draft_model_path or cfg.speculative.method
    if asked and not cfg.model.draft_tokens and draft_tokens is None:
        # A drafter with no draft-token count would serve without speculation, silently: refuse instead.
        what = "--draft-model" if cfg.model.draft_model_path else f"--method {cfg.speculative.method}"
        raise UsageError(
            f"{what} without --draft-tokens: give --draft-tokens K (1..15) to speculate "
            "(`specq bench` measures which K is fastest), or --draft-tokens 0 to serve without speculation"
        )
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
