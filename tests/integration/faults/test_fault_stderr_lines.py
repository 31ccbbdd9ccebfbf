"""Nothing on stderr but progress lines (•) and, on a failure, the one `specq: error:` line: no advice printed
before that line (plan --check), no "wrote ..." of a command that then fails (convert), no log line a
library writes before it raises (datasets' "Failed to read schema" for a damaged Parquet file), no progress
bar of a library (transformers' "Loading weights"), and serve's own announcement marked as progress."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from .conftest import SPECQ, assert_one_line

pytestmark = pytest.mark.integration
QWEN35_27B = Path(__file__).parents[2] / "fixtures" / "twin" / "qwen3_5-27b-config.json"
DRAFT_TOML = "[draft]\nsamples = 4\nprompt_tokens = 16\ngen_tokens = 16\neval_prompts = 2\neval_tokens = 12\n"


def _only_progress(err: str) -> None:
    assert all(ln.startswith("•") for ln in err.splitlines() if ln.strip()), err


def test_plan_check_that_does_not_fit_is_one_line_with_its_advice(specq, tmp_path):
    d = tmp_path / "qwen3.5-27b"
    d.mkdir()
    shutil.copy(QWEN35_27B, d / "config.json")
    r = specq("plan", d, "--gpu-memory", "24GiB", "--check")
    assert_one_line(r, 4, "will not fit", "would fit: ")
    assert "target weights" in r.out  # the plan itself is data, on stdout


@pytest.mark.parametrize(
    "content", [os.urandom(3000), b"PAR1garbagePAR1"], ids=["random bytes", "magic without a footer"]
)
def test_a_damaged_parquet_calibration_file_is_one_line(content, specq, toy_target, tmp_path):
    bad = tmp_path / "calib.parquet"
    bad.write_bytes(content)
    r = specq("quantize", toy_target, "--calib", bad, "--out", tmp_path / "q", "--seqlen", "32")
    lines = [ln for ln in r.err.splitlines() if ln.strip() and not ln.startswith("•")]
    assert r.code == 2 and len(lines) == 1 and lines[0].startswith("specq: error: calibration source")
    assert "Failed to read schema" not in r.err and not (tmp_path / "q").exists()


def test_draft_eval_on_a_damaged_parquet_file_is_one_line(specq, toy_target, tmp_path):
    bad = tmp_path / "texts.parquet"
    bad.write_bytes(b"PAR1" + os.urandom(200) + b"PAR1")
    (tmp_path / "d.toml").write_text(DRAFT_TOML)
    r = specq(
        "-q", "draft", "train", toy_target, "--data", bad, "--out", tmp_path / "d", "-c", tmp_path / "d.toml"
    )
    line = assert_one_line(r, 2, str(bad.name))
    assert "Failed to read schema" not in line and not (tmp_path / "d").exists()


def test_draft_train_shows_progress_lines_and_no_loading_bars(specq, toy_target, tmp_path):
    (tmp_path / "d.toml").write_text(DRAFT_TOML)
    r = specq(
        "draft", "train", toy_target, "--out", tmp_path / "d", "--steps", "2", "-c", tmp_path / "d.toml"
    )
    assert r.code == 0, r.err
    assert "Loading weights" not in r.err and "it/s" not in r.err
    _only_progress(r.err.replace("note: ", "• note: "))


def test_serve_announces_itself_in_progress_lines(toy_pair, tmp_path):
    env = {**os.environ, "SPECQ_STATE_DIR": str(tmp_path / "state")}
    p = subprocess.run(
        [*SPECQ, "serve", str(toy_pair.target), "--engine", "embedded", "--device", "cpu", "--detach",
         "--run-dir", str(tmp_path / "run")],
        capture_output=True, text=True, env=env, timeout=240,
    )  # fmt: skip
    try:
        assert p.returncode == 0, p.stderr
        assert "• serving target with embedded" in p.stderr and "• stop it with: specq serve stop" in p.stderr
        _only_progress(p.stderr)
        assert p.stdout.strip().endswith("/v1 target")
    finally:
        stop = subprocess.run([*SPECQ, "serve", "stop", "--json"], capture_output=True, text=True, env=env)
        for server in json.loads(stop.stdout or "[]"):  # stopped; killed too should stopping have failed
            with contextlib.suppress(ProcessLookupError, KeyError):
                os.killpg(server["pid"], signal.SIGKILL)
