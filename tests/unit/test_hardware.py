"""hardware.requirement_of against real package metadata: a dist-info directory on sys.path, read by
importlib.metadata as it reads an installed lmdeploy's."""

from __future__ import annotations

import platform
import sys

import pytest

from specq.pipeline import hardware

METADATA = """\
Metadata-Version: 2.1
Name: fakedeploy
Version: 0.18.0
Requires-Dist: tilelang==0.1.9; extra == "all"
Requires-Dist: tilelang==0.1.8; sys_platform == "no-such-platform"
Requires-Dist: tilelang==0.1.11; python_version >= "3"
Requires-Dist: flash-linear-attention>=0.4.2
Requires-Dist: torch
"""


@pytest.fixture
def fakedeploy(tmp_path, monkeypatch: pytest.MonkeyPatch) -> str:
    info = tmp_path / "fakedeploy-0.18.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(METADATA)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    return "fakedeploy"


def test_requirement_of_reads_the_plain_install_pin(fakedeploy: str) -> None:
    # the extra's pin and the other platform's are skipped; the one a plain install applies is returned
    assert hardware.requirement_of(fakedeploy, "tilelang") == "==0.1.11"
    assert hardware.requirement_of(fakedeploy, "Flash_Linear_Attention") == ">=0.4.2"  # names normalised


def test_requirement_of_is_none_without_a_pin(fakedeploy: str) -> None:
    assert hardware.requirement_of(fakedeploy, "torch") is None  # required, but at any version
    assert hardware.requirement_of(fakedeploy, "numpy") is None  # not required
    assert hardware.requirement_of("no-such-dist-anywhere", "tilelang") is None  # no metadata


GPUS = [
    hardware.GpuInfo(index=i, name="NVIDIA H200", memory_total_bytes=141 * 2**30, uuid=f"GPU-{c}{c}{c}-1234")
    for i, c in enumerate("abc")
]


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        (None, [0, 1, 2]),  # unset: every GPU NVML sees
        ("", []),  # set and empty: none
        ("2,0", [2, 0]),  # CUDA's order is the variable's
        ("1, 2", [1, 2]),
        ("0,7,1", [0]),  # the list ends at the first entry that names no GPU
        ("0,0", [0]),  # a repeated GPU ends it too
        ("GPU-bbb", [1]),  # a UUID prefix
        ("GPU-", []),  # ambiguous prefix: no GPU
        ("MIG-0123", []),  # MIG instances are not counted
        ("-1", []),
    ],
)
def test_visible_gpus_follow_cuda_visible_devices(
    monkeypatch: pytest.MonkeyPatch, env: str | None, expected: list[int]
) -> None:
    monkeypatch.setattr(hardware, "list_gpus", lambda: list(GPUS))
    if env is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", env)
    assert [g.index for g in hardware.visible_gpus()] == expected


def _subnormal_product() -> float:
    import torch

    return float((torch.tensor([1e-39], dtype=torch.float32) * 1.0).item())


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="FTZ/DAZ are x86 modes")
def test_flush_denormals_zeroes_subnormals_inside_and_restores_the_mode_after() -> None:
    import torch

    assert _subnormal_product() > 0  # torch's default: subnormals kept
    with hardware.flush_denormals():
        assert _subnormal_product() == 0.0
        with hardware.flush_denormals():  # nested: the outer mode survives the inner exit
            pass
        assert _subnormal_product() == 0.0
    assert _subnormal_product() > 0

    with pytest.raises(RuntimeError), hardware.flush_denormals():
        raise RuntimeError("a failed build")
    assert _subnormal_product() > 0

    torch.set_flush_denormal(True)  # a caller that flushes already keeps flushing
    try:
        with hardware.flush_denormals():
            pass
        assert _subnormal_product() == 0.0
    finally:
        torch.set_flush_denormal(False)
