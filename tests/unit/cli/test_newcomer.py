"""What trips a newcomer, checked: doctor's fix column keeps `specq[lmdeploy]` (rich markup would eat it) and
names `make install-gpu`; help shows flags as their names, with no `<bool>` type; `draft eval` on a plain
draft model says which command makes a drafter it can measure; `serve --draft-model` without a draft-token
count is refused instead of serving without speculation; the demo preset measures two trials (one with
--quick) and says when a busy machine made its figures noise."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specq.pipeline import hardware
from specq.pipeline.doctor import Check, DoctorReport, _lmdeploy_checks, doctor_text
from specq.pipeline.report.models import BenchReport, HostInfo, Run, Spread, Warmup, WorkloadInfo


def test_doctor_fix_column_keeps_pip_extras_and_names_make_install_gpu(monkeypatch) -> None:
    monkeypatch.setattr(hardware, "lmdeploy_version", lambda: None)  # a machine without lmdeploy
    (check,) = [c for c in _lmdeploy_checks() if c.name == "lmdeploy"]
    assert check.fix is not None and "make install-gpu" in check.fix and "'specq[lmdeploy]'" in check.fix
    report = DoctorReport.model_construct(checks=[check, Check(name="torch", status="warn", detail="x",
                                                               fix="pip install 'specq[ml]'")])  # fmt: skip
    text = doctor_text(report, width=200)
    assert "pip install 'specq[lmdeploy]'" in text and "pip install 'specq[ml]'" in text
    assert "make install-gpu" in text


@pytest.mark.parametrize("command", [("quantize",), ("bench",), ("fa3", "build"), ("demo",)])
def test_help_shows_flags_without_a_bool_type(cli, command: tuple[str, ...]) -> None:
    code, out, _ = cli(*command, "--help", env={"COLUMNS": "160"})
    assert code == 0
    assert "<bool>" not in out and "--json" in out
    if command == ("quantize",):
        assert "--no-eval" in out and "<int>" in out  # pairs still shown; other types still named


def test_the_cli_reference_names_flag_pairs_and_fills_every_default() -> None:
    from specq.cli._docs import render_cli_markdown

    md = render_cli_markdown()
    assert "| `--eval/--no-eval` |" in md and "| `--sym/--asym` |" in md
    rows = [line for line in md.splitlines() if line.startswith("| `")]
    assert rows and all(not line.rstrip().endswith("|  |") for line in rows)
    assert "| `--requests` | Requests per run. | `16` |" in md  # the default configuration's value
    assert "| `--json` | Print one JSON document on stdout. | off |" in md


def test_draft_eval_on_a_plain_draft_model_names_draft_train(cli, tmp_path: Path) -> None:
    cfg = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "num_hidden_layers": 2,
           "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128,
           "vocab_size": 256}  # fmt: skip
    for name in ("target", "draft"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps(cfg))
    code, _, err = cli("draft", "eval", str(tmp_path / "target"), str(tmp_path / "draft"))
    assert code == 2
    assert "not a valid LMDeploy DFlash drafter" in err
    assert f"specq draft train {tmp_path / 'target'} --out DIR" in err
    assert len(err.strip().splitlines()) == 1


def test_demo_preset_measures_two_trials_and_quick_one(tmp_path: Path) -> None:
    from specq.pipeline.demo import TRIALS, demo_config

    assert TRIALS >= 2
    full = demo_config(tmp_path / "t", tmp_path / "d", tmp_path / "o", quick=False)
    quick = demo_config(tmp_path / "t", tmp_path / "d", tmp_path / "o", quick=True)
    assert full.bench.trials == TRIALS and quick.bench.trials == 1
    assert quick.bench.requests == 4  # --quick stays as small as CI runs it


def _report(*runs: Run) -> BenchReport:
    wl = WorkloadInfo(source="x", digest="d", requests=4, categories={}, mode="completion", max_tokens=8,
                      temperature=0.0)  # fmt: skip
    return BenchReport(created_at="2026-12-02T00:00:00+00:00", specq_version="0", workload=wl,
                       host=HostInfo(platform="linux", python="3.11"), runs=list(runs))  # fmt: skip


def _run(label: str, warm: float, median: float, lo: float | None = None, hi: float | None = None) -> Run:
    r = Run(label=label, draft_tokens=0 if label == "baseline" else 5, concurrency=1)
    r.warmup = Warmup(requests_per_pass=4, max_passes=4, tolerance=0.1, passes=2, rates=[warm * 0.9, warm])
    lo, hi = lo if lo is not None else median, hi if hi is not None else median
    r.throughput = Spread(n=2, used=2, median=median, min=lo, max=hi, rel_spread=(hi - lo) / median)
    return r


def test_the_demo_calls_busy_machine_figures_noise() -> None:
    from specq.pipeline.demo import NOISE_FACTOR, NOISE_SPREAD, noise_warnings

    calm = _report(_run("baseline", 300.0, 290.0, 285.0, 295.0), _run("k=5", 250.0, 240.0, 235.0, 245.0))
    assert noise_warnings(calm) == []
    # the loaded machine of 2026-12-02: k = 5 warmed up at 339.8 tok/s and measured 95.1
    busy = _report(_run("baseline", 300.0, 290.0), _run("k=5", 339.8, 95.1))
    lines = noise_warnings(busy)
    assert lines[0].startswith("k=5: the last warm-up pass ran at 339.8 tok/s and the measurement at 95.1")
    assert f"more than {NOISE_FACTOR:g}x" in lines[0] and "noise" in lines[-1] and len(lines) == 2
    spread = _report(_run("baseline", 300.0, 300.0, 200.0, 330.0))  # trials 200-330: 43 % apart
    lines = noise_warnings(spread)
    assert "2 trials' output tok/s spread 43%" in lines[0] and f"more than {NOISE_SPREAD:.0%}" in lines[0]
    # the bench table says it too, under the figures (the demo prints that table)
    from specq.pipeline.report.formatters import render

    assert "NOISE: k=5: the last warm-up pass ran at 339.8 tok/s" in render(busy, "table")
    assert "NOISE" not in render(calm, "table")
