"""The benchmark report: a versioned pydantic document (`schema_version`) holding everything a run measured —
versions, GPU and driver, the full resolved config, the workload digest, per-request records, per-run
aggregates, acceptance from the server's counters, telemetry series, gates — so a saved report can be
re-rendered, compared and gated later without the server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from ..errors import InputError

SCHEMA_VERSION = "1.3"  # 1.1: warm-up, trials, consistency, step cost, headline; 1.2: decode-rate headline
# (headline basis, client decode rates per trial, e2e and decode-rate speedups); 1.3: each run's
# reproducibility across its trials, the lossless check's baseline-not-reproducible verdict, each server's
# ready time. 1.0, 1.1 and 1.2 still load.
HeadlineBasis = Literal["decode", "e2e"]


class Stats(BaseModel):
    n: int = 0
    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    min: float | None = None
    max: float | None = None

    @classmethod
    def of(cls, values: list[float]) -> Stats:
        if not values:
            return cls()
        import numpy as np

        a = np.asarray(values, dtype=float)
        p50, p90, p99 = (float(x) for x in np.percentile(a, [50, 90, 99]))
        return cls(
            n=len(values),
            mean=float(a.mean()),
            p50=p50,
            p90=p90,
            p99=p99,
            min=float(a.min()),
            max=float(a.max()),
        )


TokenSource = Literal["usage-stream", "tokenizer", "chars", "chunks"]


class TokenScore(BaseModel):
    """One output token as a server scored it: its text (the server's token string), its logprob and the
    top alternatives (token string, logprob), best first."""

    token: str
    logprob: float
    top: list[tuple[str, float]] = Field(default_factory=list)


class RequestRecord(BaseModel):
    """One request. Times are seconds; `chunk_times` are arrivals of content chunks after the send."""

    id: str
    category: str
    repeat: int = 0
    trial: int = 0
    ok: bool = True
    error: str | None = None
    start_s: float = 0.0  # since the run started
    # From the request's start to the moment its headers began to go out (waiting for and opening a
    # connection): TTFT, chunk times and e2e are measured from the send, not from here.
    connect_s: float | None = None
    ttft_s: float | None = None
    e2e_s: float | None = None
    prompt_tokens: int | None = None
    output_tokens: int | None = None  # the server's usage when it sent one (authoritative)
    usage_tokens: int | None = None
    tokenizer_tokens: int | None = None  # local recount (cross-check)
    token_count_mismatch: bool = False
    chunk_token_source: TokenSource | None = None
    finish_reason: str | None = None
    chunk_times: list[float] = Field(default_factory=list)
    chunk_tokens: list[int] = Field(default_factory=list)
    # Send times the server stamped on its chunks (`specq_t`, CLOCK_MONOTONIC, same clock as the client's),
    # relative to the client's send: only servers that stamp (the synthetic one) fill it. It lets the
    # client's own timing error be measured apart from the server's jitter.
    server_chunk_times: list[float] | None = None
    server_arrival_s: float | None = None  # when the stamping server read the request, after the send
    output_text: str = ""
    # The output's token ids when the server sent them (`return_token_ids`: LMDeploy's `gen_tokens`, vLLM's
    # `token_ids`); the lossless check compares these, else a local re-tokenization of the text.
    token_ids: list[int] | None = None
    # Per output token, the reference pass's logprobs (`logprobs` + `top_logprobs`); kept in memory for the
    # lossless check, not written to the report (its classified divergences are).
    scores: list[TokenScore] | None = Field(None, exclude=True)

    @property
    def chunks(self) -> int:
        return len(self.chunk_times)


class Acceptance(BaseModel):
    """Speculative-decoding acceptance over one run, from the diff of the server's /metrics counters."""

    source: str  # metric prefix, e.g. "lmdeploy:" or "vllm:"
    drafts: float
    draft_tokens: float
    accepted_tokens: float
    acceptance_rate: float | None = None  # accepted / draft tokens
    acceptance_length: float | None = None  # 1 + accepted / drafts (τ)
    per_position: list[float] = Field(default_factory=list)  # accepted at position i / drafts
    client_tokens_per_chunk: float | None = None  # client-side estimate of τ (one chunk per step)
    client_disagrees: bool = False
    settled: bool = True  # the "after" scrape was stable (two scrapes agreed)
    # What the server itself reports (LMDeploy's gauges, cumulative since the server started, warm-up
    # included): equal to the diffs above when the run is the server's whole life.
    server_mean_acceptance_length: float | None = None
    server_mean_acceptance_rate: float | None = None


class ServerCheck(BaseModel):
    """The server's own token and time counters, next to the client's figures. Both decode rates count the
    tokens after each request's first over the decode time (the first token arrives at TTFT, before it)."""

    generation_tokens: float | None = None
    decode_time_s: float | None = None
    decode_requests: float | None = None  # requests in the decode-time histogram (1.2)
    # (generation tokens − decode_requests) / decode time; a 1.1 report, or a server without the histogram's
    # count: generation tokens / decode time
    server_decode_tokens_per_s: float | None = None
    client_decode_tokens_per_s: float | None = None
    client_output_tokens: int | None = None
    tokens_rel_diff: float | None = None  # (client - server) / server, output tokens
    rate_rel_diff: float | None = None


class Warmup(BaseModel):
    """Warm-up to steady state before a run: passes over the run's own prompts (same lengths, same
    concurrency) until a pass's output tok/s is no faster than the previous one's by more than `tolerance`,
    at most `max_passes`."""

    requests_per_pass: int
    max_passes: int
    tolerance: float
    passes: int = 0
    rates: list[float] = Field(default_factory=list)  # output tok/s per pass
    steady: bool | None = None  # None: not checked (a single pass allowed, or no pass completed)
    error: str | None = None  # the first error when a pass had no successful request


class Consistency(BaseModel):
    """Self-consistency of one trial (or a whole run): the client's figures against the server's counters.
    A relative difference beyond `tolerance` on any check makes `consistent` False; None: nothing to check
    (the server exports no token or decode-time counters)."""

    tolerance: float
    client_output_tokens: int | None = None
    server_generation_tokens: float | None = None
    tokens_rel_diff: float | None = None  # (client - server) / server
    client_decode_tokens_per_s: float | None = None
    server_decode_tokens_per_s: float | None = None
    decode_rel_diff: float | None = None
    client_output_tokens_per_s: float | None = None
    # What the server's decode rate implies for the client's output rate, with the run's median TTFT as
    # every request's prefill: a request that paid extra (a JIT compile, a stall) drags the client below it.
    implied_output_tokens_per_s: float | None = None
    output_rel_diff: float | None = None
    consistent: bool | None = None
    problems: list[str] = Field(default_factory=list)


class Trial(BaseModel):
    """One measured pass of the whole workload; a run holds `trials` of them on one warmed server."""

    index: int
    requests: int = 0
    errors: int = 0
    duration_s: float = 0.0
    output_tokens: int = 0
    output_tokens_per_s: float | None = None
    decode_tokens_per_s: float | None = None  # client decode rate: Σ (tokens − 1) / Σ (e2e − TTFT) (1.2)
    acceptance_length: float | None = None
    consistency: Consistency | None = None
    steady: bool = True  # used for the headline: warm-up did not end unsteady and the trial is consistent


class Spread(BaseModel):
    """Median and range of a figure over a run's trials (`used` of `n` counted: the steady ones, else all)."""

    n: int = 0
    used: int = 0
    median: float | None = None
    min: float | None = None
    max: float | None = None
    rel_spread: float | None = None  # (max - min) / median


class TelemetrySample(BaseModel):
    t: float
    gpu: int
    util_pct: float | None = None
    mem_used_bytes: int | None = None
    power_w: float | None = None
    energy_j: float | None = None  # the GPU's total-energy counter, relative to the first sample
    sm_clock_mhz: int | None = None
    mem_clock_mhz: int | None = None
    temp_c: float | None = None
    throttle_reasons: int | None = None


class Telemetry(BaseModel):
    status: str = "unavailable"  # "ok" or "unavailable: <why>"
    interval_s: float = 0.1
    gpus: list[int] = Field(default_factory=list)
    samples: list[TelemetrySample] = Field(default_factory=list)
    util_mean_pct: float | None = None
    mem_peak_bytes: int | None = None
    power_mean_w: float | None = None
    power_peak_w: float | None = None
    energy_j: float | None = None
    energy_source: str | None = None  # "counter" or "power-integral"
    throttle_reasons_seen: list[str] = Field(default_factory=list)
    joules_per_output_token: float | None = None
    joules_per_accepted_token: float | None = None


class Roofline(BaseModel):
    weight_bytes_per_token: int
    bandwidth_gbps: float
    bandwidth_source: str
    ceiling_tokens_per_s: float
    decode_tokens_per_s: float
    fraction: float


class Reproducibility(BaseModel):
    """Whether a run's own trials gave the same temperature-0 output for the same prompt and repeat (1.3).
    A plain engine whose trials differ (LMDeploy's AWQ split-K kernel adds its partial sums with atomics, in
    whatever order the blocks finish) is no reference for speculation's outputs: the lossless check then
    says so instead of judging them against it."""

    trials: int  # trials with at least one ok request
    compared: int = 0  # prompts (id, repeat) with an ok output in two or more trials
    equal: int = 0  # of those, the same output in every trial
    unit: Literal["tokens", "chars"] = "chars"  # token ids when every output has them, else text
    reproducible: bool | None = None  # None: fewer than two trials to compare
    # id, repeat, trial (the first that differs from trial 1), first_divergence, lengths; at most 20
    differing: list[dict[str, Any]] = Field(default_factory=list)
    summary: str = ""


class Lossless(BaseModel):
    """Temperature-0 outputs of a speculative run against the baseline's, prompt by prompt. Each divergence
    is explained from the baseline's reference pass (`bench/divergence.py`): where the baseline's top-2
    logprob margin at the first differing token is below `near_tie_margin` it is a near-tie (numerics can
    flip it), at or above it a mismatch, and without logprobs there unexplained. When the baseline's own
    trials differ (`baseline_reproducible` False, 1.3) no divergence is judged: each is
    `baseline-not-reproducible` (its margin still recorded) and counted in `not_judged`."""

    compared: int
    exact_matches: int
    exact_match_rate: float
    mean_prefix_agreement: float  # common prefix / longer output, averaged
    unit: Literal["tokens", "chars"]
    token_ids: bool = False  # compared as the servers' own token ids (else re-tokenized text, or chars)
    # id, first_divergence, lengths; baseline_token/run_token ({id, text}), margin, runner_up, verdict, why
    mismatches: list[dict[str, Any]] = Field(default_factory=list)
    passed: bool
    near_ties: int = 0
    real_mismatches: int = 0
    unexplained: int = 0
    near_tie_margin: float | None = None
    baseline_reproducible: bool | None = None  # the baseline run's `reproducibility.reproducible` (1.3)
    not_judged: int = 0  # divergences left unjudged because the baseline is not reproducible (1.3)
    summary: str = ""


class ReferencePass(BaseModel):
    """The baseline's untimed pass that asks for logprobs (`logprobs`, `top_logprobs: 2`): one request per
    prompt after the timed trials, so its cost never enters the baseline's figures."""

    requests: int = 0
    ok: int = 0
    with_logprobs: int = 0  # requests whose reply carried a logprob for every output token
    with_token_ids: int = 0
    same_as_timed: int = 0  # outputs equal to the timed baseline's first trial (greedy is deterministic)
    seconds: float = 0.0
    error: str | None = None


class RunAggregate(BaseModel):
    requests: int = 0
    ok: int = 0
    errors: int = 0
    error_rate: float = 0.0
    duration_s: float = 0.0
    output_tokens: int = 0
    output_tokens_per_s: float | None = None  # aggregate: all output tokens / run wall time
    # Client decode rate Σ (tokens − 1) / Σ (e2e − TTFT) over the ok requests: the decode phase only (1.2).
    # In a run with trials both rates are the median over its steady trials.
    decode_rate_tokens_per_s: float | None = None
    request_tokens_per_s: Stats = Field(default_factory=Stats)  # per request: tokens / e2e
    decode_tokens_per_s: Stats = Field(default_factory=Stats)  # per request: (tokens - 1) / (e2e - ttft)
    ttft_s: Stats = Field(default_factory=Stats)
    e2e_s: Stats = Field(default_factory=Stats)
    itl_s: Stats = Field(default_factory=Stats)  # per token: a chunk's gap spread over its tokens
    tpot_s: Stats = Field(default_factory=Stats)  # per request: (last - first token) / (tokens - 1)
    tokens_per_chunk: float | None = None
    token_count_mismatches: int = 0
    chunk_token_sources: dict[str, int] = Field(default_factory=dict)


class Run(BaseModel):
    label: str  # "baseline", "baseline-turbomind", "k=4", "external"
    draft_tokens: int  # 0 = no speculation; -1 = unknown (external server)
    concurrency: int
    engine: str | None = None
    backend: str | None = None
    baseline: bool = False
    reference_pass: ReferencePass | None = None
    # the reference pass's records (output ids, text and scores), by prompt id; in memory only
    reference: dict[str, RequestRecord] = Field(default_factory=dict, exclude=True)
    status: Literal["ok", "failed", "server-failed", "interrupted"] = "ok"
    reason: str | None = None
    log_tail: str | None = None
    started_at: str | None = None
    requests: list[RequestRecord] = Field(default_factory=list)
    aggregate: RunAggregate = Field(default_factory=RunAggregate)
    acceptance: Acceptance | None = None
    server: ServerCheck | None = None
    telemetry: Telemetry = Field(default_factory=Telemetry)
    roofline: Roofline | None = None
    # Seconds from the server's launch to its first ready answer at /v1/models (1.3): the runs of one server
    # (one per concurrency) share it; None for a server specq did not start (`--url`) or that never answered.
    server_ready_s: float | None = None
    reproducibility: Reproducibility | None = None  # its trials against each other, at temperature 0 (1.3)
    lossless: Lossless | None = None
    # The speedup on the report's `speedup_basis` (the headline's, best k's and the gates' figure): the
    # median steady decode rate (or output tok/s, basis e2e) over the paired baseline's (same concurrency).
    # 1.0/1.1 reports: end to end.
    speedup: float | None = None
    baseline_label: str | None = None
    warmup: Warmup | None = None
    trials: list[Trial] = Field(default_factory=list)
    throughput: Spread = Field(default_factory=Spread)  # output tok/s over the trials
    decode_throughput: Spread = Field(default_factory=Spread)  # client decode rate over the trials (1.2)
    speedup_low: float | None = None  # lowest trial / highest baseline trial (the gates' conservative end)
    speedup_high: float | None = None
    # Both figures, whichever the basis (1.2): end to end (output tok/s, TTFT included) and decode rate.
    e2e_speedup: float | None = None
    e2e_speedup_low: float | None = None
    e2e_speedup_high: float | None = None
    decode_rate_speedup: float | None = None
    decode_rate_speedup_low: float | None = None
    decode_rate_speedup_high: float | None = None
    consistency: Consistency | None = None  # over all trials together
    flags: list[str] = Field(default_factory=list)  # "unsteady: …", "inconsistent: …"
    # Decode rate over the baseline's (the server's decode rate when both runs have one, else the client's),
    # and the cost of one speculative step in plain steps: τ / decode_speedup.
    decode_speedup: float | None = None
    step_cost_ratio: float | None = None
    step_cost_source: Literal["server", "client"] | None = None

    @property
    def key(self) -> str:
        return f"{self.label}@c{self.concurrency}"


class BestK(BaseModel):
    recommended_k: int
    predicted_speedup: float
    step_cost_fixed: float
    step_cost_per_token: float
    # where the step-cost line comes from: the measured runs, or their height with the curve's slope
    step_cost_basis: str | None = None
    acceptance_by_position: list[float]
    rows: list[dict[str, Any]]  # k, predicted, measured
    best_measured_k: int | None = None
    k_range: list[int] = Field(default_factory=list)  # the k values measured
    k_limit: int | None = None  # the largest k the method allows (DFlash: block_size - 1)
    edge: str | None = None  # set when the best measured k is the smallest or largest measured


class Headline(BaseModel):
    """The one figure a reader takes away: the best speculative run's speedup, how sure it is, and why not."""

    run: str
    basis: HeadlineBasis = "e2e"  # what `speedup` measures (1.0/1.1 reports: end to end)
    speedup: float
    speedup_low: float | None = None
    speedup_high: float | None = None
    e2e_speedup: float | None = None
    decode_rate_speedup: float | None = None
    ttft_p50_s: float | None = None  # the run's, in every request's end-to-end time, not in its decode rate
    trials: int = 1
    steady_trials: int = 1
    decode_speedup: float | None = None
    step_cost_ratio: float | None = None
    reliable: bool = True
    warnings: list[str] = Field(default_factory=list)
    text: str = ""


class Gate(BaseModel):
    name: str
    passed: bool
    reason: str
    basis: str | None = None  # which figure was gated, e.g. "lowest trial" (the conservative end)


class EngineInfo(BaseModel):
    name: str | None = None
    version: str | None = None
    url: str | None = None
    model: str | None = None


class HostInfo(BaseModel):
    platform: str
    python: str
    cpu_count: int | None = None
    gpus: list[dict[str, Any]] = Field(default_factory=list)
    driver: str | None = None


class WorkloadInfo(BaseModel):
    source: str
    digest: str
    requests: int
    categories: dict[str, int]
    mode: str
    max_tokens: int
    temperature: float


class BenchReport(BaseModel):
    schema_version: str = SCHEMA_VERSION
    kind: Literal["specq-bench"] = "specq-bench"
    created_at: str
    complete: bool = True
    specq_version: str
    engine: EngineInfo = Field(default_factory=EngineInfo)
    versions: dict[str, str | None] = Field(default_factory=dict)
    host: HostInfo
    config: dict[str, Any] = Field(default_factory=dict)
    workload: WorkloadInfo
    runs: list[Run] = Field(default_factory=list)
    # The figure `Run.speedup`, the headline, best k and the gates use (`--headline`); 1.0/1.1: end to end.
    speedup_basis: HeadlineBasis = "e2e"
    best_k: BestK | None = None
    headline: Headline | None = None
    gates: list[Gate] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    # role ("target", "drafter") -> the `specq_twin` marker of a scale twin's config.json (random weights)
    twin: dict[str, dict[str, Any]] = Field(default_factory=dict)

    def run(self, label: str, concurrency: int) -> Run | None:
        return next((r for r in self.runs if r.label == label and r.concurrency == concurrency), None)

    def save(self, path: str | Path) -> Path:
        from ..fsutil import atomic_write_text

        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(p, self.model_dump_json(indent=1))
        return p

    @classmethod
    def load(cls, path: str | Path) -> BenchReport:
        p = Path(path)
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise InputError(f"{p}: no such report") from None
        except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
            raise InputError(f"{p}: not a readable JSON report ({type(e).__name__})") from None
        if not isinstance(data, dict) or data.get("kind") != "specq-bench":
            raise InputError(f"{p}: not a specq bench report")
        major = str(data.get("schema_version", "0")).split(".")[0]
        if major != SCHEMA_VERSION.split(".")[0]:
            raise InputError(
                f"{p}: report schema {data.get('schema_version')} is not readable by this specq "
                f"(schema {SCHEMA_VERSION})"
            )
        try:
            return cls.model_validate(data)
        except ValidationError as e:
            first = e.errors()[0]
            where = ".".join(str(x) for x in first["loc"])
            raise InputError(f"{p}: invalid report at {where}: {first['msg']}") from None
