"""`specq demo`: the whole path on the project's own toy models, on any machine (no GPU, no downloads):
toy pair → GPTQ 4-bit with calibration text from the toy corpus → convert (readiness verdicts, and the
lossless GPTQ → AWQ repack that LMDeploy's speculating engine needs) → the embedded engine serving the
quantized target with the toy draft → a draft-token sweep with its paired baseline. Each stage is the same
pipeline function its command calls; this module only chains them and keeps their results."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from ..config import SpecqConfig, resolve_config
from ..config.models import QuantizeSection
from ..errors import InputError, os_error
from ..fsutil import cache_root as specq_cache_root
from ..fsutil import check_writable
from ..progress import Progress, null_progress
from ..report.noise import NOISE_FACTOR, NOISE_SPREAD, noise_warnings

__all__ = [
    "NOISE_FACTOR", "NOISE_SPREAD", "TRIALS", "DemoResult", "demo_config", "noise_warnings", "run_demo",
]  # fmt: skip

STAGES = ("toy pair", "quantize", "convert", "serve + bench")

# Measured trials per run: two by default, so the spread is shown; --quick (what CI runs): one.
TRIALS = 2
# The toy pair each demo runs on: the demo pair (an 8-layer target next to a 1-layer draft, so that a
# speculative step costs a fraction of k + 1 plain steps: docs/toy.md), and for --quick the small pair the
# test suite builds anyway (the pipeline runs; speculation does not pay on it).
DEMO_SIZE, QUICK_SIZE = "demo", "small"


class DemoResult(BaseModel):
    schema_version: int = 1
    out: str
    quick: bool
    seconds: float
    stage_seconds: dict[str, float] = Field(default_factory=dict)
    toy: dict[str, Any]
    quantize: list[dict[str, Any]]
    convert: list[dict[str, Any]]
    served_model: str
    bench_report: str
    bench_files: dict[str, str]
    summary_table: str
    best_k: dict[str, Any] | None = None
    toy_cache: str = ""  # where the toy pair lives: ${SPECQ_CACHE:-~/.cache/specq}/toy
    toy_size: str = DEMO_SIZE  # which toy pair (`specq toy build --size`)
    trials: int = 1
    noise: list[str] = Field(
        default_factory=list
    )  # why the figures are noise (`noise_warnings`); empty: none


def demo_config(
    target: Path, draft: Path, out: Path, quick: bool, prompts: Path | None = None
) -> SpecqConfig:
    """The packaged CPU demo preset, pointed at the demo's own models (and at `prompts`, a completion-mode
    prompts file, when given)."""
    flags: dict[str, dict[str, Any]] = {
        "model": {"model_path": str(target), "draft_model_path": str(draft)},
        "bench": {"out": str(out)},
    }
    if prompts is not None:
        flags["bench"].update(prompts=str(prompts), mode="completion")
    flags["bench"]["trials"] = 1 if quick else TRIALS
    if quick:
        flags["bench"].update(requests=4, max_tokens=32, warmup=1)
    return resolve_config("cpu-demo", flags=flags)


def run_demo(out: str | Path, *, quick: bool = False, progress: Progress = null_progress) -> DemoResult:
    from ..bench import BenchRequest, run_bench
    from ..convert.readiness import check_readiness
    from ..convert.repack import repack_gptq_to_awq
    from ..quantize import QuantizeRequest, quantize
    from ..report.formatters import render
    from ..toy import ToyRequest, build_toy_pair
    from ..toy.build import cache_root
    from ..toy.corpus import load_corpus, write_completion_prompts, write_jsonl

    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise InputError(f"{out} is not empty; choose another --out or remove it")
    check_writable(out / "x")
    specq_cache_root()  # the toy pair is cached there: a SPECQ_CACHE that is a file fails before --out
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise (os_error(exc, out, fix="choose another --out") or exc) from None
    t_start = time.perf_counter()
    stage_seconds: dict[str, float] = {}
    clock = [time.perf_counter()]

    def stage(i: int) -> None:
        if i > 0:
            stage_seconds[STAGES[i - 1]] = round(time.perf_counter() - clock[0], 1)
            clock[0] = time.perf_counter()
        if i < len(STAGES):
            progress(f"── stage {i + 1}/{len(STAGES)}: {STAGES[i]}")

    stage(0)
    size = QUICK_SIZE if quick else DEMO_SIZE
    pair = build_toy_pair(ToyRequest(size=size), progress=progress)
    toy_report = pair.load_report()

    stage(1)
    corpus = load_corpus()
    calib = write_jsonl(out / "calib.jsonl", corpus.train)
    qcfg = QuantizeSection.model_validate(
        {"method": "gptq", "for": "plain", "calib": str(calib), "samples": 16 if quick else 32, "seqlen": 256}
    )
    gptq_dir = out / "target-gptq"
    q = quantize(QuantizeRequest.from_config(qcfg, model=pair.target, out=gptq_dir), progress)

    stage(2)
    # The quantized target alone, like the repack below: the toy draft is a plain model for the embedded
    # engine, which LMDeploy cannot speculate with, so next to it every LMDeploy verdict would be "refused".
    verdict_gptq = check_readiness(gptq_dir, None, None)
    awq_dir = out / "target-awq"
    repack_gptq_to_awq(gptq_dir, awq_dir, progress=progress)
    verdict_awq = check_readiness(awq_dir, None, None)
    for v in (verdict_gptq, verdict_awq):
        for e in v.verdicts:
            progress(f"{Path(v.model).name}: {e.line()}")

    stage(3)
    # The toy learnt raw code: on chat prompts its greedy answers loop, and any drafter predicts a loop.
    # Held-out code prefixes, sent as completions, are text it has to write (`specq toy prompts`).
    prompts = out / "prompts.jsonl"
    write_completion_prompts(prompts, corpus, count=8)
    cfg = demo_config(gptq_dir, pair.draft, out / "bench", quick, prompts)
    report = run_bench(BenchRequest.from_config(cfg), progress=progress, out_dir=out / "bench")
    bench_dir = out / "bench"
    files = {str(p.relative_to(bench_dir)): str(p) for p in sorted(bench_dir.rglob("*")) if p.is_file()}
    stage(4)

    return DemoResult(
        out=str(out),
        quick=quick,
        seconds=round(time.perf_counter() - t_start, 1),
        stage_seconds=stage_seconds,
        toy={"target": str(pair.target), "draft": str(pair.draft), **toy_report.model_dump(mode="json")},
        quantize=[q.model_dump(mode="json")],
        convert=[verdict_gptq.model_dump(mode="json"), verdict_awq.model_dump(mode="json")],
        served_model=str(gptq_dir),
        bench_report=str(out / "bench" / "report.json"),
        bench_files=files,
        summary_table=render(report, "table"),
        best_k=report.best_k.model_dump(mode="json") if report.best_k else None,
        toy_cache=str(cache_root()),
        toy_size=size,
        trials=cfg.bench.trials or 1,
        noise=noise_warnings(report),
    )
