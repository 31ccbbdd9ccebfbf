"""The benchmark's entry point, `run_bench(request)`. With `bench.url` it measures one run against a server
someone else started. Otherwise it runs a sweep: the baseline (k = 0, on the same engine and workload, plus
any `--baseline-engine` alternatives) and every requested draft-token count, restarting the server through
the serve stage's `create_engine(serve_request, run_dir, progress)` for each, with a copy of one
`ServeRequest` that differs only in its draft-token count (a `--baseline-engine` also in its server). Every
run: warm-up, a /metrics scrape, the requests (with NVML sampling), a settled /metrics scrape, then
aggregates, acceptance, the server cross-check, the roofline and (at temperature 0) whether the run's own
trials gave the same outputs; a baseline then gets an untimed reference pass with logprobs (its server
started with the logprobs mode that needs), which the lossless check uses to explain divergences when the
baseline's own trials agree. Each server's ready time (launch to first ready answer) is recorded. Faults
stay local: a run above `--max-error-rate` fails alone, a server that will not start or dies is reported
with its log tail and the sweep moves on, and Ctrl-C writes the partial report marked incomplete before the
interrupt propagates."""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import platform
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ..checkpoint import twin_marker, twin_note
from ..engines.speculation import draft_tokens_limit
from ..errors import ProcessFailed, SpecqError
from ..fsutil import check_writable
from ..hardware import list_gpus, lmdeploy_version, package_version
from ..progress import Progress, null_progress
from ..report.compare import evaluate_gates
from ..report.models import (
    BenchReport,
    EngineInfo,
    HostInfo,
    ReferencePass,
    RequestRecord,
    Run,
    ServerCheck,
    Trial,
    Warmup,
    WorkloadInfo,
)
from ..serve.engine import Engine
from ..serve.spec import ServeRequest
from ..workload import Workload, build_workload
from .analysis import (
    aggregate,
    client_decode_rate,
    consistency,
    headline,
    judges_outputs,
    lossless,
    partial_repetition_note,
    predict_best_k,
    repetition_flag,
    reproducibility,
    roofline,
    speedups,
    spread,
    step_cost,
    warmup_settled,
    weight_bytes_per_token,
)
from .client import RequestSpec, TokenCounter, load_token_counter, run_async, run_generate, run_requests
from .limits import check_prompt_lengths
from .metrics import Scrape, acceptance, scrape, server_check, settled_scrape
from .request import BenchRequest
from .telemetry import TelemetrySampler

if TYPE_CHECKING:
    import httpx

EngineFactory = Callable[[ServeRequest, Path, Progress], Engine]
CLIENT_DISAGREEMENT = 0.15  # tokens/chunk vs τ: flag beyond this relative difference
DEFAULT_SWEEP_TRIALS = 3  # measured trials per run in a sweep (--trials); one with --url
DEFAULT_DRAFT_TOKENS = [3, 4, 5, 6]


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def default_out_dir() -> Path:
    return Path("specq-out") / ("bench-" + dt.datetime.now().strftime("%Y%m%d-%H%M%S"))


def _host() -> HostInfo:
    gpus = list_gpus()
    return HostInfo(
        platform=platform.platform(),
        python=sys.version.split()[0],
        cpu_count=os.cpu_count(),
        gpus=[g.model_dump() for g in gpus],
        driver=gpus[0].driver if gpus else None,
    )


def _versions() -> dict[str, str | None]:
    from .. import __version__

    out: dict[str, str | None] = {"specq": __version__, "lmdeploy": lmdeploy_version()}
    for pkg in ("vllm", "transformers", "torch", "httpx"):
        out[pkg] = package_version(pkg)
    return out


def new_report(request: BenchRequest, workload: Workload) -> BenchReport:
    from .. import __version__

    b = request.settings
    return BenchReport(
        created_at=_now(),
        specq_version=__version__,
        versions=_versions(),
        host=_host(),
        config=dict(request.config),
        workload=WorkloadInfo(
            source=workload.source,
            digest=workload.digest,
            requests=len(workload.prompts),
            categories=workload.categories,
            mode=b.mode,
            max_tokens=b.max_tokens,
            temperature=b.temperature,
        ),
    )


def _tail(path: Path | None, lines: int = 30) -> str | None:
    if path is None or not Path(path).is_file():
        return None
    try:
        return "\n".join(Path(path).read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return None


def _get_models(base_url: str, api_key: str | None, timeout_s: float) -> httpx.Response:
    """GET the server's /v1/models with the key's header (httpx's errors propagate)."""
    import httpx

    from ..tls import tls

    url = base_url.rstrip("/") + "/v1/models"
    return httpx.get(url, headers=auth_headers(api_key), timeout=timeout_s, verify=tls())


def _alive(base_url: str, api_key: str | None = None) -> bool:
    import httpx

    try:
        return _get_models(base_url, api_key, 5).status_code == 200
    except httpx.HTTPError:
        return False


def auth_headers(api_key: str | None) -> dict[str, str]:
    """The OpenAI clients' bearer header for `api_key` (none without a key)."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


KEY_HINT = "pass the server's key with --api-key or the SPECQ_API_KEY / OPENAI_API_KEY environment variable"


def discover_model(base_url: str, api_key: str | None = None) -> str:
    """The first model a running server lists at /v1/models; InputError (exit 2) naming what is wrong when
    nothing OpenAI-compatible answers, the server wants a key, or the listing is malformed."""
    import httpx

    from ..errors import InputError

    try:
        r = _get_models(base_url, api_key, 10)
    except (httpx.HTTPError, httpx.InvalidURL, ValueError) as e:
        raise InputError(
            f"{base_url}: no OpenAI-compatible server answers at /v1/models ({type(e).__name__})"
        ) from None
    if r.status_code in (401, 403):
        said = "refused the API key given" if api_key else "wants an API key"
        raise InputError(f"{base_url}: the server {said} (HTTP {r.status_code} at /v1/models); {KEY_HINT}")
    if r.status_code != 200:
        raise InputError(
            f"{base_url}: no OpenAI-compatible server answers at /v1/models (HTTP {r.status_code})"
        )
    try:
        body = r.json()
    except ValueError:
        body = None
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        raise InputError(
            f'{base_url}: /v1/models did not answer an OpenAI model list ({{"data": [...]}}); pass --model '
            "NAME if the server is OpenAI-compatible otherwise"
        )
    if not data:
        raise InputError(f"{base_url}: the server lists no model; pass --model NAME")
    first = data[0]
    if not isinstance(first, dict) or not isinstance(first.get("id"), str) or not first["id"]:
        raise InputError(f"{base_url}: /v1/models lists a model without a string id; pass --model NAME")
    return first["id"]


class RunContext:
    """What every run of one bench invocation shares."""

    def __init__(
        self, request: BenchRequest, workload: Workload, counter: TokenCounter | None, progress: Progress
    ):
        self.request, self.workload, self.counter, self.progress = request, workload, counter, progress

    def spec(self, model: str) -> RequestSpec:
        b = self.request.settings
        return RequestSpec(
            mode=b.mode, model=model, max_tokens=b.max_tokens, temperature=b.temperature, seed=b.seed,
            ignore_eos=b.ignore_eos, timeout_s=b.request_timeout_s, api_key=self.request.api_key,
        )  # fmt: skip

    @property
    def n_trials(self) -> int:
        b = self.request.settings
        return b.trials if b.trials is not None else (1 if b.url else DEFAULT_SWEEP_TRIALS)

    def warm_up(self, spec: RequestSpec, base_url: str, concurrency: int, tag: str) -> Warmup | None:
        """Warm up to steady state on the run's own prompts, lengths and concurrency: passes until one's
        output tok/s is no faster than the pass before it by more than `warmup_tolerance`
        (`analysis.warmup_settled`), at most `warmup_passes`. An engine that compiles kernels on first use of
        a shape (LMDeploy's AWQ path) pays it here, not in the run."""
        b = self.request.settings
        prompts = self.workload.prompts
        n = len(prompts) if b.warmup is None else b.warmup
        if n == 0 or not prompts:
            return None
        batch = [prompts[i % len(prompts)] for i in range(n)]
        w = Warmup(requests_per_pass=n, max_passes=b.warmup_passes, tolerance=b.warmup_tolerance)
        for _ in range(b.warmup_passes):
            records, wall = run_async(run_requests(base_url, spec, batch, concurrency=concurrency))
            w.passes += 1
            ok = [r for r in records if r.ok]
            if not ok or wall <= 0:
                w.error = next((r.error for r in records if not r.ok), None)
                break
            w.rates.append(sum(r.output_tokens or 0 for r in ok) / wall)
            if warmup_settled(w.rates, b.warmup_tolerance):
                w.steady = True
                break
        if w.steady is None and len(w.rates) >= 2:
            w.steady = False
        rates = ", ".join(f"{r:.1f}" for r in w.rates)
        verdict = {True: "steady", False: "NOT steady", None: "not checked"}[w.steady]
        self.progress(f"{tag}: warm-up {w.passes} pass(es) of {n} request(s) ({rates} tok/s): {verdict}")
        return w

    def reference_pass(self, run: Run, base_url: str, model: str) -> None:
        """After a baseline's timed trials: one request per prompt asking for logprobs with the top 2
        alternatives, whose margins explain where speculative runs leave the baseline's text
        (`divergence.py`). Untimed, so asking for logprobs cannot slow the baseline's figures; a server
        that refuses or ignores logprobs leaves the divergences unexplained, never the run failed."""
        spec = dataclasses.replace(self.spec(model), top_logprobs=2)
        timed = {r.id: r for r in run.requests if r.ok and r.repeat == 0 and r.trial == 0}
        t0 = time.perf_counter()
        prompts = self.workload.prompts
        if run.engine == "lmdeploy" and spec.mode == "completion":  # its /v1/completions has no logprobs
            decode = getattr(self.counter, "decode", None)
            job = run_generate(base_url, spec, prompts, concurrency=run.concurrency, decode=decode)
            records = run_async(job)
        else:
            records, _ = run_async(run_requests(base_url, spec, prompts, concurrency=run.concurrency))
        ref = ReferencePass(requests=len(records), seconds=round(time.perf_counter() - t0, 3))
        for r in records:
            if not r.ok:
                ref.error = ref.error or r.error
                continue
            ref.ok += 1
            ref.with_logprobs += r.scores is not None and len(r.scores) == (r.output_tokens or 0)
            ref.with_token_ids += r.token_ids is not None
            same = r.id in timed and r.output_text == timed[r.id].output_text
            ref.same_as_timed += same
            run.reference[r.id] = r
        run.reference_pass = ref
        self.progress(
            f"{run.label} c={run.concurrency}: reference pass (logprobs, untimed): {ref.with_logprobs}/"
            f"{ref.requests} with logprobs, {ref.same_as_timed} equal to the timed output"
        )

    def measure(self, run: Run, base_url: str, metrics_url: str, model: str) -> Run:
        """Warm up to steady state, then `trials` measured passes of the workload, each between a /metrics
        scrape and a settled one; then compute. Fills `run` in place, so an interrupt leaves it holding
        what completed."""
        b = self.request.settings
        spec = self.spec(model)
        run.started_at = _now()
        tag = f"{run.label} c={run.concurrency}"
        run.warmup = self.warm_up(spec, base_url, run.concurrency, tag)
        n_trials = self.n_trials
        total = len(self.workload.prompts) * b.repeats * n_trials
        step = max(1, -(-total // 4))

        def done(rec: RequestRecord) -> None:
            n = len(run.requests)
            if n % step == 0 or n == total:
                self.progress(f"{tag}: {n}/{total} requests")

        measured: list[tuple[Scrape, Scrape, bool, list[RequestRecord], float]] = []
        sampler = TelemetrySampler(b.nvml_interval_s)  # over the last trial: energy per token at steady state
        try:
            for i in range(n_trials):
                before = scrape(metrics_url)
                last = i == n_trials - 1
                if last:
                    sampler.start()
                recs, wall = run_async(
                    run_requests(
                        base_url, spec, self.workload.prompts, concurrency=run.concurrency, repeats=b.repeats,
                        trial=i, counter=self.counter, on_done=done, sink=run.requests,
                    )
                )  # fmt: skip
                if last:
                    sampler.stop()
                after, settled = settled_scrape(
                    lambda: scrape(metrics_url), timeout_s=b.metrics_settle_timeout_s
                )
                measured.append((before, after, settled, recs, wall))
        except KeyboardInterrupt:
            sampler.stop()
            run.status, run.reason = "interrupted", "interrupted by the user"
            starts = [r.start_s + (r.e2e_s or 0) for r in run.requests]
            run.aggregate = aggregate(run.requests, max(starts, default=0.0))
            raise
        finally:
            sampler.stop()
        self.compute(run, measured, sampler)
        return run

    def compute(
        self,
        run: Run,
        measured: list[tuple[Scrape, Scrape, bool, list[RequestRecord], float]],
        sampler: TelemetrySampler,
    ) -> None:
        """Aggregates over all trials, acceptance and the server check from the first trial's "before" to
        the last one's "after", per-trial consistency, steady trials, and the run's decode rate and output
        tok/s: each the median over its steady trials."""
        b = self.request.settings
        tag = f"{run.label} c={run.concurrency}"
        wall_total = sum(m[4] for m in measured)
        run.aggregate = agg = aggregate(run.requests, wall_total)
        first_before, (_, last_after, settled, _, _) = measured[0][0], measured[-1]
        acc = acceptance(first_before, last_after, settled=settled and all(m[2] for m in measured))
        if acc is not None and agg.tokens_per_chunk is not None and acc.acceptance_length:
            acc.client_tokens_per_chunk = agg.tokens_per_chunk
            acc.client_disagrees = (
                abs(agg.tokens_per_chunk - acc.acceptance_length) / acc.acceptance_length
                > CLIENT_DISAGREEMENT
            )
        run.acceptance = acc
        run.server = sc = self.server_figures(first_before, last_after, run.requests, agg.output_tokens)
        ttft_ref = agg.ttft_s.p50
        tol = b.consistency_tolerance
        unsteady = run.warmup is not None and run.warmup.steady is False
        for i, (before, after, _, recs, wall) in enumerate(measured):
            t_agg = aggregate(recs, wall)
            t_acc = acceptance(before, after)
            trial = Trial(
                index=i, requests=t_agg.requests, errors=t_agg.errors, duration_s=wall,
                output_tokens=t_agg.output_tokens, output_tokens_per_s=t_agg.output_tokens_per_s,
                decode_tokens_per_s=t_agg.decode_rate_tokens_per_s,
                acceptance_length=t_acc.acceptance_length if t_acc else None,
                consistency=consistency(recs, wall, server_check(before, after), tol, ttft_ref),
            )  # fmt: skip
            trial.steady = not unsteady and not (trial.consistency and trial.consistency.consistent is False)
            run.trials.append(trial)
        rates = [t.output_tokens_per_s for t in run.trials if t.output_tokens_per_s is not None]
        used = [t.output_tokens_per_s for t in run.trials if t.steady and t.output_tokens_per_s is not None]
        run.throughput = spread(rates, used or rates)
        agg.output_tokens_per_s = run.throughput.median
        rates = [t.decode_tokens_per_s for t in run.trials if t.decode_tokens_per_s is not None]
        used = [t.decode_tokens_per_s for t in run.trials if t.steady and t.decode_tokens_per_s is not None]
        run.decode_throughput = spread(rates, used or rates)
        agg.decode_rate_tokens_per_s = run.decode_throughput.median
        run.consistency = consistency(run.requests, wall_total, sc, tol, ttft_ref)
        if b.temperature == 0:
            run.reproducibility = rep = reproducibility(run)
            if rep is not None and rep.reproducible is not None:
                self.progress(f"{tag}: {rep.summary}")
        self.flag(run)
        run.telemetry = sampler.result(run.trials[-1].output_tokens, acc.accepted_tokens if acc else None)
        if not first_before.ok:
            run.reason = f"no acceptance counters: {first_before.error}"
        self.judge_errors(run)
        if run.draft_tokens == 0:
            bw, src = self.bandwidth()
            run.roofline = roofline(self.request.serve.model_path, agg.decode_tokens_per_s.mean, bw, src)
        tps, dec = agg.output_tokens_per_s, agg.decode_rate_tokens_per_s
        self.progress(
            f"{tag}: {agg.ok}/{agg.requests} ok, {dec or 0:.1f} decode tok/s, {tps or 0:.1f} output tok/s"
            + (f" (median of {run.throughput.used}/{len(run.trials)} trials)" if len(run.trials) > 1 else "")
            + (f", τ={acc.acceptance_length:.2f}" if acc and acc.acceptance_length else "")
            + "".join(f"; {f}" for f in run.flags)
        )

    @staticmethod
    def server_figures(
        before: Scrape, after: Scrape, records: list[RequestRecord], output_tokens: int
    ) -> ServerCheck | None:
        sc = server_check(before, after)
        if sc is None:
            return None
        sc.client_output_tokens = output_tokens
        sc.client_decode_tokens_per_s = client_decode_rate(records)
        if sc.generation_tokens:
            sc.tokens_rel_diff = (output_tokens - sc.generation_tokens) / sc.generation_tokens
        if sc.server_decode_tokens_per_s and sc.client_decode_tokens_per_s:
            sc.rate_rel_diff = (
                sc.client_decode_tokens_per_s - sc.server_decode_tokens_per_s
            ) / sc.server_decode_tokens_per_s
        return sc

    def flag(self, run: Run) -> None:
        """The run's warnings: a warm-up that never settled, trials inconsistent with the server, and (on the
        baseline, which every speculative run reproduces, or on a running server's only run) outputs that
        loop."""
        w = run.warmup
        if w is not None and w.steady is False:
            rates = ", ".join(f"{r:.1f}" for r in w.rates)
            run.flags.append(
                f"unsteady: warm-up did not settle within {w.tolerance:.0%} in {w.passes} passes "
                f"({rates} tok/s); raise --warmup-passes"
            )
        bad = [t for t in run.trials if t.consistency and t.consistency.consistent is False]
        if bad:
            first = bad[0].consistency
            assert first is not None
            run.flags.append(
                f"inconsistent: {len(bad)}/{len(run.trials)} trial(s) disagree with the server's counters "
                f"beyond {first.tolerance:.0%} (trial {bad[0].index + 1}: {'; '.join(first.problems)})"
            )
        elif run.consistency and run.consistency.consistent is False:
            run.flags.append(f"inconsistent: {'; '.join(run.consistency.problems)}")
        if judges_outputs(run) and (looping := repetition_flag(run.requests)):
            run.flags.append(looping)

    def judge_errors(self, run: Run) -> None:
        """`--max-error-rate` fails a run above it; a run in which every request failed fails whatever the
        rate allows (it measured nothing)."""
        b = self.request.settings
        agg = run.aggregate
        first = next((r.error for r in run.requests if not r.ok), "")
        if agg.requests and agg.ok == 0:
            run.status = "failed"
            run.reason = f"all {agg.requests} requests failed (first: {first})"
        elif agg.error_rate > b.max_error_rate:
            run.status = "failed"
            run.reason = (
                f"error rate {agg.error_rate:.0%} > --max-error-rate {b.max_error_rate:.0%} (first: {first})"
            )

    def bandwidth(self) -> tuple[float | None, str]:
        if self.request.settings.gpu_bandwidth_gbps:
            return self.request.settings.gpu_bandwidth_gbps, "--gpu-bandwidth"
        gpus = list_gpus()
        if gpus and gpus[0].bandwidth_gbps:
            return gpus[0].bandwidth_gbps, f"NVML ({gpus[0].name})"
        return None, "unknown"


def _default_factory() -> EngineFactory:
    from ..serve import create_engine

    return create_engine


def dflash_block_size(request: BenchRequest) -> int | None:
    """The drafter's DFlash `block_size` when the run speculates with DFlash (by --method, else detected from
    the draft checkpoint as the serve stage does); None otherwise or when its config cannot be read."""
    from ..checkpoint import Checkpoint

    path = request.serve.draft_model_path
    method = request.serve.method
    if not path or method not in (None, "dflash"):
        return None
    try:
        draft = Checkpoint(path)
        if method is None and draft.draft_kind != "dflash":
            return None
        bs = draft.dflash_block_size
    except Exception:  # an unreadable draft is the serve stage's to report, with its own message
        return None
    return bs if bs is not None and bs >= 2 else None


def default_draft_tokens(block_size: int | None) -> list[int]:
    """k values swept when --draft-tokens is not given: 3..6, and for a DFlash drafter on up to
    block_size − 1 (every k to 7, then every 4th, always ending at block_size − 1)."""
    if block_size is None:
        return list(DEFAULT_DRAFT_TOKENS)
    top = draft_tokens_limit(block_size)
    ks = set(range(min(3, top), min(top, 7) + 1)) | set(range(7, top + 1, 4)) | {top}
    return sorted(ks)


def k_limit(request: BenchRequest) -> int | None:
    """The largest k a DFlash drafter allows (block_size − 1), for the best-k note; None for other methods."""
    bs = dflash_block_size(request)
    return draft_tokens_limit(bs) if bs is not None else None


def draft_token_values(request: BenchRequest) -> list[int]:
    """The k values to sweep: as asked, else the default for the method."""
    b = request.settings
    if b.draft_tokens is not None:
        return list(b.draft_tokens)
    return default_draft_tokens(dflash_block_size(request))


def sweep_plan(request: BenchRequest) -> list[tuple[str, ServeRequest]]:
    """(label, what to serve) for every server the sweep starts, baseline(s) first: copies of the request's
    `ServeRequest` that differ in the draft-token count (a `--baseline-engine` also in its server, and a
    baseline the reference pass will score also in its logprobs mode)."""
    b, serve = request.settings, request.serve
    plan: list[tuple[str, ServeRequest]] = []
    asked = draft_token_values(request)
    ks = sorted({k for k in asked if k > 0})
    if b.baseline or 0 in asked or not ks:
        for be in dict.fromkeys(b.baseline_engine):
            base = dataclasses.replace(serve, draft_tokens=0)
            if be in ("turbomind", "pytorch"):
                base = dataclasses.replace(base, server="lmdeploy", backend=be)
            elif be == "embedded":
                base = dataclasses.replace(base, server="embedded")
            plan.append(("baseline" if be == "same" else f"baseline-{be}", base))
    if b.temperature == 0 and ks:  # the baselines' outputs get a reference pass (`wants_reference`)
        plan = [(label, scored(s)) for label, s in plan]
    for k in ks:
        plan.append((f"k={k}", dataclasses.replace(serve, draft_tokens=k)))
    return plan


# LMDeploy's PyTorch engine answers a request for logprobs with HTTP 400 unless it was started with a
# `--logprobs-mode`. `raw_logprobs` is the log-softmax of the logits before any sampling processor (at
# temperature 0 LMDeploy turns greedy into top_k = 1, which would leave no second choice to compare): the
# target's own top-2 margin, as the divergence classifier reads it. TurboMind and the embedded engine serve
# logprobs without it (`serve/lmdeploy.py` passes it to the PyTorch engine only).
REFERENCE_LOGPROBS_MODE = "raw_logprobs"


def scored(serve: ServeRequest) -> ServeRequest:
    """`serve` started so that its logprobs can be asked for: the logprobs mode the user set, else
    `REFERENCE_LOGPROBS_MODE`. Requests that ask for none (every timed one) cost the engine nothing more."""
    if serve.options.logprobs_mode:
        return serve
    options = dataclasses.replace(serve.options, logprobs_mode=REFERENCE_LOGPROBS_MODE)
    return dataclasses.replace(serve, options=options)


def check_inputs(request: BenchRequest, engine_factory: EngineFactory | None) -> None:
    """Refuse contradictory options before any server starts."""
    from ..errors import UsageError
    from ..report.models import BenchReport as _Report

    b = request.settings
    if not b.url and not request.serve.model_path and engine_factory is None:
        raise UsageError("nothing to benchmark: give MODEL (specq starts the servers) or --url URL")
    if b.max_regression is not None and not b.baseline_report:
        raise UsageError("--max-regression needs --baseline-report OLD.json")
    if b.baseline_report:
        _Report.load(b.baseline_report)  # fail now, not after the sweep


def check_servers(request: BenchRequest, engine_factory: EngineFactory | None, out: Path) -> None:
    """Every refusal a planned server's launch would make without starting it, before any output is
    written: `serve`'s checks of what was asked (`resolve_spec`: the checkpoints, the drafter and method,
    the backend and its options such as `engine.step_patch` on TurboMind) and the engine's preflight of
    this machine (lmdeploy, a GPU, FlashAttention-3: exit 4), for the baseline and every k."""
    if request.settings.url or not request.serve.model_path or engine_factory is not None:
        return
    from ..serve.base import require_weights
    from ..serve.registry import build_engine
    from ..serve.spec import resolve_spec

    for label, serve in sweep_plan(request):
        spec = resolve_spec(serve)
        try:
            build_engine(spec, out / "servers" / label.replace("=", "")).preflight()  # built, never started
            require_weights(spec.target.path, spec.draft_path)
        finally:
            spec.release_port()  # a server that never starts


def run_bench(
    request: BenchRequest,
    *,
    progress: Progress = null_progress,
    engine_factory: EngineFactory | None = None,
    out_dir: Path | None = None,
) -> BenchReport:
    """Run the benchmark described by `request` and write its report files; returns the report (gates are
    evaluated into it; `specq.pipeline.report.compare.enforce_gates` turns a failure into exit 3)."""
    b = request.settings
    model_path = request.serve.model_path
    check_inputs(request, engine_factory)
    out = Path(out_dir or b.out or default_out_dir())
    check_writable(out)  # before any server starts
    created = not out.exists()
    workload = build_workload(
        suite=b.suite, prompts_file=b.prompts, dataset=b.dataset, field=b.field, requests=b.requests
    )
    counter, why = load_token_counter(b.tokenizer or model_path)
    check_prompt_lengths(workload, counter, b.max_tokens, model_path, b.mode)
    check_servers(request, engine_factory, out)
    report = new_report(request, workload)
    mark_twins(report, request)
    if counter is None:
        report.notes.append(
            f"no tokenizer recount ({why}); per-chunk token counts from usage and text length"
        )
    ctx = RunContext(request, workload, counter, progress)
    start_errors: list[SpecqError] = []
    try:
        if b.url:
            _external(report, ctx)
        else:
            start_errors = _sweep(report, ctx, engine_factory or _default_factory(), out)
    except KeyboardInterrupt:
        report.complete = False
        report.notes.append("interrupted: partial report")
        finalize(report, request, counter)
        _write(report, out, created)
        raise
    empty = unmeasured_runs(report)
    if empty:
        report.complete = False
        what = "; ".join(f"{r.key} measured nothing ({r.reason})" for r in empty)
        report.notes.append(f"incomplete: {what}")
    finalize(report, request, counter)
    _write(report, out, created)
    progress(f"report written to {out}")
    raise_for_unmeasured(report, empty, start_errors, out)
    return report


def mark_twins(report: BenchReport, request: BenchRequest) -> None:
    """A scale twin (`specq twin`: random weights at a real model's shapes) is named in the report, so its
    figures are never read as a model's: speed and memory are real, acceptance and outputs are not."""
    paths = (("target", request.serve.model_path), ("drafter", request.serve.draft_model_path))
    for role, path in paths:
        marker = twin_marker(path)
        if marker is None:
            continue
        report.twin[role] = marker
        report.notes.append(twin_note(role, str(path), marker))


def note_compat(report: BenchReport, engine: Engine) -> None:
    """A note naming specq's LMDeploy compatibility patches a server ran with (`engine.step_patch`'s spec-step
    changes the engine's speed, so a report says so), once per report."""
    from ..engines.lmdeploy_compat import ENV

    shown = getattr(engine, "shown_env", None)  # what a launched process's environment adds (ProcessEngine)
    patches = shown().get(ENV) if shown is not None else None
    note = f"LMDeploy ran with specq's compatibility patches: {patches} (docs/serve.md)" if patches else None
    if note and note not in report.notes:
        report.notes.append(note)


def target_bytes(request: BenchRequest) -> int | None:
    """The bytes of weights the target reads per decode step (None: no local checkpoint to read), the size at
    which best k reads the step-cost curve."""
    path = request.serve.model_path
    if not path:
        return None
    try:
        return weight_bytes_per_token(path)
    except SpecqError:
        return None


def _write(report: BenchReport, out: Path, created: bool) -> None:
    """The report files, all or none; when they cannot be written (a full disk) an --out directory this run
    created goes too, so nothing half-written (server logs of a run without a report) is left."""
    from ..report.formatters import write_outputs

    try:
        write_outputs(report, out)
    except SpecqError:
        if created:
            shutil.rmtree(out, ignore_errors=True)
        raise


def unmeasured_runs(report: BenchReport) -> list[Run]:
    """Runs that produced no measurement: the server did not start or died, or every request failed."""
    return [
        r for r in report.runs if r.status == "server-failed" or (r.status == "failed" and not r.aggregate.ok)
    ]


def raise_for_unmeasured(
    report: BenchReport, empty: list[Run], start_errors: list[SpecqError], out: Path
) -> None:
    """A benchmark with a run that measured nothing is not a result: after the report is written (marked
    incomplete), fail with the first such run and its first error. When not one server came up, that
    start-up error is raised as it is (its own exit code: a missing FlashAttention-3 is exit 4)."""
    if not empty:
        return
    if start_errors and all(r.status == "server-failed" for r in report.runs):
        raise start_errors[0]
    first = empty[0]
    raise ProcessFailed(
        f"run {first.key} measured nothing: {first.reason}"
        + (f" (and {len(empty) - 1} more run(s))" if len(empty) > 1 else "")
        + f"; the report in {out} is marked incomplete"
    )


def _external(report: BenchReport, ctx: RunContext) -> None:
    b = ctx.request.settings
    assert b.url is not None
    base = b.url.rstrip("/")
    if base.endswith("/v1"):
        base = base[:-3]
    model = b.served_model_name or discover_model(base, ctx.request.api_key)
    report.engine = EngineInfo(name="external", url=base, model=model)
    for conc in b.concurrency:
        run = Run(
            label="external",
            draft_tokens=external_draft_tokens(ctx.request),
            concurrency=conc,
            engine="external",
        )
        report.runs.append(run)
        ctx.measure(run, base, base + "/metrics", model)
        if run.draft_tokens < 0 and run.acceptance and run.acceptance.per_position:
            run.draft_tokens = len(run.acceptance.per_position)  # one counter per draft position


def external_draft_tokens(request: BenchRequest) -> int:
    """The k a running server was started with, as the user told it: one --draft-tokens value, else the
    config's model.draft_tokens; -1 when unknown (then `_external` reads it off the per-position counters)."""
    ks = request.settings.draft_tokens
    if ks is not None and len(ks) == 1:
        return ks[0]
    return request.serve.draft_tokens if request.serve.draft_tokens else -1


def _sweep(report: BenchReport, ctx: RunContext, factory: EngineFactory, out: Path) -> list[SpecqError]:
    """Run every planned server; returns the start-up errors (each also recorded as a failed run)."""
    b = ctx.request.settings
    errors: list[SpecqError] = []
    for label, variant in sweep_plan(ctx.request):
        run_dir = out / "servers" / label.replace("=", "")
        ctx.progress(f"{label}: starting the server")
        engine: Engine | None = None
        try:
            engine = factory(variant, run_dir, ctx.progress)
            engine.start()
            engine.wait_ready(variant.options.ready_timeout_s)
        except SpecqError as e:
            errors.append(e)
            tail = _tail(engine.log_path if engine is not None else None)
            if engine is not None:
                engine.stop()
            for conc in b.concurrency:
                report.runs.append(
                    Run(
                        label=label, draft_tokens=variant.draft_tokens, concurrency=conc,
                        baseline=variant.draft_tokens == 0,
                        status="server-failed",
                        reason=f"server did not start: {e}", log_tail=tail, engine=variant.server,
                        backend=variant.backend,
                    )
                )  # fmt: skip
            ctx.progress(f"{label}: server did not start, continuing with the next run ({e})")
            continue
        try:
            if report.engine.name is None:
                report.engine = EngineInfo(
                    name=engine.name,
                    version=lmdeploy_version() if engine.name == "lmdeploy" else report.specq_version,
                    url=engine.base_url,
                    model=engine.model_name,
                )
            note_compat(report, engine)
            ready_s = engine.ready_s
            if ready_s is not None:
                ctx.progress(f"{label}: server ready {ready_s:.1f} s after its launch")
            for conc in b.concurrency:
                run = Run(label=label, draft_tokens=variant.draft_tokens, concurrency=conc,
                          baseline=variant.draft_tokens == 0, engine=engine.name,
                          backend=variant.backend, server_ready_s=ready_s)  # fmt: skip
                report.runs.append(run)
                ctx.measure(run, engine.base_url, engine.metrics_url, engine.model_name)
                if run.aggregate.errors and not _alive(engine.base_url):
                    run.status = "server-failed"
                    run.reason = "the server died during the run"
                    run.log_tail = _tail(engine.log_path)
                    ctx.progress(f"{label}: the server died; continuing with the next run")
                    break
                if run.baseline and wants_reference(ctx.request) and run.status == "ok":
                    ctx.reference_pass(run, engine.base_url, engine.model_name)
        finally:
            engine.stop()
    return errors


def wants_reference(request: BenchRequest) -> bool:
    """Whether baselines get a reference pass: at temperature 0 with a speculative run to compare (then
    `sweep_plan` starts them with a logprobs mode, `scored`)."""
    return request.settings.temperature == 0 and any(s.draft_tokens > 0 for _, s in sweep_plan(request))


def finalize(report: BenchReport, request: BenchRequest, counter: TokenCounter | None) -> None:
    """Speedups (both bases; `--headline` picks the one the headline, best k and gates use), lossless
    checks, best k and gates (also on a partial report)."""
    b = request.settings
    report.speedup_basis = b.headline
    for conc in sorted({r.concurrency for r in report.runs}):
        runs = [r for r in report.runs if r.concurrency == conc]
        base = next((r for r in runs if r.baseline and r.status == "ok"), None)
        if base is None:
            continue
        for r in runs:
            if r.baseline and r is base:
                continue
            speedups(base, r, report.speedup_basis)
            if not r.baseline and r.status in ("ok", "failed"):
                step_cost(base, r)
            if not r.baseline and b.temperature == 0 and r.status in ("ok", "failed"):
                r.lossless = lossless(base, r, counter, b.near_tie_margin)
        if report.best_k is None:
            report.best_k = predict_best_k(
                base,
                [r for r in runs if not r.baseline],
                k_limit(request),
                weight_bytes=target_bytes(request),
            )
    for r in report.runs:  # the baseline's outputs are every run's (a --url run: its own)
        if judges_outputs(r) and (note := partial_repetition_note(r.requests)):
            if (line := f"{r.key}: {note}") not in report.notes:
                report.notes.append(line)
    report.headline = headline(report)
    old = None
    if b.baseline_report:
        from ..report.models import BenchReport as _R

        old = _R.load(b.baseline_report)
    report.gates = evaluate_gates(report, min_speedup=b.min_speedup, old=old, max_regression=b.max_regression)
