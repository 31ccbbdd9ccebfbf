"""`specq bench` refuses what needs no server before it writes anything: the checks `serve` makes before a
launch (the checkpoint, the drafter and method, the backend and its options) run for the baseline and every
planned k first, so a refusal is exit 2 with no --out directory and no report, not a report of runs whose
servers "did not start"."""

from __future__ import annotations

import importlib.util
import json

import pytest

from .conftest import assert_one_line

pytestmark = pytest.mark.integration


def _bench(specq, target, out, *args, config=None):
    extra = ["-c", config] if config else []
    return specq("-q", "bench", target, "--requests", "1", "--max-tokens", "4", "--out", out, *extra, *args)


def test_step_patch_on_turbomind_is_refused_before_the_report(specq, toy_target, tmp_path):
    (tmp_path / "c.toml").write_text("[engine]\nstep_patch = true\n")
    r = _bench(specq, toy_target, tmp_path / "out", "--engine", "lmdeploy", "--backend", "turbomind",
               "--draft-tokens", "0", config=tmp_path / "c.toml")  # fmt: skip
    assert_one_line(r, 2, "engine.step_patch", "--backend pytorch")
    assert not (tmp_path / "out").exists()


def test_a_machine_without_lmdeploy_is_found_before_the_report(specq, toy_target, tmp_path):
    """The engine's preflight (lmdeploy, a GPU: exit 4) needs no server either."""
    if importlib.util.find_spec("lmdeploy") is not None:
        pytest.skip("lmdeploy is installed here")
    r = _bench(specq, toy_target, tmp_path / "out", "--engine", "lmdeploy", "--draft-tokens", "0")
    assert_one_line(r, 4, "lmdeploy is not installed", "--engine embedded")
    assert not (tmp_path / "out").exists()


def test_a_damaged_target_is_refused_before_the_report(specq, toy_target, tmp_path):
    cfg = json.loads((toy_target / "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemm"}
    (toy_target / "config.json").write_text(json.dumps(cfg))  # AWQ said, no AWQ tensors there
    r = _bench(specq, toy_target, tmp_path / "out", "--engine", "embedded", "--draft-tokens", "0")
    assert_one_line(r, 2, str(toy_target), "quantized")
    assert not (tmp_path / "out").exists()


def test_an_existing_out_keeps_no_trace_of_a_refused_run(specq, toy_target, tmp_path):
    """--out may exist (a report directory reused): a refusal adds nothing to it."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    (tmp_path / "c.toml").write_text("[engine]\nstep_patch = true\n")
    turbomind = ["--engine", "lmdeploy", "--backend", "turbomind", "--draft-tokens", "0"]
    r = _bench(specq, toy_target, out, *turbomind, config=tmp_path / "c.toml")
    assert_one_line(r, 2, "engine.step_patch")
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]
