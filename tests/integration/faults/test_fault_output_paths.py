"""Output paths the OS refuses, for reasons beyond permissions: a directory that takes no new files (/proc,
/sys), a device, a pipe, a directory where a file goes. Every OSError of an output path is one line naming
the path the user gave (exit 2; 4 for a full device), never the temporary sibling specq writes first and
never an unexpected error; what is not a regular file is written in place, never renamed over (as root, a
rename would have put a regular file where a device node was)."""

from __future__ import annotations

import gzip
import os
import stat
import threading
from pathlib import Path

import pytest

from .conftest import assert_one_line, run_specq

pytestmark = pytest.mark.integration


def _full_device(tmp_path: Path) -> Path:
    """A private node of /dev/full (character device 1, 7): writes fail with ENOSPC. Needs root."""
    if os.geteuid() != 0:
        pytest.skip("making a device node needs root")
    node = tmp_path / "full"
    os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 7))
    return node


@pytest.mark.parametrize("where", ["/proc/specq-prompts.jsonl", "/proc/self/specq-prompts.jsonl"])
def test_prompts_into_a_directory_that_takes_no_files(specq, where):
    r = specq("toy", "prompts", where, "--count", "2")
    assert_one_line(r, 2, where, "cannot be written", "use another path")


def test_prompts_under_sys(specq):
    r = specq("toy", "prompts", "/sys/specq-prompts.jsonl", "--count", "2")
    assert_one_line(r, 2, "/sys/specq-prompts.jsonl")


def test_prompts_onto_a_full_device_is_exit_4_and_the_node_stays(specq, tmp_path):
    node = _full_device(tmp_path)
    r = specq("toy", "prompts", node, "--count", "2")
    assert_one_line(r, 4, str(node), "no space left")
    assert stat.S_ISCHR(node.lstat().st_mode)  # still the device, not a regular file renamed over it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["full"]  # no temporary sibling left


def test_prompts_into_a_fifo_are_written_through_it(specq, tmp_path):
    fifo = tmp_path / "prompts.fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    r = specq("toy", "prompts", fifo, "--count", "3")
    reader.join(timeout=60)
    assert r.code == 0, r.err
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    assert len(got[0].decode().splitlines()) == 3


def test_prompts_onto_a_directory(specq, tmp_path):
    r = specq("toy", "prompts", tmp_path, "--count", "2")
    assert_one_line(r, 2, str(tmp_path), "is a directory", "name a file")


def test_prompts_through_a_dangling_link_write_its_target(specq, tmp_path):
    link, target = tmp_path / "link.jsonl", tmp_path / "target.jsonl"
    link.symlink_to(target)
    r = specq("toy", "prompts", link, "--count", "2")
    assert r.code == 0, r.err
    assert link.is_symlink() and len(target.read_text().splitlines()) == 2


def test_a_report_rendered_onto_a_full_device(tmp_path):
    """`report show` to stdout on a full device: the data path's ENOSPC is exit 4, one line."""
    node = _full_device(tmp_path)
    fixture = Path(__file__).parents[2] / "fixtures" / "bench-reports" / "h200-awq-dflash-1.1.json.gz"
    report = tmp_path / "report.json"
    report.write_bytes(gzip.decompress(fixture.read_bytes()))
    with open(node, "w") as full:
        r = run_specq("report", "show", report, "--format", "csv", cwd=tmp_path, stdout=full.fileno())
    assert_one_line(r, 4, "no space left")


@pytest.mark.parametrize(
    "command",
    ["toy build", "convert --dtype", "twin", "draft train", "quantize", "bench"],
)
def test_out_in_a_directory_that_takes_no_files(command, specq, toy_target, toy_draft, calib):
    twin_config = Path(__file__).parents[2] / "fixtures" / "twin" / "qwen3_5-27b-config.json"
    out = "/proc/specq-out"
    args = {
        "toy build": ["toy", "build", out],
        "convert --dtype": ["convert", toy_draft, "--dtype", "float16", "--out", out],
        "twin": ["twin", twin_config, "--out", out, "--device", "cpu"],
        "draft train": ["draft", "train", toy_target, "--out", out],
        "quantize": ["quantize", toy_target, "--calib", calib, "--out", out, "--method", "gptq"],
        "bench": ["bench", toy_target, "--engine", "embedded", "--draft-tokens", "0", "--out", out],
    }[command]
    r = specq("-q", *args)
    assert_one_line(r, 2, out, "/proc")
