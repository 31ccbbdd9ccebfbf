"""benchmarks/scenarios/w4a16_kernel.py `--against FILE`: another revision of the kernel module, loaded from a
file and checked bitwise against the installed one at the configuration specq runs. The timing runs on a GPU
(docs/w4a16.md); here the loading and the bitwise check run under Triton's interpreter, in a child process
(the interpreter is chosen when Triton is imported)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specq.pipeline.kernels import w4a16 as W

ROOT = Path(__file__).resolve().parents[3]
CHILD = """
import json, sys, torch
from benchmarks.scenarios import w4a16_kernel as B
torch.manual_seed(0)
out = {}
for path in sys.argv[1:]:
    out[path] = B.against_checks(B.load_revision(path), 64, 256, torch.bfloat16, device="cpu")
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def checked(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path, Path]:
    d = tmp_path_factory.mktemp("revisions")
    same = d / "same.py"
    same.write_text(Path(W.__file__).read_text(encoding="utf-8"), encoding="utf-8")
    other = d / "other.py"  # a revision whose dequantization is off by one: other bits
    text = same.read_text(encoding="utf-8")
    line = "lo = ((words >> SHIFT) & 0xF) - z"
    assert line in text
    other.write_text(text.replace(line, line + " + 1"), encoding="utf-8")
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(same), str(other)],
        env=env, capture_output=True, text=True, timeout=600, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), same, other


def test_the_same_revision_gives_the_same_bits_at_every_row_count(checked) -> None:
    result, same, _ = checked
    assert result[str(same)]["bitwise_equal"]
    assert set(result[str(same)]["rows"]) == {"1", "2", "4", "8", "16"}


def test_a_revision_that_computes_other_values_is_reported_unequal(checked) -> None:
    result, _, other = checked
    assert not result[str(other)]["bitwise_equal"]
    assert not any(result[str(other)]["rows"].values())


def test_a_file_that_is_not_the_kernel_module_is_refused(tmp_path: Path) -> None:
    from benchmarks.scenarios import w4a16_kernel as B

    f = tmp_path / "x.py"
    f.write_text("Config = 1\n")
    with pytest.raises(ValueError, match="not a revision of specq's W4A16 kernel module"):
        B.load_revision(f)
