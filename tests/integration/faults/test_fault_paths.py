"""Paths and sizes a user got wrong: an --out that is a dangling symlink, a name over NAME_MAX, a place in
/proc, a SPECQ_CACHE that is a file; a --group-size or --bits no quantizer takes (refused before the
calibration data is read); a calibration file that is one 50 MB line (cut to what the samples need, with a
note, instead of tokenizing it all). Each is one line with exit 2, and nothing is written."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from .conftest import assert_one_line

pytestmark = pytest.mark.integration


def _commands(toy_target: Path, toy_draft: Path, calib: Path, out: Path) -> dict[str, list[str | Path]]:
    return {
        "quantize": [
            "quantize",
            toy_target,
            "--calib",
            calib,
            "--out",
            out,
            "--method",
            "gptq",
            "--for",
            "plain",
        ],
        "convert --dtype": ["convert", toy_draft, "--dtype", "float16", "--out", out],
        "draft train": ["draft", "train", toy_target, "--out", out],
        "bench": ["bench", "--url", "http://127.0.0.1:9", "--out", out],
        "toy build": ["toy", "build", out],
    }


def dangling_symlink(tmp: Path) -> tuple[Path, str]:
    out = tmp / "out"
    out.symlink_to(tmp / "nowhere" / "at-all")
    return out, "a dangling symbolic link"


def name_too_long(tmp: Path) -> tuple[Path, str]:
    return tmp / ("x" * 300), "a file name is too long"


def in_proc(tmp: Path) -> tuple[Path, str]:
    return Path("/proc/specq-out"), "cannot create files in /proc"


def a_file(tmp: Path) -> tuple[Path, str]:
    (tmp / "afile").write_text("x")
    return tmp / "afile", "exists and is not a directory"


@pytest.mark.parametrize("command", ["quantize", "convert --dtype", "draft train", "bench", "toy build"])
@pytest.mark.parametrize("fault", [dangling_symlink, name_too_long, in_proc], ids=lambda f: f.__name__)
def test_unusable_out_path(fault, command, specq, toy_target, toy_draft, calib, tmp_path):
    out, needle = fault(tmp_path)
    r = specq("-q", *_commands(toy_target, toy_draft, calib, out)[command])
    line = assert_one_line(r, 2, needle)
    assert fault is name_too_long or ("OUT" if command == "toy build" else "--out") in line
    assert not os.path.lexists(out) or out.is_symlink()


@pytest.mark.parametrize(
    ("command", "needle"),
    [("bench", "exists and is not a directory"), ("draft train", "already exists"),
     ("convert --dtype", "exists and is not a directory")],
)  # fmt: skip
def test_out_that_is_a_file(command, needle, specq, toy_target, toy_draft, calib, tmp_path):
    out, _ = a_file(tmp_path)
    r = specq("-q", *_commands(toy_target, toy_draft, calib, out)[command])
    assert_one_line(r, 2, needle, "--out")
    assert out.read_text() == "x"


@pytest.mark.parametrize(
    "args",
    [["toy", "build", "o"], ["serve", "status"], ["serve", "stop"], ["demo", "--quick", "--out", "d"]],
    ids=["toy build", "serve status", "serve stop", "demo"],
)
@pytest.mark.parametrize("where", ["afile", "afile/below"])
def test_specq_cache_that_is_a_file(where, args, specq, tmp_path):
    (tmp_path / "afile").write_text("x")
    r = specq("-q", *args, env={"SPECQ_CACHE": str(tmp_path / where)})
    assert_one_line(r, 2, "SPECQ_CACHE=", "is not a directory")
    assert not (tmp_path / "o").exists() and not (tmp_path / "d").exists()


# --------------------------------------------------------------------------------- quantize sizes, early


@pytest.fixture
def unread_calib(tmp_path: Path) -> Path:
    """A calibration file that is not UTF-8: reading it would be an error of its own, so a test that sees
    the size error instead proves the sizes were checked before the data was read."""
    p = tmp_path / "calib.jsonl"
    p.write_bytes(b'{"text": "\xff"}\n')
    return p


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--group-size", "0"], "quantize.group_size: must be a positive number of columns"),
        (["--group-size", "-5"], "or -1 for whole rows, not -5"),
        (
            ["--group-size", "48", "--no-turbomind-check"],
            "--group-size 48 does not divide the model's hidden_size",
        ),
        (["--group-size", "100", "--no-turbomind-check"], "does not divide"),
        (["--bits", "5"], "quantize.bits"),
        (["--bits", "0"], "quantize.bits"),
    ],
)
def test_quantize_sizes_checked_before_calibration(flags, needle, specq, toy_target, unread_calib, tmp_path):
    r = specq(
        "-q", "quantize", toy_target, "--calib", unread_calib, "--out", tmp_path / "q", "--method", "gptq",
        "--for", "plain", *flags,
    )  # fmt: skip
    assert_one_line(r, 2, needle)
    assert not (tmp_path / "q").exists()


def test_quantize_group_size_minus_one_is_accepted_up_to_calibration(
    specq, toy_target, unread_calib, tmp_path
):
    """-1 (one group per row) passes the size checks: what stops it is the bad calibration file."""
    r = specq(
        "-q", "quantize", toy_target, "--calib", unread_calib, "--out", tmp_path / "q", "--method", "gptq",
        "--for", "plain", "--group-size", "-1", "--no-turbomind-check",
    )  # fmt: skip
    assert_one_line(r, 2, "not UTF-8")


# ------------------------------------------------------------------------------------ huge calibration text


def _one_line_jsonl(path: Path, mb: int) -> Path:
    line = "def f(x):\n    return x + 1\n"
    path.write_text(json.dumps({"text": line * (mb * 2**20 // len(line))}) + "\n")
    return path


def _one_line_txt(path: Path, mb: int) -> Path:
    path.write_text("word " * (mb * 2**20 // 5))
    return path


def _one_huge_among_many(path: Path, mb: int) -> Path:
    rows = [{"text": f"def g{i}(y):\n    return y * {i}\n"} for i in range(50)]
    rows.insert(7, {"text": "x = 1\n" * (mb * 2**20 // 6)})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize(
    ("make", "name"),
    [(_one_line_jsonl, "c.jsonl"), (_one_line_txt, "c.txt"), (_one_huge_among_many, "many.jsonl")],
    ids=["one 50 MB jsonl line", "one 50 MB text line", "one huge text among many"],
)
def test_huge_calibration_text_is_cut_with_a_note(make, name, toy_target, tmp_path):
    from specq.pipeline.calibration import load_calibration

    path = make(tmp_path / name, 50 if "many" not in name else 8)
    notes: list[str] = []
    calib = load_calibration(
        str(path), toy_target, samples=4, seqlen=64, heldout_samples=1, progress=notes.append
    )
    limit = max(2**16, 8 * 5 * 64)
    assert any(f"cut to their first {limit:,}" in n for n in notes)
    assert any(f"cut to their first {limit}" in n for n in calib.report.notes)
    assert calib.report.samples == 4 and all(len(s) == 64 for s in calib.samples)
    assert max(map(len, calib.texts)) <= limit


def test_calibration_line_over_the_limit_is_refused(toy_target, tmp_path, monkeypatch):
    import specq.pipeline.calibration as calibration
    from specq.pipeline.errors import InputError

    monkeypatch.setattr(calibration, "MAX_LINE_BYTES", 1 << 16)  # the real limit is 256 MiB
    path = _one_line_jsonl(tmp_path / "c.jsonl", 1)
    with pytest.raises(
        InputError, match=r"c.jsonl:1: a line longer than 0.0625 MiB; split the text into rows"
    ):
        calibration.load_calibration(str(path), toy_target, samples=2, seqlen=64)


@pytest.mark.parametrize("host", ["bad host", "256.1.1.1", "nosuch.invalid", "8.8.8.8"])
def test_serve_host_that_is_not_this_machines(host, specq, toy_target, tmp_path):
    r = specq("serve", toy_target, "--engine", "embedded", "--host", host, "--run-dir", tmp_path / "run")
    assert_one_line(r, 2, f"cannot listen on {host}", "--host")
    assert not (tmp_path / "run").exists()
