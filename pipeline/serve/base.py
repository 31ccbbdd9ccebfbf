"""The part both engines share: a server child supervised by `ManagedProcess`, reached at host:port, with
optional API keys (read from an environment variable or a file, never echoed)."""

from __future__ import annotations

import abc
import os
import time
from pathlib import Path

from ..errors import ConfigError, InputError
from ..progress import Progress, null_progress
from .engine import Engine
from .process import ManagedProcess, check_port_free
from .spec import ServerOptions, ServeSpec

MASK = "***"


def read_api_keys(options: ServerOptions) -> list[str]:
    """API keys from `engine.api_keys_env` (a variable name; comma- or space-separated keys) or
    `engine.api_keys_file` (one key per line)."""
    keys: list[str] = []
    if options.api_keys_env:
        value = os.environ.get(options.api_keys_env)
        if not value:
            raise ConfigError(
                f"engine.api_keys_env: the environment variable {options.api_keys_env} is not set"
            )
        keys += [k for k in value.replace(",", " ").split() if k]
    if options.api_keys_file:
        path = Path(options.api_keys_file).expanduser()
        try:
            keys += [ln.strip() for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
        except OSError as e:
            raise ConfigError(f"engine.api_keys_file: cannot read {path}: {e.strerror or e}") from None
    return keys


LOOPBACK = ("", "localhost", "127.0.0.1", "::1")


def warn_if_exposed(host: str | None, api_keys: list[str], progress: Progress) -> None:
    """A server reachable beyond this machine with no API key serves anyone who can reach it: say so."""
    if (host or "") in LOOPBACK or host is None or host.startswith("127.") or api_keys:
        return
    progress(
        f"warning: --host {host} listens beyond this machine and no API key is set: anyone who can reach"
        " it can use it; pass --api-keys-env VAR or --api-keys-file FILE, or bind 127.0.0.1"
    )


class ProcessEngine(Engine):
    """An Engine whose server is one supervised child process."""

    log_name = "server.log"
    #: stop the server when this process dies, even by SIGKILL (Linux); only `serve --detach` turns it off
    die_with_parent = True

    def __init__(self, spec: ServeSpec, run_dir: Path, progress: Progress = null_progress) -> None:
        self.spec = spec
        self.run_dir = Path(run_dir)
        self.progress = progress
        self.api_keys = read_api_keys(spec.options)
        warn_if_exposed(spec.host, self.api_keys, progress)
        self._proc: ManagedProcess | None = None
        self._launched: float | None = None  # time.monotonic() at the launch

    # -- what subclasses provide ------------------------------------------------------------------------
    @abc.abstractmethod
    def argv(self, *, masked: bool) -> list[str]:
        """The server's argument list (`masked`: API keys replaced, as `--dry-run` shows it)."""

    def child_env(self) -> dict[str, str]:
        return dict(os.environ)

    def shown_env(self) -> dict[str, str]:
        """The variables of `child_env` that `serve --dry-run` shows with the command (never API keys)."""
        return {}

    def preflight(self) -> None:
        """Raise what would make the launch fail (EnvironmentMissing); the default checks nothing."""

    def prepare(self) -> None:
        """Work to do just before launch (e.g. writing an fp16 drafter copy)."""

    # -- Engine --------------------------------------------------------------------------------------------
    def command(self) -> list[str]:
        """The argument list `start()` runs; API keys, if any, are shown as ***."""
        return self.argv(masked=True)

    @property
    def base_url(self) -> str:
        host = self.spec.host
        if host in ("0.0.0.0", "", "localhost"):
            host = "127.0.0.1"
        elif host == "::":
            host = "::1"
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.spec.port}"

    @property
    def model_name(self) -> str:
        return self.spec.model_name

    @property
    def log_path(self) -> Path:
        return self.run_dir / self.log_name

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def start(self) -> None:
        if self._proc is not None:
            return
        self.preflight()
        if self.spec.port_given:
            check_port_free(self.spec.host or "127.0.0.1", self.spec.port)
        require_weights(self.spec.target.path, self.spec.draft_path)
        self.prepare()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._proc = ManagedProcess(
            self.argv(masked=False), self.log_path, env=self.child_env(), name=f"{self.name} server",
            progress=self.progress, die_with_parent=self.die_with_parent,
        )  # fmt: skip
        self._proc.start()
        self._launched = time.monotonic()  # after preflight and prepare (an fp16 drafter copy): the launch

    def wait_ready(self, timeout_s: float | None = None) -> None:
        if self._proc is None:
            self.start()
        assert self._proc is not None
        headers = {"Authorization": f"Bearer {self.api_keys[0]}"} if self.api_keys else None
        timeout = timeout_s if timeout_s is not None else self.spec.options.ready_timeout_s
        self._proc.wait_ready(f"{self.base_url}/v1/models", timeout, headers)
        if self.ready_s is None and self._launched is not None:
            self.ready_s = round(time.monotonic() - self._launched, 3)

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.stop()
        self.spec.release_port()  # a server that never got as far as its readiness poll

    def poll(self) -> int | None:
        """The child's exit code, or None while it runs."""
        return self._proc.poll() if self._proc is not None else None

    def detach(self) -> None:
        if self._proc is not None:
            self._proc.detach()

    def __enter__(self) -> ProcessEngine:
        self.start()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self


def require_weights(target: Path, draft: Path | None) -> None:
    """A launch needs weights: a config-only directory (fine for `--dry-run` and `specq plan`) is exit 2."""
    from ..checkpoint import Checkpoint

    for role, path in (("target", target), ("drafter", draft)):
        if path is not None and not Checkpoint(path).has_weights:
            raise InputError(
                f"{role} {path}: no .safetensors weights to serve; pass a complete model directory"
            )
