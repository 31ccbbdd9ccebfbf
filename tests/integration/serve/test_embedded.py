"""A real embedded server (child process, real HTTP) on a target/draft pair with K = 3: OpenAI-compatible
answers, streaming with exact usage, /metrics counters that match the tokens returned, consistent speculative
counters, and a clean shutdown that leaves no process behind."""

from __future__ import annotations

import json
import os
from contextlib import ExitStack

import httpx
import pytest

from specq.pipeline.config.models import SpecqConfig
from specq.pipeline.serve import ServeRequest, create_engine
from specq.pipeline.serve.process import group_alive, pid_alive

pytestmark = pytest.mark.integration

K = 3


def scrape(url: str) -> dict[str, float]:
    """Prometheus text → {'name{labels}': value} for lmdeploy: series."""
    out: dict[str, float] = {}
    for line in httpx.get(url, timeout=10).text.splitlines():
        if line.startswith("lmdeploy:"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def total(metrics: dict[str, float], name: str) -> float:
    return sum(v for k, v in metrics.items() if k.split("{")[0] == name)


@pytest.fixture(scope="module")
def server(toy_pair, tmp_path_factory: pytest.TempPathFactory):
    target, draft = toy_pair.target, toy_pair.draft
    cfg = SpecqConfig.model_validate(
        {
            "model": {"model_path": str(target), "draft_model_path": str(draft), "num_draft_tokens": K,
                      "model_name": "toy"},
            "engine": {"engine": "embedded", "device": "cpu", "max_queue": 2, "ready_timeout_s": 180},
        }
    )  # fmt: skip
    engine = create_engine(ServeRequest.from_config(cfg), tmp_path_factory.mktemp("run"))
    engine.start()
    try:
        engine.wait_ready()
        yield engine
    finally:
        engine.stop()


def test_chat_content_as_a_list_of_parts(server) -> None:
    """OpenAI clients may send `content` as parts; it used to be answered with HTTP 500."""
    parts = [{"type": "text", "text": "def add(a, b):"}]
    body = {
        "model": "toy",
        "max_tokens": 4,
        "temperature": 0,
        "messages": [{"role": "user", "content": parts}],
    }
    r = httpx.post(f"{server.base_url}/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    plain = dict(body, messages=[{"role": "user", "content": "def add(a, b):"}])
    same = httpx.post(f"{server.base_url}/v1/chat/completions", json=plain, timeout=60)
    assert r.json()["choices"][0]["message"]["content"] == same.json()["choices"][0]["message"]["content"]


def test_models_and_health(server) -> None:
    r = httpx.get(f"{server.base_url}/v1/models", timeout=10)
    assert r.status_code == 200
    assert [m["id"] for m in r.json()["data"]] == ["toy"]
    assert httpx.get(f"{server.base_url}/health", timeout=10).status_code == 200


def test_completions_and_chat_match_metrics(server) -> None:
    before = scrape(server.metrics_url)
    r = httpx.post(
        f"{server.base_url}/v1/completions",
        json={"model": "toy", "prompt": "def add(a, b):", "max_tokens": 12, "ignore_eos": True},
        timeout=120,
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["usage"]["completion_tokens"] == 12
    assert body["choices"][0]["finish_reason"] == "length"

    # Streaming chat with a final usage chunk: count the tokens the server says it generated.
    chunks, usage, text = 0, None, ""
    with httpx.stream(
        "POST",
        f"{server.base_url}/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "import os"}], "max_tokens": 10, "stream": True,
              "stream_options": {"include_usage": True}, "min_new_tokens": 10},
        timeout=120,
    ) as s:  # fmt: skip
        assert s.status_code == 200
        for line in s.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            data = json.loads(line[6:])
            chunks += 1
            if data.get("usage"):
                usage = data["usage"]
            for c in data["choices"]:
                text += c.get("delta", {}).get("content") or ""
    assert usage is not None and usage["completion_tokens"] == 10
    assert chunks >= 3

    after = scrape(server.metrics_url)  # no lag: the embedded engine flushes at once
    gen = total(after, "lmdeploy:generation_tokens_total") - total(before, "lmdeploy:generation_tokens_total")
    prompt = total(after, "lmdeploy:prompt_tokens_total") - total(before, "lmdeploy:prompt_tokens_total")
    assert gen == 12 + 10
    assert prompt == body["usage"]["prompt_tokens"] + usage["prompt_tokens"]

    def grown(name: str) -> float:
        return total(after, name) - total(before, name)

    drafts = grown("lmdeploy:spec_decode_num_drafts_total")
    drafted = grown("lmdeploy:spec_decode_num_draft_tokens_total")
    accepted = grown("lmdeploy:spec_decode_num_accepted_tokens_total")
    per_pos = grown("lmdeploy:spec_decode_num_accepted_tokens_per_pos_total")
    assert drafts > 0
    assert 0 <= accepted <= drafted <= K * drafts
    assert per_pos == accepted
    # Each request's first token comes from its prefill and every verification step emits its accepted
    # drafts plus one token of the target's; a step drafts min(K, tokens left - 1), so a request whose last
    # step has one token left takes it without drafting (at most one such step a request, two requests).
    assert accepted + drafts + 2 <= gen <= accepted + drafts + 2 + 2
    labels = [k for k in after if k.startswith("lmdeploy:spec_decode_num_accepted_tokens_per_pos_total")]
    assert any('position="0"' in k and 'model_name="toy"' in k and 'engine="0"' in k for k in labels)


def test_metrics_text_format(server) -> None:
    text = httpx.get(server.metrics_url, timeout=10).text
    for name in ("spec_decode_num_drafts_total", "spec_decode_num_draft_tokens_total",
                 "spec_decode_num_accepted_tokens_total", "spec_decode_num_accepted_tokens_per_pos_total",
                 "generation_tokens_total", "prompt_tokens_total"):  # fmt: skip
        assert f"# TYPE lmdeploy:{name} counter" in text
    assert "_created" not in text


def test_bad_requests(server) -> None:
    r = httpx.post(f"{server.base_url}/v1/chat/completions", json={"messages": []}, timeout=10)
    assert r.status_code == 400
    r = httpx.post(f"{server.base_url}/v1/completions", json={"model": "other", "prompt": "x"}, timeout=10)
    assert r.status_code == 404


def test_full_queue_answers_429(server) -> None:
    """One request generating and `max_queue` (2) waiting: the next is turned away with 429, not queued
    forever, and the waiting ones are served. Streamed requests get their status when they are admitted, so
    the four arrive in a known order without threads. The premise (the long one still generating when the
    fourth arrived) is read from the server's own count of finished requests, which a request adds to before
    it leaves the queue: unchanged after the fourth's answer, nothing had left. An attempt whose long request
    ended first (a very slow machine: it had ~2000 tokens to go) is tried again rather than judged."""
    url, metrics = f"{server.base_url}/v1/completions", f"{server.base_url}/metrics"
    long_body = {"prompt": "class A:", "max_tokens": 2000, "ignore_eos": True, "stream": True}
    short = {"prompt": "class A:", "max_tokens": 8, "ignore_eos": True, "stream": True}
    with httpx.Client(timeout=300) as client:
        for _attempt in range(3):
            with ExitStack() as stack:
                long = stack.enter_context(client.stream("POST", url, json=long_body))
                assert long.status_code == 200
                lines = long.iter_lines()  # kept: a line iterator dropped early closes the connection
                assert any(line.startswith("data: ") for line in lines)  # generating
                finished = total(scrape(metrics), "lmdeploy:request_success_total")
                waiting = [stack.enter_context(client.stream("POST", url, json=short)) for _ in range(2)]
                fourth = stack.enter_context(client.stream("POST", url, json=short))
                if total(scrape(metrics), "lmdeploy:request_success_total") != finished:
                    continue  # the long request ended around the fourth's arrival: no full queue to judge
                assert [r.status_code for r in waiting] == [200, 200]
                assert fourth.status_code == 429, fourth.status_code
                assert "queue full" in json.loads(fourth.read())["error"]["message"]
                long.close()  # the client goes away: the server stops generating for it
                for r in waiting:
                    assert "data: [DONE]" in list(r.iter_lines())
                return
    pytest.fail("the 2000-token request ended before the queue filled, three times over")


def test_logprobs_are_refused_while_speculating_but_token_ids_are_served(server) -> None:
    body = {"model": "toy", "max_tokens": 4, "temperature": 0, "return_token_ids": True,
            "messages": [{"role": "user", "content": "def add(a, b):"}]}  # fmt: skip
    r = httpx.post(f"{server.base_url}/v1/chat/completions", json={**body, "logprobs": True}, timeout=60)
    assert r.status_code == 400 and "while speculating" in r.json()["error"]["message"]
    ok = httpx.post(f"{server.base_url}/v1/chat/completions", json=body, timeout=60).json()
    message = ok["choices"][0]["message"]
    assert len(message["gen_tokens"]) == ok["usage"]["completion_tokens"]


def test_stop_leaves_no_process(server) -> None:
    """Runs last in this module: stopping the server leaves neither it nor its process group behind."""
    pid = server.pid
    assert pid is not None and os.getpgid(pid) == pid  # its own process group
    server.stop()
    assert not pid_alive(pid)
    assert not group_alive(pid)
    assert server.log_path.is_file()
    server.stop()  # idempotent
