"""specq's mirror of hopper/setup.py's source enumeration against the real setup.py, read from the
flash-attention tarball the project keeps beside the checkout (../shared/fa3, as on CI and the GPU
machine). The enumeration block of setup.py (from `DTYPE_FWD_SM80 =` to the scheduler source) is executed
with the DISABLE_* variables a build would set; the rest of setup.py needs torch and CUDA and is not run."""

from __future__ import annotations

import itertools
import tarfile
import textwrap
import types
from pathlib import Path

import pytest

from specq.pipeline.fa3.kernels import FLAG_NAMES, KernelSet, setup_py_sources

TARBALL = Path(__file__).resolve().parents[3].parent / "shared" / "fa3" / "flash-attention-hopper-src.tar.xz"
pytestmark = pytest.mark.skipif(
    not TARBALL.is_file(), reason=f"needs the flash-attention tarball at {TARBALL}"
)


@pytest.fixture(scope="module")
def enumerate_sources():
    with tarfile.open(TARBALL) as tar:
        member = tar.extractfile("flash-attention/hopper/setup.py")
        assert member is not None
        text = member.read().decode()
    start = text.index('    DTYPE_FWD_SM80 = ["bf16"]')
    end = text.index('    sources += ["flash_prepare_scheduler.cu"]\n') + len(
        '    sources += ["flash_prepare_scheduler.cu"]\n'
    )
    block = textwrap.dedent(text[start:end])
    from packaging.version import parse

    def run(disabled: set[str], torch_version: str) -> list[str]:
        names = {f"DISABLE_{n}": n in disabled for n in FLAG_NAMES if n != "SM80"}
        names["DISABLE_SM8x"] = "SM80" in disabled
        scope = dict(
            names, itertools=itertools, parse=parse, torch=types.SimpleNamespace(__version__=torch_version)
        )
        exec(block, scope)  # setup.py's own enumeration, verbatim
        return list(scope["sources"])

    return run


CASES = [
    KernelSet(arch="sm90", hdims=(64,), dtypes=("bf16", "fp16")),  # the README's measured build
    KernelSet(arch="sm90", hdims=(64,), dtypes=("bf16",)),
    KernelSet(arch="sm80", hdims=(64, 256), dtypes=("bf16", "fp16")),  # an RTX 3090 serving Qwen3.5
    KernelSet(arch="sm90", hdims=(128, 256), dtypes=("bf16",), local=True, softcap=True),
    KernelSet(arch="sm80", hdims=(96, 192), dtypes=("bf16", "fp16"), softcap=True),
]


@pytest.mark.parametrize(
    "ks", CASES, ids=lambda k: f"{k.arch}-{'_'.join(map(str, k.hdims))}-{'+'.join(k.dtypes)}"
)
def test_derived_flags_give_setup_pys_sources(enumerate_sources, ks: KernelSet) -> None:
    for torch_version in ("2.13.0", "2.8.0"):
        assert setup_py_sources(ks.disabled(), torch_version) == enumerate_sources(
            set(ks.disabled()), torch_version
        )


@pytest.mark.parametrize("disabled", [set(), {"BACKWARD"}, {"FP8", "SPLIT"}, {"PAGEDKV", "PACKGQA", "SM80"}])
def test_other_flag_combinations(enumerate_sources, disabled: set[str]) -> None:
    assert setup_py_sources(disabled, "2.13.0") == enumerate_sources(disabled, "2.13.0")


def test_every_source_of_a_full_build_is_in_the_checkout() -> None:
    with tarfile.open(TARBALL) as tar:
        names = {n.removeprefix("flash-attention/hopper/") for n in tar.getnames()}
    missing = [s for s in setup_py_sources([], "2.13.0") if s not in names]
    assert missing == []
