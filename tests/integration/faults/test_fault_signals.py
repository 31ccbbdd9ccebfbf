"""Signals and kills against commands that start servers: SIGTERM and SIGHUP unwind like Ctrl-C (partial
report marked incomplete, exit 128 + signal, one line), and no server outlives specq, even when specq is
killed outright (SIGKILL, a timeout): its servers die with it (PR_SET_PDEATHSIG)."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from .conftest import SPECQ, Result, assert_one_line

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _listening_descendant(proc: subprocess.Popen, timeout_s: float = 240) -> tuple[psutil.Process, int]:
    """The server specq started, once it listens: (process, port)."""
    deadline = time.monotonic() + timeout_s
    parent = psutil.Process(proc.pid)
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        for child in parent.children(recursive=True):
            try:
                ports = [
                    c.laddr.port for c in child.net_connections("inet") if c.status == psutil.CONN_LISTEN
                ]
            except psutil.Error:
                continue
            if ports:
                return child, ports[0]
        time.sleep(0.2)
    raise AssertionError("no server started")


def _gone(server: psutil.Process, port: int, timeout_s: float = 20) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        alive = server.is_running() and server.status() != psutil.STATUS_ZOMBIE
        if not alive:
            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", port)) != 0
        time.sleep(0.2)
    return False


def _bench(toy_pair, out: Path, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [*SPECQ, "-q", "bench", str(toy_pair.target), "--draft-model", str(toy_pair.draft), "--engine",
         "embedded", "--draft-tokens", "3", "--requests", "400", "--max-tokens", "48", "--warmup", "0",
         "--out", str(out)],
        cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("sig", "code", "words"),
    [(signal.SIGTERM, 143, "terminated by SIGTERM"), (signal.SIGHUP, 129, "terminated by SIGHUP"),
     (signal.SIGINT, 130, "interrupted")],
    ids=["SIGTERM", "SIGHUP", "SIGINT"],
)  # fmt: skip
def test_bench_signal_writes_partial_report_and_stops_server(sig, code, words, toy_pair, tmp_path):
    out = tmp_path / "out"
    proc = _bench(toy_pair, out, tmp_path)
    try:
        server, port = _listening_descendant(proc)
        time.sleep(1.0)  # requests in flight
        proc.send_signal(sig)
        stdout, stderr = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert_one_line(Result(proc.returncode, stdout, stderr), code, words)
    assert _gone(server, port)
    report = json.loads((out / "report.json").read_text())
    assert report["complete"] is False and any("interrupted" in n for n in report["notes"])


def test_bench_killed_outright_leaves_no_server(toy_pair, tmp_path):
    """SIGKILL (what `timeout -s KILL`, the OOM killer or a CI runner does): no handler runs in specq, and
    the server still goes, because it asked the kernel to be signalled when its parent dies."""
    proc = _bench(toy_pair, tmp_path / "out", tmp_path)
    try:
        server, port = _listening_descendant(proc)
        proc.kill()
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert _gone(server, port)


@pytest.mark.parametrize(
    ("sig", "code", "words"),
    [(signal.SIGTERM, 143, "terminated by SIGTERM"), (signal.SIGHUP, 129, "terminated by SIGHUP"),
     (signal.SIGINT, 130, "interrupted")],
    ids=["SIGTERM", "SIGHUP", "SIGINT"],
)  # fmt: skip
def test_foreground_serve_stops_its_server_on_signal(sig, code, words, toy_pair, tmp_path):
    """A foreground server stopped by a signal: the server goes, and specq exits 128 + the signal as the
    README documents (so a supervisor can tell a stop from a clean exit), with one line."""
    proc = subprocess.Popen(
        [*SPECQ, "-q", "serve", str(toy_pair.target), "--engine", "embedded",
         "--run-dir", str(tmp_path / "run")],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        server, port = _listening_descendant(proc)
        proc.send_signal(sig)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert_one_line(Result(proc.returncode, stdout, stderr), code, words)
    assert _gone(server, port)
