"""A completion workload's reference pass on LMDeploy goes through LMDeploy's own /generate endpoint: LMDeploy
0.18's /v1/completions returns no logprobs (asked for them, its stream raises "logprobs is removed" after the
headers, so the connection drops; its whole reply sets none). On the H200 (2026-12-05, the 27B-AWQ twin) the
reference pass through /v1/completions ended "peer closed connection without sending complete message body"
for 8 of 8 prompts. The fake server here answers both endpoints as LMDeploy 0.18's source does
(`serve/openai/endpoints/completions.py`, `generate.py`: `output_ids`, `meta_info.output_token_logprobs` as
(logprob, id) pairs, `output_top_logprobs` as lists of them), over real HTTP."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from http.server import ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any

import pytest

from specq.pipeline.bench.client import RequestSpec, generate_payload, run_async, run_generate
from specq.pipeline.bench.divergence import top2_margin
from specq.pipeline.bench.runner import RunContext
from specq.pipeline.report.models import RequestRecord, Run
from specq.pipeline.workload import Prompt, Workload
from tests.fake_openai import JsonHandler

IDS = [5, 7, 9, 11]
# token 2 (id 9) nearly tied with id 4; the others clear winners
TOPS = [[[-0.01, 5], [-5.0, 3]], [[-0.02, 7], [-4.0, 2]], [[-0.6, 9], [-0.7, 4]], [[-0.03, 11], [-6.0, 1]]]


def decode(ids: Sequence[int]) -> str:
    return "".join(f" w{i}" for i in ids)


class FakeLMDeploy:
    def __init__(self, reply: Any = None) -> None:
        self.reply = reply
        self.generate_bodies: list[dict[str, Any]] = []
        self.completion_bodies: list[dict[str, Any]] = []

    def handler(self) -> type[JsonHandler]:
        fake = self

        class Handler(JsonHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                if self.path == "/generate":
                    fake.generate_bodies.append(body)
                    reply = fake.reply or {
                        "text": decode(IDS),
                        "output_ids": IDS,
                        "meta_info": {
                            "finish_reason": {"type": "length"},
                            "output_token_logprobs": [[t[0][0], i] for t, i in zip(TOPS, IDS, strict=True)],
                            "output_top_logprobs": TOPS,
                            "prompt_tokens": 3,
                            "completion_tokens": 4,
                        },
                    }
                    self._send(200, json.dumps(reply).encode())
                    return
                fake.completion_bodies.append(body)
                # LMDeploy 0.18's completions stream with logprobs: headers, then the generator raises
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                self.wfile.flush()
                self.close_connection = True

        return Handler


@contextmanager
def serve(fake: FakeLMDeploy) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), fake.handler())
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


PROMPT = Prompt(id="p0", category="code", prompt="def f(x):")
SPEC = RequestSpec(
    mode="completion", model="m", max_tokens=4, temperature=0.0, ignore_eos=True, top_logprobs=2
)


def test_the_generate_request_asks_for_the_top_two_logprobs_of_the_raw_prompt() -> None:
    body = generate_payload(SPEC, PROMPT)
    assert body == {
        "prompt": "def f(x):", "max_tokens": 4, "temperature": 0.0, "return_logprob": True,
        "top_logprobs_num": 2, "stream": False, "ignore_eos": True,
    }  # fmt: skip


def test_generate_gives_ids_and_each_tokens_top_two_as_text() -> None:
    fake = FakeLMDeploy()
    with serve(fake) as url:
        (rec,) = run_async(run_generate(url, SPEC, [PROMPT], concurrency=1, decode=decode))
    assert rec.ok and rec.output_text == " w5 w7 w9 w11" and rec.token_ids == IDS and rec.output_tokens == 4
    assert rec.scores is not None and [s.token for s in rec.scores] == [" w5", " w7", " w9", " w11"]
    assert rec.scores[2].top == [(" w9", -0.6), (" w4", -0.7)]
    assert top2_margin(rec.scores[2]) == pytest.approx(0.1)
    assert top2_margin(rec.scores[0]) == pytest.approx(4.99)
    assert rec.finish_reason == "length"
    assert fake.generate_bodies[0]["return_logprob"] is True


@pytest.mark.parametrize(
    "reply",
    [
        {"text": "x"},  # no output_ids
        {"text": "x", "output_ids": [1, 2], "meta_info": {"output_token_logprobs": [[-0.1, 1]]}},  # 1 for 2
        {"text": 3, "output_ids": [1], "meta_info": {}},
    ],
)
def test_a_generate_reply_of_another_shape_is_an_error_not_a_guess(reply: dict[str, Any]) -> None:
    with serve(FakeLMDeploy(reply)) as url:
        (rec,) = run_async(run_generate(url, SPEC, [PROMPT], concurrency=1, decode=decode))
    assert not rec.ok and rec.error is not None and rec.error.startswith("unexpected /generate reply")
    assert rec.scores is None


def context() -> RunContext:
    settings = SimpleNamespace(
        mode="completion", max_tokens=4, temperature=0.0, seed=None, ignore_eos=True, request_timeout_s=10.0
    )
    request: Any = SimpleNamespace(settings=settings, api_key=None)
    counter: Any = SimpleNamespace(decode=decode)
    return RunContext(request, Workload(source="test", prompts=[PROMPT]), counter, lambda _msg: None)


def baseline(engine: str) -> Run:
    timed = RequestRecord(id="p0", category="code", output_text=" w5 w7 w9 w11")
    return Run(label="baseline", draft_tokens=0, concurrency=1, engine=engine, requests=[timed])


def test_an_lmdeploy_baselines_reference_pass_gets_every_logprob_through_generate() -> None:
    fake = FakeLMDeploy()
    run = baseline("lmdeploy")
    with serve(fake) as url:
        context().reference_pass(run, url, "m")
    ref = run.reference_pass
    assert ref is not None and (ref.requests, ref.ok, ref.with_logprobs, ref.with_token_ids) == (1, 1, 1, 1)
    assert ref.same_as_timed == 1 and ref.error is None
    assert fake.generate_bodies and not fake.completion_bodies
    assert run.reference["p0"].token_ids == IDS


def test_through_v1_completions_the_same_server_gives_no_logprobs() -> None:
    """What the reference pass got before, and still gets from an engine other than LMDeploy that behaves so:
    an error recorded, no logprobs, the run not failed."""
    fake = FakeLMDeploy()
    run = baseline("vllm")
    with serve(fake) as url:
        context().reference_pass(run, url, "m")
    ref = run.reference_pass
    assert ref is not None and ref.with_logprobs == 0 and ref.ok == 0 and ref.error
    assert fake.completion_bodies and fake.completion_bodies[0]["logprobs"] == 2 and not fake.generate_bodies
