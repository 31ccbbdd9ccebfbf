"""Unbounded requests and sweeps with a dying server: a prompt longer than the model's positions is refused
by bench before anything is sent (exit 2) and by the embedded server with OpenAI's HTTP 400; a server killed
mid-sweep fails its own run only, and the report says which and why."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading

import httpx
import pytest

from specq.pipeline.bench import BenchRequest
from specq.pipeline.bench.runner import run_bench
from specq.pipeline.bench.synthetic import SyntheticEngine
from specq.pipeline.config.models import SpecqConfig
from specq.pipeline.errors import ProcessFailed
from specq.pipeline.serve.process import ManagedProcess, free_port

from .conftest import assert_one_line

pytestmark = pytest.mark.integration
LONG = "def f(x):\n    return x\n" * 2000  # ~20k tokens for a 2,048-position model


def test_bench_refuses_a_prompt_beyond_the_positions(specq, toy_pair, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(
        json.dumps({"id": "short", "prompt": "hi"}) + "\n" + json.dumps({"id": "huge", "prompt": LONG})
    )
    r = specq("bench", toy_pair.target, "--engine", "embedded", "--prompts", prompts, "--out", tmp_path / "b")
    assert_one_line(r, 2, "prompt 'huge'", "2048 positions", "--max-tokens")
    assert not (tmp_path / "b" / "servers").exists()  # refused before any server started


def test_bench_refuses_max_tokens_beyond_the_positions(specq, toy_pair, tmp_path):
    r = specq(
        "bench", toy_pair.target, "--engine", "embedded", "--max-tokens", "4096", "--out", tmp_path / "b"
    )
    assert_one_line(r, 2, "--max-tokens 4096", "2048 positions")


@pytest.fixture(scope="module")
def embedded_server(toy_pair, tmp_path_factory):
    port = free_port()
    log = tmp_path_factory.mktemp("embedded") / "server.log"
    proc = ManagedProcess(
        [sys.executable, "-m", "specq.pipeline.serve.embedded", str(toy_pair.target), "--served-model-name",
         "t", "--port", str(port), "--device", "cpu"],
        log, die_with_parent=True,
    )  # fmt: skip
    proc.start()
    try:
        proc.wait_ready(f"http://127.0.0.1:{port}/v1/models", 240)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.stop()


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [("/v1/chat/completions", {"messages": [{"role": "user", "content": LONG}]}, "messages"),
     ("/v1/completions", {"prompt": LONG}, "prompt"),
     ("/v1/completions", {"prompt": "def", "max_tokens": 5000}, "prompt")],
    ids=["chat", "completion", "max_tokens"],
)  # fmt: skip
def test_embedded_server_answers_400_beyond_the_positions(path, body, field, embedded_server):
    r = httpx.post(embedded_server + path, json={"model": "t", **body}, timeout=120)
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error"
    assert "maximum context length is 2048 tokens" in err["message"] and f"in the {field}" in err["message"]
    ok = httpx.post(embedded_server + "/v1/completions", json={"prompt": "def", "max_tokens": 2}, timeout=60)
    assert ok.status_code == 200  # the server is unharmed


def test_sweep_survives_a_server_killed_mid_run(tmp_path):
    """kill -9 the k=3 server while it serves: k=3 is reported failed with the reason, k=4 still runs."""
    cfg = SpecqConfig()
    cfg.model.model_path = None
    cfg.bench = cfg.bench.model_validate(
        {"draft_tokens": [3, 4], "requests": 8, "max_tokens": 24, "warmup": 0, "suite": "code",
         "metrics_settle_timeout_s": 2.0, "out": str(tmp_path / "out")}
    )  # fmt: skip

    def factory(c, run_dir, progress):
        engine = SyntheticEngine(c, run_dir, progress, "--step-s", "0.02", "--ttft-s", "0.01")
        if c.draft_tokens == 3:
            start = engine.start

            def start_then_kill() -> None:
                start()
                threading.Timer(1.0, lambda: os.kill(engine._proc.pid, signal.SIGKILL)).start()

            engine.start = start_then_kill  # type: ignore[method-assign]
        return engine

    # A run that measured nothing fails the benchmark (exit 5), after the whole report is written.
    with pytest.raises(ProcessFailed, match="k=3@c1 measured nothing: the server died"):
        run_bench(BenchRequest.from_config(cfg), engine_factory=factory)
    saved = json.loads((tmp_path / "out" / "report.json").read_text())
    by = {r["label"]: r for r in saved["runs"]}
    assert by["k=3"]["status"] == "server-failed" and "died" in (by["k=3"]["reason"] or "")
    assert by["baseline"]["status"] == "ok" and by["k=4"]["status"] == "ok"
    assert [r["status"] for r in saved["runs"]] == ["ok", "server-failed", "ok"]
    assert saved["complete"] is False
