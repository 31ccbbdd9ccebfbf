"""The project's fake OpenAI-compatible servers, one module for every test and benchmark that needs one.

`hostile_server(Behaviour(...))` answers what a test scripts, in a thread of the test process: a malformed
`/v1/models`, SSE chunks of any shape, a stream cut short, an API key it insists on (so `specq bench --url`
can be driven in-process against it).

The synthetic server (`start_server`, `SyntheticEngine`) has a known, fixed schedule — the benchmark's own
yardstick. It serves `/v1/models`, `/v1/chat/completions`, `/v1/completions` (SSE with
`stream_options.include_usage`, and non-streaming), `/health` and `/metrics` with LMDeploy's
`lmdeploy:spec_decode_*` counter names, whose values it controls exactly.

Every request produces the same word tokens (`" w<n>"`, deterministic in the prompt) whatever k is, so the
lossless check passes by construction (unless `--unstable-after`, below). The first chunk arrives `ttft_s`
after the request; then one chunk every `step_s`, each chunk one simulated verify step carrying
`accepted + 1` tokens, where `accepted` cycles through `--accept-pattern` (capped at k). With k = 0 every
chunk carries `tokens_per_chunk` tokens.
Chunks are sent on an absolute schedule (no drift), so a client's ITL and tokens/s can be checked against
the truth. `--first-chunk-tokens N` makes the first chunk carry N tokens. `--jit-requests N --jit-s S` models
an engine that JIT-compiles kernels on first use (LMDeploy's AWQ Triton path): the i-th of the first N
requests after start pays `S × (1 − i/N)` extra before its first token (prefill), outside the decode-time
counter. Fault injection: `--fail-every N` answers every N-th request with HTTP 500, `--die-after N` exits
after N requests, `--error-mid-stream` sends an error event after the first chunk, `--stall-s S` pauses S
seconds after the first chunk, `--metrics-lag-s` delays counter updates like LMDeploy's lagging /metrics.
`--loop N` makes every output cycle through its first N words, like a model stuck in a loop (with
`--loop-every M`, only the outputs of prompts whose hash is a multiple of M: a model that loops on some).
`--unstable-after N` models a plain engine that is not deterministic (LMDeploy's AWQ split-K kernel adds
partial sums with atomics, in whatever order its blocks finish): after N tokens every request's words depend
on how many requests the server has answered, so two trials of the same prompt differ there.

Used by tests (`SyntheticEngine` implements the serve stage's `Engine`) and by
`benchmarks/bench_client_throughput.py`. Run: `python tests/fake_openai.py --port 0`."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specq.pipeline.errors import ProcessFailed
from specq.pipeline.progress import Progress, null_progress
from specq.pipeline.serve.engine import Engine

if TYPE_CHECKING:
    from specq.pipeline.serve.spec import ServeRequest

MODEL = "synthetic"
HERE = Path(__file__).resolve()


class JsonHandler(BaseHTTPRequestHandler):
    """What both servers' handlers share: HTTP/1.1, no request log, a whole JSON (or text) reply."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *a: Any) -> None:  # keep the log quiet
        pass

    def _send(self, code: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def models_reply(name: str) -> Any:
    """/v1/models as OpenAI (and LMDeploy) list one model."""
    return {"object": "list", "data": [{"id": name, "object": "model"}]}


# ---- the scripted server -----------------------------------------------------------------------------

OK_MODELS: Any = models_reply("m")


def chunk(text: str, usage: Any = None, **extra: Any) -> bytes:
    body: dict[str, Any] = {"choices": [{"index": 0, "delta": {"content": text}}], **extra}
    if usage is not None:
        body["usage"] = usage
    return json.dumps(body).encode()


def good_stream(n: int = 3) -> list[bytes]:
    return [chunk(f" w{i}") for i in range(n)] + [
        json.dumps({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": n}}).encode(),
        b"[DONE]",
    ]


@dataclass
class Behaviour:
    models: Any = field(default_factory=lambda: OK_MODELS)  # a JSON value, or raw bytes
    models_status: int = 200
    events: list[bytes] = field(default_factory=good_stream)  # SSE data payloads, in order
    api_key: str | None = None  # when set, every request needs "Authorization: Bearer KEY"
    delay_s: float = 0.0  # pause before each SSE event (a slow server, for signals mid-stream)
    seen_auth: list[str] = field(default_factory=list)


def _scripted_handler(b: Behaviour) -> type[BaseHTTPRequestHandler]:
    class Handler(JsonHandler):
        def _refused(self) -> bool:
            auth = self.headers.get("Authorization", "")
            b.seen_auth.append(auth)
            if b.api_key is None or auth == f"Bearer {b.api_key}":
                return False
            self._send(401, json.dumps({"error": {"message": "invalid api key"}}).encode())
            return True

        def do_GET(self) -> None:
            if self.path.startswith("/v1/") and self._refused():  # /metrics is open, as on LMDeploy
                return
            if self.path.startswith("/v1/models"):
                raw = b.models if isinstance(b.models, bytes) else json.dumps(b.models).encode()
                self._send(b.models_status, raw)
            elif self.path.startswith("/metrics"):
                self._send(404, b"", "text/plain")
            else:
                self._send(404, b"{}")

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if self._refused():
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            for data in b.events:
                time.sleep(b.delay_s)
                try:
                    self.wfile.write(b"data: " + data + b"\n\n")
                    self.wfile.flush()
                except OSError:  # the client went away
                    return
            self.close_connection = True

    return Handler


@contextmanager
def hostile_server(behaviour: Behaviour) -> Iterator[str]:
    """`http://127.0.0.1:PORT` of a server behaving as told, for the duration of the block."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _scripted_handler(behaviour))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


# ---- the synthetic server ----------------------------------------------------------------------------


class Counters:
    def __init__(self, draft_tokens: int, lag_s: float):
        self.draft_tokens, self.lag_s = draft_tokens, lag_s
        self.lock = threading.Lock()
        self.values: dict[str, float] = {}
        self.pending: list[tuple[float, dict[str, float]]] = []
        self.requests = 0

    def add(self, delta: dict[str, float]) -> None:
        with self.lock:
            if self.lag_s > 0:
                self.pending.append((time.monotonic() + self.lag_s, delta))
            else:
                self._apply(delta)

    def _apply(self, delta: dict[str, float]) -> None:
        for key, v in delta.items():
            self.values[key] = self.values.get(key, 0.0) + v

    def render(self) -> str:
        with self.lock:
            now = time.monotonic()
            due = [d for t, d in self.pending if t <= now]
            self.pending = [(t, d) for t, d in self.pending if t > now]
            for d in due:
                self._apply(d)
            v = dict(self.values)
        lab = 'engine="0",model_name="synthetic"'
        out = []

        def counter(name: str, value: float, extra: str = "") -> None:
            out.append(f"# TYPE lmdeploy:{name} counter")
            out.append(f"lmdeploy:{name}_total{{{lab}{extra}}} {value}")

        counter("generation_tokens", v.get("gen", 0.0))
        counter("spec_decode_num_drafts", v.get("drafts", 0.0))
        counter("spec_decode_num_draft_tokens", v.get("draft_tokens", 0.0))
        counter("spec_decode_num_accepted_tokens", v.get("accepted", 0.0))
        out.append("# TYPE lmdeploy:spec_decode_num_accepted_tokens_per_pos counter")
        for i in range(max(self.draft_tokens, 1)):
            val = v.get(f"pos{i}", 0.0)
            out.append(
                f'lmdeploy:spec_decode_num_accepted_tokens_per_pos_total{{{lab},position="{i}"}} {val}'
            )
        out.append("# TYPE lmdeploy:request_decode_time_seconds histogram")
        out.append(f'lmdeploy:request_decode_time_seconds_bucket{{{lab},le="+Inf"}} {v.get("reqs", 0.0)}')
        out.append(f"lmdeploy:request_decode_time_seconds_count{{{lab}}} {v.get('reqs', 0.0)}")
        out.append(f"lmdeploy:request_decode_time_seconds_sum{{{lab}}} {v.get('decode_s', 0.0)}")
        return "\n".join(out) + "\n"


def plan_chunks(
    k: int, n_tokens: int, pattern: list[int], tokens_per_chunk: int, first: int | None = None
) -> list[int]:
    """Tokens per chunk for one request: k > 0 → accepted+1 per step (accepted cycles through pattern).
    `first`: tokens in the first chunk (default: the prefill's one token when k > 0)."""
    sizes: list[int] = [1] if k > 0 and n_tokens > 0 else []  # the prefill's token comes alone
    if first is not None and n_tokens > 0:
        sizes = [min(first, n_tokens)]
    left, step = n_tokens - sum(sizes), 0
    while left > 0:
        size = (min(pattern[step % len(pattern)], k) + 1) if k > 0 else tokens_per_chunk
        size = min(size, left)
        sizes.append(size)
        left -= size
        step += 1
    return sizes


def wait_until(target: float) -> None:
    """Sleep until `target` (perf_counter), spinning the last millisecond: time.sleep overshoots by a few
    hundred microseconds on a busy machine, and the schedule is the yardstick."""
    delay = target - time.perf_counter()
    if delay > 0.001:
        time.sleep(delay - 0.001)
    while time.perf_counter() < target:
        pass


def make_handler(args: argparse.Namespace, counters: Counters) -> type[BaseHTTPRequestHandler]:
    pattern = [int(x) for x in args.accept_pattern.split(",")]

    class Handler(JsonHandler):
        def setup(self) -> None:
            super().setup()
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def parse_request(self) -> bool:
            # The request line has just been read: the schedule (TTFT) starts at the request's arrival.
            self.t_arrive = time.perf_counter()
            return super().parse_request()

        def do_GET(self) -> None:
            if self.path.startswith("/v1/models"):
                self._send(200, json.dumps(models_reply(MODEL)).encode())
            elif self.path.startswith("/health"):
                self._send(200, b"{}")
            elif self.path.startswith("/metrics"):
                self._send(200, counters.render().encode(), "text/plain; version=0.0.4")
            else:
                self._send(404, b'{"error": "not found"}')

        def do_POST(self) -> None:
            t_arrive = self.t_arrive
            length = int(self.headers.get("Content-Length", 0))
            body = json.loads(self.rfile.read(length) or b"{}")
            with counters.lock:
                counters.requests += 1
                n_req = counters.requests
            if args.die_after and n_req > args.die_after:
                os._exit(3)
            if args.fail_every and n_req % args.fail_every == 0:
                self._send(500, b'{"error": {"message": "injected failure"}}')
                return
            chat = self.path.startswith("/v1/chat/completions")
            prompt = json.dumps(body.get("messages") if chat else body.get("prompt"))
            seed = int(hashlib.sha256(prompt.encode()).hexdigest()[:6], 16)
            n = int(body.get("max_tokens") or 16)
            words = [f" w{(seed + i * 7919) % 100000:05d}" for i in range(n)]  # fixed width: 7 chars a token
            if args.loop and seed % args.loop_every == 0:
                words = [words[i % args.loop] for i in range(n)]
            if args.unstable_after is not None:  # from there on, this request's words are its own
                at = args.unstable_after
                words[at:] = [f" u{(seed + n_req * 104729 + i) % 100000:05d}" for i in range(at, n)]
            sizes = plan_chunks(args.draft_tokens, n, pattern, args.tokens_per_chunk, args.first_chunk_tokens)
            jit = args.jit_s * (1 - (n_req - 1) / args.jit_requests) if n_req <= args.jit_requests else 0.0
            if not body.get("stream"):
                time.sleep(jit + args.ttft_s + args.step_s * (len(sizes) - 1))
                self._account(sizes, args.step_s * (len(sizes) - 1))
                msg = {"role": "assistant", "content": "".join(words)}
                whole: dict[str, Any] = {"index": 0, "finish_reason": "length"}
                whole.update({"message": msg} if chat else {"text": msg["content"]})
                usage = {"prompt_tokens": len(prompt.split()), "completion_tokens": n, "total_tokens": n}
                self._send(200, json.dumps({"id": "x", "choices": [whole], "usage": usage}).encode())
                return
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            obj = "chat.completion.chunk" if chat else "text_completion"
            pos = 0
            t_first = t_arrive + jit + args.ttft_s
            for j, size in enumerate(sizes):
                if j == 1 and args.error_mid_stream:
                    err = {"error": {"message": "injected mid-stream error", "type": "internal_error"}}
                    self.wfile.write(b"data: " + json.dumps(err).encode() + b"\n\n")
                    self.wfile.flush()
                    return
                if j == 1 and args.stall_s:
                    time.sleep(args.stall_s)
                    t_first += args.stall_s
                text = "".join(words[pos : pos + size])
                pos += size
                last = j == len(sizes) - 1
                choice: dict[str, Any] = {"index": 0, "finish_reason": "length" if last else None}
                if chat:
                    choice["delta"] = {"content": text} if j else {"role": "assistant", "content": text}
                else:
                    choice["text"] = text
                chunk: dict[str, Any] = {"id": "x", "object": obj, "model": MODEL, "choices": [choice]}
                if args.continuous_usage:
                    chunk["usage"] = {"prompt_tokens": 1, "completion_tokens": pos, "total_tokens": pos + 1}
                wait_until(t_first + j * args.step_s)
                if args.stamp:
                    chunk["specq_t"] = time.perf_counter()  # CLOCK_MONOTONIC on Linux: the client's clock
                    chunk["specq_arrive"] = t_arrive
                self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                self.wfile.flush()
            if include_usage:
                usage = {"prompt_tokens": 1, "completion_tokens": n, "total_tokens": n + 1}
                final = {"id": "x", "object": obj, "model": MODEL, "choices": [], "usage": usage}
                self.wfile.write(b"data: " + json.dumps(final).encode() + b"\n\n")
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
            self._account(sizes, args.step_s * (len(sizes) - 1))

        def _account(self, sizes: list[int], decode_s: float) -> None:
            d: dict[str, float] = {"gen": float(sum(sizes)), "reqs": 1.0, "decode_s": decode_s}
            if args.draft_tokens > 0:
                # The first chunk is the prefill's token; every later chunk is one verify step.
                steps = sizes[1:]
                d["drafts"] = float(len(steps))
                d["draft_tokens"] = float(len(steps) * args.draft_tokens)
                d["accepted"] = float(sum(s - 1 for s in steps))
                for i in range(args.draft_tokens):
                    d[f"pos{i}"] = float(sum(1 for s in steps if s - 1 > i))
            counters.add(d)

    return Handler


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="specq synthetic streaming server")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--draft-tokens", "--k", type=int, default=0, help="draft tokens (0 = plain decoding)")
    p.add_argument("--accept-pattern", default="2,1,3,0", help="accepted drafts per step, cycled")
    p.add_argument("--tokens-per-chunk", type=int, default=1, help="tokens per chunk when k = 0")
    p.add_argument("--ttft-s", type=float, default=0.01)
    p.add_argument("--step-s", type=float, default=0.002, help="time between chunks")
    p.add_argument("--continuous-usage", action="store_true", help="cumulative usage in every chunk")
    p.add_argument("--stamp", action="store_true", help="put the send time (specq_t) in every chunk")
    p.add_argument("--fail-every", type=int, default=0)
    p.add_argument("--die-after", type=int, default=0)
    p.add_argument("--metrics-lag-s", type=float, default=0.0)
    p.add_argument("--first-chunk-tokens", type=int, default=None, help="tokens in the first chunk")
    p.add_argument("--jit-requests", type=int, default=0, help="the first N requests pay a JIT compile")
    p.add_argument("--jit-s", type=float, default=0.0, help="compile time of the first request (decays)")
    p.add_argument("--error-mid-stream", action="store_true", help="an error event after the first chunk")
    p.add_argument("--stall-s", type=float, default=0.0, help="pause after the first chunk")
    p.add_argument("--loop", type=int, default=0, help="outputs cycle through their first N words")
    p.add_argument("--loop-every", type=int, default=1, help="--loop only where the prompt's hash %% M == 0")
    p.add_argument(
        "--unstable-after", type=int, default=None, help="outputs differ between requests after N tokens"
    )
    return p.parse_args(argv)


def serve(args: argparse.Namespace) -> None:
    counters = Counters(args.draft_tokens, args.metrics_lag_s)
    server = ThreadingHTTPServer((args.host, args.port), make_handler(args, counters))
    server.daemon_threads = True
    print(f"PORT {server.server_address[1]}", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    try:
        server.serve_forever(poll_interval=0.1)
    finally:
        server.server_close()


def start_server(*args: str, log: Path | None = None) -> tuple[subprocess.Popen[bytes], str]:
    """Start the synthetic server in a child process; (process, base URL)."""
    cmd = [sys.executable, str(HERE), "--port", "0", *args]
    err = open(log, "wb") if log else subprocess.DEVNULL  # noqa: SIM115 - the child owns it
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, start_new_session=True)
    assert proc.stdout is not None
    line = proc.stdout.readline().decode()
    if not line.startswith("PORT "):
        proc.kill()
        raise ProcessFailed(f"synthetic server did not start: {line.strip() or 'no output'}")
    return proc, f"http://127.0.0.1:{int(line.split()[1])}"


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if proc.stdout:
        proc.stdout.close()


class SyntheticEngine(Engine):
    """The serve stage's Engine interface over the synthetic server, for `request.draft_tokens`."""

    name = "synthetic"

    def __init__(self, request: ServeRequest, run_dir: Path, progress: Progress = null_progress, *extra: str):
        self.draft_tokens = request.draft_tokens
        self.run_dir = Path(run_dir)
        self.extra = list(extra)
        self._proc: subprocess.Popen[bytes] | None = None
        self._url = ""
        self._launched = 0.0

    def command(self) -> list[str]:
        return [sys.executable, str(HERE), "--draft-tokens", str(self.draft_tokens), *self.extra]

    def start(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._launched = time.monotonic()
        self._proc, self._url = start_server(
            "--draft-tokens", str(self.draft_tokens), *self.extra, log=self.log_path
        )

    def wait_ready(self, timeout_s: float) -> None:
        import httpx

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if httpx.get(self._url + "/v1/models", timeout=2).status_code == 200:
                    self.ready_s = round(time.monotonic() - self._launched, 3)
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise ProcessFailed(f"synthetic server at {self._url} not ready after {timeout_s:g} s")

    def stop(self) -> None:
        if self._proc is not None:
            stop_server(self._proc)
            self._proc = None

    @property
    def base_url(self) -> str:
        return self._url

    @property
    def model_name(self) -> str:
        return MODEL

    @property
    def log_path(self) -> Path:
        return self.run_dir / "server.log"


if __name__ == "__main__":
    serve(parse_args())
