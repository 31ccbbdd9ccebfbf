"""Prometheus metrics of the embedded engine, under LMDeploy 0.18's names, label sets and TYPE lines
(`lmdeploy:spec_decode_*`, `lmdeploy:generation_tokens_total`, …, labels `engine` and `model_name`), so that
`specq bench` reads either server the same way. Unlike LMDeploy, every counter is updated the moment a
verification step or a token happens: a scrape right after a response is already exact."""

from __future__ import annotations

import threading
from typing import Any, NamedTuple

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics

# LMDeploy exposes no `_created` series (see the captures in the project's fixtures).
disable_created_metrics()

LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
                   120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)  # fmt: skip
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)  # fmt: skip


class _Metric(NamedTuple):
    attr: str
    kind: type[Counter] | type[Gauge] | type[Histogram]
    name: str
    doc: str
    extra_labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] | None = None


# In LMDeploy's order (the order of /metrics); every one is labelled `engine` and `model_name`, plus extras.
_METRICS = (
    _Metric("prompt_tokens", Counter, "lmdeploy:prompt_tokens", "Number of prefill tokens processed."),
    _Metric("generation_tokens", Counter, "lmdeploy:generation_tokens",
            "Number of generation tokens processed."),
    _Metric("drafts", Counter, "lmdeploy:spec_decode_num_drafts", "Number of speculative decoding drafts."),
    _Metric("drafted_tokens", Counter, "lmdeploy:spec_decode_num_draft_tokens",
            "Number of speculative decoding draft tokens."),
    _Metric("accepted_tokens", Counter, "lmdeploy:spec_decode_num_accepted_tokens",
            "Number of speculative decoding accepted tokens."),
    _Metric("accepted_per_pos", Counter, "lmdeploy:spec_decode_num_accepted_tokens_per_pos",
            "Number of accepted speculative decoding tokens per draft position.", ("position",)),
    _Metric("mean_accept_rate", Gauge, "lmdeploy:spec_decode_mean_accept_rate",
            "Mean speculative decoding acceptance rate. 1 means 100 percent accepted."),
    _Metric("mean_accept_length", Gauge, "lmdeploy:spec_decode_mean_accept_length",
            "Mean speculative decoding acceptance length, including the bonus token."),
    _Metric("per_position_accept_rate", Gauge, "lmdeploy:spec_decode_per_position_accept_rate",
            "Speculative decoding acceptance rate per draft position. 1 means 100 percent accepted.",
            ("position",)),
    _Metric("request_success", Counter, "lmdeploy:request_success",
            "Count of successfully processed requests.", ("finished_reason",)),
    _Metric("ttft", Histogram, "lmdeploy:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.", buckets=TTFT_BUCKETS),
    _Metric("e2e", Histogram, "lmdeploy:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.", buckets=LATENCY_BUCKETS),
    _Metric("decode_time", Histogram, "lmdeploy:request_decode_time_seconds",
            "Histogram of time spent in DECODE phase for request.", buckets=LATENCY_BUCKETS),
    _Metric("requests_waiting", Gauge, "lmdeploy:num_requests_waiting",
            "Number of requests waiting to be processed."),
    _Metric("requests_running", Gauge, "lmdeploy:num_requests_running",
            "Number of requests in model execution batches."),
)  # fmt: skip


class EngineMetrics:
    """All counters of one served model. Thread-safe: the generation thread writes, /metrics reads."""

    prompt_tokens: Counter
    generation_tokens: Counter
    drafts: Counter
    drafted_tokens: Counter
    accepted_tokens: Counter
    accepted_per_pos: Counter
    mean_accept_rate: Gauge
    mean_accept_length: Gauge
    per_position_accept_rate: Gauge
    request_success: Counter
    ttft: Histogram
    e2e: Histogram
    decode_time: Histogram
    requests_waiting: Gauge
    requests_running: Gauge

    def __init__(self, model_name: str, draft_tokens: int = 0, engine: str = "0") -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.labels = {"engine": engine, "model_name": model_name}
        self.draft_tokens = draft_tokens  # per step; the counter of tokens drafted is `drafted_tokens`
        self._lock = threading.Lock()
        for m in _METRICS:
            labelnames = ["engine", "model_name", *m.extra_labels]
            extra: dict[str, Any] = {"buckets": m.buckets} if m.buckets else {}
            metric = m.kind(m.name, m.doc, labelnames, registry=self.registry, **extra)
            setattr(self, m.attr, metric)
            if not m.extra_labels:  # every series visible from the start, at 0, as LMDeploy does
                metric.labels(**self.labels)
        self.request_success.labels(**self.labels, finished_reason="ResponseType.FINISH")
        for i in range(draft_tokens):
            self.accepted_per_pos.labels(**self.labels, position=str(i))
            self.per_position_accept_rate.labels(**self.labels, position=str(i))
        self._n_drafts = 0
        self._n_draft_tokens = 0
        self._n_accepted = 0
        self._per_pos: list[int] = [0] * draft_tokens

    def add_prompt_tokens(self, n: int) -> None:
        self.prompt_tokens.labels(**self.labels).inc(n)

    def add_generation_tokens(self, n: int) -> None:
        self.generation_tokens.labels(**self.labels).inc(n)

    def record_verification(self, drafted: int, accepted: int) -> None:
        """One verification step: `drafted` candidate tokens, the first `accepted` of them accepted."""
        if drafted <= 0:
            return
        accepted = max(0, min(accepted, drafted))
        with self._lock:
            self._n_drafts += 1
            self._n_draft_tokens += drafted
            self._n_accepted += accepted
            if drafted > len(self._per_pos):
                for i in range(len(self._per_pos), drafted):
                    self.per_position_accept_rate.labels(**self.labels, position=str(i))
                    self.accepted_per_pos.labels(**self.labels, position=str(i))
                self._per_pos.extend([0] * (drafted - len(self._per_pos)))
            for i in range(accepted):
                self._per_pos[i] += 1
            self.drafts.labels(**self.labels).inc()
            self.drafted_tokens.labels(**self.labels).inc(drafted)
            self.accepted_tokens.labels(**self.labels).inc(accepted)
            for i in range(accepted):
                self.accepted_per_pos.labels(**self.labels, position=str(i)).inc()
            self.mean_accept_rate.labels(**self.labels).set(self._n_accepted / self._n_draft_tokens)
            self.mean_accept_length.labels(**self.labels).set(1 + self._n_accepted / self._n_drafts)
            for i, n in enumerate(self._per_pos):
                self.per_position_accept_rate.labels(**self.labels, position=str(i)).set(n / self._n_drafts)

    def finish_request(self, e2e_s: float, ttft_s: float | None, reason: str = "ResponseType.FINISH") -> None:
        self.e2e.labels(**self.labels).observe(e2e_s)
        if ttft_s is not None:
            self.ttft.labels(**self.labels).observe(ttft_s)
            self.decode_time.labels(**self.labels).observe(max(0.0, e2e_s - ttft_s))
        self.request_success.labels(**self.labels, finished_reason=reason).inc()

    def render(self) -> bytes:
        from prometheus_client import generate_latest

        return generate_latest(self.registry)
