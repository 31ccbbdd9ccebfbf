"""The embedded engine's OpenAI-compatible HTTP API (FastAPI): `/v1/models`, `/v1/completions`,
`/v1/chat/completions` (SSE streaming with `stream_options.include_usage`, and non-streaming), `/health` and
`/metrics`. Requests are served one at a time by a single generation thread; up to `max_queue` wait, more get
429. `ignore_eos` and `min_new_tokens` are accepted as LMDeploy accepts them, and so are log-probabilities
(chat: `logprobs: true` with `top_logprobs: N`; completions: `logprobs: N`, in OpenAI's two shapes, carried
by the chunk holding each token's text) and `return_token_ids: true` (each chunk's token ids as
`gen_tokens`, where LMDeploy's api_server puts them: in the chat delta, on the completion choice)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse

from .generator import GenerationRequest, Generator, TokenLogprob
from .metrics import EngineMetrics
from .validate import BadRequest, Sampling, messages_of, prompt_of, sampling


class _Rejected(Exception):
    def __init__(self, status: int, message: str, kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status, self.message, self.kind = status, message, kind


def _error(status: int, message: str, kind: str = "invalid_request_error") -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind, "code": status}}, status_code=status)


def build_app(
    generator: Generator,
    metrics: EngineMetrics,
    model_name: str,
    *,
    max_queue: int = 64,
    default_max_tokens: int = 256,
    api_keys: list[str] | None = None,
    max_positions: int | None = None,
) -> FastAPI:
    app = FastAPI(title="specq embedded engine", docs_url=None, redoc_url=None, openapi_url=None)
    positions = max_positions if max_positions is not None else _model_positions(generator)
    server = _Server(generator, metrics, model_name, max_queue, default_max_tokens, api_keys, positions)

    @app.exception_handler(_Rejected)
    async def _rejected(request: Request, exc: _Rejected) -> JSONResponse:
        return _error(exc.status, exc.message, exc.kind)

    @app.get("/health")
    async def health() -> Response:
        return Response(status_code=200)

    @app.get("/metrics")
    async def prometheus() -> Response:
        return PlainTextResponse(metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.get("/v1/models")
    async def models(request: Request) -> Response:
        if (denied := server.check_key(request)) is not None:
            return denied
        return server.models()

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        if (denied := server.check_key(request)) is not None:
            return denied
        return await server.completions(await _body_of(request))

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        if (denied := server.check_key(request)) is not None:
            return denied
        return await server.chat_completions(await _body_of(request))

    return app


class _Server:
    """What the routes share: the generator, its single worker thread and the admission count behind
    `max_queue` (one request generating, the rest waiting)."""

    def __init__(
        self,
        generator: Generator,
        metrics: EngineMetrics,
        model_name: str,
        max_queue: int,
        default_max_tokens: int,
        api_keys: list[str] | None,
        positions: int | None,
    ) -> None:
        self.generator, self.metrics, self.model_name = generator, metrics, model_name
        self.max_queue, self.default_max_tokens = max_queue, default_max_tokens
        self.api_keys, self.positions = api_keys, positions
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="generate")
        self.pending = 0
        self.pending_lock = threading.Lock()
        self.created = int(time.time())

    def check_key(self, request: Request) -> JSONResponse | None:
        if not self.api_keys:
            return None
        auth = request.headers.get("authorization", "")
        if auth.startswith("Bearer ") and auth[7:] in self.api_keys:
            return None
        return _error(401, "invalid or missing API key", "authentication_error")

    def admit(self) -> None:
        with self.pending_lock:
            if self.pending >= self.max_queue + 1:
                raise _Rejected(
                    429, f"queue full ({self.max_queue} waiting); retry later", "rate_limit_error"
                )
            self.pending += 1
            self._gauges()

    def release(self) -> None:
        with self.pending_lock:
            self.pending -= 1
            self._gauges()

    def _gauges(self) -> None:
        running = 1 if self.pending > 0 else 0
        self.metrics.requests_running.labels(**self.metrics.labels).set(running)
        self.metrics.requests_waiting.labels(**self.metrics.labels).set(max(0, self.pending - 1))

    def models(self) -> JSONResponse:
        return JSONResponse(
            {
                "object": "list",
                "data": [
                    {
                        "id": self.model_name,
                        "object": "model",
                        "created": self.created,
                        "owned_by": "specq",
                        "root": self.model_name,
                    }
                ],
            }  # fmt: skip
        )

    async def completions(self, body: dict[str, Any]) -> Response:
        try:
            settings = sampling(body, self.default_max_tokens)
            prompt = prompt_of(body, self.vocab_size)
        except BadRequest as e:
            raise _Rejected(400, str(e)) from None
        _check_model(body, self.model_name)
        ids = prompt if isinstance(prompt, list) else self.generator.encode(prompt)
        req = self.request(settings, ids, self.top_logprobs(body, chat=False))
        return await self.run(req, settings, chat=False, body=body)

    async def chat_completions(self, body: dict[str, Any]) -> Response:
        try:
            settings = sampling(body, self.default_max_tokens)
            messages = messages_of(body)
        except BadRequest as e:
            raise _Rejected(400, str(e)) from None
        _check_model(body, self.model_name)
        try:
            ids = self.generator.encode_chat(messages)
        except Exception as e:  # the model's chat template refused these messages (a jinja error)
            raise _Rejected(
                400, f"the chat template refused these messages: {type(e).__name__}: {e}"[:300]
            ) from None
        return await self.run(
            self.request(settings, ids, self.top_logprobs(body, chat=True)), settings, True, body
        )

    @property
    def vocab_size(self) -> int | None:
        config = getattr(getattr(self.generator, "model", None), "config", None)
        value = getattr(config, "vocab_size", None)
        return value if isinstance(value, int) and value > 0 else None

    @staticmethod
    def request(s: Sampling, prompt_ids: list[int], top_logprobs: int | None = None) -> GenerationRequest:
        return GenerationRequest(
            prompt_ids=prompt_ids, max_new_tokens=s.max_new_tokens, temperature=s.temperature, top_p=s.top_p,
            top_k=s.top_k, repetition_penalty=s.repetition_penalty, min_new_tokens=s.min_new_tokens,
            ignore_eos=s.ignore_eos, seed=s.seed, top_logprobs=top_logprobs,
        )  # fmt: skip

    def top_logprobs(self, body: dict[str, Any], chat: bool) -> int | None:
        """How many alternatives per token the request asks for (None: no logprobs): chat's `logprobs:
        true` with `top_logprobs` (0..20), a completion's `logprobs` (0..5, OpenAI's limits)."""
        asked = body.get("logprobs")
        if chat:
            if asked is not None and not isinstance(asked, bool):  # "yes" is not true: booleans are booleans
                raise _Rejected(400, f"'logprobs' must be true or false, not {asked!r}"[:200])
            if not asked:
                return None
            top = body.get("top_logprobs")
            n, limit, name = 0 if top is None else top, 20, "top_logprobs"
        else:
            if asked is None or asked is False:
                return None
            n, limit, name = asked, 5, "logprobs"
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= limit:
            raise _Rejected(400, f"'{name}' must be an integer from 0 to {limit}")
        if getattr(self.generator, "draft", None) is not None:
            raise _Rejected(
                400, "logprobs are not served while speculating (assisted generation also scores the drafts);"
                " ask the server without a draft model"
            )  # fmt: skip
        return n

    async def run(
        self, req: GenerationRequest, settings: Sampling, chat: bool, body: dict[str, Any]
    ) -> Response:
        check_context(req, self.positions, "messages" if chat else "prompt")
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
        return_ids = body.get("return_token_ids")
        if return_ids is not None and not isinstance(return_ids, bool):
            raise _Rejected(400, f"'return_token_ids' must be a boolean, not {return_ids!r}"[:200])
        self.admit()
        if not settings.stream:
            return await self._complete(req, chat, rid, bool(return_ids))
        return self._stream(req, chat, rid, settings.include_usage, bool(return_ids))

    def logprobs(self, scored: list[TokenLogprob], chat: bool) -> dict[str, Any]:
        """OpenAI's logprobs object for these tokens: chat's `content` list (token, bytes, logprob,
        top_logprobs), or a completion's parallel lists (tokens, token_logprobs, top_logprobs, text_offset).
        Token strings are the tokenizer's decoded pieces."""
        piece = self.generator.token_text
        if chat:

            def entry(i: int, lp: float) -> dict[str, Any]:
                t = piece(i)
                return {"token": t, "bytes": list(t.encode("utf-8")), "logprob": lp}

            content = [
                {**entry(s.token_id, s.logprob), "top_logprobs": [entry(i, v) for i, v in s.top]}
                for s in scored
            ]
            return {"content": content}
        tokens = [piece(s.token_id) for s in scored]
        offsets, at = [], 0
        for t in tokens:
            offsets.append(at)
            at += len(t)
        return {
            "tokens": tokens,
            "token_logprobs": [s.logprob for s in scored],
            "top_logprobs": [{piece(i): v for i, v in s.top} for s in scored],
            "text_offset": offsets,
        }

    async def _complete(self, req: GenerationRequest, chat: bool, rid: str, return_ids: bool) -> Response:
        """The non-streaming answer; the caller has admitted the request, this releases it."""
        loop = asyncio.get_running_loop()
        scored: list[TokenLogprob] = []

        def on_tokens(ids: list[int], logprobs: list[TokenLogprob]) -> None:
            scored.extend(logprobs)

        try:
            result = await loop.run_in_executor(
                self.executor, lambda: self.generator.generate(req, lambda d, n: None, on_tokens=on_tokens)
            )
        finally:
            self.release()
        usage = _usage(result.prompt_tokens, len(result.token_ids))
        logprobs = self.logprobs(scored, chat) if req.top_logprobs is not None else None
        choice: dict[str, Any] = {"index": 0, "finish_reason": result.finish_reason, "logprobs": logprobs}
        if chat:
            choice["message"] = {"role": "assistant", "content": result.text}
        else:
            choice["text"] = result.text
        if return_ids:
            (choice["message"] if chat else choice)["gen_tokens"] = result.token_ids
        return JSONResponse(
            {
                "id": rid,
                "object": "chat.completion" if chat else "text_completion",
                "created": int(time.time()),
                "model": self.model_name,
                "choices": [choice],
                "usage": usage,
            }  # fmt: skip
        )

    def _stream(
        self, req: GenerationRequest, chat: bool, rid: str, include_usage: bool, return_ids: bool
    ) -> Response:
        """The SSE answer: generation runs on the worker thread and hands deltas to the event loop through a
        queue; the caller has admitted the request, the worker releases it. Token ids and logprobs, when
        asked, ride on the chunk that carries the first text after them (text held back for an incomplete
        UTF-8 sequence waits, and so do they); any left at the end go with the final chunk."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        cancel = threading.Event()
        held: tuple[list[int], list[TokenLogprob]] = ([], [])
        wanted = return_ids or req.top_logprobs is not None

        def extras() -> dict[str, Any]:
            ids, scored = list(held[0]), list(held[1])
            held[0].clear()
            held[1].clear()
            out: dict[str, Any] = {}
            if return_ids:
                out["gen_tokens"] = ids
            if req.top_logprobs is not None:
                out["logprobs"] = self.logprobs(scored, chat)
            return out

        def on_tokens(ids: list[int], scored: list[TokenLogprob]) -> None:
            held[0].extend(ids)
            held[1].extend(scored)

        def on_delta(delta: str, n: int) -> None:
            if delta:
                loop.call_soon_threadsafe(queue.put_nowait, ("delta", (delta, extras() if wanted else {})))

        def work() -> None:
            try:
                res = self.generator.generate(req, on_delta, cancel=cancel, on_tokens=on_tokens)
                if wanted and held[0]:
                    loop.call_soon_threadsafe(queue.put_nowait, ("delta", ("", extras())))
                loop.call_soon_threadsafe(queue.put_nowait, ("done", res))
            except BaseException as e:  # reported to the client as an SSE error event
                loop.call_soon_threadsafe(queue.put_nowait, ("error", e))
            finally:
                self.release()

        loop.run_in_executor(self.executor, work)
        chunks = _Chunks(rid, self.model_name, chat, include_usage)
        return StreamingResponse(_events(queue, cancel, chunks), media_type="text/event-stream")


class _Chunks:
    """The SSE `data:` lines of one streamed completion (chat or text)."""

    def __init__(self, rid: str, model_name: str, chat: bool, include_usage: bool) -> None:
        self.rid, self.model_name, self.chat, self.include_usage = rid, model_name, chat, include_usage
        self.obj = "chat.completion.chunk" if chat else "text_completion"

    def chunk(self, choices: list[dict[str, Any]], usage: dict[str, int] | None = None) -> str:
        data: dict[str, Any] = {"id": self.rid, "object": self.obj, "created": int(time.time()),
                                "model": self.model_name, "choices": choices}  # fmt: skip
        if self.include_usage:
            data["usage"] = usage
        return f"data: {json.dumps(data)}\n\n"

    def delta(self, text: str, finish: str | None = None, extras: dict[str, Any] | None = None) -> str:
        extras = extras or {}
        if self.chat:
            delta: dict[str, Any] = {"content": text} if text or "gen_tokens" in extras else {}
            if "gen_tokens" in extras:
                delta["gen_tokens"] = extras["gen_tokens"]
            choice = {"index": 0, "delta": delta, "finish_reason": finish,
                      "logprobs": extras.get("logprobs")}  # fmt: skip
        else:
            choice = {"index": 0, "text": text, "finish_reason": finish, "logprobs": extras.get("logprobs")}
            if "gen_tokens" in extras:
                choice["gen_tokens"] = extras["gen_tokens"]
        return self.chunk([choice])

    def role(self) -> str:
        return self.chunk([{"index": 0, "delta": {"role": "assistant", "content": ""},
                            "finish_reason": None, "logprobs": None}])  # fmt: skip

    def usage(self, prompt: int, completion: int) -> str:
        data = {"id": self.rid, "object": self.obj, "created": int(time.time()),
                "model": self.model_name, "choices": [], "usage": _usage(prompt, completion)}  # fmt: skip
        return f"data: {json.dumps(data)}\n\n"


async def _events(
    queue: asyncio.Queue[tuple[str, Any]], cancel: threading.Event, chunks: _Chunks
) -> AsyncIterator[str]:
    try:
        if chunks.chat:
            yield chunks.role()
        while True:
            kind, value = await queue.get()
            if kind == "delta":
                yield chunks.delta(value[0], extras=value[1])
            elif kind == "error":
                msg = f"{type(value).__name__}: {value}"
                yield f"data: {json.dumps({'error': {'message': msg, 'code': 500}})}\n\n"
                break
            else:
                yield chunks.delta("", value.finish_reason)
                if chunks.include_usage:
                    yield chunks.usage(value.prompt_tokens, len(value.token_ids))
                break
        yield "data: [DONE]\n\n"
    finally:
        cancel.set()  # the client went away (or all is sent): stop generating for it


async def _body_of(request: Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except (ValueError, RecursionError):  # not JSON, not UTF-8, or nested deeper than the parser goes
        raise _Rejected(400, "request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise _Rejected(400, "request body must be a JSON object")
    return body


def check_context(req: GenerationRequest, positions: int | None, field: str) -> None:
    """HTTP 400 before any work when prompt + max_tokens exceed the model's positions (OpenAI's wording)."""
    if positions is None:
        return
    total = len(req.prompt_ids) + req.max_new_tokens
    if total > positions:
        raise _Rejected(
            400,
            f"This model's maximum context length is {positions} tokens. However, you requested {total} "
            f"tokens ({len(req.prompt_ids)} in the {field}, {req.max_new_tokens} in the completion). "
            f"Please reduce the length of the {field} or completion.",
        )


def _model_positions(generator: Generator) -> int | None:
    config = getattr(getattr(generator, "model", None), "config", None)
    value = getattr(config, "max_position_embeddings", None)
    return value if isinstance(value, int) and value > 0 else None


def _check_model(body: dict[str, Any], model_name: str) -> None:
    name = body.get("model")
    if name not in (None, "", model_name):
        raise _Rejected(404, f"model '{name}' is not served here; this server serves '{model_name}'",
                        "not_found_error")  # fmt: skip


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
