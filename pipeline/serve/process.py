"""A supervised server child: started from an argument list (never a shell string) in its own process group
(session), stdout and stderr to a log file under the run directory, readiness polled on `/v1/models` with a
deadline (on a port that `free_port` holds for it until then), the log's tail shown on failure, and stopped
with SIGTERM → wait → SIGKILL to the whole group. An atexit hook stops whatever is still running when the
parent exits (Ctrl-C, an exception), so no orphan survives specq unless it was deliberately detached."""

from __future__ import annotations

import atexit
import contextlib
import errno
import functools
import os
import signal
import socket
import subprocess
import time
import urllib.parse
from collections.abc import Mapping
from pathlib import Path

from ..errors import ProcessFailed, UsageError
from ..progress import Progress, null_progress

_LIVE: set[ManagedProcess] = set()
_HELD: dict[int, socket.socket] = {}  # port → its bound, non-listening socket (see free_port)


def _stop_all() -> None:
    for proc in list(_LIVE):
        with contextlib.suppress(Exception):
            proc.stop()


atexit.register(_stop_all)


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on, the OS's pick, held for the server that will take it.

    Between this call and the server's bind, model loading takes seconds to minutes; a port merely probed and
    let go in that window can be handed to any other process's `bind(host, 0)` or outgoing connection, and
    then the readiness poll is answered by a stranger. So the probe socket stays bound (SO_REUSEADDR, never
    listening) until `release_port`, which `ManagedProcess.wait_ready` calls when it is done with the port:
    the kernel hands a bound port to no one else, while a server that binds with SO_REUSEADDR (uvicorn, which
    LMDeploy and the embedded engine run on, and http.server) still can."""
    s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind((host, 0))
    except OSError as e:  # socket.gaierror included: a host name that does not resolve
        s.close()
        raise UsageError(
            f"cannot listen on {host}: {e.strerror or e}; pass an address of this machine with --host"
        ) from None
    port = int(s.getsockname()[1])
    _HELD[port] = s
    return port


def release_port(port: int | None) -> None:
    """Let go of a port `free_port` holds (no-op for any other): its server listens on it, or never will."""
    s = _HELD.pop(port, None) if port is not None else None
    if s is not None:
        s.close()


def check_port_free(host: str, port: int) -> None:
    """Raise a one-line UsageError when host:port cannot be bound (in use, or not an address of this host)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise UsageError(
                    f"port {port} on {host} is already in use; "
                    "choose another --port or leave it out for a free one"
                ) from None
            raise UsageError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None


def _parent_death_signal(parent: int) -> None:
    """In the child, before exec (Linux): get SIGTERM when specq dies, even by SIGKILL or a timeout's
    SIGKILL, so that no server outlives the specq that started it. If specq already died before this ran,
    the signal would never come: exit instead."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the atexit hook and signal handlers still cover it
        return
    if os.getppid() != parent:
        os._exit(1)


def tail(path: Path, lines: int = 20) -> str:
    try:
        data = path.read_bytes()[-16384:].decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(data.splitlines()[-lines:])


def last_error_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if "error" in ln.lower() or "exception" in ln.lower():
            return ln
    return lines[-1] if lines else "(empty log)"


class ManagedProcess:
    """One child process and its process group."""

    def __init__(
        self,
        argv: list[str],
        log_path: Path,
        *,
        env: Mapping[str, str] | None = None,
        name: str = "server",
        progress: Progress = null_progress,
        die_with_parent: bool = False,
    ) -> None:
        self.argv = list(argv)
        self.log_path = Path(log_path)
        self.env = dict(env) if env is not None else None
        self.name = name
        self.progress = progress
        self.die_with_parent = die_with_parent
        self.popen: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen is not None else None

    def start(self) -> None:
        if self.popen is not None:
            return
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        parent = os.getpid()
        with open(self.log_path, "ab") as log:
            self.popen = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,  # own process group: Ctrl-C in the terminal reaches only specq
                preexec_fn=functools.partial(_parent_death_signal, parent) if self.die_with_parent else None,
            )
        _LIVE.add(self)

    def poll(self) -> int | None:
        return self.popen.poll() if self.popen is not None else None

    def failed(self, what: str) -> ProcessFailed:
        """One line: what happened, the log's last error line, and where the whole log is."""
        log = tail(self.log_path, 200)  # the last error line may sit above a screenful of warnings
        return ProcessFailed(f"{self.name} {what}: {last_error_line(log)} (log: {self.log_path})")

    def wait_ready(self, url: str, timeout_s: float, headers: Mapping[str, str] | None = None) -> None:
        """Poll `url` until it answers 200; raise ProcessFailed if the child exits or the deadline passes.
        Either way the URL's port, if `free_port` holds it, is let go."""
        try:
            self._poll_ready(url, timeout_s, headers)
        finally:
            release_port(urllib.parse.urlsplit(url).port)

    def _poll_ready(self, url: str, timeout_s: float, headers: Mapping[str, str] | None) -> None:
        import httpx

        from ..tls import tls

        deadline = time.monotonic() + timeout_s
        with httpx.Client(timeout=2.0, headers=dict(headers or {}), trust_env=False, verify=tls()) as client:
            while True:
                code = self.poll()
                if code is not None:
                    _LIVE.discard(self)
                    self._kill_group(signal.SIGKILL)  # anything it left behind
                    raise self.failed(f"exited with code {code} before it was ready")
                try:
                    if client.get(url).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    self.stop()
                    raise self.failed(f"did not answer {url} within {timeout_s:.0f} s")
                time.sleep(0.25)

    def _kill_group(self, sig: int) -> None:
        if self.popen is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, sig)

    def stop(self, grace_s: float = 10.0) -> int | None:
        """SIGTERM to the group, wait up to `grace_s`, then SIGKILL. Idempotent. Returns the exit code."""
        if self.popen is None:
            return None
        try:
            if self.popen.poll() is None:
                self._kill_group(signal.SIGTERM)
                try:
                    self.popen.wait(timeout=grace_s)
                except subprocess.TimeoutExpired:
                    self._kill_group(signal.SIGKILL)
                    self.popen.wait(timeout=10)
            # The group leader is gone; make sure no grandchild of its group survives it.
            self._kill_group(signal.SIGKILL)
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and group_alive(self.popen.pid):
                time.sleep(0.05)
        finally:
            _LIVE.discard(self)
        return self.popen.returncode

    def detach(self) -> None:
        """Leave the child running after specq exits (`specq serve --detach`)."""
        _LIVE.discard(self)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0); treat it as gone.
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def start_ticks(pid: int) -> int | None:
    """When process `pid` started (clock ticks since boot, /proc/PID/stat field 22): with the PID, what
    tells the process specq started from a later one that reused its number. None where /proc cannot say."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def cmdline(pid: int) -> list[str] | None:
    """Process `pid`'s argument list (/proc/PID/cmdline); None where /proc cannot say."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    return [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a]


def _proc_stats() -> list[list[str]] | None:
    """(pid, state, ppid, pgrp, ...) of every process, from /proc (Linux); None elsewhere."""
    root = Path("/proc")
    if not (root / "self" / "stat").exists():
        return None
    out: list[list[str]] = []
    for entry in root.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "stat").read_text(encoding="ascii", errors="replace")
        except OSError:
            continue
        out.append([entry.name, *raw.rsplit(")", 1)[1].split()])
    return out


def group_alive(pgid: int) -> bool:
    """Whether any process of group `pgid` still runs (zombies waiting to be reaped do not count)."""
    stats = _proc_stats()
    if stats is not None:
        return any(st[3] == str(pgid) and st[1] != "Z" for st in stats)
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def stop_group(pid: int, grace_s: float = 10.0) -> None:
    """Stop a process group we did not start in this process (a detached server): TERM, wait, KILL."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and (pid_alive(pid) or group_alive(pid)):
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
