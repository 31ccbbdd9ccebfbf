"""The engine interface: start → wait ready → base URL and metrics URL → stop, plus `command()` for dry
runs. `specq serve` and `specq bench` (which restarts a server for every draft-token count) use only this.
Implementations: LMDeploy's `api_server` (`lmdeploy.py`) and specq's embedded server (`embedded/`)."""

from __future__ import annotations

import abc
from pathlib import Path
from types import TracebackType


class Engine(abc.ABC):
    """One server process serving one model, optionally with a drafter."""

    #: the server's name (`engines.ServerName`: "lmdeploy" or "embedded"; bench's test server: "synthetic")
    name: str
    #: seconds from the launch to the first ready answer, set by `wait_ready` (None until then)
    ready_s: float | None = None

    @abc.abstractmethod
    def command(self) -> list[str]:
        """The exact argument list that `start()` runs (shown by --dry-run; never a shell string)."""

    @abc.abstractmethod
    def start(self) -> None:
        """Launch the server as a supervised child (own process group, log under the run directory)."""

    @abc.abstractmethod
    def wait_ready(self, timeout_s: float) -> None:
        """Block until the server answers (then `ready_s` holds how long it took since the launch), or raise
        ProcessFailed with the log's tail."""

    @abc.abstractmethod
    def stop(self) -> None:
        """SIGTERM → wait → SIGKILL; idempotent; never leaves orphans."""

    @property
    @abc.abstractmethod
    def base_url(self) -> str:
        """e.g. http://127.0.0.1:23333 (OpenAI-compatible API under /v1)."""

    @property
    def metrics_url(self) -> str:
        return f"{self.base_url}/metrics"

    @property
    @abc.abstractmethod
    def model_name(self) -> str:
        """The model name the server announces at /v1/models."""

    @property
    @abc.abstractmethod
    def log_path(self) -> Path:
        """Where the child's stdout and stderr go."""

    def __enter__(self) -> Engine:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
