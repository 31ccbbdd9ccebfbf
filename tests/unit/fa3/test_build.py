"""The build machinery that runs without CUDA: staging the checkout copy, the supervised subprocess and its
ninja progress (a real child process printing ninja's lines), the atomic install into a site-packages
directory, and job sizing. The compile itself needs nvcc and a CUDA torch: the GPU machine runs it."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from specq.pipeline.errors import InputError, ProcessFailed
from specq.pipeline.fa3.build import BUILD_RECORD, _run_build, _stage, install
from specq.pipeline.fa3.installed import read_config
from specq.pipeline.fa3.plan import Fa3Request, make_plan, size_jobs
from tests.fa3files import README_BUILD, fake_checkout, write_fa3_config

NINJA = """
import sys
print("running build_ext")
for i in range(1, 5):
    src = f"/tmp/x/instantiations/flash_fwd_hdim64_bf16_{i}_sm90.cu"
    print(f"[{i}/4] /usr/local/cuda/bin/nvcc -c {src} -o x.o")
print("warning: something harmless", file=sys.stderr)
sys.exit(int(sys.argv[1]))
"""


def test_ninja_lines_become_progress(tmp_path: Path) -> None:
    seen: list[str] = []
    done = _run_build(
        [sys.executable, "-c", NINJA, "0"], tmp_path, {}, tmp_path / "b.log", 4, time.monotonic(), seen.append
    )
    assert done == 4
    assert [s.split(" (")[0] for s in seen] == [
        f"compiled {i}/4 flash_fwd_hdim64_bf16_{i}_sm90.cu" for i in range(1, 5)
    ]
    assert "something harmless" in (tmp_path / "b.log").read_text()  # stderr is logged too


def test_a_failed_build_names_its_error_and_log(tmp_path: Path) -> None:
    script = NINJA.replace('"warning: something harmless"', '"error: identifier cute::foo is undefined"')
    with pytest.raises(ProcessFailed, match=r"FA3 build failed \(exit 3\): error: identifier cute::foo") as e:
        _run_build(
            [sys.executable, "-c", script, "3"],
            tmp_path,
            {},
            tmp_path / "b.log",
            4,
            time.monotonic(),
            lambda m: None,
        )
    assert e.value.exit_code == 5 and str(tmp_path / "b.log") in str(e.value)


def test_stage_copies_what_setup_py_needs(tmp_path: Path) -> None:
    src = fake_checkout(tmp_path / "fa", readme=False)
    (src / "hopper" / "build").mkdir()
    (src / "hopper" / "flash_attn_3").mkdir()
    (src / "hopper" / "flash_attn_3" / "_C.abi3.so").write_bytes(b"old")
    plan = make_plan(Fa3Request(source=str(src), head_dims=(64,), arch="sm90"))
    hopper = _stage(plan, tmp_path / "work")
    assert (hopper / "setup.py").is_file() and (hopper.parent / "README.md").is_file()
    assert not (hopper / "build").exists() and not (hopper / "flash_attn_3" / "_C.abi3.so").exists()
    assert (hopper.parent / "csrc").is_symlink()
    assert not (src / "README.md").exists()  # the user's checkout is left alone


def _built(tmp_path: Path, marker: bytes) -> Path:
    hopper = tmp_path / "hopper"
    (hopper / "flash_attn_3").mkdir(parents=True)
    (hopper / "flash_attn_3" / "__init__.py").write_text("")
    (hopper / "flash_attn_3" / "_C.abi3.so").write_bytes(marker)
    (hopper / "flash_attn_interface.py").write_text("# interface\n")
    write_fa3_config(hopper, README_BUILD)
    return hopper


def test_install_places_the_three_entries_and_replaces_an_old_build(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    site.mkdir()
    placed = install(_built(tmp_path / "a", b"first"), site, json.dumps({"source": "/src/a"}))
    assert sorted(p.name for p in placed) == [
        "flash_attn_3",
        "flash_attn_config.py",
        "flash_attn_interface.py",
    ]
    placed = install(_built(tmp_path / "b", b"second"), site, json.dumps({"source": "/src/b"}))
    assert (site / "flash_attn_3" / "_C.abi3.so").read_bytes() == b"second"
    assert json.loads((site / "flash_attn_3" / BUILD_RECORD).read_text())["source"] == "/src/b"
    assert read_config(site / "flash_attn_config.py")["build_flags"]["FLASHATTENTION_DISABLE_HDIM128"] is True
    assert sorted(p.name for p in site.iterdir()) == [
        "flash_attn_3",
        "flash_attn_config.py",
        "flash_attn_interface.py",
    ]


def test_jobs_fit_cores_and_memory() -> None:
    assert size_jobs(files=6, cores=16, memory_gib=128) == 6  # no more jobs than files
    assert size_jobs(files=300, cores=16, memory_gib=128) == 16  # the H200 machine: cores bound
    assert size_jobs(files=300, cores=64, memory_gib=30) == 7  # memory bound: 4 GiB per nvcc job
    assert size_jobs(files=300, cores=2, memory_gib=2) == 1
    assert size_jobs(files=300, cores=2, memory_gib=2, jobs=5) == 5
    with pytest.raises(InputError):
        size_jobs(files=3, cores=2, memory_gib=8, jobs=0)
