"""`specq serve` as a user runs it, in a subprocess: in the foreground until Ctrl-C (SIGINT), and detached
with `serve status` / `serve stop`. Each leaves no server process behind."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from specq.pipeline.serve.process import group_alive, pid_alive

pytestmark = pytest.mark.integration

SPECQ = [sys.executable, "-c", "from specq.cli.app import main; main()"]


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "SPECQ_STATE_DIR": str(tmp_path / "state")}


def _read_json(proc: subprocess.Popen[str], timeout_s: float) -> dict:
    """The one JSON document `specq serve --json` prints on stdout once the server is ready."""
    lines: queue.Queue[str] = queue.Queue()

    def reader() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)

    threading.Thread(target=reader, daemon=True).start()
    text, deadline = "", time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            text += lines.get(timeout=0.5)
        except queue.Empty:
            if proc.poll() is not None:
                break
            continue
        if text.lstrip().startswith("{") and text.rstrip().endswith("}"):
            try:
                return dict(json.loads(text))
            except json.JSONDecodeError:
                continue
    raise AssertionError(f"specq serve printed no JSON (exit {proc.poll()}): {text!r}")


def test_foreground_ctrl_c_stops_the_server(toy_pair, tmp_path: Path) -> None:
    target = toy_pair.target
    proc = subprocess.Popen(
        [*SPECQ, "serve", str(target), "--engine", "embedded", "--device", "cpu", "--json",
         "--run-dir", str(tmp_path / "run")],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=_env(tmp_path),
    )  # fmt: skip
    try:
        info = _read_json(proc, 240)
        child = info["pid"]
        assert pid_alive(child)
        r = httpx.post(f"{info['url']}/v1/completions", json={"prompt": "def", "max_tokens": 2}, timeout=60)
        assert r.status_code == 200
        # The baseline (no draft): speculative counters stay at 0, generation counts what was returned.
        metrics = httpx.get(info["metrics_url"], timeout=10).text
        assert 'lmdeploy:spec_decode_num_drafts_total{engine="0",model_name="target"} 0.0' in metrics
        generated = r.json()["usage"]["completion_tokens"]
        assert (
            f'lmdeploy:generation_tokens_total{{engine="0",model_name="target"}} {float(generated)}'
            in metrics
        )
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 130  # stopped by Ctrl-C, as the README's exit codes say
    assert not pid_alive(child) and not group_alive(child)
    assert (tmp_path / "run" / "embedded.log").is_file()


def test_detach_status_stop(toy_pair, tmp_path: Path) -> None:
    target = toy_pair.target
    env = _env(tmp_path)
    res = subprocess.run(
        [*SPECQ, "serve", str(target), "--engine", "embedded", "--device", "cpu", "--detach", "--json",
         "--model-name", "detached", "--run-dir", str(tmp_path / "run")],
        capture_output=True, text=True, env=env, timeout=240,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    info = json.loads(res.stdout)
    pid = info["pid"]
    stopped = False
    try:
        assert pid_alive(pid)  # outlived the specq process that started it
        assert httpx.get(f"{info['url']}/v1/models", timeout=10).json()["data"][0]["id"] == "detached"
        st = subprocess.run([*SPECQ, "serve", "status", "--json"], capture_output=True, text=True, env=env)
        status = json.loads(st.stdout)
        assert [(s["info"]["pid"], s["running"]) for s in status] == [(pid, True)]
        port = info["url"].rsplit(":", 1)[1]
        sp = subprocess.run(
            [*SPECQ, "serve", "stop", "--port", port], capture_output=True, text=True, env=env
        )
        assert sp.returncode == 0, sp.stderr
        assert not pid_alive(pid) and not group_alive(pid)
        stopped = True
        st = subprocess.run([*SPECQ, "serve", "status", "--json"], capture_output=True, text=True, env=env)
        assert json.loads(st.stdout) == []
    finally:
        # only a server this test did not see stop: once gone, its pid (pid_max 32768) can be another
        # process's within seconds, as it once was here
        if not stopped and pid_alive(pid):
            os.killpg(pid, signal.SIGKILL)
