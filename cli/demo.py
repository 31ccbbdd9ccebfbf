"""`specq demo`: the whole pipeline on the toy models (the work is `specq.pipeline.demo.run_demo`)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from specq.pipeline.demo import run_demo

from ._common import emit, out, progress
from ._options import JsonOpt, OutOpt, WideOpt


def demo(
    out_dir: OutOpt = None,
    quick: Annotated[
        bool,
        typer.Option(
            "--quick",
            help="The small toy pair (the test suite's), fewer prompts and tokens, one trial: what CI runs. "
            "It shows that every stage runs, not that speculation pays.",
        ),
    ] = False,
    wide: WideOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Run the whole pipeline on the project's toy models, on CPU, with no downloads: build the demo toy pair
    (an 8-layer target and a 1-layer draft: specq toy build --size demo, about 2.5 minutes the first time),
    quantize the target to 4-bit GPTQ, check it with convert (and repack it to AWQ), serve it with the
    embedded engine and the toy draft, and sweep --draft-tokens 4,6 against the baseline, two trials per run
    (--quick: one, on the small pair). Every artifact goes to the --out directory (must be empty; default
    specq-out/demo-TIME); the toy pairs are cached in ${SPECQ_CACHE:-~/.cache/specq}/toy. When a run's
    measurement and its warm-up differ by more than 2x, or its trials by more than 25 %, the demo says the
    figures are noise.

    Example: specq demo --quick --out /tmp/specq-demo
    """
    if out_dir is None:
        out_dir = Path("specq-out") / time.strftime("demo-%Y%m%d-%H%M%S")
    from specq.pipeline.report import BenchReport
    from specq.pipeline.report.formatters import render

    result = run_demo(out_dir, quick=quick, progress=progress)
    times = ", ".join(f"{k} {v:.0f} s" for k, v in result.stage_seconds.items())
    diagnostics = [
        f"toy models: the {result.toy_size} pair in {result.toy_cache} (SPECQ_CACHE moves them; default "
        "~/.cache/specq)",
        f"reports: {Path(result.bench_report).parent} (report.json, runs.csv, summary.md, plots/)",
        f"demo finished in {result.seconds:.0f} s: {times}; {result.trials} measured trial(s) per run",
    ]
    report = BenchReport.load(result.bench_report)
    # the table's notes say when the machine was busy (result.noise holds the same lines for --json)
    emit(result, as_json, lambda r: render(report, "table", width=out.width, wide=wide), diagnostics)
