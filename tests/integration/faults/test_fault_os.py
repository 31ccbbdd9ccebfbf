"""OS faults a user can fix: unreadable and non-UTF-8 inputs, outputs under a directory without write
permission, on a read-only file system or a full one. Each is one line naming the path (exit 2; 4 for a
full disk), found before the long work starts, and leaves nothing partial behind."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from .conftest import assert_one_line, run_specq

pytestmark = pytest.mark.integration
LATIN1 = "caf\xe9 d\xe9j\xe0 vu\n".encode("latin-1")


@pytest.fixture
def locked(tmp_path: Path) -> Path:
    """A directory nobody (but root with DAC capabilities) may write into."""
    d = tmp_path / "locked"
    d.mkdir()
    d.chmod(0o555)
    yield d
    d.chmod(0o755)


def _quantize(model: Path, calib: Path, out: Path) -> list[str | Path]:
    return ["quantize", model, "--calib", calib, "--out", out, "--method", "gptq", "--for", "plain"]


# ---------------------------------------------------------------------------------------- unreadable inputs


def test_unreadable_calibration_file(toy_target, calib, tmp_path):
    calib.chmod(0)
    r = run_specq(*_quantize(toy_target, calib, tmp_path / "q"), cwd=tmp_path, unprivileged=True)
    assert_one_line(r, 2, str(calib), "permission denied", "chmod")
    assert not (tmp_path / "q").exists()


@pytest.mark.parametrize("suffix", [".jsonl", ".txt"])
def test_calibration_not_utf8(suffix, specq, toy_target, tmp_path):
    calib = tmp_path / f"calib{suffix}"
    calib.write_bytes(b'{"text": "' + LATIN1.strip() + b'"}\n' if suffix == ".jsonl" else LATIN1)
    r = specq(*_quantize(toy_target, calib, tmp_path / "q"))
    assert_one_line(r, 2, str(calib), "UTF-8")


def test_unreadable_config_file(tmp_path):
    cfg = tmp_path / "specq.toml"
    cfg.write_text("[bench]\nrequests = 4\n")
    cfg.chmod(0)
    r = run_specq("config", "show", "--config", cfg, cwd=tmp_path, unprivileged=True)
    assert_one_line(r, 2, str(cfg), "not readable")


def test_config_file_not_utf8(specq, tmp_path):
    cfg = tmp_path / "specq.toml"
    cfg.write_bytes(b"# " + LATIN1)
    assert_one_line(specq("config", "show", "--config", cfg), 2, str(cfg), "UTF-8")


def test_prompts_file_not_utf8(specq, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_bytes(b'{"prompt": "' + LATIN1.strip() + b'"}\n')
    r = specq("bench", "--url", "http://127.0.0.1:9", "--prompts", prompts, "--out", tmp_path / "b")
    assert_one_line(r, 2, str(prompts), "UTF-8")


def test_unreadable_prompts_file(tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "hi"}\n')
    prompts.chmod(0)
    r = run_specq(
        "bench", "--url", "http://127.0.0.1:9", "--prompts", prompts, "--out", tmp_path / "b",
        cwd=tmp_path, unprivileged=True,
    )  # fmt: skip
    assert_one_line(r, 2, str(prompts), "permission denied")


def test_unreadable_report(tmp_path):
    rep = tmp_path / "report.json"
    rep.write_text("{}")
    rep.chmod(0)
    r = run_specq("report", "show", rep, cwd=tmp_path, unprivileged=True)
    assert_one_line(r, 2, str(rep))


def test_report_not_utf8(specq, tmp_path):
    rep = tmp_path / "report.json"
    rep.write_bytes(LATIN1)
    assert_one_line(specq("report", "show", rep), 2, str(rep))


def test_unreadable_model_config(toy_target, tmp_path):
    (toy_target / "config.json").chmod(0)
    r = run_specq("convert", toy_target, cwd=tmp_path, unprivileged=True)
    assert_one_line(r, 2, "config.json", "permission denied")


def test_unreadable_weights(toy_target, tmp_path):
    (toy_target / "model.safetensors").chmod(0)
    r = run_specq("plan", toy_target, "--gpu-memory", "24GiB", cwd=tmp_path, unprivileged=True)
    assert_one_line(r, 2, "model.safetensors", "PermissionError")


# --------------------------------------------------------------------- outputs that cannot be written


def _out_commands(toy_target: Path, toy_draft: Path, calib: Path, out: Path) -> dict[str, list]:
    return {
        "quantize": _quantize(toy_target, calib, out),
        "convert --dtype": ["convert", toy_draft, "--dtype", "float16", "--out", out],
        "draft train": ["draft", "train", toy_target, "--out", out],
        "bench": ["bench", toy_target, "--engine", "embedded", "--draft-tokens", "0", "--out", out],
        "toy build": ["toy", "build", out],
        "demo": ["demo", "--quick", "--out", out],
    }


OUT_COMMANDS = ["quantize", "convert --dtype", "draft train", "bench", "toy build", "demo"]


@pytest.mark.parametrize("command", OUT_COMMANDS)
def test_out_under_a_directory_without_write_permission(
    command, toy_target, toy_draft, calib, locked, tmp_path
):
    out = locked / "sub" / "out"
    args = _out_commands(toy_target, toy_draft, calib, out)[command]
    r = run_specq("-q", *args, cwd=tmp_path, unprivileged=True)
    assert_one_line(r, 2, str(locked), "permission denied", "--out" if command != "toy build" else "OUT")
    assert list(locked.iterdir()) == []


@pytest.mark.parametrize("command", ["quantize", "convert --dtype", "draft train", "bench"])
def test_out_on_a_read_only_file_system(command, specq, toy_target, toy_draft, calib, readonly_fs):
    out = readonly_fs / "out"
    r = specq("-q", *_out_commands(toy_target, toy_draft, calib, out)[command])
    assert_one_line(r, 2, str(readonly_fs), "read-only file system", "--out")


def test_out_below_a_file(specq, toy_draft, tmp_path):
    (tmp_path / "afile").write_text("x")
    r = specq("convert", toy_draft, "--dtype", "float16", "--out", tmp_path / "afile" / "out")
    assert_one_line(r, 2, "is not a directory")


def test_readiness_in_a_read_only_model_directory(specq, toy_target, sized_fs):
    """The verdicts stand without a manifest: exit 0 and a note naming the file, not an error."""
    model = sized_fs / "m"
    shutil.copytree(toy_target, model)
    subprocess.run(["mount", "-o", "remount,ro", str(sized_fs)], check=True)
    r = specq("convert", model)
    assert r.code == 0, r.err
    assert "could not write" in r.err and "specq-manifest.json" in r.err and "Traceback" not in r.err
    assert not (model / "specq-manifest.json").exists()


def test_full_disk_while_writing_a_checkpoint(specq, toy_draft, full_fs, monkeypatch):
    """The space check passes (it is a lower bound) and the disk fills while writing: exit 4 naming --out."""
    from specq.pipeline.checkpoint import Checkpoint

    monkeypatch.setattr(Checkpoint, "file_bytes", property(lambda self: 0))  # skip the early check
    out = full_fs / "draft-fp16"
    r = specq("-q", "convert", toy_draft, "--dtype", "float16", "--out", out)
    assert_one_line(r, 4, str(out), "no space left")
    assert list(full_fs.iterdir()) == []  # the partial copy was removed


def test_full_disk_on_stdout(tmp_path):
    """Data to a full device (/dev/full): exit 4, one line, no 'Exception ignored' noise."""
    with open("/dev/full", "w") as full:
        r = run_specq("config", "show", cwd=tmp_path, stdout=full.fileno())
    assert_one_line(r, 4, "no space left")


@pytest.mark.parametrize("command", ["quantize", "convert --dtype"])
def test_too_little_space_is_found_before_long_work(command, specq, toy_target, toy_draft, calib, full_fs):
    out = full_fs / "out"
    r = specq("-q", *_out_commands(toy_target, toy_draft, calib, out)[command])
    assert_one_line(r, 4, str(full_fs), "MiB free", "--out")
    assert list(full_fs.iterdir()) == []
