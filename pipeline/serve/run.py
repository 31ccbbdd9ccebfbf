"""What `specq serve` does, as pipeline functions: a dry run (the exact command and the resolved config), a
foreground server that runs until Ctrl-C or SIGTERM, a detached server recorded in a state file, and
`status`/`stop` for detached servers. The CLI only parses options and prints what these return."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from types import FrameType
from typing import Any

from pydantic import BaseModel

from ..config.models import STAGES, SpecqConfig  # noqa: F401  (STAGES: the CLI shows the serve sections)
from ..errors import InputError, ProcessFailed, Terminated, UsageError
from ..fsutil import atomic_write_text, cache_root
from ..progress import Progress, null_progress
from .base import ProcessEngine
from .process import cmdline, group_alive, last_error_line, pid_alive, start_ticks, stop_group, tail

SCHEMA_VERSION = 1


class ServeInfo(BaseModel):
    """What is (or would be) served, and how to reach it."""

    schema_version: int = SCHEMA_VERSION
    engine: str
    backend: str | None
    model_name: str
    model_path: str
    draft_model_path: str | None
    method: str | None
    draft_tokens: int
    url: str
    metrics_url: str
    command: list[str]  # API keys masked
    environment: dict[str, str] = {}  # variables specq sets for the server, shown to the user (no secrets)
    log: str
    pid: int | None = None
    pid_start: int | None = None  # the server's start time (/proc ticks): a reused PID is not it
    started: str | None = None
    config: dict[str, Any] = {}

    @property
    def command_line(self) -> str:
        """The command as a shell line, prefixed by `env NAME=VALUE …` for the variables specq sets."""
        env = ["env", *(f"{k}={v}" for k, v in self.environment.items())] if self.environment else []
        return shlex.join([*env, *self.command])


def state_dir() -> Path:
    """Where detached servers are recorded: $SPECQ_STATE_DIR, else $SPECQ_CACHE/serve (~/.cache/specq)."""
    if os.environ.get("SPECQ_STATE_DIR"):
        return Path(os.environ["SPECQ_STATE_DIR"])
    return cache_root() / "serve"


def _engine(cfg: SpecqConfig, run_dir: Path | None, progress: Progress) -> ProcessEngine:
    from . import create_engine
    from .spec import ServeRequest

    check_draft_tokens_given(cfg)
    return create_engine(ServeRequest.from_config(cfg), run_dir, progress)


def check_draft_tokens_given(cfg: SpecqConfig) -> None:
    """A drafter (or a speculative method) with no draft-token count anywhere (flag, config file,
    environment) would serve without speculation, silently: refuse it. An explicit 0 serves without."""
    asked = cfg.model.draft_model_path or cfg.speculative.method
    if asked and "draft_tokens" not in cfg.model.model_fields_set:
        what = "--draft-model" if cfg.model.draft_model_path else f"--method {cfg.speculative.method}"
        raise UsageError(
            f"{what} without --draft-tokens: give --draft-tokens K (1..15) to speculate "
            "(`specq bench` measures which K is fastest), or --draft-tokens 0 to serve without speculation"
        )


def info_of(engine: ProcessEngine, cfg: SpecqConfig) -> ServeInfo:
    spec = engine.spec
    sections = STAGES["serve"]
    return ServeInfo(
        engine=engine.name,
        backend=spec.backend,
        model_name=engine.model_name,
        model_path=str(spec.target.path),
        draft_model_path=str(spec.draft_path) if spec.draft_path is not None else None,
        method=spec.method,
        draft_tokens=spec.draft_tokens,
        url=engine.base_url,
        metrics_url=engine.metrics_url,
        command=engine.command(),
        environment=engine.shown_env(),
        log=str(engine.log_path),
        pid=engine.pid,
        config=cfg.model_dump(include=set(sections), mode="json"),
    )


def dry_run(cfg: SpecqConfig, run_dir: Path | None = None, progress: Progress = null_progress) -> ServeInfo:
    """Resolve and check everything a launch would, without launching; preflight problems become notices."""
    engine = _engine(cfg, run_dir, progress)
    if engine.name == "lmdeploy":
        from .preflight import lmdeploy_problems

        spec = engine.spec
        backend, models = spec.backend or "turbomind", spec.request.served_models()
        o = spec.options
        for problem in lmdeploy_problems(
            backend, spec.speculative, models, o.dtype, o.tp, o.distributed_executor_backend
        ):
            progress(f"preflight (a launch here would stop): {problem}")
    engine.spec.release_port()  # nothing will listen on it
    return info_of(engine, cfg)


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """Treat SIGTERM to specq like Ctrl-C, so the server is stopped in `finally` either way (and specq exits
    143, as the CLI maps `Terminated`)."""

    def handler(signum: int, frame: FrameType | None) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise Terminated(signum)

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread: nothing to install
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def serve_foreground(
    cfg: SpecqConfig,
    run_dir: Path | None = None,
    progress: Progress = null_progress,
    on_ready: Callable[[ServeInfo], None] | None = None,
) -> ServeInfo:
    """Start the server, report it ready, and serve until Ctrl-C/SIGTERM (then stop it and return). A server
    that dies on its own raises ProcessFailed (exit 5) with its log's tail."""
    engine = _engine(cfg, run_dir, progress)
    with _sigterm_as_interrupt():
        try:
            engine.start()
            engine.wait_ready()
            info = info_of(engine, cfg)
            info.started = datetime.now(timezone.utc).isoformat(timespec="seconds")
            if on_ready is not None:
                on_ready(info)
            while True:
                code = engine.poll()
                if code is not None:
                    raise ProcessFailed(
                        f"{engine.name} server exited with code {code}: "
                        f"{last_error_line(tail(engine.log_path, 200))} (log: {engine.log_path})"
                    )
                time.sleep(0.5)
        except KeyboardInterrupt:  # Ctrl-C, SIGTERM, SIGHUP: stop the server, exit 130/143/129
            progress("stopping the server")
            raise
        finally:
            engine.stop()


def serve_detached(
    cfg: SpecqConfig, run_dir: Path | None = None, progress: Progress = null_progress
) -> ServeInfo:
    """Start the server, wait until it answers, record it in the state directory and leave it running."""
    engine = _engine(cfg, run_dir, progress)
    engine.die_with_parent = False  # it is meant to outlive specq
    with _sigterm_as_interrupt():
        try:
            engine.start()
            engine.wait_ready()
        except BaseException:
            engine.stop()
            raise
    info = info_of(engine, cfg)
    info.started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    info.pid_start = start_ticks(engine.pid) if engine.pid is not None else None
    path = state_dir() / f"{engine.spec.port}.json"
    atomic_write_text(path, info.model_dump_json(indent=2))
    engine.detach()
    return info


class ServerStatus(BaseModel):
    info: ServeInfo
    state_file: str
    running: bool


def _states() -> list[tuple[Path, ServeInfo]]:
    d = state_dir()
    out: list[tuple[Path, ServeInfo]] = []
    for path in sorted(d.glob("*.json")) if d.is_dir() else []:
        try:
            out.append((path, ServeInfo.model_validate(json.loads(path.read_text(encoding="utf-8")))))
        except (OSError, ValueError):
            continue  # a damaged state file is not a server
    return out


def is_recorded_server(info: ServeInfo) -> bool:
    """Whether `info.pid` still is the server specq recorded, not a later process that reused the PID: the
    same start time when one was recorded, else a command line that names the served model."""
    if info.pid is None or not pid_alive(info.pid):
        return False
    if info.pid_start is not None:
        return start_ticks(info.pid) in (info.pid_start, None)
    argv = cmdline(info.pid)
    return argv is None or info.model_path in argv


def status() -> list[ServerStatus]:
    """Every detached server specq recorded, and whether it still runs."""
    return [
        ServerStatus(info=info, state_file=str(path), running=is_recorded_server(info))
        for path, info in _states()
    ]


def stop(port: int | None = None, progress: Progress = null_progress) -> list[ServeInfo]:
    """Stop detached servers (all, or the one on `port`): SIGTERM to the group, wait, SIGKILL."""
    states = [(p, i) for p, i in _states() if port is None or i.url.rsplit(":", 1)[-1] == str(port)]
    if port is not None and not states:
        raise InputError(f"no detached specq server on port {port} (see: specq serve status)")
    stopped: list[ServeInfo] = []
    for path, info in states:
        if info.pid is not None and pid_alive(info.pid) and not is_recorded_server(info):
            progress(
                f"pid {info.pid} is no longer the {info.engine} server specq started at {info.url}; not "
                f"signalling it (removed the stale state file {path})"
            )
        elif info.pid is not None and (pid_alive(info.pid) or group_alive(info.pid)):
            progress(f"stopping {info.engine} server {info.model_name} at {info.url} (pid {info.pid})")
            stop_group(info.pid)
            stopped.append(info)
        path.unlink(missing_ok=True)
    return stopped
