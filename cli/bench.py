"""`specq bench`: measure a running server (`--url`) or sweep draft-token counts against a paired baseline
on servers specq starts itself; the work is `specq.pipeline.bench.run_bench`."""

from __future__ import annotations

from typing import Annotated

import typer

from ._common import emit, out, progress, resolve_given
from ._fields import Given, arg, opt, takes
from ._options import ConfigOpt, JsonOpt, OutOpt, WideOpt

ApiKeyOpt = Annotated[
    str | None,
    typer.Option(
        "--api-key", envvar=["SPECQ_API_KEY", "OPENAI_API_KEY"], show_envvar=True, show_default=False,
        help="Bearer key for a --url server started with keys; never logged or saved.",
    ),
]  # fmt: skip
# In the order --help lists them: config keys (section.key), and the command's own parameters.
OPTIONS = [
    "model.draft_model_path", "engine.engine", "engine.backend", "engine.tp",
    "engine.distributed_executor_backend", "speculative.method", "bench.draft_tokens",
    "bench.baseline_engine", "bench.url", "bench.served_model_name", "api_key", "bench.suite",
    "bench.prompts", "bench.dataset", "bench.field", "bench.mode", "bench.requests", "bench.max_tokens",
    "bench.concurrency", "bench.warmup", "bench.warmup_passes", "bench.warmup_tolerance", "bench.trials",
    "bench.consistency_tolerance", "bench.repeats", "bench.temperature", "bench.seed", "bench.ignore_eos",
    "bench.tokenizer", "bench.request_timeout_s", "bench.max_error_rate", "bench.gpu_bandwidth_gbps",
    "out_dir", "bench.headline", "bench.min_speedup", "bench.baseline_report", "bench.max_regression",
]  # fmt: skip


@takes(
    arg("model.model_path", dest="model", help="Target checkpoint to serve (omit with --url)."),
    *(opt(k) if "." in k else k for k in OPTIONS),
)
def bench(
    given: Given,
    api_key: ApiKeyOpt = None,
    out_dir: OutOpt = None,
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

    cfg = resolve_given(config, given, bench={"out": out_dir})
    report = run_bench(BenchRequest.from_config(cfg, api_key=api_key), progress=progress, out_dir=out_dir)
    emit(report, as_json, lambda r: render(r, "table", width=out.width, wide=wide))
    enforce_gates(report)
