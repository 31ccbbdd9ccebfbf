"""Decoding for the embedded engine through Hugging Face transformers models. Greedy requests (temperature
0, no repetition penalty, no logprobs) are decoded by specq's own loop (`decode.py`), plain or speculative
with a separate draft model and a constant number of draft tokens K, the same loop for both so a sweep's
baseline and its speculative runs differ only by speculation. Everything else goes through transformers'
`generate` (sampling), with assisted generation when a draft model is loaded; its acceptance is counted from
what each verification step returned: transformers calls the candidate generator's
`update_candidate_strategy(input_ids, scores, num_matches)` once per verification step, with the target's
logits for the K' drafted positions plus the bonus position; K' = scores.shape[1] - 1 and the first
num_matches drafted tokens were accepted. Imports torch; runs only inside the server child process."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...errors import EnvironmentMissing, InputError
from .metrics import EngineMetrics

DTYPES = {"float16": "float16", "bfloat16": "bfloat16", "float32": "float32"}


@dataclasses.dataclass
class GenerationRequest:
    prompt_ids: list[int]
    max_new_tokens: int
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int | None = None
    repetition_penalty: float = 1.0
    min_new_tokens: int = 0
    ignore_eos: bool = False
    seed: int | None = None
    top_logprobs: int | None = None  # record each token's logprob and the top N (None: record nothing)


@dataclasses.dataclass
class TokenLogprob:
    """One generated token's log-probability under the distribution it was chosen from, and the `top` N
    (id, logprob) of that distribution, best first."""

    token_id: int
    logprob: float
    top: list[tuple[int, float]]


class LogprobRecorder:
    """A transformers logits processor placed last in the list: it sees the scores the next token is chosen
    from (the raw logits when no penalty or warper applies, as at temperature 0 without penalties), keeps
    their log-softmax, and hands each chosen token its `TokenLogprob` when the streamer receives it."""

    def __init__(self, top: int) -> None:
        self.top = top
        self.pending: list[Any] = []

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        self.pending.append(torch.log_softmax(scores[0].float(), dim=-1))
        return scores

    def take(self, token_id: int) -> TokenLogprob | None:
        if not self.pending:
            return None
        row = self.pending.pop(0)
        values, ids = row.topk(max(self.top, 1)) if self.top else (row[:0], row[:0].long())
        top = [(int(i), float(v)) for i, v in zip(ids.tolist(), values.tolist(), strict=True)]
        return TokenLogprob(token_id, float(row[token_id]), top[: self.top])


@dataclasses.dataclass
class GenerationResult:
    token_ids: list[int]
    text: str
    finish_reason: str  # "stop" | "length"
    prompt_tokens: int
    ttft_s: float | None
    e2e_s: float


class TokenStream:
    """A transformers streamer (put/end) that turns token-id chunks into text deltas. One call to `put` may
    carry several tokens (assisted generation emits accepted + 1 per step); every token is counted."""

    def __init__(
        self,
        tokenizer: Any,
        on_delta: Callable[[str, int], None],
        recorder: LogprobRecorder | None = None,
        on_tokens: Callable[[list[int], list[TokenLogprob]], None] | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.on_delta = on_delta
        self.recorder, self.on_tokens = recorder, on_tokens
        self.ids: list[int] = []
        self._sent = 0  # characters of the decoded text already emitted
        self._prompt_skipped = False
        self.first_token_at: float | None = None

    def put(self, value: Any) -> None:
        if not self._prompt_skipped:  # transformers first puts the prompt
            self._prompt_skipped = True
            return
        self.push([int(t) for t in value.reshape(-1).tolist()])

    def push(self, new: list[int]) -> None:
        """New token ids, as specq's decode loop hands them over (no prompt first)."""
        self._prompt_skipped = True
        if not new:
            return
        if self.first_token_at is None:
            self.first_token_at = time.perf_counter()
        self.ids.extend(new)
        if self.on_tokens is not None:  # before the delta: a chunk carries the ids and logprobs of its text
            taken = [self.recorder.take(t) for t in new] if self.recorder is not None else []
            self.on_tokens(new, [t for t in taken if t is not None])
        text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        # Hold back an incomplete UTF-8 sequence until the next token completes it.
        stable = len(text) - 1 if text.endswith("\ufffd") else len(text)
        delta = text[self._sent : stable]
        self._sent = max(self._sent, stable)
        self.on_delta(delta, len(new))

    def end(self) -> None:
        text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        if len(text) > self._sent:
            self.on_delta(text[self._sent :], 0)
            self._sent = len(text)


class Generator:
    """Target (and optional draft) loaded once; `generate` serves one request at a time."""

    def __init__(
        self,
        model_path: str,
        draft_model_path: str | None = None,
        draft_tokens: int = 0,
        device: str = "auto",
        dtype: str = "auto",
        trust_remote_code: bool = False,
        metrics: EngineMetrics | None = None,
    ) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from ...hardware import pick_device

        device = pick_device(device)
        self.device = device
        torch_dtype: Any = "auto" if dtype == "auto" else getattr(torch, DTYPES[dtype])
        if dtype == "auto" and device == "cpu":
            torch_dtype = torch.float32  # bf16/fp16 matmuls are slow or missing on CPU
        self.tokenizer = AutoTokenizer.from_pretrained(model_path, trust_remote_code=trust_remote_code)
        self.model = _load(AutoModelForCausalLM, model_path, torch_dtype, device, trust_remote_code)
        self.draft = None
        self.draft_tokens = draft_tokens if draft_model_path else 0
        if draft_model_path and draft_tokens > 0:
            self.draft = _load(
                AutoModelForCausalLM, draft_model_path, self.model.dtype, device, trust_remote_code
            )
            gc = self.draft.generation_config
            # A constant K: no heuristic schedule and no early stop on low draft confidence.
            gc.num_assistant_tokens = draft_tokens
            gc.num_assistant_tokens_schedule = "constant"
            gc.assistant_confidence_threshold = 0.0
            self._install_acceptance_hook()
        self.metrics = metrics
        self.eos_ids = _eos_ids(self.model, self.tokenizer)
        self._lock = threading.Lock()
        from .decode import eligible

        self.own_loop = eligible(self.model)  # greedy requests go to decode.greedy_decode

    def _greedy(self, req: GenerationRequest) -> bool:
        return (
            self.own_loop
            and req.temperature <= 0
            and req.repetition_penalty == 1.0
            and (req.top_logprobs is None)
        )

    def _install_acceptance_hook(self) -> None:
        """Wrap, on this model instance only, the factory of transformers' candidate generator so that each
        verification step's (drafted, accepted) reaches the metrics the moment it happens."""
        model = self.model
        original = model._get_candidate_generator
        owner = self

        def get_candidate_generator(*args: Any, **kwargs: Any) -> Any:
            gen = original(*args, **kwargs)
            update = gen.update_candidate_strategy

            def update_candidate_strategy(input_ids: Any, scores: Any, num_matches: Any) -> Any:
                drafted = int(scores.shape[1]) - 1
                if owner.metrics is not None:
                    owner.metrics.record_verification(drafted, int(num_matches))
                return update(input_ids, scores, num_matches)

            gen.update_candidate_strategy = update_candidate_strategy
            return gen

        model._get_candidate_generator = get_candidate_generator

    def encode_chat(self, messages: list[dict[str, Any]]) -> list[int]:
        tok = self.tokenizer
        if getattr(tok, "chat_template", None):
            # Templates concatenate `content` as a string; OpenAI clients may send a list of text parts.
            plain = [{**m, "content": _content(m)} for m in messages]
            text = tok.apply_chat_template(plain, tokenize=False, add_generation_prompt=True)
        else:
            text = "".join(f"{m.get('role', 'user')}: {_content(m)}\n" for m in messages) + "assistant: "
        return list(tok(text, add_special_tokens=False)["input_ids"])

    def token_text(self, token_id: int) -> str:
        """One token as text (a piece of a multi-byte character decodes to U+FFFD)."""
        return str(self.tokenizer.decode([token_id], skip_special_tokens=False))

    def encode(self, prompt: str) -> list[int]:
        return list(self.tokenizer(prompt)["input_ids"])

    def generate(
        self,
        req: GenerationRequest,
        on_delta: Callable[[str, int], None],
        cancel: threading.Event | None = None,
        on_tokens: Callable[[list[int], list[TokenLogprob]], None] | None = None,
    ) -> GenerationResult:
        """Generate for `req`, calling `on_delta(text, tokens)` as text becomes final and, when given,
        `on_tokens(ids, logprobs)` just before for the same tokens (logprobs only when `req.top_logprobs`
        is set; speculation then is refused by the server, since assisted generation scores drafts too)."""
        import torch
        from transformers import LogitsProcessorList, StoppingCriteria, StoppingCriteriaList

        class Cancelled(StoppingCriteria):
            def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
                flag = cancel is not None and cancel.is_set()
                return torch.full((input_ids.shape[0],), flag, dtype=torch.bool, device=input_ids.device)

        with self._lock:
            start = time.perf_counter()
            if self.metrics is not None:
                self.metrics.add_prompt_tokens(len(req.prompt_ids))

            def counted(delta: str, n: int) -> None:
                if n and self.metrics is not None:
                    self.metrics.add_generation_tokens(n)
                on_delta(delta, n)

            recorder = LogprobRecorder(req.top_logprobs) if req.top_logprobs is not None else None
            stream = TokenStream(self.tokenizer, counted, recorder, on_tokens)
            if self._greedy(req):
                self._decode_greedy(req, stream, cancel)
                return self._finish(req, stream, start)
            input_ids = torch.tensor([req.prompt_ids], dtype=torch.long, device=self.model.device)
            kwargs: dict[str, Any] = {
                "max_new_tokens": req.max_new_tokens,
                "streamer": stream,
                "attention_mask": torch.ones_like(input_ids),
                "pad_token_id": self.tokenizer.pad_token_id
                if self.tokenizer.pad_token_id is not None
                else (self.eos_ids[0] if self.eos_ids else 0),
                "repetition_penalty": req.repetition_penalty,
                "stopping_criteria": StoppingCriteriaList([Cancelled()]),
            }
            if recorder is not None:
                kwargs["logits_processor"] = LogitsProcessorList([recorder])
            min_new = req.max_new_tokens if req.ignore_eos else min(req.min_new_tokens, req.max_new_tokens)
            if min_new > 0:
                kwargs["min_new_tokens"] = min_new
            if req.temperature > 0:
                kwargs.update(do_sample=True, temperature=req.temperature, top_p=req.top_p)
                kwargs["top_k"] = req.top_k if req.top_k else 0
            else:
                kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
            if req.seed is not None:
                torch.manual_seed(req.seed)
            if self.draft is not None:
                kwargs["assistant_model"] = self.draft
            with torch.inference_mode():
                self.model.generate(input_ids, **kwargs)
            return self._finish(req, stream, start)

    def _decode_greedy(
        self, req: GenerationRequest, stream: TokenStream, cancel: threading.Event | None
    ) -> None:
        from .decode import greedy_decode

        min_new = req.max_new_tokens if req.ignore_eos else min(req.min_new_tokens, req.max_new_tokens)
        metrics = self.metrics
        greedy_decode(
            self.model, req.prompt_ids, max_new_tokens=req.max_new_tokens, emit=stream.push,
            draft=self.draft, draft_tokens=self.draft_tokens, min_new_tokens=min_new,
            eos_ids=self.eos_ids,  # ignore_eos: masked until max_new_tokens, as generate does
            on_verification=metrics.record_verification if metrics is not None else None,
            cancelled=(lambda: cancel.is_set()) if cancel is not None else (lambda: False),
        )  # fmt: skip
        stream.end()

    def _finish(self, req: GenerationRequest, stream: TokenStream, start: float) -> GenerationResult:
        e2e = time.perf_counter() - start
        ids = stream.ids
        hit_eos = bool(ids) and ids[-1] in self.eos_ids
        finish = "stop" if hit_eos or len(ids) < req.max_new_tokens else "length"
        ttft = (stream.first_token_at - start) if stream.first_token_at is not None else None
        if self.metrics is not None:
            self.metrics.finish_request(e2e, ttft)
        text = str(self.tokenizer.decode(ids, skip_special_tokens=True))
        return GenerationResult(ids, text, finish, len(req.prompt_ids), ttft, e2e)


def _content(m: dict[str, Any]) -> str:
    c = m.get("content", "")
    if isinstance(c, list):  # OpenAI content parts
        return "".join(p.get("text", "") for p in c if isinstance(p, dict))
    return str(c)


def _eos_ids(model: Any, tokenizer: Any) -> list[int]:
    eos = model.generation_config.eos_token_id
    if eos is None:
        eos = tokenizer.eos_token_id
    if eos is None:
        return []
    return [int(e) for e in (eos if isinstance(eos, list) else [eos])]


def _load(cls: Any, path: str, torch_dtype: Any, device: str, trust_remote_code: bool) -> Any:
    from ...checkpoint import Checkpoint
    from ...hardware import module_present

    ckpt = Checkpoint(Path(path))
    quant = ckpt.quantization
    if quant is not None and quant.method in ("gptq", "awq") and module_present("gptqmodel"):
        from ...engines.embedded import load_quantized

        try:
            return load_quantized(Path(path), device, None if torch_dtype == "auto" else torch_dtype)
        except (ImportError, ValueError, RuntimeError, OSError) as e:
            raise EnvironmentMissing(
                f"gptqmodel cannot run the {quant.method} checkpoint {path} on {device}: "
                f"{str(e).splitlines()[0] if str(e) else type(e).__name__}"
            ) from None
    try:
        model = cls.from_pretrained(
            path,
            dtype=torch_dtype,
            trust_remote_code=trust_remote_code,
            **({"device_map": device} if quant is not None else {}),
        )
    except ImportError as e:
        method = quant.method if quant else "this"
        raise EnvironmentMissing(
            f"cannot load the {method} checkpoint {path} on {device}: {str(e).splitlines()[0]}"
        ) from None
    except (ValueError, RuntimeError, OSError) as e:
        if quant is not None:
            raise EnvironmentMissing(
                f"the installed quantization backend cannot run the {quant.method} checkpoint {path} on "
                f"{device}: {str(e).splitlines()[0] if str(e) else type(e).__name__}"
            ) from None
        raise InputError(
            f"cannot load {path}: {str(e).splitlines()[0] if str(e) else type(e).__name__}"
        ) from None
    if quant is None:
        model = model.to(device)
    model.eval()
    return model
