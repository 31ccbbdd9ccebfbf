"""What the machine has: GPUs through NVML (nvidia-ml-py), optional packages by import, FlashAttention-3,
and the one place a stage picks its torch device and CPU thread count. Shared by `doctor`, serve preflight,
the benchmark's report header and every stage that runs torch. Nothing here imports torch unless a function
says so."""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import importlib.util
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from .errors import EnvironmentMissing, UsageError, missing_package


class GpuInfo(BaseModel):
    index: int
    name: str
    memory_total_bytes: int
    driver: str | None = None
    uuid: str | None = None
    compute_capability: str | None = None
    memory_bus_width_bits: int | None = None
    max_memory_clock_mhz: int | None = None
    bandwidth_gbps: float | None = None  # theoretical peak from NVML's memory clock and bus width


def _nvml() -> Any | None:
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # NVMLError_LibraryNotFound / DriverNotLoaded: no NVIDIA GPU here
        return None
    return pynvml


def list_gpus() -> list[GpuInfo]:
    """Every NVIDIA GPU NVML sees; an empty list on machines without one."""
    nv = _nvml()
    if nv is None:
        return []
    gpus: list[GpuInfo] = []
    driver = _safe(lambda: _s(nv.nvmlSystemGetDriverVersion()))
    for i in range(nv.nvmlDeviceGetCount()):
        h = nv.nvmlDeviceGetHandleByIndex(i)
        uuid = _safe(lambda h=h: _s(nv.nvmlDeviceGetUUID(h)))
        cc = _safe(lambda h=h: ".".join(map(str, nv.nvmlDeviceGetCudaComputeCapability(h))))
        bus = _safe(lambda h=h: int(nv.nvmlDeviceGetMemoryBusWidth(h)))
        clock = _safe(lambda h=h: int(nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_MEM)))
        # DDR: two transfers per clock; bus width in bits.
        bw = round(clock * 1e6 * 2 * bus / 8 / 1e9, 1) if bus and clock else None
        gpus.append(
            GpuInfo(
                index=i,
                name=_s(nv.nvmlDeviceGetName(h)),
                memory_total_bytes=int(nv.nvmlDeviceGetMemoryInfo(h).total),
                driver=driver,
                uuid=uuid,
                compute_capability=cc,
                memory_bus_width_bits=bus,
                max_memory_clock_mhz=clock,
                bandwidth_gbps=bw,
            )
        )
    return gpus


def visible_gpus() -> list[GpuInfo]:
    """The GPUs a CUDA process started here may use: NVML's list filtered and ordered by
    CUDA_VISIBLE_DEVICES as CUDA reads it (indices or `GPU-` UUID prefixes, comma-separated; the list ends at
    the first entry that names no GPU; empty: none). MIG instances (`MIG-` entries) are not counted."""
    gpus = list_gpus()
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is None:
        return gpus
    visible: list[GpuInfo] = []
    for entry in (e.strip() for e in env.split(",")):
        if entry.lstrip("-").isdigit():
            i = int(entry)
            match = [gpus[i]] if 0 <= i < len(gpus) else []
        elif entry.startswith("GPU-"):
            match = [g for g in gpus if g.uuid and g.uuid.startswith(entry)]
        else:
            match = []
        if len(match) != 1 or match[0] in visible:
            break
        visible.append(match[0])
    return visible


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _safe(fn: Any) -> Any:
    try:
        return fn()
    except Exception:  # an NVML query this GPU or driver does not support
        return None


def package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def requirement_of(dist: str, package: str) -> str | None:
    """The version specifier that installed `dist`'s metadata puts on `package` in a plain install on this
    machine (extras and other platforms left out), e.g. "==0.1.11"; None when `dist` has no metadata, does
    not require `package`, or pins no version."""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    try:
        lines = importlib.metadata.requires(dist) or []
    except importlib.metadata.PackageNotFoundError:
        return None
    want = canonicalize_name(package)
    for line in lines:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if canonicalize_name(req.name) != want:
            continue
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue  # an extra's requirement, or another platform's
        return str(req.specifier) or None
    return None


def lmdeploy_version() -> str | None:
    """LMDeploy's version from its metadata, or from `lmdeploy/version.py` when it is on the path without
    metadata (a source tree on PYTHONPATH, as on the project's GPU machine)."""
    v = package_version("lmdeploy")
    if v is not None or not module_present("lmdeploy"):
        return v
    import re

    spec = importlib.util.find_spec("lmdeploy")
    origin = spec.origin if spec else None
    if origin:
        text = (Path(origin).parent / "version.py").read_text(encoding="utf-8", errors="replace")
        m = re.search(r"__version__\s*=\s*['\"]([^'\"]+)", text)
        if m:
            return m.group(1)
    return None


def module_present(module: str) -> bool:
    """True when `module` can be found, without importing it."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def try_import(module: str) -> str | None:
    """Import `module`; None when it works, else the one-line reason."""
    try:
        importlib.import_module(module)
        return None
    except Exception as e:  # ImportError, OSError from a native library, anything a module may raise
        return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}".strip()


def flash_attention_3() -> str | None:
    """None when FlashAttention-3 imports (LMDeploy's speculative decoding on CUDA needs it)."""
    return try_import("flash_attn_interface")


def cuda_usable() -> bool:
    """Whether torch sees a CUDA device (imports torch; False without it)."""
    if not module_present("torch"):
        return False
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False


def pick_device(requested: str) -> str:
    """`auto` → cuda when torch sees a CUDA device, else cpu; `cuda` (or `cuda:N`) without one is an exit-4
    error; cpu is returned as asked; anything else (`tpu`, `mps`, a typo) is a usage error, refused here
    before torch meets it."""
    if requested == "auto":
        return "cuda" if cuda_usable() else "cpu"
    if not re.fullmatch(r"cpu|cuda(:\d+)?", requested):
        raise UsageError(f"--device {requested}: not a device specq runs on; use auto, cpu, cuda or cuda:N")
    if requested.startswith("cuda") and not cuda_usable():
        raise EnvironmentMissing(f"--device {requested}: no usable CUDA GPU here; use --device cpu or auto")
    return requested


@contextlib.contextmanager
def cpu_threads(threads: int | None) -> Iterator[None]:
    """Run with `threads` torch CPU threads (None or 0: torch's current count), restoring the previous count
    afterwards. On a shared CPU, fewer threads than cores avoids OpenMP spin-waiting (the measurement is in
    docs/performance.md, "Threads on a shared CPU")."""
    try:
        import torch
    except ImportError:
        raise missing_package("torch", "ml") from None
    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _flushing(torch: Any) -> bool:
    """Whether this thread's CPU arithmetic treats subnormal floats as zero (x86 FTZ/DAZ)."""
    return bool((torch.tensor([1e-39], dtype=torch.float32) * 1.0).item() == 0.0)


@contextlib.contextmanager
def flush_denormals() -> Iterator[None]:
    """Run with subnormal floats flushed to zero on this thread's CPU arithmetic (`torch.set_flush_denormal`,
    x86 only; elsewhere nothing changes), restoring the previous mode afterwards. The Qwen3.5 toy's
    pure-torch Gated DeltaNet makes subnormals (its decay factors are exponentials of large negative sums),
    and each one costs the CPU a slow microcode path: on one core its build took 233 s with them and 157 s
    flushed, and the built weights were bitwise the same (both toy architectures, 2026-12-05)."""
    try:
        import torch
    except ImportError:
        raise missing_package("torch", "ml") from None
    before = _flushing(torch)
    if not torch.set_flush_denormal(True):
        yield
        return
    try:
        yield
    finally:
        torch.set_flush_denormal(before)
