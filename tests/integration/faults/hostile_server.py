"""A small OpenAI-shaped HTTP server that answers what a test tells it to: a malformed `/v1/models`, SSE
chunks of any shape, a stream cut short, an API key it insists on. It runs in a thread of the test process,
so `specq bench --url` can be driven in-process against it."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

OK_MODELS: Any = {"object": "list", "data": [{"id": "m", "object": "model"}]}


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


def _handler(b: Behaviour) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *a: Any) -> None:
            pass

        def _refused(self) -> bool:
            auth = self.headers.get("Authorization", "")
            b.seen_auth.append(auth)
            if b.api_key is None or auth == f"Bearer {b.api_key}":
                return False
            self._send(401, json.dumps({"error": {"message": "invalid api key"}}).encode())
            return True

        def _send(self, code: int, body: bytes, ctype: str = "application/json") -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

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
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(behaviour))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
