"""The streaming client: sends OpenAI-compatible chat or completion requests over httpx (async, SSE) and
times every content chunk. Tokens, not chunks, are what latency is measured per:

* The request asks for `stream_options: {include_usage: true}`; the final usage's `completion_tokens` is
  the authoritative output-token count.
* How many tokens each chunk carried (a speculative server streams one verify step — several tokens — per
  chunk) comes, in order of preference, from per-chunk cumulative usage when the server sends it
  (`usage-stream`), from a local tokenizer that re-tokenizes the output and assigns each token to the chunk
  holding its last character (`tokenizer`), from the chunks' character lengths scaled to the usage total
  (`chars`), and — only when the server sends no usage and no tokenizer is available — one per chunk
  (`chunks`, flagged in the report). Whatever the source, per-chunk counts are scaled so that they sum to
  the usage total; a tokenizer recount that differs from it is flagged, never silently used.
* Per-token ITL: a chunk's gap since the previous content chunk is spread evenly over its n tokens. Tokens
  that arrive with the first chunk have no gap to measure (they count in TPOT, not as ITL samples).
  TPOT = (last content chunk − first content chunk) / (output tokens − 1).
* The clock starts when the request is sent: httpcore's `trace` extension reports the moment the request
  headers start going out, after a connection was taken from the pool or opened. TTFT, chunk times and e2e
  are measured from there; the time before it (waiting for or opening a connection) is `connect_s`.
* Every request asks for `return_token_ids` (a few integers per chunk the server holds anyway), so the
  lossless check compares token ids; a request made with `top_logprobs` (the baseline's untimed reference
  pass only) also asks for logprobs, read from either OpenAI shape (chat's `content` list, a completion's
  parallel lists).
"""

from __future__ import annotations

import asyncio
import bisect
import json
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..errors import Terminated
from ..report.models import RequestRecord, TokenScore, TokenSource
from ..tls import tls
from ..workload import Mode, Prompt


class TokenCounter(Protocol):
    """What the client needs from a tokenizer."""

    def encode(self, text: str) -> list[int]: ...

    def counts_per_chunk(self, texts: Sequence[str]) -> list[int]: ...


class HFTokenCounter:
    """A local Hugging Face tokenizer (transformers imported lazily, on first use)."""

    def __init__(self, path: str):
        from transformers import AutoTokenizer

        self.path = path
        self.tok = AutoTokenizer.from_pretrained(path)

    def encode(self, text: str) -> list[int]:
        return list(self.tok(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: Sequence[int]) -> str:
        return str(self.tok.decode(list(ids), skip_special_tokens=False))

    def piece_text(self, piece: str) -> str:
        """A vocabulary entry as text ('ĠBob' → ' Bob'): LMDeploy's logprobs name tokens by their entry."""
        try:
            return str(self.tok.convert_tokens_to_string([piece]))
        except Exception:  # not an entry of this vocabulary (a server's decoded text): as it is
            return piece

    def counts_per_chunk(self, texts: Sequence[str]) -> list[int]:
        full = "".join(texts)
        counts = [0] * len(texts)
        if not full:
            return counts
        ends, pos = [], 0
        for t in texts:
            pos += len(t)
            ends.append(pos)
        if getattr(self.tok, "is_fast", False):
            enc = self.tok(full, add_special_tokens=False, return_offsets_mapping=True)
            for start, end in enc["offset_mapping"]:
                char = max(end - 1, start)
                counts[min(bisect.bisect_right(ends, char), len(texts) - 1)] += 1
            return counts
        # Slow tokenizers have no offsets: count the growth of the prefix's token count chunk by chunk.
        prev = 0
        for i, e in enumerate(ends):
            n = len(self.encode(full[:e]))
            counts[i], prev = max(n - prev, 0), n
        return counts


def load_token_counter(path: str | None) -> tuple[TokenCounter | None, str | None]:
    """A tokenizer for the recount, or None and why not (never fatal: usage stays authoritative)."""
    if not path:
        return None, "no local tokenizer given"
    from ..hardware import module_present

    if not module_present("transformers"):
        return None, "transformers is not installed (pip install 'specq[ml]')"
    try:
        return HFTokenCounter(path), None
    except Exception as e:  # a directory without tokenizer files, a broken tokenizer.json
        return None, f"tokenizer at {path} did not load: {type(e).__name__}"


# ----------------------------------------------------------------------------------------------- token math


def scale_counts(weights: Sequence[float], total: int, *, min_one: bool = True) -> list[int]:
    """Integer counts proportional to `weights` that sum to `total` (largest remainder); with `min_one`
    every chunk gets at least one token when the total allows it (taken from the largest counts)."""
    n = len(weights)
    if n == 0:
        return []
    w = [max(float(x), 0.0) for x in weights]
    if sum(w) <= 0:
        w = [1.0] * n
    s = sum(w)
    raw = [total * x / s for x in w]
    counts = [int(r) for r in raw]
    left = total - sum(counts)
    order = sorted(range(n), key=lambda i: (raw[i] - counts[i], -i), reverse=True)
    for i in order[:left]:
        counts[i] += 1
    if min_one and total >= n:
        for i in range(n):
            if counts[i] == 0:
                j = max(range(n), key=lambda m: (counts[m], -m))
                counts[j] -= 1
                counts[i] = 1
    return counts


def per_token_latencies(
    chunk_times: Sequence[float], chunk_tokens: Sequence[int]
) -> tuple[list[float], float | None]:
    """(ITL per token, TPOT) from content-chunk arrival times and their token counts.

    A chunk carrying n tokens contributes n ITL samples of gap/n, where gap is the time since the previous
    chunk that carried tokens. Chunks with 0 tokens are skipped (their gap folds into the next one)."""
    itl: list[float] = []
    prev: float | None = None
    first: float | None = None
    last: float | None = None
    total = 0
    for t, n in zip(chunk_times, chunk_tokens, strict=True):
        if n <= 0:
            continue
        total += n
        if prev is None:
            first = t
        else:
            gap = (t - prev) / n
            itl.extend([gap] * n)
        prev = last = t
    tpot = (last - first) / (total - 1) if first is not None and last is not None and total > 1 else None
    return itl, tpot


def chunk_token_counts(
    texts: Sequence[str],
    cumulative_usage: Sequence[int | None],
    usage_total: int | None,
    counter: TokenCounter | None,
) -> tuple[list[int], TokenSource, int | None, bool]:
    """(tokens per chunk, source, tokenizer recount, recount disagrees with usage)."""
    n = len(texts)
    recount: int | None = None
    mismatch = False
    if n and all(u is not None for u in cumulative_usage):
        counts, prev = [], 0
        for u in cumulative_usage:
            counts.append(max(int(u or 0) - prev, 0))
            prev = int(u or 0)
        if counter is not None:
            recount = sum(counter.counts_per_chunk(texts))
            mismatch = usage_total is not None and recount != usage_total
        total = usage_total if usage_total is not None else sum(counts)
        if sum(counts) != total:
            counts = scale_counts(counts, total)
        return counts, "usage-stream", recount, mismatch
    if counter is not None:
        counts = counter.counts_per_chunk(texts)
        recount = sum(counts)
        if usage_total is not None and recount != usage_total:
            mismatch = True
            counts = scale_counts([c + 1e-9 for c in counts], usage_total)
        return counts, "tokenizer", recount, mismatch
    if usage_total is not None:
        return scale_counts([len(t) for t in texts], usage_total), "chars", None, False
    return [1] * n, "chunks", None, False


# ----------------------------------------------------------------------------------------------- requests


@dataclass
class RequestSpec:
    mode: Mode
    model: str
    max_tokens: int
    temperature: float
    seed: int | None = None
    ignore_eos: bool = False
    timeout_s: float = 300.0
    return_token_ids: bool = True
    top_logprobs: int | None = None  # ask for logprobs with this many alternatives (the reference pass)
    api_key: str | None = field(default=None, repr=False)  # sent as a bearer header, never recorded

    def payload(self, prompt: Prompt) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if self.seed is not None:
            body["seed"] = self.seed
        if self.ignore_eos:
            body["ignore_eos"] = True
        if self.return_token_ids:
            body["return_token_ids"] = True
        if self.top_logprobs is not None:
            if self.mode == "chat":
                body.update(logprobs=True, top_logprobs=self.top_logprobs)
            else:
                body["logprobs"] = self.top_logprobs
        if self.mode == "chat":
            body["messages"] = prompt.as_messages()
        else:
            body["prompt"] = prompt.as_text()
        return body

    @property
    def path(self) -> str:
        return "/v1/chat/completions" if self.mode == "chat" else "/v1/completions"


@dataclass
class _Stream:
    times: list[float] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    cumulative: list[int | None] = field(default_factory=list)
    stamps: list[float] = field(default_factory=list)
    arrive: float | None = None
    usage_completion: int | None = None
    usage_prompt: int | None = None
    finish_reason: str | None = None
    done: bool = False  # the stream ended with [DONE]
    token_ids: list[int] = field(default_factory=list)
    ids_seen: bool = False
    scores: list[TokenScore] = field(default_factory=list)


def _chunk_ids(choice: dict[str, Any]) -> list[int] | None:
    """A choice's token ids: vLLM's `token_ids`, LMDeploy's `gen_tokens` (on a completion choice, in a chat
    delta) or `output_ids`; None when it carries none."""
    raw = choice.get("delta")
    delta: dict[str, Any] = raw if isinstance(raw, dict) else {}
    for ids in (choice.get("token_ids"), choice.get("gen_tokens"), delta.get("gen_tokens"),
                choice.get("output_ids")):  # fmt: skip
        if isinstance(ids, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
            return ids
    return None


def _chunk_scores(choice: dict[str, Any]) -> list[TokenScore]:
    """A choice's logprobs as TokenScores: chat's `{content: [{token, logprob, top_logprobs}]}` or a
    completion's `{tokens, token_logprobs, top_logprobs: [{token: logprob}]}`; [] when absent or malformed."""
    lp = choice.get("logprobs")
    if not isinstance(lp, dict):
        return []
    out: list[TokenScore] = []
    try:
        if isinstance(lp.get("content"), list):
            for e in lp["content"]:
                top = [(str(t["token"]), float(t["logprob"])) for t in e.get("top_logprobs") or []]
                out.append(TokenScore(token=str(e["token"]), logprob=float(e["logprob"]), top=top))
        elif isinstance(lp.get("tokens"), list):
            tops = lp.get("top_logprobs") or [None] * len(lp["tokens"])
            for tok, value, alts in zip(lp["tokens"], lp.get("token_logprobs") or [], tops, strict=False):
                top = sorted(((str(t), float(v)) for t, v in (alts or {}).items()), key=lambda x: -x[1])
                out.append(TokenScore(token=str(tok), logprob=float(value), top=top))
    except (KeyError, TypeError, ValueError):
        return []
    return out


def _chunk_text(choice: dict[str, Any], mode: Mode) -> str:
    if mode == "completion" or "text" in choice:
        return str(choice.get("text") or "")
    delta = choice.get("delta") or {}
    return str(delta.get("content") or "") + str(delta.get("reasoning_content") or "")


def _json_loads() -> Callable[[bytes], Any]:
    try:
        import orjson  # optional: about 3x faster per chunk, which matters at tens of thousands of tokens/s

        return orjson.loads  # type: ignore[no-any-return]
    except ImportError:
        return json.loads


_loads = _json_loads()


class Malformed(RuntimeError):
    """A reply that breaks the OpenAI streaming format or reports impossible numbers: the request failed."""


def _count(usage: dict[str, Any], key: str) -> int | None:
    """A token count from `usage`: a non-negative integer, or None when absent; Malformed otherwise."""
    value = usage.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise Malformed(f"malformed usage: {key} is {json.dumps(value)[:40]}, not an integer")
    if value < 0:
        raise Malformed(f"impossible usage: {key} is negative ({value})")
    return value


def _handle_event(s: _Stream, data: bytes, now: float, mode: Mode) -> bool:
    """Fold one SSE `data:` payload into the stream; False at `[DONE]`."""
    if data == b"[DONE]":
        s.done = True
        return False
    try:
        chunk = _loads(data)
    except (ValueError, RecursionError):
        raise Malformed(f"malformed SSE data: {data[:80]!r}") from None
    if not isinstance(chunk, dict):
        raise Malformed(f"malformed SSE data: a JSON {type(chunk).__name__}, not an object: {data[:60]!r}")
    choices = chunk.get("choices") or []
    if "error" in chunk and not choices:
        err = chunk["error"]
        raise RuntimeError(f"server error: {err.get('message', err) if isinstance(err, dict) else err}")
    usage = chunk.get("usage") or None
    if usage is not None and not isinstance(usage, dict):
        raise Malformed(f"malformed usage: {json.dumps(usage)[:40]}, not an object")
    if not isinstance(choices, list) or not all(isinstance(c, dict) for c in choices):
        raise Malformed(f"malformed SSE data: choices is not a list of objects: {data[:60]!r}")
    if any(c.get("delta") is not None and not isinstance(c.get("delta"), dict) for c in choices):
        raise Malformed(f"malformed SSE data: a delta is not an object: {data[:60]!r}")
    text = "".join(_chunk_text(c, mode) for c in choices)
    for c in choices:
        if c.get("finish_reason"):
            s.finish_reason = str(c["finish_reason"])
        if (ids := _chunk_ids(c)) is not None:
            s.token_ids.extend(ids)
            s.ids_seen = True
        s.scores.extend(_chunk_scores(c))
    completion = _count(usage, "completion_tokens") if usage else None
    if text:
        s.times.append(now)
        s.texts.append(text)
        s.cumulative.append(completion)
        if "specq_t" in chunk:
            try:
                s.stamps.append(float(chunk["specq_t"]))
                s.arrive = float(chunk.get("specq_arrive", s.stamps[-1]))
            except (TypeError, ValueError):
                raise Malformed("malformed SSE data: specq_t is not a number") from None
    if usage:
        s.usage_completion = completion or 0
        s.usage_prompt = _count(usage, "prompt_tokens")
    return True


def check_plausible(s: _Stream, spec: RequestSpec) -> None:
    """A complete stream whose numbers could be true: it ended with [DONE], and the server's token count
    fits the request (at most max_tokens)."""
    if not s.done:
        raise Malformed("the stream ended without [DONE] (cut short); the output is incomplete")
    if s.usage_completion is not None and s.usage_completion > spec.max_tokens:
        raise Malformed(
            f"impossible usage: completion_tokens {s.usage_completion} exceeds the request's max_tokens "
            f"{spec.max_tokens}"
        )


@dataclass
class SendClock:
    """When the request's headers started going out (httpcore trace), on `now`'s clock
    (`time.perf_counter`; tests give it a clock of their own)."""

    sent: float | None = None
    now: Callable[[], float] = time.perf_counter

    async def trace(self, event: str, info: dict[str, Any]) -> None:
        # http11.send_request_headers.started / http2.send_request_headers.started; a retried request
        # (a stale pooled connection) is sent again, so the last send counts.
        if event.endswith("send_request_headers.started"):
            self.sent = self.now()


async def _stream(client: Any, url: str, body: dict[str, Any], mode: Mode, clock: SendClock) -> _Stream:
    """Read the SSE body network read by network read: every event in one read gets that read's arrival
    time (they did arrive together), and no per-line decoding is done before it is needed. Times are
    absolute (`time.perf_counter`); the caller makes them relative to the send."""
    s = _Stream()
    async with client.stream("POST", url, json=body, extensions={"trace": clock.trace}) as resp:
        if resp.status_code != 200:
            text = (await resp.aread()).decode("utf-8", "replace")
            raise RuntimeError(f"HTTP {resp.status_code}: {' '.join(text.split())[:200]}")
        buf = b""
        async for raw in resp.aiter_bytes():
            now = time.perf_counter()
            buf += raw
            while True:
                cut = buf.find(b"\n")
                if cut < 0:
                    break
                line, buf = buf[:cut].rstrip(b"\r"), buf[cut + 1 :]
                if line.startswith(b"data:") and not _handle_event(s, line[5:].strip(), now, mode):
                    return s
    return s


async def send_request(
    client: Any,
    base_url: str,
    spec: RequestSpec,
    prompt: Prompt,
    *,
    repeat: int = 0,
    trial: int = 0,
    run_t0: float = 0.0,
    counter: TokenCounter | None = None,
) -> RequestRecord:
    """One streamed request → its record (errors and timeouts are recorded, never raised)."""
    import httpx

    t_start = time.perf_counter()
    clock = SendClock()
    rec = RequestRecord(
        id=prompt.id, category=prompt.category, repeat=repeat, trial=trial, start_s=t_start - run_t0
    )

    def since_send() -> float:
        t0 = clock.sent if clock.sent is not None else t_start
        rec.connect_s = t0 - t_start
        return time.perf_counter() - t0

    try:
        s = await asyncio.wait_for(
            _stream(client, base_url.rstrip("/") + spec.path, spec.payload(prompt), spec.mode, clock),
            spec.timeout_s,
        )
    except (asyncio.TimeoutError, httpx.TimeoutException):
        rec.ok, rec.error = False, f"timeout after {spec.timeout_s:g} s"
        rec.e2e_s = since_send()
        return rec
    except httpx.HTTPError as e:
        rec.ok, rec.error = False, f"{type(e).__name__}: {e}".strip()[:300]
        rec.e2e_s = since_send()
        return rec
    except RuntimeError as e:
        rec.ok, rec.error = False, str(e)[:300]
        rec.e2e_s = since_send()
        return rec
    end = time.perf_counter()
    try:
        check_plausible(s, spec)
    except Malformed as e:
        rec.ok, rec.error = False, str(e)[:300]
        t0 = clock.sent if clock.sent is not None else t_start
        rec.connect_s, rec.e2e_s = t0 - t_start, end - t0
        return rec
    return stream_record(rec, s, t_start, clock.sent, end, counter, keep_scores=spec.top_logprobs is not None)


def stream_record(
    rec: RequestRecord,
    s: _Stream,
    t_start: float,
    sent: float | None,
    end: float,
    counter: TokenCounter | None = None,
    keep_scores: bool = False,
) -> RequestRecord:
    """Fill `rec` from a finished stream whose times are absolute, on one clock: the request was started at
    `t_start`, its headers went out at `sent` (None: the trace never said; `t_start` then) and the stream
    ended at `end`. TTFT, chunk times, e2e and the server's stamps count from the send; the time before it
    is `connect_s`. `keep_scores`: the stream's logprobs go into the record (the reference pass)."""
    t0 = sent if sent is not None else t_start
    rec.connect_s = t0 - t_start
    rec.e2e_s = end - t0
    fill_record(rec, [t - t0 for t in s.times], s.texts, s.cumulative, s.usage_completion, counter)
    rec.prompt_tokens = s.usage_prompt
    rec.finish_reason = s.finish_reason
    if s.ids_seen and (s.usage_completion is None or len(s.token_ids) == s.usage_completion):
        rec.token_ids = s.token_ids
    if keep_scores and s.scores:
        rec.scores = s.scores
    if s.stamps and len(s.stamps) == len(s.times):
        rec.server_chunk_times = [round(t - t0, 7) for t in s.stamps]
        rec.server_arrival_s = round(s.arrive - t0, 7) if s.arrive is not None else None
    return rec


def fill_record(
    rec: RequestRecord,
    times: Sequence[float],
    texts: Sequence[str],
    cumulative: Sequence[int | None],
    usage_total: int | None,
    counter: TokenCounter | None,
) -> RequestRecord:
    counts, source, recount, mismatch = chunk_token_counts(texts, cumulative, usage_total, counter)
    rec.chunk_times = [round(t, 7) for t in times]
    rec.chunk_tokens = counts
    rec.chunk_token_source = source
    rec.usage_tokens = usage_total
    rec.tokenizer_tokens = recount
    rec.token_count_mismatch = mismatch
    rec.output_tokens = usage_total if usage_total is not None else sum(counts)
    rec.output_text = "".join(texts)
    rec.ttft_s = times[0] if times else None
    return rec


# LMDeploy's own endpoint for a completion workload's reference pass. LMDeploy 0.18's /v1/completions never
# returns logprobs (its stream raises "logprobs is removed" and drops the connection; the whole reply sets
# none: `serve/openai/endpoints/completions.py`), /generate does, for the same raw prompt (no chat template):
# the output ids and each token's top alternatives as (logprob, id) pairs.
GENERATE_PATH = "/generate"


def generate_payload(spec: RequestSpec, prompt: Prompt) -> dict[str, Any]:
    """LMDeploy's /generate request for `prompt`, asking for `spec.top_logprobs` alternatives a token."""
    body: dict[str, Any] = {
        "prompt": prompt.as_text(),
        "max_tokens": spec.max_tokens,
        "temperature": spec.temperature,
        "return_logprob": True,
        "top_logprobs_num": spec.top_logprobs or 1,
        "stream": False,
    }
    if spec.ignore_eos:
        body["ignore_eos"] = True
    return body


def generate_record(
    rec: RequestRecord, reply: Any, decode: Callable[[Sequence[int]], str] | None = None
) -> RequestRecord:
    """Fill `rec` from a /generate reply (`text`, `output_ids`, `meta_info.output_token_logprobs` and
    `output_top_logprobs`). Each token's text is what it adds to the decoded output (so the texts spell
    the output, as a completion's logprobs do) and each alternative's its own decoded text; without a
    tokenizer (`decode`) they are the ids as strings. A reply of another shape is an error, never a guess."""
    try:
        text = reply["text"]
        ids = [int(i) for i in reply["output_ids"]]
        meta = reply.get("meta_info") or {}
        chosen = [(float(lp), int(i)) for lp, i in meta.get("output_token_logprobs") or []]
        tops = [[(float(lp), int(i)) for lp, i in alts] for alts in meta.get("output_top_logprobs") or []]
        if not isinstance(text, str) or (chosen and len(chosen) != len(ids)):
            raise ValueError("the logprobs do not match the output")
    except (KeyError, TypeError, ValueError) as e:
        rec.ok, rec.error = False, f"unexpected /generate reply: {type(e).__name__}: {e}"[:300]
        return rec
    rec.output_text, rec.token_ids, rec.output_tokens = text, ids, len(ids)
    rec.finish_reason = ((meta.get("finish_reason") or {}).get("type")) if isinstance(meta, dict) else None

    def one(i: int) -> str:
        return decode([i]) if decode is not None else str(i)

    if decode is not None:  # what each token adds to the text decoded so far
        done = [decode(ids[: n + 1]) for n in range(len(ids))]
        before = ["", *done[:-1]]
        steps = zip(before, done, ids, strict=True)
        pieces = [b[len(a) :] if b.startswith(a) else one(i) for a, b, i in steps]
    else:
        pieces = [str(i) for i in ids]
    if chosen:
        rec.scores = [
            TokenScore(
                token=pieces[n],
                logprob=chosen[n][0],
                top=[(one(i), lp) for lp, i in sorted(tops[n], key=lambda t: -t[0])] if n < len(tops) else [],
            )
            for n in range(len(ids))
        ]
    return rec


async def run_generate(
    base_url: str,
    spec: RequestSpec,
    prompts: Sequence[Prompt],
    *,
    concurrency: int,
    decode: Callable[[Sequence[int]], str] | None = None,
) -> list[RequestRecord]:
    """`prompts` through LMDeploy's /generate, at most `concurrency` at once: one record each, in order
    (errors recorded, never raised)."""
    import httpx

    timeout = httpx.Timeout(spec.timeout_s, connect=min(spec.timeout_s, 30.0))
    headers = {"Authorization": f"Bearer {spec.api_key}"} if spec.api_key else None
    gate = asyncio.Semaphore(max(1, concurrency))
    async with httpx.AsyncClient(timeout=timeout, headers=headers, verify=tls()) as client:

        async def one(p: Prompt) -> RequestRecord:
            rec = RequestRecord(id=p.id, category=p.category)
            async with gate:
                try:
                    url = base_url.rstrip("/") + GENERATE_PATH
                    r = await client.post(url, json=generate_payload(spec, p))
                    r.raise_for_status()
                    return generate_record(rec, r.json(), decode)
                except (httpx.HTTPError, ValueError) as e:
                    rec.ok, rec.error = False, f"{type(e).__name__}: {e}".strip()[:300]
                    return rec

        return list(await asyncio.gather(*(one(p) for p in prompts)))


async def run_requests(
    base_url: str,
    spec: RequestSpec,
    prompts: Sequence[Prompt],
    *,
    concurrency: int,
    repeats: int = 1,
    trial: int = 0,
    counter: TokenCounter | None = None,
    on_done: Callable[[RequestRecord], None] | None = None,
    sink: list[RequestRecord] | None = None,
) -> tuple[list[RequestRecord], float]:
    """Send every prompt `repeats` times with at most `concurrency` in flight; (records, wall seconds).
    Records are appended to `sink` as they finish, so an interrupted run keeps what completed."""
    import httpx

    queue: asyncio.Queue[tuple[int, Prompt]] = asyncio.Queue()
    for r in range(repeats):
        for p in prompts:
            queue.put_nowait((r, p))
    records: list[RequestRecord] = sink if sink is not None else []
    own: list[RequestRecord] = []
    limits = httpx.Limits(max_connections=concurrency + 2, max_keepalive_connections=concurrency + 2)
    timeout = httpx.Timeout(spec.timeout_s, connect=min(spec.timeout_s, 30.0))
    headers = {"Authorization": f"Bearer {spec.api_key}"} if spec.api_key else None
    async with httpx.AsyncClient(limits=limits, timeout=timeout, headers=headers, verify=tls()) as client:
        # The run's clock starts once the client exists: making the process's first (it builds the TLS
        # context, `tls()`) takes 25-60 ms here, no part of the server's time, which would pull a short
        # trial's output rate down.
        t0 = time.perf_counter()

        async def worker() -> None:
            while True:
                try:
                    r, p = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                rec = await send_request(
                    client, base_url, spec, p, repeat=r, trial=trial, run_t0=t0, counter=counter
                )
                records.append(rec)
                own.append(rec)
                if on_done is not None:
                    on_done(rec)

        await asyncio.gather(*(worker() for _ in range(max(1, concurrency))))
        wall = time.perf_counter() - t0
    return own, wall


def run_async(coro: Any) -> Any:
    """`asyncio.run(coro)`, but SIGTERM, SIGHUP and Ctrl-C cancel the running requests from inside the
    event loop and then raise `Terminated` (or KeyboardInterrupt), as asyncio.run does for Ctrl-C alone. The
    CLI's own handler raises `Terminated` wherever Python happens to be, which inside a task left that
    task's exception unretrieved and asyncio logging a traceback at exit; here the loop winds down first,
    so only the one error line remains."""
    loop = asyncio.new_event_loop()
    received: list[int] = []
    previous: dict[int, Any] = {}

    def cancel(signum: int) -> None:
        received.append(signum)
        for task in asyncio.all_tasks(loop):
            task.cancel()

    for name in ("SIGTERM", "SIGHUP", "SIGINT"):
        sig = getattr(signal, name, None)
        if sig is None or (name == "SIGINT" and signal.getsignal(sig) in (signal.SIG_IGN, None)):
            continue  # an ignored SIGINT (a background job) stays ignored
        try:
            previous[sig] = signal.getsignal(sig)
            loop.add_signal_handler(sig, cancel, sig)
        except (ValueError, RuntimeError, NotImplementedError):  # not the main thread, or no support
            previous.pop(sig, None)
    try:
        try:
            return loop.run_until_complete(coro)
        except asyncio.CancelledError:
            if received and received[0] == signal.SIGINT:
                raise KeyboardInterrupt from None
            if received:
                raise Terminated(received[0]) from None
            raise
    finally:
        try:
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            for sig, handler in previous.items():
                loop.remove_signal_handler(sig)
                # after a signal, the caller unwinds (writes the partial report, stops servers): a second
                # Ctrl-C must not cut that short, so further signals stay ignored until the CLI exits
                signal.signal(sig, signal.SIG_IGN if received else handler)
            loop.close()
