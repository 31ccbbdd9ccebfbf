"""`specq twin` against hostile values and a killed build: option values no build can use (an infinite or
not-a-number shard size, a device torch does not know) are refused in one line before any work; a config of
a million layers is sized from its layer count and refused for its size without listing its tensors; a
build killed with SIGKILL leaves its temporary directory, and the next run (of twin or of any other writer)
removes it and says so, while a live writer's temporary is left alone."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from .conftest import SPECQ, assert_one_line

pytestmark = pytest.mark.integration
QWEN3 = {
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
    "vocab_size": 640, "max_position_embeddings": 2048, "tie_word_embeddings": False, "eos_token_id": 600,
    "bos_token_id": 601, "rms_norm_eps": 1e-6, "rope_theta": 1e6,
}  # fmt: skip


def _config(tmp_path: Path, **changes: object) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**QWEN3, **changes}))
    return path


@pytest.mark.parametrize(
    ("value", "needle"),
    [("inf", "less than or equal to 1024"), ("nan", "less than or equal to 1024"),
     ("-inf", "greater than or equal to 0.001"), ("2000", "less than or equal to 1024"),
     ("0", "greater than or equal to 0.001")],
)  # fmt: skip
def test_shard_sizes_no_build_can_use(value, needle, specq, tmp_path):
    r = specq("twin", _config(tmp_path), "--out", tmp_path / "out", "--shard-gib", value, "--device", "cpu")
    assert_one_line(r, 2, "--shard-gib", needle)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("device", ["tpu", "mps", "cuda:x", "CPU"])
def test_a_device_specq_does_not_run_on(device, specq, tmp_path):
    r = specq("twin", _config(tmp_path), "--out", tmp_path / "out", "--device", device)
    assert_one_line(r, 2, f"--device {device}", "use auto, cpu, cuda or cuda:N")
    assert not (tmp_path / "out").exists()


def test_a_million_layers_are_sized_from_the_config_and_refused_for_their_size(specq, tmp_path):
    """1e6 layers of this shape are about 100 GiB: more than any test disk holds, so the space check refuses
    it (exit 4) from the layer count alone; listing the tensors first took 28 s and 3.1 GB."""
    config = _config(tmp_path, num_hidden_layers=10**6, hidden_size=256, intermediate_size=512)
    r = specq("twin", config, "--out", tmp_path / "out", "--device", "cpu")
    assert_one_line(r, 4, "MiB free", "--out", str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def _stale(tmp_path: Path, name: str, pid: int) -> Path:
    """A temporary of specq's naming whose process (`pid`) is gone, with some bytes in it."""
    d = tmp_path / f".{name}.{pid}.abcd1234.partial"
    (d / "target").mkdir(parents=True)
    (d / "target" / "model-00001-of-00002.safetensors").write_bytes(b"\0" * 4096)
    return d


def _dead_pid() -> int:
    """A PID no process has: above the kernel's largest (a reaped child's could be reused meanwhile)."""
    return int(Path("/proc/sys/kernel/pid_max").read_text()) + 1


def test_the_next_twin_removes_what_a_killed_build_left_and_says_so(specq, tmp_path):
    stale = _stale(tmp_path, "out", _dead_pid())
    r = specq("twin", _config(tmp_path), "--out", tmp_path / "out", "--device", "cpu")
    assert r.code == 0, r.err
    assert not stale.exists() and (tmp_path / "out" / "target" / "config.json").is_file()
    assert f"removed the temporary an interrupted run left beside {tmp_path / 'out'}: {stale.name}" in r.err


def test_a_live_writers_temporary_is_left_alone(specq, tmp_path):
    """Held under its writer's lock (as every specq writer holds its own), so not abandoned."""
    held = _stale(tmp_path, "out", _dead_pid())
    fd = os.open(held, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        r = specq("twin", _config(tmp_path), "--out", tmp_path / "out", "--device", "cpu")
        assert r.code == 0, r.err
        assert held.exists() and "removed" not in r.err
    finally:
        os.close(fd)
    held.rename(tmp_path / "kept")  # not a partial artifact of this test: it stood for another writer's


def test_any_writer_removes_an_abandoned_temporary_of_its_destination(specq, toy_draft, tmp_path):
    stale = _stale(tmp_path, "fp16", _dead_pid())
    r = specq("convert", toy_draft, "--dtype", "float16", "--out", tmp_path / "fp16")
    assert r.code == 0, r.err
    assert not stale.exists() and "removed the temporary an interrupted run left" in r.err


def test_a_twin_killed_mid_build_is_cleaned_by_the_next_run(specq, tmp_path):
    """SIGKILL while the shards are written (no handler runs): its temporary stays; the next build of the
    same --out removes it, names it and completes."""
    # about 1.3 GiB in 10 MiB shards, far more than is written before the first shard is seen and the kill
    # lands, so the build cannot finish first however the machine schedules the two processes
    big = tmp_path / "big"
    big.mkdir()
    shape = dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=8, vocab_size=32000)
    config = _config(big, **shape, head_dim=128, num_attention_heads=16, num_key_value_heads=8)
    out = tmp_path / "out"
    args = ["twin", str(config), "--out", str(out), "--device", "cpu", "--shard-gib", "0.01"]
    p = subprocess.Popen([*SPECQ, *args], cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300  # a bound on waiting, not a measurement
    partial: list[Path] = []
    while time.monotonic() < deadline and p.poll() is None:  # until its first shard is on disk
        partial = [d for d in tmp_path.glob(".out.*.partial") if list(d.glob("target/*.safetensors"))]
        if partial:
            break
        time.sleep(0.05)
    assert partial and p.poll() is None, "the build finished or never wrote a shard"
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    assert partial[0].exists()  # what a killed build leaves
    # the next build of the same --out (a small model this time: the leftover is what matters)
    r = specq("twin", _config(tmp_path), "--out", out, "--device", "cpu")
    assert r.code == 0, r.err
    assert not partial[0].exists() and partial[0].name in r.err
    assert (out / "twin_report.json").is_file()
