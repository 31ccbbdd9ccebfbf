"""Processes specq manages or signals: a child that fails is one line naming its log (the log keeps the
rest), `serve stop` never signals a process that merely reuses a recorded PID, a double Ctrl-C does not cut
the cleanup short with a second traceback, and the data libraries stay quiet on stderr."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specq.pipeline.errors import ProcessFailed
from specq.pipeline.serve.process import ManagedProcess, start_ticks

from .conftest import SPECQ, Result, assert_one_line
from .hostile_server import Behaviour, good_stream, hostile_server

pytestmark = pytest.mark.integration


def _py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


CHILDREN = {
    "a long traceback": (
        "import sys\nfor i in range(40): print('loading shard', i)\nraise RuntimeError('no weights here')",
        "RuntimeError: no weights here",
    ),
    "forty lines then exit 3": ("for i in range(40): print('line', i)\nraise SystemExit(3)", "line 39"),
    "an empty log": ("raise SystemExit(7)", "(empty log)"),
    "an error among warnings": (
        "print('Error: CUDA out of memory')\nfor i in range(30): print('warning', i)\nraise SystemExit(1)",
        "Error: CUDA out of memory",
    ),
}


@pytest.mark.parametrize("case", CHILDREN)
def test_failed_child_is_one_line_naming_its_log(case, tmp_path):
    code, needle = CHILDREN[case]
    notes: list[str] = []
    log = tmp_path / "server.log"
    proc = ManagedProcess(_py(code), log, progress=notes.append)
    proc.start()
    with pytest.raises(ProcessFailed) as e:
        proc.wait_ready("http://127.0.0.1:9/v1/models", timeout_s=60)
    msg = str(e.value)
    assert "\n" not in msg and needle in msg and f"(log: {log})" in msg
    assert e.value.exit_code == 5
    assert all("\n" not in n for n in notes)  # no tail of the log on the progress channel
    assert proc.poll() is not None


def test_server_that_fails_to_load_is_one_line(specq, toy_target, tmp_path):
    """End to end: the embedded server cannot load the model (an architecture transformers does not know);
    specq exits 5 with one line holding the child's own error and the log's path, and the log keeps it all."""
    cfg = json.loads((toy_target / "config.json").read_text())
    cfg["model_type"] = "nosuchmodel"
    (toy_target / "config.json").write_text(json.dumps(cfg))
    r = specq("serve", toy_target, "--engine", "embedded", "--run-dir", tmp_path / "run")
    line = assert_one_line(r, 5, "embedded server exited", "nosuchmodel", "(log: ")
    log = Path(line.rsplit("(log: ", 1)[1].rstrip(")"))
    assert log.is_file() and "nosuchmodel" in log.read_text()


# ---------------------------------------------------------------------------------------- serve stop


def _state(state_dir: Path, pid: int, port: int, **extra: object) -> Path:
    state_dir.mkdir(parents=True, exist_ok=True)
    info = {
        "engine": "embedded", "backend": None, "model_name": "t", "model_path": "/models/t",
        "draft_model_path": None, "method": None, "draft_tokens": 0, "url": f"http://127.0.0.1:{port}",
        "metrics_url": f"http://127.0.0.1:{port}/metrics", "command": ["python", "-m", "x"], "log": "l",
        "pid": pid, **extra,
    }  # fmt: skip
    path = state_dir / f"{port}.json"
    path.write_text(json.dumps(info))
    return path


@pytest.fixture
def bystander(tmp_path):
    """An unrelated process (in its own session, like a detached server) that must survive `serve stop`."""
    p = subprocess.Popen(["sleep", "300"], start_new_session=True)
    yield p
    p.kill()
    p.wait()


STALE = {
    "start time differs": lambda p: {"pid_start": (start_ticks(p.pid) or 0) + 12345},
    "no start time, another command line": lambda p: {},
    "start time differs, same model path": lambda p: {"pid_start": 1, "model_path": "300"},
}


@pytest.mark.parametrize("case", STALE)
def test_stop_leaves_a_process_that_reused_the_pid_alone(case, bystander, specq, tmp_path):
    state_dir = tmp_path / "state"
    path = _state(state_dir, bystander.pid, 23999, **STALE[case](bystander))
    r = specq("serve", "stop", "--port", "23999", env={"SPECQ_STATE_DIR": str(state_dir)})
    assert r.code == 0, r.err
    assert f"pid {bystander.pid} is no longer the embedded server specq started" in r.err
    assert "Traceback" not in r.err
    time.sleep(0.2)
    assert bystander.poll() is None  # still running: never signalled
    assert not path.exists()  # the stale record is gone


def test_status_does_not_call_a_reused_pid_running(bystander, specq, tmp_path):
    state_dir = tmp_path / "state"
    _state(state_dir, bystander.pid, 23997, pid_start=1)
    r = specq("serve", "status", "--json", env={"SPECQ_STATE_DIR": str(state_dir)})
    assert r.code == 0 and json.loads(r.out)[0]["running"] is False


def test_stop_still_stops_the_recorded_server(specq, tmp_path):
    """The control: a process whose start time matches the record is stopped."""
    p = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        state_dir = tmp_path / "state"
        _state(state_dir, p.pid, 23996, pid_start=start_ticks(p.pid))
        r = specq("serve", "stop", "--port", "23996", env={"SPECQ_STATE_DIR": str(state_dir)})
        assert r.code == 0, r.err
        p.wait(timeout=15)
        assert p.returncode == -signal.SIGTERM
    finally:
        if p.poll() is None:
            p.kill()


# ------------------------------------------------------------------------------------ interrupts, noise


@pytest.mark.parametrize("presses", [1, 2, 3])
def test_repeated_ctrl_c_is_one_line_and_a_whole_partial_report(presses, tmp_path):
    b = Behaviour(events=good_stream(60), delay_s=0.05)
    out = tmp_path / "b"
    with hostile_server(b) as url:
        proc = subprocess.Popen(
            [*SPECQ, "-q", "bench", "--url", url, "--requests", "4", "--max-tokens", "64", "--warmup", "0",
             "--out", str(out)],
            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            # the server was reached (its model probe, or a request): Ctrl-C lands as bench starts its
            # requests or mid-stream, wherever Python is (once inside an event loop's constructor)
            while not b.seen_auth and time.monotonic() < deadline:
                time.sleep(0.05)
            for _ in range(presses):
                proc.send_signal(signal.SIGINT)
                time.sleep(0.1)
            stdout, stderr = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert "Exception ignored" not in stderr
    assert_one_line(Result(proc.returncode, stdout, stderr), 130, "interrupted")
    report = json.loads((out / "report.json").read_text())
    assert report["complete"] is False
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temporary files left


@pytest.mark.parametrize(
    ("name", "text"),
    [("p.csv", "a,b\n1,2\n"), ("p.json", '[{"a": 1}]'), ("p.parquet", None)],
)
def test_local_datasets_read_quietly(name, text, specq, toy_target, tmp_path):
    """A local dataset file goes through `datasets` (and pyarrow): no progress bars or import chatter on
    stderr, only the one line about the missing field."""
    path = tmp_path / name
    if text is None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.table({"a": [1, 2]}), path)
    else:
        path.write_text(text)
    r = specq("bench", toy_target, "--engine", "embedded", "--dataset", path, "--out", tmp_path / "b")
    assert_one_line(r, 2, "has no field 'prompt'", "fields: a")
    assert "Generating" not in r.err and "examples/s" not in r.err
