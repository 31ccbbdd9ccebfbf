"""benchmarks/scenarios/_marlin.py: Marlin's sources narrowed to the decode instances (the compile and the
timing run on a GPU machine: docs/w4a16.md). Here, on a source distribution shaped like gptqmodel's: the
dispatch keeps exactly the six instances the build compiles, and a wrong archive is refused."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from benchmarks.scenarios import _marlin as M

DISPATCH = """\
template <typename scalar_t>
MarlinFuncPtr get_marlin_kernel(const vllm::ScalarType q_type,
                                int stages) {
  int num_bits = q_type.size_bits();
  auto kernel = MarlinDefault;
  if (stages == pipe_stages) {
    if (false) {
    }
    COMMON_GET_IF(vllm::kU4, pipe_stages)
    COMMON_GET_IF(vllm::kU8, pipe_stages)
    ACT_GET_IF(vllm::kU4B8, pipe_stages)
  }

  return kernel;
}

int after_the_dispatch() { return 1; }
"""


def sdist(path: Path, files: dict[str, str]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"gptqmodel-7.7.0/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_the_dispatch_keeps_the_six_decode_instances_and_they_are_written(tmp_path: Path) -> None:
    marlin = "gptqmodel_ext/marlin/"
    archive = sdist(
        tmp_path / "g.tar.gz",
        {
            marlin + "gptq_marlin.cu": DISPATCH,
            marlin + "kernel_bf16_ku8.cu": "// every instance of kU8",
            marlin + "core/scalar_type.hpp": "// header",
            "gptqmodel/__init__.py": "",
        },
    )
    files = M.sources(archive, tmp_path / "src")
    text = (tmp_path / "src" / "gptq_marlin.cu").read_text()
    kept = [line.strip() for line in text.splitlines() if "_GET_IF(" in line]
    assert len(kept) == 6 and all(k.startswith("_GET_IF(vllm::kU4, 1,") and ", 8, " in k for k in kept)
    assert "COMMON_GET_IF" not in text and "ACT_GET_IF" not in text
    assert "return kernel;" in text and "int after_the_dispatch()" in text  # the rest of the file is kept
    assert (tmp_path / "src" / "core" / "scalar_type.hpp").exists()
    assert not (tmp_path / "src" / "kernel_bf16_ku8.cu").exists()  # gptqmodel's instance lists are dropped
    instances = sorted(f for f in files if f.name.startswith("kernel_specq_"))
    assert len(instances) == 6
    bodies = [f.read_text() for f in instances]
    for (threads, n, k), m8 in [(t, m) for t in M.SMALL_TILES for m in ("true", "false")]:
        want = f"{threads}, 1, {n}, {k}, {m8}, pipe_stages, 8, false>"
        assert sum(want in b for b in bodies) == 1, want


def test_an_archive_without_marlin_or_with_another_dispatch_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no gptqmodel_ext/marlin/"):
        M.sources(sdist(tmp_path / "a.tar.gz", {"gptqmodel/__init__.py": ""}), tmp_path / "a")
    other = sdist(tmp_path / "b.tar.gz", {"gptqmodel_ext/marlin/gptq_marlin.cu": "int main() {}\n"})
    with pytest.raises(ValueError, match="get_marlin_kernel not found"):
        M.sources(other, tmp_path / "b")


def test_uint4_is_vllm_scalar_type_id() -> None:
    # exponent 0, mantissa 4 (bits 8-15), unsigned, bias 0, NaN representation IEEE 754 (1, at bit 50)
    assert M._uint4_id() == (4 << 8) | (1 << 50)
