"""`specq demo`: the whole pipeline on the toy models (the work is `specq.pipeline.demo.run_demo`)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from specq.pipeline.demo import run_demo

from ._common import emit, progress
from ._options import JsonOpt, OutOpt


def demo(
    out_dir: OutOpt = None,
    quick: Annotated[bool, typer.Option("--quick", help="Fewer prompts and tokens (what CI runs).")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Run the whole pipeline on the project's toy models, on CPU, with no downloads: build the toy pair,
    quantize the target to 4-bit GPTQ, check it with convert (and repack it to AWQ), serve it with the
    embedded engine and the toy draft, and sweep --draft-tokens 3..6 against the baseline. Every artifact goes
    to the --out directory (must be empty; default specq-out/demo-TIME).

    Example: specq demo --quick --out /tmp/specq-demo
    """
    if out_dir is None:
        out_dir = Path("specq-out") / time.strftime("demo-%Y%m%d-%H%M%S")
    result = run_demo(out_dir, quick=quick, progress=progress)
    times = ", ".join(f"{k} {v:.0f} s" for k, v in result.stage_seconds.items())
    diagnostics = [
        f"reports: {Path(result.bench_report).parent} (report.json, runs.csv, summary.md, plots/)",
        f"demo finished in {result.seconds:.0f} s: {times}",
    ]
    emit(result, as_json, lambda r: r.summary_table, diagnostics)
