"""A disk that fills while `quantize` writes. The early space check passes (it is a lower bound) and the
checkpoint's write hits ENOSPC. It used to exit 1 with no message in most runs: the backend's output was
captured to a log on the same full disk, whose last flush failed before the user's stderr was restored, so
the one error line went to a closed file. Whether the log still held unflushed text when the disk filled
depended on the backend's timing, so the case is repeated: 20 quantizations in one process (imports paid
once), each judged as a user sees it, and the capture's restore checked directly on a full file system."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import _mount

pytestmark = [pytest.mark.integration, pytest.mark.slow]
REPEATS = 20

# One process, REPEATS runs of `specq quantize` through the Typer app; each prints one JSON line. A run that
# loses stderr takes the process down with it, so a missing line is a failure too.
DRIVER = r"""
import json, shutil, sys
from pathlib import Path
from typer.testing import CliRunner
from specq.cli.app import app
target, calib, disk, repeats = sys.argv[1], sys.argv[2], Path(sys.argv[3]), int(sys.argv[4])
for i in range(repeats):
    for p in disk.iterdir():
        shutil.rmtree(p) if p.is_dir() else p.unlink()
    args = ["quantize", target, "--calib", calib, "--seqlen", "32", "--samples", "2", "--no-eval",
            "--out", str(disk / "q")]
    r = CliRunner().invoke(app, args, catch_exceptions=False)
    left = sorted(p.name for p in disk.iterdir())
    print(json.dumps({"run": i, "code": r.exit_code, "err": r.stderr, "left": left}), flush=True)
"""


@pytest.fixture
def one_mib_fs() -> Iterator[Path]:
    """1 MiB: the small toy target's 4-bit estimate fits (the early check passes), its checkpoint does not."""
    yield from _mount("size=1m")


def test_quantize_onto_a_disk_that_fills_says_so_every_time(toy_pair, calib, one_mib_fs, tmp_path):
    p = subprocess.run(
        [sys.executable, "-c", DRIVER, str(toy_pair.target), str(calib), str(one_mib_fs), str(REPEATS)],
        capture_output=True, text=True, cwd=tmp_path, timeout=900,
    )  # fmt: skip
    runs = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    assert len(runs) == REPEATS, f"the driver stopped after {len(runs)} runs ({p.returncode}):\n{p.stderr}"
    out = str(one_mib_fs / "q")
    for run in runs:
        # progress lines (•) come first; the failure is one `specq: error:` line after them
        lines = [ln for ln in run["err"].splitlines() if ln.strip() and not ln.startswith("•")]
        assert run["code"] == 4, run
        assert lines == [lines[0]] and lines[0].startswith("specq: error: "), run
        assert out in lines[0] and "no space left" in lines[0] and "--out" in lines[0], run
        assert "Traceback" not in run["err"], run
        assert run["left"] == [], run  # nothing half-written: no partial checkpoint, no scratch


def test_the_backend_capture_gives_stderr_back_when_its_log_disk_is_full(tmp_path):
    """The restore itself, on a full file system: text still buffered for the log when the disk is full
    must not keep sys.stderr on the log, and the error that filled the disk is the one that propagates."""
    from specq.pipeline.quantize._capture import backend_output_to

    with contextlib.contextmanager(_mount)("size=64k") as disk:
        before = sys.stderr
        with pytest.raises(OSError) as e, backend_output_to(disk / "quantize.log"):
            sys.stderr.write("x" * 4096)  # buffered for the log, flushed only at the end
            (disk / "weights").write_bytes(b"\0" * 2**20)  # the checkpoint's write fills the disk
        assert e.value.errno == 28
        assert sys.stderr is before
