"""The benchmark's entry point, `run_bench(cfg)`. With `bench.url` it measures one run against a server
someone else started. Otherwise it runs a sweep: the baseline (k = 0, on the same engine and workload, plus
any `--baseline-engine` alternatives) and every requested draft-token count, restarting the server through
the serve stage's `create_engine(cfg, run_dir, progress)` for each. Every run: warm-up, a /metrics scrape,
the requests (with NVML sampling), a settled /metrics scrape, then aggregates, acceptance, the server
cross-check and the roofline. Faults stay local: a run above `--max-error-rate` fails alone, a server that
will not start or dies is reported with its log tail and the sweep moves on, and Ctrl-C writes the partial
report marked incomplete before the interrupt propagates."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import platform
import sys
from collections.abc import Callable
from pathlib import Path

from ..config.models import SpecqConfig
from ..errors import SpecqError
from ..fsutil import check_writable
from ..hardware import list_gpus, lmdeploy_version, package_version
from ..progress import Progress, null_progress
from ..report.compare import evaluate_gates
from ..report.models import (
    BenchReport,
    EngineInfo,
    HostInfo,
    RequestRecord,
    Run,
    WorkloadInfo,
)
from ..serve.engine import Engine
from .analysis import aggregate, client_decode_rate, lossless, predict_best_k, roofline
from .client import RequestSpec, TokenCounter, load_token_counter, run_requests
from .limits import check_prompt_lengths
from .metrics import acceptance, scrape, server_check, settled_scrape
from .telemetry import TelemetrySampler
from .workload import Workload, build_workload

EngineFactory = Callable[[SpecqConfig, Path, Progress], Engine]
CLIENT_DISAGREEMENT = 0.15  # tokens/chunk vs τ: flag beyond this relative difference


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

    out: dict[str, str | None] = {"specq": __version__}
    for pkg in ("lmdeploy", "vllm", "transformers", "torch", "httpx"):
        out[pkg] = package_version(pkg)
    return out


def new_report(cfg: SpecqConfig, workload: Workload) -> BenchReport:
    from .. import __version__

    b = cfg.bench
    return BenchReport(
        created_at=_now(),
        specq_version=__version__,
        versions=_versions(),
        host=_host(),
        config=cfg.model_dump(mode="json", by_alias=True),
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


def _alive(base_url: str) -> bool:
    import httpx

    try:
        return httpx.get(base_url.rstrip("/") + "/v1/models", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def discover_model(base_url: str) -> str:
    import httpx

    from ..errors import InputError

    try:
        r = httpx.get(base_url.rstrip("/") + "/v1/models", timeout=10)
        r.raise_for_status()
        data = r.json().get("data") or []
    except (httpx.HTTPError, ValueError) as e:
        raise InputError(
            f"{base_url}: no OpenAI-compatible server answers at /v1/models ({type(e).__name__})"
        ) from None
    if not data:
        raise InputError(f"{base_url}: the server lists no model; pass --model NAME")
    return str(data[0]["id"])


class RunContext:
    """What every run of one bench invocation shares."""

    def __init__(
        self, cfg: SpecqConfig, workload: Workload, counter: TokenCounter | None, progress: Progress
    ):
        self.cfg, self.workload, self.counter, self.progress = cfg, workload, counter, progress

    def spec(self, model: str) -> RequestSpec:
        b = self.cfg.bench
        return RequestSpec(
            mode=b.mode, model=model, max_tokens=b.max_tokens, temperature=b.temperature, seed=b.seed,
            ignore_eos=b.ignore_eos, timeout_s=b.request_timeout_s,
        )  # fmt: skip

    def measure(self, run: Run, base_url: str, metrics_url: str, model: str) -> Run:
        """Warm up, scrape, send the workload, scrape until settled, compute. Fills `run` in place, so an
        interrupt leaves it holding what completed."""
        b = self.cfg.bench
        spec = self.spec(model)
        run.started_at = _now()
        tag = f"{run.label} c={run.concurrency}"
        if b.warmup:
            asyncio.run(run_requests(base_url, spec, self.workload.prompts[: b.warmup], concurrency=1))
        before = scrape(metrics_url)
        total = len(self.workload.prompts) * b.repeats
        step = max(1, -(-total // 4))

        def done(rec: RequestRecord) -> None:
            n = len(run.requests)
            if n % step == 0 or n == total:
                self.progress(f"{tag}: {n}/{total} requests")

        sampler = TelemetrySampler(b.nvml_interval_s)
        sampler.start()
        try:
            _, wall = asyncio.run(
                run_requests(
                    base_url, spec, self.workload.prompts, concurrency=run.concurrency, repeats=b.repeats,
                    counter=self.counter, on_done=done, sink=run.requests,
                )
            )  # fmt: skip
        except KeyboardInterrupt:
            sampler.stop()
            run.status, run.reason = "interrupted", "interrupted by the user"
            starts = [r.start_s + (r.e2e_s or 0) for r in run.requests]
            run.aggregate = aggregate(run.requests, max(starts, default=0.0))
            raise
        finally:
            sampler.stop()
        after, settled = settled_scrape(lambda: scrape(metrics_url), timeout_s=b.metrics_settle_timeout_s)
        run.aggregate = agg = aggregate(run.requests, wall)
        acc = acceptance(before, after, settled=settled)
        if acc is not None and agg.tokens_per_chunk is not None and acc.acceptance_length:
            acc.client_tokens_per_chunk = agg.tokens_per_chunk
            acc.client_disagrees = (
                abs(agg.tokens_per_chunk - acc.acceptance_length) / acc.acceptance_length
                > CLIENT_DISAGREEMENT
            )
        run.acceptance = acc
        sc = server_check(before, after)
        if sc is not None:
            sc.client_output_tokens = agg.output_tokens
            sc.client_decode_tokens_per_s = client_decode_rate(run.requests)
            if sc.generation_tokens:
                sc.tokens_rel_diff = (agg.output_tokens - sc.generation_tokens) / sc.generation_tokens
            if sc.server_decode_tokens_per_s and sc.client_decode_tokens_per_s:
                sc.rate_rel_diff = (
                    sc.client_decode_tokens_per_s - sc.server_decode_tokens_per_s
                ) / sc.server_decode_tokens_per_s
        run.server = sc
        run.telemetry = sampler.result(agg.output_tokens, acc.accepted_tokens if acc else None)
        if not before.ok:
            run.reason = f"no acceptance counters: {before.error}"
        if agg.error_rate > b.max_error_rate:
            first = next((r.error for r in run.requests if not r.ok), "")
            run.status = "failed"
            run.reason = (
                f"error rate {agg.error_rate:.0%} > --max-error-rate {b.max_error_rate:.0%} (first: {first})"
            )
        if run.draft_tokens == 0:
            bw, src = self.bandwidth()
            run.roofline = roofline(self.cfg.model.model_path, agg.decode_tokens_per_s.mean, bw, src)
        tps = agg.output_tokens_per_s
        self.progress(
            f"{tag}: {agg.ok}/{agg.requests} ok, {tps or 0:.1f} output tok/s"
            + (f", τ={acc.acceptance_length:.2f}" if acc and acc.acceptance_length else "")
        )
        return run

    def bandwidth(self) -> tuple[float | None, str]:
        if self.cfg.bench.gpu_bandwidth_gbps:
            return self.cfg.bench.gpu_bandwidth_gbps, "--gpu-bandwidth"
        gpus = list_gpus()
        if gpus and gpus[0].bandwidth_gbps:
            return gpus[0].bandwidth_gbps, f"NVML ({gpus[0].name})"
        return None, "unknown"


def _default_factory() -> EngineFactory:
    from ..serve import create_engine

    return create_engine


def sweep_plan(cfg: SpecqConfig) -> list[tuple[str, int, SpecqConfig]]:
    """(label, draft tokens, config) for every server the sweep starts, baseline(s) first."""
    b = cfg.bench
    plan: list[tuple[str, int, SpecqConfig]] = []
    ks = sorted({k for k in b.draft_tokens if k > 0})
    if b.baseline or 0 in b.draft_tokens or not ks:
        for be in dict.fromkeys(b.baseline_engine):
            c = cfg.model_copy(deep=True)
            c.model.num_draft_tokens = 0
            if be == "turbomind":
                c.engine.engine, c.engine.backend = "lmdeploy", "turbomind"
            elif be == "pytorch":
                c.engine.engine, c.engine.backend = "lmdeploy", "pytorch"
            elif be == "embedded":
                c.engine.engine = "embedded"
            plan.append(("baseline" if be == "same" else f"baseline-{be}", 0, c))
    for k in ks:
        c = cfg.model_copy(deep=True)
        c.model.num_draft_tokens = k
        plan.append((f"k={k}", k, c))
    return plan


def check_inputs(cfg: SpecqConfig, engine_factory: EngineFactory | None) -> None:
    """Refuse contradictory options before any server starts."""
    from ..errors import UsageError
    from ..report.models import BenchReport as _Report

    b = cfg.bench
    if not b.url and not cfg.model.model_path and engine_factory is None:
        raise UsageError("nothing to benchmark: give MODEL (specq starts the servers) or --url URL")
    if b.max_regression is not None and not b.baseline_report:
        raise UsageError("--max-regression needs --baseline-report OLD.json")
    if b.baseline_report:
        _Report.load(b.baseline_report)  # fail now, not after the sweep


def run_bench(
    cfg: SpecqConfig,
    *,
    progress: Progress = null_progress,
    engine_factory: EngineFactory | None = None,
    out_dir: Path | None = None,
) -> BenchReport:
    """Run the benchmark described by `cfg` and write its report files; returns the report (gates are
    evaluated into it; `specq.pipeline.report.compare.enforce_gates` turns a failure into exit 3)."""
    from ..report.formatters import write_outputs

    b = cfg.bench
    check_inputs(cfg, engine_factory)
    out = Path(out_dir or b.out or default_out_dir())
    check_writable(out)  # before any server starts
    workload = build_workload(
        suite=b.suite, prompts_file=b.prompts, dataset=b.dataset, field=b.field, requests=b.requests
    )
    counter, why = load_token_counter(b.tokenizer or cfg.model.model_path)
    check_prompt_lengths(workload, counter, b.max_tokens, cfg.model.model_path, b.mode)
    report = new_report(cfg, workload)
    if counter is None:
        report.notes.append(
            f"no tokenizer recount ({why}); per-chunk token counts from usage and text length"
        )
    ctx = RunContext(cfg, workload, counter, progress)
    start_errors: list[SpecqError] = []
    try:
        if b.url:
            _external(report, ctx)
        else:
            start_errors = _sweep(report, ctx, engine_factory or _default_factory(), out)
    except KeyboardInterrupt:
        report.complete = False
        report.notes.append("interrupted: partial report")
        finalize(report, cfg, counter)
        write_outputs(report, out)
        raise
    finalize(report, cfg, counter)
    write_outputs(report, out)
    progress(f"report written to {out}")
    if start_errors and all(r.status == "server-failed" for r in report.runs):
        # Not one server came up: that is the user's problem to fix (its own exit code), not a result.
        raise start_errors[0]
    return report


def _external(report: BenchReport, ctx: RunContext) -> None:
    b = ctx.cfg.bench
    assert b.url is not None
    base = b.url.rstrip("/")
    if base.endswith("/v1"):
        base = base[:-3]
    model = b.served_model_name or discover_model(base)
    report.engine = EngineInfo(name="external", url=base, model=model)
    k = ctx.cfg.model.num_draft_tokens if ctx.cfg.model.num_draft_tokens else -1
    for conc in b.concurrency:
        run = Run(label="external", draft_tokens=k, concurrency=conc, engine="external")
        report.runs.append(run)
        ctx.measure(run, base, base + "/metrics", model)


def _sweep(report: BenchReport, ctx: RunContext, factory: EngineFactory, out: Path) -> list[SpecqError]:
    """Run every planned server; returns the start-up errors (each also recorded as a failed run)."""
    b = ctx.cfg.bench
    errors: list[SpecqError] = []
    for label, k, variant in sweep_plan(ctx.cfg):
        run_dir = out / "servers" / label.replace("=", "")
        ctx.progress(f"{label}: starting the server")
        engine: Engine | None = None
        try:
            engine = factory(variant, run_dir, ctx.progress)
            engine.start()
            engine.wait_ready(variant.engine.ready_timeout_s)
        except SpecqError as e:
            errors.append(e)
            tail = _tail(engine.log_path if engine is not None else None)
            if engine is not None:
                engine.stop()
            for conc in b.concurrency:
                report.runs.append(
                    Run(
                        label=label, draft_tokens=k, concurrency=conc, baseline=k == 0,
                        status="server-failed",
                        reason=f"server did not start: {e}", log_tail=tail, engine=variant.engine.engine,
                        backend=variant.engine.backend,
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
            for conc in b.concurrency:
                run = Run(label=label, draft_tokens=k, concurrency=conc, baseline=k == 0,
                          engine=engine.name, backend=variant.engine.backend)  # fmt: skip
                report.runs.append(run)
                ctx.measure(run, engine.base_url, engine.metrics_url, engine.model_name)
                if run.aggregate.errors and not _alive(engine.base_url):
                    run.status = "server-failed"
                    run.reason = "the server died during the run"
                    run.log_tail = _tail(engine.log_path)
                    ctx.progress(f"{label}: the server died; continuing with the next run")
                    break
        finally:
            engine.stop()
    return errors


def finalize(report: BenchReport, cfg: SpecqConfig, counter: TokenCounter | None) -> None:
    """Speedups, lossless checks, best k and gates (also on a partial report)."""
    b = cfg.bench
    for conc in sorted({r.concurrency for r in report.runs}):
        runs = [r for r in report.runs if r.concurrency == conc]
        base = next((r for r in runs if r.baseline and r.status == "ok"), None)
        if base is None:
            continue
        for r in runs:
            if r.baseline and r is base:
                continue
            if base.aggregate.output_tokens_per_s and r.aggregate.output_tokens_per_s is not None:
                r.speedup = r.aggregate.output_tokens_per_s / base.aggregate.output_tokens_per_s
                r.baseline_label = base.label
            if not r.baseline and b.temperature == 0 and r.status in ("ok", "failed"):
                r.lossless = lossless(base, r, counter)
        if report.best_k is None:
            report.best_k = predict_best_k(base, [r for r in runs if not r.baseline])
    old = None
    if b.baseline_report:
        from ..report.models import BenchReport as _R

        old = _R.load(b.baseline_report)
    report.gates = evaluate_gates(report, min_speedup=b.min_speedup, old=old, max_regression=b.max_regression)
