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
from specq.pipeline.config.models import SpecqConfig
from specq.pipeline.errors import ProcessFailed
from specq.pipeline.serve.process import ManagedProcess, free_port
from tests.fake_openai import SyntheticEngine

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


M = [{"role": "user", "content": "def add(a, b):"}]
BAD_REQUESTS = {
    # messages of the wrong shape
    "messages not objects": ("/v1/chat/completions", {"messages": [1, "x"]}, "'messages[0]' must be"),
    "messages a string": ("/v1/chat/completions", {"messages": "hi"}, "'messages' must be a non-empty list"),
    "message without role": ("/v1/chat/completions", {"messages": [{"content": "hi"}]}, "'messages[0].role'"),
    "content a number": ("/v1/chat/completions", {"messages": [{"role": "user", "content": 5}]}, ".content"),
    "content part not text": (
        "/v1/chat/completions", {"messages": [{"role": "user", "content": [{"type": "image"}]}]}, "text part"
    ),
    # fields of the wrong type
    "stream_options a string": (
        "/v1/chat/completions", {"messages": M, "stream": True, "stream_options": "yes"}, "'stream_options'"
    ),
    "stream a string": ("/v1/chat/completions", {"messages": M, "stream": "yes"}, "'stream' must be true"),
    "max_tokens a string": ("/v1/completions", {"prompt": "def", "max_tokens": "5"}, "'max_tokens'"),
    "ignore_eos a number": ("/v1/completions", {"prompt": "def", "ignore_eos": 1}, "'ignore_eos'"),
    "model a number": ("/v1/completions", {"prompt": "def", "model": 3}, "'model' must be a string"),
    "huge seed": ("/v1/completions", {"prompt": "def", "seed": 2**70}, "'seed' must be an integer in"),
    "seed a float": ("/v1/completions", {"prompt": "def", "seed": 1.5}, "'seed'"),
    "token id too large": ("/v1/completions", {"prompt": [1, 2, 10**6]}, "token id 1000000 is out of range"),
    "negative token id": ("/v1/completions", {"prompt": [1, -4]}, "token id -4 is out of range"),
    "prompt an object": ("/v1/completions", {"prompt": {"a": 1}}, "'prompt' must be a string"),
    # out of the OpenAI API's ranges
    "max_tokens -5": ("/v1/completions", {"prompt": "def", "max_tokens": -5}, "'max_tokens' must be"),
    "max_tokens 0": ("/v1/completions", {"prompt": "def", "max_tokens": 0}, "'max_tokens' must be"),
    "max_completion_tokens 0": ("/v1/chat/completions", {"messages": M, "max_completion_tokens": 0}, "≥ 1"),
    "repetition_penalty 0": ("/v1/completions", {"prompt": "def", "repetition_penalty": 0}, "(0, 10]"),
    "top_p 5": ("/v1/completions", {"prompt": "def", "top_p": 5}, "'top_p' must be a number in (0, 1]"),
    "top_p 0": ("/v1/completions", {"prompt": "def", "top_p": 0}, "'top_p'"),
    "temperature -1": ("/v1/completions", {"prompt": "def", "temperature": -1}, "[0, 2]"),
    "temperature 3": ("/v1/completions", {"prompt": "def", "temperature": 3}, "[0, 2]"),
    "top_k -1": ("/v1/completions", {"prompt": "def", "top_k": -1}, "'top_k'"),
    "min_tokens above max": ("/v1/completions", {"prompt": "x", "max_tokens": 4, "min_tokens": 9}, "[0, 4]"),
    "presence_penalty 3": ("/v1/completions", {"prompt": "def", "presence_penalty": 3}, "[-2, 2]"),
    "n 2": ("/v1/completions", {"prompt": "def", "n": 2}, "n > 1"),
    # booleans are booleans: "yes" is not true
    "chat logprobs a string": ("/v1/chat/completions", {"messages": M, "logprobs": "yes"}, "must be true"),
    "chat logprobs a number": ("/v1/chat/completions", {"messages": M, "logprobs": 1}, "must be true"),
    "top_logprobs a boolean": (
        "/v1/chat/completions", {"messages": M, "logprobs": True, "top_logprobs": False}, "'top_logprobs'"
    ),
    "completion logprobs a string": ("/v1/completions", {"prompt": "def", "logprobs": "yes"}, "'logprobs'"),
    "return_token_ids a string": ("/v1/completions", {"prompt": "def", "return_token_ids": "yes"}, "boolean"),
}  # fmt: skip


@pytest.mark.parametrize("case", BAD_REQUESTS)
def test_embedded_server_refuses_a_bad_request_with_400(case, embedded_server):
    path, body, needle = BAD_REQUESTS[case]
    for stream in (False, True):
        r = httpx.post(embedded_server + path, json={"stream": stream, **body}, timeout=60)
        assert r.status_code == 400, r.text  # before anything is generated: never a 500, never a 200 stream
        err = r.json()["error"]
        assert err["type"] == "invalid_request_error" and err["code"] == 400
        assert needle in err["message"], err["message"]


@pytest.mark.parametrize(
    "raw",
    [b"[" * 100_000 + b"]" * 100_000, b'{"prompt": "\xff\xfe"}', b'{"prompt": "def"', b"[1, 2]"],
    ids=["deeply nested", "not UTF-8", "truncated", "not an object"],
)
def test_embedded_server_refuses_an_unparsable_body_with_400(raw, embedded_server):
    r = httpx.post(
        embedded_server + "/v1/completions",
        content=raw,
        headers={"content-type": "application/json"},
        timeout=60,
    )
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize(
    "body",
    [{"max_tokens": 3, "seed": -3}, {"max_tokens": 3, "seed": 2**64 - 1, "temperature": 0.7, "top_k": 0},
     {"max_tokens": None, "top_p": None, "temperature": None, "max_completion_tokens": 3}],
    ids=["negative seed", "largest seed", "nulls take defaults"],
)  # fmt: skip
def test_embedded_server_accepts_the_edges_of_the_ranges(body, embedded_server):
    r = httpx.post(embedded_server + "/v1/completions", json={"prompt": "def", **body}, timeout=60)
    assert r.status_code == 200, r.text
    assert 1 <= r.json()["usage"]["completion_tokens"] <= 3
