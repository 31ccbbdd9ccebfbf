"""The embedded engine's own greedy decode loop (serve/embedded/decode.py) against transformers' `generate` on
the small toy pair: the same tokens plain and speculative (lossless), end-of-sequence and `min_new_tokens` as
transformers applies them, each verification step counted, cancellation, and the requests it leaves to
`generate`."""

from __future__ import annotations

import threading

import pytest

pytestmark = pytest.mark.integration
torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def models(toy_pair):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(toy_pair.target)
    target = AutoModelForCausalLM.from_pretrained(toy_pair.target).eval()
    draft = AutoModelForCausalLM.from_pretrained(toy_pair.draft).eval()
    return tok, target, draft


@pytest.fixture(scope="module")
def prompts(models, toy_corpus) -> list[list[int]]:
    from specq.pipeline.toy.corpus import completion_prompts

    tok = models[0]
    return [tok(p["prompt"])["input_ids"] for p in completion_prompts(toy_corpus, count=4)]


def hf_greedy(target, prompt: list[int], n: int, **kw) -> list[int]:
    ids = torch.tensor([prompt])
    with torch.inference_mode():
        out = target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, do_sample=False,
                              pad_token_id=0, **kw)  # fmt: skip
    return out[0, len(prompt) :].tolist()


def own(target, prompt: list[int], n: int, draft=None, k: int = 0, **kw) -> tuple[list[int], list[list[int]]]:
    from specq.pipeline.serve.embedded.decode import greedy_decode

    chunks: list[list[int]] = []
    out = greedy_decode(
        target, prompt, max_new_tokens=n, emit=chunks.append, draft=draft, draft_tokens=k, **kw
    )
    assert sum(chunks, []) == out
    return out, chunks


@pytest.mark.parametrize("k", [0, 1, 4])
def test_the_loop_decodes_what_generate_decodes(models, prompts, k: int) -> None:
    _, target, draft = models
    eos = target.generation_config.eos_token_id
    for prompt in prompts:
        want = hf_greedy(target, prompt, 40)
        got, chunks = own(target, prompt, 40, draft, k, eos_ids=eos)
        assert got == want
        if k:  # the first token alone after the prefill, then accepted drafts + the target's own per step
            assert len(chunks[0]) == 1 and max(len(c) for c in chunks) <= k + 1


@pytest.mark.parametrize("k", [0, 3])
def test_end_of_sequence_and_min_new_tokens_as_generate_applies_them(models, prompts, k: int) -> None:
    _, target, draft = models
    plain = hf_greedy(target, prompts[0], 30)
    stop = plain[4]  # a token the target writes early: as end-of-sequence it must end the output there
    first = plain.index(stop)
    got, _ = own(target, prompts[0], 30, draft, k, eos_ids=[stop])
    assert got == plain[: first + 1] == hf_greedy(target, prompts[0], 30, eos_token_id=[stop])
    # masked until token 12, as transformers' MinNewTokensLengthLogitsProcessor does
    want = hf_greedy(target, prompts[0], 30, eos_token_id=[stop], min_new_tokens=12)
    got, _ = own(target, prompts[0], 30, draft, k, eos_ids=[stop], min_new_tokens=12)
    assert got == want and len(got) >= 12 and stop not in got[:12]


def test_every_verification_step_is_counted(models, prompts) -> None:
    _, target, draft = models
    steps: list[tuple[int, int]] = []
    got, chunks = own(target, prompts[1], 25, draft, 4, on_verification=lambda d, a: steps.append((d, a)))
    assert len(got) == 25
    # each step drafts min(4, tokens left - 1) and emits its accepted drafts and the target's own token; with
    # one token left a step drafts nothing (a plain step, not counted)
    done = 1
    for (drafted, accepted), chunk in zip(steps, chunks[1:], strict=False):
        assert drafted == min(4, 25 - done - 1) and len(chunk) == accepted + 1
        done += len(chunk)
    assert len(chunks) - 1 - len(steps) in (0, 1)
    assert sum(a for _, a in steps) > 0  # the toy draft is accepted


def test_cancel_stops_between_steps(models, prompts) -> None:
    _, target, draft = models
    flag = threading.Event()

    def emit(ids: list[int]) -> None:
        flag.set()

    from specq.pipeline.serve.embedded.decode import greedy_decode

    out = greedy_decode(target, prompts[0], max_new_tokens=40, emit=emit, draft=draft, draft_tokens=2,
                        cancelled=flag.is_set)  # fmt: skip
    assert len(out) == 1


def test_generator_routes_greedy_to_the_loop_and_the_rest_to_generate(toy_pair, prompts) -> None:
    from specq.pipeline.serve.embedded.generator import GenerationRequest, Generator
    from specq.pipeline.serve.embedded.metrics import EngineMetrics

    metrics = EngineMetrics("toy", draft_tokens=4)
    gen = Generator(str(toy_pair.target), str(toy_pair.draft), draft_tokens=4, device="cpu", metrics=metrics)
    assert gen.own_loop
    greedy = GenerationRequest(prompt_ids=prompts[2], max_new_tokens=24)
    assert gen._greedy(greedy)
    for other in (GenerationRequest(prompt_ids=prompts[2], max_new_tokens=24, temperature=0.7),
                  GenerationRequest(prompt_ids=prompts[2], max_new_tokens=24, repetition_penalty=1.1),
                  GenerationRequest(prompt_ids=prompts[2], max_new_tokens=24, top_logprobs=2)):  # fmt: skip
        assert not gen._greedy(other)
    fast = gen.generate(greedy, lambda d, n: None)
    gen.own_loop = False  # transformers' assisted generation, as before the loop
    slow = gen.generate(greedy, lambda d, n: None)
    assert fast.token_ids == slow.token_ids and fast.finish_reason == slow.finish_reason == "length"
    assert fast.text == slow.text and fast.ttft_s is not None
    # a generation config that adds a logits processor keeps the model on generate
    from specq.pipeline.serve.embedded.decode import eligible

    gen.model.generation_config.repetition_penalty = 1.3
    try:
        assert not eligible(gen.model)
    finally:
        gen.model.generation_config.repetition_penalty = 1.0
    assert eligible(gen.model)
