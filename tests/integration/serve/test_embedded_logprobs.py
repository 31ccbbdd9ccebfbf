"""The embedded engine's logprobs and token ids, as LMDeploy's api_server serves them (chat: `logprobs` +
`top_logprobs`, a completion: `logprobs: N`; `return_token_ids` → `gen_tokens`), on the small toy target:
streamed and whole answers agree, and every logprob equals a separate teacher-forced forward pass of the
target over the same tokens."""

from __future__ import annotations

import json
import warnings

import pytest

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def client(toy_pair):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fastapi.testclient import TestClient

    from specq.pipeline.serve.embedded.app import build_app
    from specq.pipeline.serve.embedded.generator import Generator
    from specq.pipeline.serve.embedded.metrics import EngineMetrics

    gen = Generator(str(toy_pair.target), device="cpu")
    with TestClient(build_app(gen, EngineMetrics("toy"), "toy")) as c:
        c.generator = gen  # type: ignore[attr-defined]
        yield c


def events(text: str) -> list[dict]:
    return [json.loads(x[5:]) for x in text.splitlines() if x.startswith("data:") and "[DONE]" not in x]


CHAT = {"model": "toy", "messages": [{"role": "user", "content": "def add(a, b):"}], "max_tokens": 6,
        "temperature": 0, "logprobs": True, "top_logprobs": 2, "return_token_ids": True}  # fmt: skip


def test_chat_logprobs_streamed_and_whole_match_a_forward_pass(client) -> None:
    import torch

    whole = client.post("/v1/chat/completions", json=CHAT).json()["choices"][0]
    ids = whole["message"]["gen_tokens"]
    content = whole["logprobs"]["content"]
    assert len(ids) == len(content) == 6
    chunks = events(client.post("/v1/chat/completions", json={**CHAT, "stream": True}).text)
    streamed_ids = [i for c in chunks for ch in c["choices"] for i in ch["delta"].get("gen_tokens", [])]
    scored = [ch["logprobs"]["content"] for c in chunks for ch in c["choices"] if ch.get("logprobs")]
    streamed = [e for entries in scored for e in entries]
    assert streamed_ids == ids and streamed == content
    gen = client.generator
    prompt = gen.encode_chat(CHAT["messages"])
    with torch.no_grad():
        logits = gen.model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1 : -1]
    lp = torch.log_softmax(logits.float(), dim=-1)
    for i, (tok, entry) in enumerate(zip(ids, content, strict=True)):
        assert entry["logprob"] == pytest.approx(float(lp[i, tok]), abs=1e-4)
        values, best = lp[i].topk(2)
        assert [t["token"] for t in entry["top_logprobs"]] == [gen.token_text(int(j)) for j in best]
        assert [t["logprob"] for t in entry["top_logprobs"]] == pytest.approx(values.tolist(), abs=1e-4)
        assert entry["token"] == entry["top_logprobs"][0]["token"]  # greedy: the chosen token is the best


def test_completion_logprobs_shape_and_refusals(client) -> None:
    body = {"model": "toy", "prompt": "def add(a, b):", "max_tokens": 4, "temperature": 0, "logprobs": 2}
    choice = client.post("/v1/completions", json=body).json()["choices"][0]
    lp = choice["logprobs"]
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == 4
    assert "".join(lp["tokens"]) == choice["text"] and lp["text_offset"][0] == 0
    assert all(
        len(t) == 2 and max(t.values()) == v
        for t, v in zip(lp["top_logprobs"], lp["token_logprobs"], strict=True)
    )
    assert "gen_tokens" not in choice  # ids only when asked
    r = client.post("/v1/completions", json={**body, "logprobs": 9})
    assert r.status_code == 400 and "from 0 to 5" in r.json()["error"]["message"]
    plain = client.post("/v1/chat/completions", json={k: v for k, v in CHAT.items() if "logprobs" not in k})
    assert plain.json()["choices"][0]["logprobs"] is None
