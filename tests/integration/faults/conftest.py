"""What every fault test shares: running specq as a user would (in-process through the Typer app, or as a
subprocess where the case needs a real process: signals, privileges, stdout), the one-line failure check,
and the check that nothing is left behind (no partial artifact, no process, no listening port).

Permission cases need an unprivileged process: as root (this sandbox, some CI runners) the subprocess drops
CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH from its capability bounding set before exec, so file modes bind it
like any user. Read-only and full file systems are tiny tmpfs mounts when this process may mount (root);
elsewhere those cases skip and /dev/full still exercises a full device."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

SPECQ = [sys.executable, "-c", "from specq.cli.app import main; main()"]
PARTIAL_MARKERS = (".partial", ".work", ".specq-probe-", ".old-")


@dataclass
class Result:
    code: int
    out: str
    err: str


def assert_one_line(r: Result, code: int, *needles: str) -> str:
    """Exit `code`, exactly one stderr line in specq's error form, no traceback, each needle in it."""
    lines = [ln for ln in r.err.splitlines() if ln.strip()]
    assert r.code == code, f"exit {r.code}, expected {code}; stderr:\n{r.err}"
    assert "Traceback" not in r.err, r.err
    assert len(lines) == 1 and lines[0].startswith("specq: error: "), r.err
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"
    assert "Value error" not in lines[0]
    return lines[0]


def _drop_dac_capabilities() -> None:  # in the child, before exec
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
        libc.prctl(24, cap, 0, 0, 0)  # PR_CAPBSET_DROP


def run_specq(
    *args: str | Path,
    cwd: Path,
    env: dict[str, str] | None = None,
    unprivileged: bool = False,
    stdout: int | None = None,
    timeout: float = 120,
) -> Result:
    """`specq ARGS` in a subprocess; `unprivileged` makes file permissions apply even to root."""
    preexec = _drop_dac_capabilities if unprivileged and os.geteuid() == 0 else None
    p = subprocess.run(
        [*SPECQ, *map(str, args)],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        stdout=stdout if stdout is not None else subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        timeout=timeout,
        preexec_fn=preexec,
    )
    return Result(p.returncode, p.stdout or "", p.stderr)


@pytest.fixture
def specq(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Result]:
    """In-process `specq ARGS` (fast: imports are shared), cwd = tmp_path, SPECQ_* env as given."""
    from typer.testing import CliRunner

    from specq.cli.app import app

    monkeypatch.chdir(tmp_path)

    def invoke(*args: str | Path, env: dict[str, str] | None = None) -> Result:
        for k, v in (env or {}).items():
            monkeypatch.setenv(k, v)
        r = CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)
        for k in env or {}:
            monkeypatch.delenv(k)
        return Result(r.exit_code, r.stdout, r.stderr)

    return invoke


def partial_artifacts(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if any(m in p.name for m in PARTIAL_MARKERS)]


def processes_under(root: Path) -> list[psutil.Process]:
    """Live processes (not this one) started in `root` or naming it on their command line."""
    me, found = os.getpid(), []
    for p in psutil.process_iter(["pid", "cmdline", "cwd", "status"]):
        with contextlib.suppress(psutil.Error):
            if p.pid == me or p.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            cwd = p.info["cwd"] or ""
            cmd = " ".join(p.info["cmdline"] or [])
            if cwd.startswith(str(root)) or str(root) in cmd:
                found.append(p)
    return found


def listening_ports(pids: set[int]) -> list[int]:
    return [
        c.laddr.port
        for c in psutil.net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN and c.pid in pids
    ]


@pytest.fixture(autouse=True)
def nothing_left(tmp_path: Path) -> Iterator[None]:
    """After every fault: no partial artifact under tmp_path and no process started there still running."""
    yield
    assert partial_artifacts(tmp_path) == []
    deadline = time.monotonic() + 10  # a server given SIGTERM may take a moment to exit
    alive = processes_under(tmp_path)
    while alive and time.monotonic() < deadline:
        time.sleep(0.2)
        alive = processes_under(tmp_path)
    leftover = [(p.pid, " ".join(p.cmdline())[:120]) for p in alive]
    for p in alive:  # do not let one failure poison the next tests
        with contextlib.suppress(psutil.Error):
            p.kill()
    assert leftover == []


@pytest.fixture
def toy_target(toy_pair, tmp_path: Path) -> Path:
    """A private copy of the cached toy target, free to damage."""
    d = tmp_path / "target"
    shutil.copytree(toy_pair.target, d)
    return d


@pytest.fixture
def toy_draft(toy_pair, tmp_path: Path) -> Path:
    d = tmp_path / "draft"
    shutil.copytree(toy_pair.draft, d)
    return d


@pytest.fixture
def calib(tmp_path: Path) -> Path:
    p = tmp_path / "calib.jsonl"
    p.write_text(
        "".join(json.dumps({"text": f"def f{i}(x):\n    return x + {i}\n"}) + "\n" for i in range(8))
    )
    return p


def _mount(opts: str) -> Iterator[Path]:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    d = Path("/tmp") / f"specq-fault-{uuid.uuid4().hex[:8]}"
    d.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(d)], capture_output=True)
    if r.returncode != 0:
        d.rmdir()
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode().strip()}")
    try:
        yield d
    finally:
        subprocess.run(["umount", "-l", str(d)], check=False)
        with contextlib.suppress(OSError):
            d.rmdir()


@pytest.fixture
def readonly_fs() -> Iterator[Path]:
    """A read-only file system (an empty tmpfs mounted ro)."""
    yield from _mount("ro,size=64k")


@pytest.fixture
def full_fs() -> Iterator[Path]:
    """A file system with 64 KiB of space: any checkpoint written there fills it."""
    yield from _mount("size=64k")


@pytest.fixture
def sized_fs() -> Iterator[Path]:
    """A writable 16 MiB tmpfs (the toy checkpoint fits); a test may remount it read-only."""
    yield from _mount("size=16m")
