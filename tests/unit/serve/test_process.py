"""The supervisor on small real children (plain Python processes): failure with the log's tail, the
readiness deadline, SIGTERM → SIGKILL escalation, no grandchild left behind, and a free port held for its
server until the server is ready."""

from __future__ import annotations

import errno
import http.server
import socket
import sys
import threading
import time
from pathlib import Path

import pytest

from specq.pipeline.errors import ProcessFailed, UsageError
from specq.pipeline.serve import process
from specq.pipeline.serve.process import (
    ManagedProcess,
    check_port_free,
    free_port,
    group_alive,
    pid_alive,
    release_port,
)


def py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_child_that_dies_reports_one_line_and_the_log(tmp_path: Path) -> None:
    notes: list[str] = []
    proc = ManagedProcess(
        py(
            "import sys; print('loading'); print('RuntimeError: no weights here', file=sys.stderr); "
            "sys.exit(3)"
        ),
        tmp_path / "server.log",
        progress=notes.append,
    )
    proc.start()
    with pytest.raises(ProcessFailed) as e:
        proc.wait_ready("http://127.0.0.1:9/v1/models", timeout_s=30)
    msg = str(e.value)
    assert "exited with code 3" in msg and "RuntimeError: no weights here" in msg and "server.log" in msg
    assert "\n" not in msg
    assert not any("loading" in n for n in notes)  # the log's tail stays in the log: one line names it
    assert e.value.exit_code == 5


def test_deadline_stops_the_child(tmp_path: Path) -> None:
    proc = ManagedProcess(py("import time; time.sleep(60)"), tmp_path / "log")
    proc.start()
    pid = proc.pid
    with pytest.raises(ProcessFailed, match="did not answer"):
        proc.wait_ready(f"http://127.0.0.1:{free_port()}/v1/models", timeout_s=1)
    assert pid is not None and not pid_alive(pid)


def test_stop_escalates_and_kills_grandchildren(tmp_path: Path) -> None:
    code = (
        "import signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = ManagedProcess(py(code), tmp_path / "log")
    proc.start()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not (tmp_path / "log").read_text().strip():
        time.sleep(0.05)
    grandchild = int((tmp_path / "log").read_text().split()[0])
    pid = proc.pid
    assert pid is not None
    t = time.monotonic()
    proc.stop(grace_s=0.5)
    # SIGTERM is ignored, so only the escalation to SIGKILL after the 0.5 s grace ends it (about 0.6 s);
    # the bound is over 10x that, so a busy machine cannot fail it, and far below the children's 60 s
    assert time.monotonic() - t < 15
    assert not pid_alive(pid) and not pid_alive(grandchild) and not group_alive(pid)
    proc.stop()  # idempotent


def serve_until_ready(port: int, tmp_path: Path) -> None:
    """A child answering 200 to every GET on `port` (http.server, which binds with SO_REUSEADDR), started and
    waited for as servers are, then stopped."""
    code = (
        "import http.server\n"
        "class H(http.server.BaseHTTPRequestHandler):\n"
        "    def do_GET(self):\n"
        "        self.send_response(200); self.end_headers(); self.wfile.write(b'{}')\n"
        "    def log_message(self, *a): pass\n"
        f"http.server.HTTPServer(('127.0.0.1', {port}), H).serve_forever()\n"
    )
    proc = ManagedProcess(py(code), tmp_path / "log")
    proc.start()
    try:
        proc.wait_ready(f"http://127.0.0.1:{port}/v1/models", timeout_s=30)
    finally:
        proc.stop()


def test_ready_when_models_answers(tmp_path: Path) -> None:
    port = free_port()
    serve_until_ready(port, tmp_path)


def test_port_in_use() -> None:
    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    port = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with pytest.raises(UsageError, match=f"port {port} on 127.0.0.1 is already in use"):
            check_port_free("127.0.0.1", port)
    finally:
        server.shutdown()
        server.server_close()
    check_port_free("127.0.0.1", port)


def test_a_free_port_is_held_until_its_server_is_ready(tmp_path: Path) -> None:
    """The port is nobody else's between the pick and the server's bind: no `bind(host, 0)` returns it (one
    in about 14,000 would if it were let go: 60,000 picks miss it by chance about 1 time in 70), a plain
    bind is refused, a server binding with SO_REUSEADDR still takes it, and once the server answers the
    hold is let go."""
    port = free_port()
    for _ in range(60_000):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            assert s.getsockname()[1] != port
    with socket.socket() as s, pytest.raises(OSError) as refused:
        s.bind(("127.0.0.1", port))
    assert refused.value.errno == errno.EADDRINUSE
    serve_until_ready(port, tmp_path)
    assert port not in process._HELD  # let go (the server's closed connections keep it from a plain bind)
    release_port(port)  # already let go: a no-op
