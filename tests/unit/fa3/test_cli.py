"""`specq fa3 build` from the command line: the dry-run's exact environment and command, `--json`, and every
refusal's exit code and one-line message. The checkout is a real directory layout; nvcc is a real script
where a version is needed; a GPU (NVML) is simulated only where this machine cannot have one."""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

import pytest

from specq.pipeline import hardware
from specq.pipeline.hardware import GpuInfo
from tests.fa3files import QWEN35_27B, fake_checkout, toy_configs, write_config

pytest.importorskip("transformers")

H200 = GpuInfo(index=0, name="NVIDIA H200", memory_total_bytes=141 * 2**30, compute_capability="9.0")
RTX3090 = GpuInfo(
    index=0, name="NVIDIA GeForce RTX 3090", memory_total_bytes=24 * 2**30, compute_capability="8.6"
)
T4 = GpuInfo(index=0, name="Tesla T4", memory_total_bytes=16 * 2**30, compute_capability="7.5")


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    return fake_checkout(tmp_path / "flash-attention")


@pytest.fixture
def models(tmp_path: Path) -> tuple[Path, Path]:
    target, _, dflash = toy_configs(tmp_path / "toy")
    return target, dflash


def _one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("specq: error:")]
    assert len(lines) == 1, err
    return lines[0]


def fake_nvcc(tmp_path: Path, release: str) -> Path:
    """A CUDA home whose bin/nvcc is a script reporting `release` the way nvcc -V does."""
    home = tmp_path / f"cuda-{release}"
    (home / "bin").mkdir(parents=True)
    nvcc = home / "bin" / "nvcc"
    nvcc.write_text(f"#!/bin/sh\necho 'Cuda compilation tools, release {release}, V{release}.1'\n")
    nvcc.chmod(0o755)
    return home


def test_dry_run_prints_the_exact_env_and_command(cli, checkout: Path, models: tuple[Path, Path]) -> None:
    code, out, err = cli(
        "fa3", "build", "--source", str(checkout), *map(str, models), "--arch", "sm90", "--dry-run"
    )
    assert code == 0, err
    hopper = (checkout / "hopper").resolve()
    assert f"cd {hopper}" in out
    cmd = next(line for line in out.splitlines() if line.startswith("env "))
    env = dict(w.split("=", 1) for w in shlex.split(cmd.rstrip(" \\"))[1:])
    assert env["FLASH_ATTENTION_DISABLE_FP16"] == "TRUE"  # bf16 toy pair
    assert env["FLASH_ATTENTION_DISABLE_HDIM128"] == "TRUE" and "FLASH_ATTENTION_DISABLE_HDIM64" not in env
    assert env["FLASH_ATTENTION_DISABLE_SM80"] == "TRUE" and env["FLASH_ATTENTION_OFFLINE_BUILD"] == "TRUE"
    assert "FLASH_ATTENTION_DISABLE_PAGEDKV" not in env and "FLASH_ATTENTION_DISABLE_VARLEN" not in env
    assert int(env["MAX_JOBS"]) >= 1 and int(env["NVCC_THREADS"]) >= 1
    assert "setup.py build_ext --inplace" in out
    assert f"export PYTHONPATH={hopper}:$PYTHONPATH" in out
    assert "2 kernel files" in out  # hdim64 × bf16 × {paged, not paged}
    assert f"target {models[0]}" in out and f"draft {models[1]}" in out


def test_dry_run_json_for_qwen35_on_an_rtx3090(cli, checkout: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(hardware, "list_gpus", lambda: [RTX3090])  # simulated: no GPU here
    q35 = write_config(tmp_path / "q35", QWEN35_27B)
    code, out, err = cli(
        "fa3",
        "build",
        "--source",
        str(checkout / "hopper"),
        str(q35),
        "--dtype",
        "fp16",
        "--dry-run",
        "--json",
    )
    assert code == 0, err
    plan = json.loads(out)
    assert plan["arch"] == "sm80" and "RTX 3090" in plan["arch_reason"]
    assert plan["kernels"]["hdims"] == [256] and plan["kernels"]["dtypes"] == ["bf16", "fp16"]
    assert "FLASH_ATTENTION_DISABLE_SM80" not in plan["env"]
    kernels = [s for s in plan["sources"] if s.startswith("instantiations/")]
    assert len(kernels) == 8  # hdim256 × {bf16, fp16} × {paged, not} × {sm80, sm90}
    assert plan["checkout"]["root"] == str(checkout.resolve())
    assert isinstance(plan["problems"], list) and plan["shell"].startswith("cd ")


def test_missing_readme_is_in_the_shell_lines(cli, tmp_path: Path, models) -> None:
    src = fake_checkout(tmp_path / "fa", readme=False)
    code, out, _ = cli("fa3", "build", "--source", str(src), str(models[0]), "--arch", "sm90", "--dry-run")
    assert code == 0 and "touch ../README.md" in out


@pytest.mark.parametrize(
    "layout, message",
    [
        (lambda p: p.mkdir(), "not a flash-attention checkout"),
        (lambda p: None, "not a directory"),
        (
            lambda p: (fake_checkout(p), (p / "hopper" / "setup.py").write_text("name='flash_attn'")),
            "does not build flash_attn_3",
        ),
        (lambda p: (fake_checkout(p), (p / "csrc/cutlass/include/cutlass").rmdir()), "CUTLASS is missing"),
    ],
)
def test_not_a_checkout_exits_2(cli, tmp_path: Path, models, layout, message: str) -> None:
    src = tmp_path / "src"
    layout(src)
    code, _, err = cli("fa3", "build", "--source", str(src), str(models[0]), "--arch", "sm90", "--dry-run")
    assert code == 2 and message in _one_error_line(err)


def test_nothing_to_build_exits_2(cli, checkout: Path) -> None:
    code, _, err = cli("fa3", "build", "--source", str(checkout), "--arch", "sm90", "--dry-run")
    assert code == 2 and "nothing to build for" in _one_error_line(err)


def test_auto_arch_without_a_gpu_exits_4(cli, checkout: Path, models, monkeypatch) -> None:
    monkeypatch.setattr(hardware, "list_gpus", lambda: [])
    code, _, err = cli("fa3", "build", "--source", str(checkout), str(models[0]), "--dry-run")
    assert code == 4 and "pass --arch sm90 (Hopper) or --arch sm80" in _one_error_line(err)


def test_gpu_below_sm80_exits_4(cli, checkout: Path, models, monkeypatch) -> None:
    monkeypatch.setattr(hardware, "list_gpus", lambda: [T4])  # simulated: no GPU here
    code, _, err = cli("fa3", "build", "--source", str(checkout), str(models[0]))
    assert code == 4 and "compute capability 7.5" in _one_error_line(err)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "CUDA_PATH")}
    return env | extra


def _build_sm90(cli, checkout: Path, model: Path, *extra: str, env: dict[str, str] | None = None):
    """`specq fa3 build --source CHECKOUT MODEL --arch sm90 EXTRA…`: (code, stdout, stderr)."""
    return cli("fa3", "build", "--source", str(checkout), str(model), "--arch", "sm90", *extra, env=env)


def test_no_nvcc_exits_4(cli, checkout: Path, models, tmp_path: Path) -> None:
    empty = tmp_path / "no-cuda"
    empty.mkdir()
    code, _, err = _build_sm90(cli, checkout, models[0], env=_env(CUDA_HOME=str(empty), PATH=str(tmp_path)))
    line = _one_error_line(err)
    assert code == 4 and line.startswith("specq: error: no nvcc") and "CUDA toolkit 12.3" in line


def test_no_nvcc_on_path_exits_4(cli, checkout: Path, models, tmp_path: Path) -> None:
    """Nothing on PATH, no CUDA_HOME: /usr/local/cuda is torch's last resort, so only where it is absent."""
    if Path("/usr/local/cuda").is_dir():
        pytest.skip("/usr/local/cuda exists here: torch (and specq) would use its nvcc")
    code, _, err = _build_sm90(cli, checkout, models[0], env=_env(PATH=str(tmp_path)))
    assert code == 4 and "nvcc is not on PATH" in _one_error_line(err)


def test_cuda_older_than_12_3_exits_4(cli, checkout: Path, models, tmp_path: Path) -> None:
    home = fake_nvcc(tmp_path, "12.1")
    code, _, err = _build_sm90(cli, checkout, models[0], env=_env(CUDA_HOME=str(home)))
    assert code == 4 and "CUDA 12.1: FlashAttention-3 needs CUDA 12.3 or newer" in _one_error_line(err)


def test_torch_without_cuda_exits_4(cli, checkout: Path, models, tmp_path: Path) -> None:
    import torch

    if torch.version.cuda is not None:
        pytest.skip("this torch has CUDA")
    home = fake_nvcc(tmp_path, "12.8")
    code, _, err = _build_sm90(cli, checkout, models[0], env=_env(CUDA_HOME=str(home)))
    assert code == 4 and "has no CUDA" in _one_error_line(err)


def test_torch_that_does_not_import_exits_4(cli, checkout: Path, models, tmp_path: Path, monkeypatch) -> None:
    """A torch whose CUDA libraries are missing (seen: a CUDA wheel without its nvidia-* packages raises
    `ImportError: libcudnn.so.9`) is named as the environment problem, not reported as a bug."""
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError
    home = fake_nvcc(tmp_path, "12.8")
    code, _, err = _build_sm90(cli, checkout, models[0], env=_env(CUDA_HOME=str(home)))
    assert code == 4 and "does not import (ModuleNotFoundError" in _one_error_line(err)


def test_dry_run_notes_what_a_build_would_stop_on(cli, checkout: Path, models, tmp_path: Path) -> None:
    empty = tmp_path / "no-cuda"
    empty.mkdir()
    code, out, err = _build_sm90(cli, checkout, models[0], "--dry-run", env=_env(CUDA_HOME=str(empty)))
    assert code == 0 and "a build here would stop: no nvcc" in err and "setup.py build_ext" in out


def test_no_check_without_out_exits_2(cli, checkout: Path, models) -> None:
    code, _, err = cli(
        "fa3", "build", "--source", str(checkout), str(models[0]), "--arch", "sm90", "--no-check"
    )
    assert code == 2 and "pass --out DIR" in _one_error_line(err)


def test_bad_jobs_exits_2(cli, checkout: Path, models) -> None:
    code, _, err = _build_sm90(cli, checkout, models[0], "--jobs", "0", "--dry-run")
    assert code == 2 and "--jobs 0" in _one_error_line(err)
