"""Marlin, the maintained W4A16 kernel of vLLM that gptqmodel ships as CUDA sources, built for the one case
specq's benchmark compares it in: bf16 activations, 4-bit AWQ weights with zero points (`uint4`), group
size 128, at most 16 rows. Its sources come from a gptqmodel source distribution (`pip download --no-deps
--no-binary :all: gptqmodel`; 7.7.0 was measured), compiled here with torch's extension builder; nothing of
it is part of specq.

gptqmodel compiles every Marlin variant (weight types, group sizes, tile shapes up to 64 rows: hundreds of
template instances, tens of minutes). This build keeps the kernel's source as it is and narrows only its
dispatch table to the six instances that decode needs (group 128, one 16-row tile or the 8-row one, its three
small-batch tile shapes), so the build takes a minute or two on a 16-core machine. Used by `w4a16-kernel
--kernels ...,marlin --marlin-sdist FILE`."""

from __future__ import annotations

import re
import tarfile
from pathlib import Path
from typing import Any

import torch

from specq.pipeline.kernels import w4a16 as W

# (threads, n blocks, k blocks) of Marlin's small-batch tiles; each with its 8-row variant (m_block_size_8)
SMALL_TILES = ((256, 8, 8), (128, 8, 4), (128, 4, 8))
GROUP_BLOCKS = 8  # group 128 = 16 * 8
INSTANCE = (
    "template __global__ void Marlin<nv_bfloat16, vllm::kU4.id(), vllm::kBFloat16.id(), {t}, 1, {n}, {k}, "
    "{m8}, pipe_stages, {g}, false>( MARLIN_KERNEL_PARAMS );"
)
GET_IF = "    _GET_IF(vllm::kU4, 1, {n}, {k}, {m8}, pipe_stages, {g}, {t}, false)"
# Marlin's permutation of scales and zero points (vLLM's `get_scale_perms`); its zero points' nibble
# interleave (`marlin_zero_points`: 0, 2, 4, 6, 1, 3, 5, 7) is AWQ's order, `w4a16.AWQ_ORDER`
SCALE_PERM = [i + 8 * j for i in range(8) for j in range(8)]


def _uint4_id() -> int:
    """vLLM's ScalarType id of uint4: exponent 0, mantissa 4, unsigned, bias 0, NaN repr IEEE 754 (1)."""
    fields = ((0, 8), (4, 8), (0, 1), (0, 32), (0, 1), (1, 8))
    val, off = 0, 0
    for member, width in fields:
        val |= (member & ((1 << width) - 1)) << off
        off += width
    return val


def sources(sdist: Path, root: Path) -> list[Path]:
    """Extracts gptqmodel's Marlin sources from `sdist` into `root`, narrows the dispatch and writes the six
    template instances; returns the files to compile."""
    with tarfile.open(sdist) as tar:
        members = [m for m in tar.getmembers() if "/gptqmodel_ext/marlin/" in m.name and m.isfile()]
        if not members:
            raise ValueError(f"{sdist}: no gptqmodel_ext/marlin/ sources in it")
        for m in members:
            rel = m.name.split("/gptqmodel_ext/marlin/", 1)[1]
            dest = root / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            f = tar.extractfile(m)
            assert f is not None
            dest.write_bytes(f.read())
    main = root / "gptq_marlin.cu"
    text = main.read_text(encoding="utf-8")
    body = re.search(
        r"(MarlinFuncPtr get_marlin_kernel\(.*?\{\n)(.*?)(\n  return kernel;\n\})", text, flags=re.S
    )
    if body is None:
        raise ValueError(f"{main}: get_marlin_kernel not found (a gptqmodel other than 7.7.0?)")
    ifs = [
        GET_IF.format(t=t, n=n, k=k, m8=m8, g=GROUP_BLOCKS)
        for t, n, k in SMALL_TILES
        for m8 in ("true", "false")
    ]
    dispatch = (
        "  int num_bits = q_type.size_bits();\n  auto kernel = MarlinDefault;\n"
        "  if (stages == pipe_stages) {\n    if (false) {\n    }\n" + "\n".join(ifs) + "\n  }"
    )
    main.write_text(text[: body.start(2)] + dispatch + text[body.end(2) :], encoding="utf-8")
    files = [root / "marlin_torch_bf16.cpp", root / "gptq_marlin_bf16.cu"]
    files += [root / "gptq_marlin_repack.cu", root / "awq_marlin_repack.cu"]
    for old in root.glob("kernel_*.cu"):
        old.unlink()
    i = 0
    for t, n, k in SMALL_TILES:
        for m8 in ("true", "false"):
            inst = root / f"kernel_specq_{i}.cu"
            inst.write_text(
                '#include "kernel.h"\n#include "marlin_template.h"\nnamespace MARLIN_NAMESPACE_NAME {\n'
                + INSTANCE.format(t=t, n=n, k=k, m8=m8, g=GROUP_BLOCKS)
                + "\n}\n",
                encoding="utf-8",
            )
            files.append(inst)
            i += 1
    return files


def build(sdist: Path, root: Path, verbose: bool = False) -> Any:
    """Builds (or loads, when built before in `root`) the narrowed extension; returns its ops namespace."""
    from torch.utils.cpp_extension import load

    root.mkdir(parents=True, exist_ok=True)
    src = root / "src"
    files = sources(sdist, src)
    flags = ["-O3", "-std=c++17", "-DENABLE_BF16"]
    load(
        name="specq_bench_marlin_bf16",
        sources=[str(f) for f in files],
        extra_include_paths=[str(src)],
        extra_cflags=flags,
        extra_cuda_cflags=[*flags, "-static-global-template-stub=false", "-lineinfo", "--threads", "4"],
        build_directory=str(root),
        is_python_module=False,
        verbose=verbose,
    )
    return torch.ops.gptqmodel_marlin_bf16


class MarlinAWQ:
    """One AWQ layer (qweight int32 [K, N/8], qzeros int32 [K/g, N/8], scales [K/g, N]) in Marlin's layout,
    as vLLM's AWQ-Marlin path converts it; `__call__(x)` is vLLM's call (fp32 reduce, no atomics)."""

    def __init__(self, ops: Any, qweight: torch.Tensor, qzeros: torch.Tensor, scales: torch.Tensor) -> None:
        self.ops = ops
        self.k, self.n = qweight.shape[0], qweight.shape[1] * 8
        groups = qzeros.shape[0]
        if self.k // groups != 16 * GROUP_BLOCKS:
            raise ValueError(f"this Marlin build takes group {16 * GROUP_BLOCKS} only")
        self.qweight = ops.awq_marlin_repack(qweight, self.k, self.n, 4)
        perm = torch.tensor(SCALE_PERM, device=scales.device)
        s = scales.to(torch.bfloat16).reshape(-1, 64)[:, perm]
        self.scales = s.reshape(groups, self.n).contiguous()
        # zero points: permuted as the scales, then packed in Marlin's nibble interleave, which is AWQ's
        z = W.unpack_awq(qzeros).reshape(-1, 64)[:, perm].reshape(groups, self.n)
        self.zeros = W.pack_awq(z).contiguous()
        sms = torch.cuda.get_device_properties(qweight.device).multi_processor_count
        self.workspace = torch.zeros(max(sms * 4, 128), dtype=torch.int32, device=qweight.device)
        self.qtype = _uint4_id()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.ops.gptq_marlin_gemm_bf16(
            x, None, self.qweight, None, self.scales, None, self.zeros, None, None, self.workspace,
            self.qtype, x.shape[0], self.n, self.k, True, False, True, False,
        )  # fmt: skip
