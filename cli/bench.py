"""`specq bench`: measure a running server (`--url`) or sweep draft-token counts against a paired baseline
on servers specq starts itself; the work is `specq.pipeline.bench.run_bench`."""

from __future__ import annotations

from typing import Annotated

import typer

from ._common import emit, out, progress, resolve
from ._options import (
    BackendOpt,
    ConfigOpt,
    DraftModelOpt,
    DraftTokensOpt,
    EngineOpt,
    ExecutorOpt,
    JsonOpt,
    MethodOpt,
    OutOpt,
    TpOpt,
    WideOpt,
)

Opt = typer.Option


def bench(
    model: Annotated[str | None, typer.Argument(help="Target checkpoint to serve (omit with --url).")] = None,
    draft_model: DraftModelOpt = None,
    engine: EngineOpt = None,
    backend: BackendOpt = None,
    tp: TpOpt = None,
    executor: ExecutorOpt = None,
    method: MethodOpt = None,
    draft_tokens: DraftTokensOpt = None,
    baseline_engine: Annotated[
        str | None, Opt("--baseline-engine", help="same | turbomind | pytorch | embedded (comma list).")
    ] = None,
    url: Annotated[str | None, Opt("--url", help="Benchmark this running server (one run).")] = None,
    served_model: Annotated[str | None, Opt("--model", help="Model name at --url (default: first).")] = None,
    api_key: Annotated[
        str | None,
        Opt(
            "--api-key",
            envvar=["SPECQ_API_KEY", "OPENAI_API_KEY"],
            show_default=False,
            show_envvar=True,
            help="Bearer key for a --url server started with keys; never logged or saved.",
        ),
    ] = None,
    suite: Annotated[
        str | None, Opt("--suite", help="Built-in suite: code, math, chat, ... or mixed.")
    ] = None,
    prompts: Annotated[str | None, Opt("--prompts", help="JSONL with prompt or messages per line.")] = None,
    dataset: Annotated[str | None, Opt("--dataset", help="datasets name or local file/dir.")] = None,
    field: Annotated[str | None, Opt("--field", help="Dataset field holding the prompt.")] = None,
    mode: Annotated[str | None, Opt("--mode", help="chat | completion.")] = None,
    requests: Annotated[int | None, Opt("--requests", help="Requests per run.")] = None,
    max_tokens: Annotated[int | None, Opt("--max-tokens", help="Output tokens per request.")] = None,
    concurrency: Annotated[str | None, Opt("--concurrency", help="In-flight requests, e.g. 1,4,8.")] = None,
    warmup: Annotated[
        str | None, Opt("--warmup", help="Prompts per warm-up pass: N, all (default) or 0 (off).")
    ] = None,
    warmup_passes: Annotated[
        int | None, Opt("--warmup-passes", help="At most N passes to reach steady state (default 5).")
    ] = None,
    warmup_tolerance: Annotated[
        str | None, Opt("--warmup-tolerance", help="Steady: a pass at most e.g. 5% faster than the last.")
    ] = None,
    trials: Annotated[
        int | None, Opt("--trials", help="Measured trials per run (default 3; 1 with --url).")
    ] = None,
    consistency_tolerance: Annotated[
        str | None, Opt("--consistency-tolerance", help="Flag client vs server beyond, e.g. 10%.")
    ] = None,
    repeats: Annotated[int | None, Opt("--repeats", help="Times each prompt is sent.")] = None,
    temperature: Annotated[float | None, Opt("--temperature")] = None,
    seed: Annotated[int | None, Opt("--seed")] = None,
    ignore_eos: Annotated[bool | None, Opt("--ignore-eos/--no-ignore-eos", help="Default off.")] = None,
    tokenizer: Annotated[str | None, Opt("--tokenizer", help="Local tokenizer for the recount.")] = None,
    timeout: Annotated[float | None, Opt("--timeout", help="Seconds per request.")] = None,
    max_error_rate: Annotated[
        str | None, Opt("--max-error-rate", help="Fail a run above this, e.g. 10%.")
    ] = None,
    gpu_bandwidth: Annotated[float | None, Opt("--gpu-bandwidth", help="GB/s for the roofline.")] = None,
    out_dir: OutOpt = None,
    headline: Annotated[
        str | None, Opt("--headline", help="Speedup basis: decode (default, no TTFT) | e2e.")
    ] = None,
    min_speedup: Annotated[float | None, Opt("--min-speedup", help="Gate: best k's speedup ≥ X.")] = None,
    baseline_report: Annotated[
        str | None, Opt("--baseline-report", help="Gate: an older report.json.")
    ] = None,
    max_regression: Annotated[
        str | None, Opt("--max-regression", help="Gate: allowed drop, e.g. 5%.")
    ] = None,
    config: ConfigOpt = None,
    wide: WideOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Benchmark tokens/s, per-token latency, acceptance (from /metrics), NVML telemetry and the best
    draft-token count; a sweep restarts the server for every k next to a k = 0 baseline. Every run warms
    up to steady state, is measured in --trials trials (median and spread) and checked against the
    server's own counters. The headline speedup is the decode rate's (--headline e2e: end to end, TTFT
    included); both are reported. Writes report.json, runs.csv, summary.md and plots to the --out directory.
    Gates exit 3 (on the conservative end of the trials); a run that measured nothing exits 5.

    Example: specq bench ./target --draft-model ./draft --draft-tokens 3..6 --min-speedup 1.2
    """
    from specq.pipeline.bench import BenchRequest, run_bench
    from specq.pipeline.report.compare import enforce_gates
    from specq.pipeline.report.formatters import render

    cfg = resolve(
        config,
        model=dict(model_path=model, draft_model_path=draft_model),
        engine=dict(engine=engine, backend=backend, tp=tp, distributed_executor_backend=executor),
        speculative=dict(method=method),
        bench=dict(
            url=url, served_model_name=served_model, draft_tokens=draft_tokens, suite=suite, prompts=prompts,
            baseline_engine=baseline_engine, dataset=dataset, field=field, mode=mode, requests=requests,
            max_tokens=max_tokens, concurrency=concurrency, warmup=warmup, warmup_passes=warmup_passes,
            warmup_tolerance=warmup_tolerance, trials=trials, consistency_tolerance=consistency_tolerance,
            repeats=repeats, temperature=temperature, seed=seed, ignore_eos=ignore_eos, tokenizer=tokenizer,
            request_timeout_s=timeout, max_error_rate=max_error_rate, gpu_bandwidth_gbps=gpu_bandwidth,
            out=out_dir, headline=headline, min_speedup=min_speedup, baseline_report=baseline_report,
            max_regression=max_regression,
        ),
    )  # fmt: skip
    report = run_bench(BenchRequest.from_config(cfg, api_key=api_key), progress=progress, out_dir=out_dir)
    emit(report, as_json, lambda r: render(r, "table", width=out.width, wide=wide))
    enforce_gates(report)
