"""From a flash-attention checkout and the models to be served to a typed, frozen build plan: the checkout's
paths, the GPU architecture, the kernel set, the exact environment and command of `python setup.py
build_ext --inplace`, the files it compiles, and the parallelism that fits this machine's cores and memory.
Also the environment probes a real build needs (nvcc ≥ 12.3, torch with CUDA, ninja, git, setuptools/wheel)
and the refusals when one is missing. Pure Python: torch is imported only to ask for its CUDA version."""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from .. import hardware
from ..config.models import flag
from ..errors import EnvironmentMissing, InputError
from .kernels import Arch, Dtype, KernelSet, ModelNeed, derive_needs, kernel_set, setup_py_sources

ArchChoice = Literal["auto", "sm80", "sm90"]
MIN_CUDA = (12, 3)
# An nvcc job compiling one FA3 kernel file takes 2-4 GB of memory; more jobs than memory allows swaps or
# gets killed, so jobs = min(cores, available GiB // GIB_PER_JOB, files).
GIB_PER_JOB = 4
# nvcc --threads: parallelises only across the -gencode targets of one file (2 for the files built for both
# sm80 and sm90), so setup.py's default of 2 is enough.
NVCC_THREADS = 2
SOURCE_PLACEHOLDER = "FLASH_ATTENTION_DIR"


class Checkout(BaseModel):
    model_config = ConfigDict(frozen=True)

    root: str  # the directory holding hopper/, csrc/ and README.md
    hopper: str
    readme: bool  # setup.py reads ../README.md and fails without it


class Fa3Plan(BaseModel):
    """Everything a build does, decided before it starts; `--dry-run` prints it."""

    model_config = ConfigDict(frozen=True)

    schema_version: int = 1
    checkout: Checkout
    arch: Arch
    arch_reason: str
    models: tuple[ModelNeed, ...]
    head_dims: tuple[int, ...]  # the models' own (and --head-dim) head dims
    kernels: KernelSet
    sources: tuple[str, ...]  # what setup.py compiles, in its order
    jobs: int
    nvcc_threads: int
    cores: int
    memory_gib: float | None
    env: dict[str, str]  # what the command needs on top of the user's environment
    command: tuple[str, ...]  # run in checkout.hopper
    notes: tuple[str, ...] = ()

    @property
    def kernel_files(self) -> tuple[str, ...]:
        return tuple(s for s in self.sources if s.startswith("instantiations/"))

    def shell(self) -> str:
        """The build as shell lines a user can paste (in the checkout itself, as by hand)."""
        lines = [f"cd {shlex.quote(self.checkout.hopper)}"]
        if not self.checkout.readme:
            lines.append("touch ../README.md  # setup.py reads it")
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        lines.append(f"env {env} \\\n  {shlex.join(self.command)}")
        lines.append(
            f"export PYTHONPATH={shlex.quote(self.checkout.hopper)}:$PYTHONPATH"
            "  # flash_attn_interface.py, flash_attn_config.py, flash_attn_3/_C.abi3.so"
        )
        return "\n".join(lines)


def find_checkout(source: str | Path) -> Checkout:
    """The flash-attention checkout at `source` (its root or its hopper/ directory); InputError (exit 2)
    naming what is missing otherwise."""
    path = Path(source).expanduser()
    if not path.is_dir():
        raise InputError(f"{path}: not a directory; pass --source a flash-attention checkout (the directory "
                         "containing hopper/)")  # fmt: skip
    if (path / "hopper" / "setup.py").is_file():
        root, hopper = path, path / "hopper"
    elif path.name == "hopper" and (path / "setup.py").is_file():
        root, hopper = path.parent, path
    else:
        raise InputError(
            f"{path}: not a flash-attention checkout (no hopper/setup.py); pass the directory containing "
            "hopper/ (git clone https://github.com/Dao-AILab/flash-attention)"
        )
    setup = (hopper / "setup.py").read_text(encoding="utf-8", errors="replace")
    if "flash_attn_3" not in setup or not (hopper / "flash_attn_interface.py").is_file():
        raise InputError(f"{hopper}: this setup.py does not build flash_attn_3 (FlashAttention-3); pass a "
                         "flash-attention checkout with the hopper/ FA3 sources")  # fmt: skip
    if not (hopper / "instantiations").is_dir():
        raise InputError(f"{hopper}: no instantiations/ directory; the checkout is incomplete")
    if not (root / "csrc" / "cutlass" / "include" / "cutlass").is_dir():
        raise InputError(
            f"{root}: CUTLASS is missing (csrc/cutlass/include); run `git submodule update --init "
            "csrc/cutlass` in the checkout"
        )
    return Checkout(
        root=str(root.resolve()), hopper=str(hopper.resolve()), readme=(root / "README.md").is_file()
    )


def _cc(gpu: hardware.GpuInfo) -> tuple[int, int] | None:
    try:
        major, minor = (gpu.compute_capability or "").split(".")[:2]
        return int(major), int(minor)
    except ValueError:
        return None


def arch_of(cc: tuple[int, int]) -> Arch | None:
    """The kernel family that runs on a compute capability: sm90 on Hopper, sm80 on Ampere/Ada (an sm_80
    cubin runs on sm_86/sm_89, not on sm_90); None below sm_80 or on Blackwell and later."""
    if cc[0] == 9:
        return "sm90"
    if cc[0] == 8:
        return "sm80"
    return None


def resolve_arch(choice: ArchChoice, gpus: Sequence[hardware.GpuInfo]) -> tuple[Arch, str]:
    if choice != "auto":
        return choice, f"--arch {choice}"
    if not gpus:
        raise EnvironmentMissing(
            "no NVIDIA GPU found to choose FA3 kernels for: pass --arch sm90 (Hopper) or --arch sm80 "
            "(Ampere/Ada, e.g. RTX 3090) to build for another machine"
        )
    gpu = gpus[0]
    cc = _cc(gpu)
    arch = arch_of(cc) if cc else None
    if cc is None or arch is None:
        if cc is not None and cc >= (10, 0):
            why = "FA3's hopper/ sources have kernels for sm_80-sm_89 and sm_90 only"
        else:
            why = "FlashAttention-3 needs compute capability 8.0 or newer"
        raise EnvironmentMissing(
            f"GPU {gpu.index} ({gpu.name}) has compute capability {gpu.compute_capability}: {why}; "
            "LMDeploy cannot speculate on it with FA3"
        )
    return arch, f"GPU {gpu.index} ({gpu.name}, sm {gpu.compute_capability})"


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _available_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 2**20
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        return None


def size_jobs(files: int, cores: int, memory_gib: float | None, jobs: int | None = None) -> int:
    if jobs is not None:
        if jobs < 1:
            raise InputError(f"--jobs {jobs}: must be 1 or more")
        return jobs
    by_memory = int(memory_gib // GIB_PER_JOB) if memory_gib is not None else cores
    return max(1, min(cores, by_memory, files))


def torch_version() -> str:
    return hardware.package_version("torch") or "0"


class Fa3Request(BaseModel):
    """Everything `specq fa3 build` needs, frozen: the flash-attention checkout, the models to be served
    (target(s) and drafter(s)), what to build beyond what they need, and what to do with the build
    (`check`: self-check before installing; `out`: write the modules there instead of installing)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    source: str = Field(
        description="A flash-attention checkout: the directory containing hopper/ (or hopper/).",
        json_schema_extra=flag(path=True),
    )
    models: tuple[str, ...] = Field(
        (), description="The model directories to serve: target(s) and drafter(s)."
    )
    arch: ArchChoice = Field(
        "auto",
        description="auto: this GPU's (sm90 on Hopper, sm80 on Ampere/Ada such as the RTX 3090).",
        json_schema_extra=flag(choices=True),
    )
    head_dims: tuple[int, ...] = Field(
        (), description="Also build this head dim (repeatable).", json_schema_extra=flag("--head-dim")
    )
    dtype: Dtype | None = Field(
        None,
        description="The dtype the engine runs in, instead of the one derived (as `specq serve --dtype`).",
        json_schema_extra=flag(choices=True),
    )
    jobs: int | None = Field(None, description="Parallel nvcc jobs (default: min(cores, available GiB / 4)).")
    cuda_home: str | None = None
    check: bool = Field(
        True,
        description="Self-check against torch SDPA before installing (needs a GPU).",
        json_schema_extra=flag("--check/--no-check"),
    )
    out: str | None = None


def make_plan(request: Fa3Request) -> Fa3Plan:
    """The build plan (what `--dry-run` prints). Raises InputError (exit 2) for a bad checkout or model,
    EnvironmentMissing (exit 4) when `arch` is auto and no usable GPU is found."""
    source, models, arch, head_dims = request.source, request.models, request.arch, request.head_dims
    dtype, jobs, cuda_home = request.dtype, request.jobs, request.cuda_home
    dtypes: tuple[Dtype, ...] = (dtype,) if dtype else ()
    checkout = find_checkout(source)
    needs = derive_needs(models, dtype) if models else []
    if not needs and not head_dims:
        raise InputError("nothing to build for: pass the MODEL directories to serve (target and drafter) "
                         "or --head-dim")  # fmt: skip
    resolved, reason = resolve_arch(arch, hardware.list_gpus() if arch == "auto" else [])
    ks = kernel_set(needs, resolved, head_dims, dtypes)
    sources = tuple(setup_py_sources(ks.disabled(), torch_version()))
    notes = [note for n in needs for note in n.notes]
    missing = [s for s in sources if not (Path(checkout.hopper) / s).is_file()]
    if missing:
        notes.append(
            f"{len(missing)} of the files specq expects are not in this checkout (first: {missing[0]}); "
            "specq's list follows flash-attention 0251105a2fb1: the progress total comes from ninja instead"
        )
    cores, mem = _cores(), _available_gib()
    n_jobs = size_jobs(len(sources), cores, mem, jobs)
    env = ks.env()
    env["FLASH_ATTENTION_OFFLINE_BUILD"] = "TRUE"  # never download an nvcc/ptxas (CUDA 12.3-12.x)
    env["MAX_JOBS"] = str(n_jobs)
    env["NVCC_THREADS"] = str(min(NVCC_THREADS, cores))
    if cuda_home:
        env["CUDA_HOME"] = cuda_home
    all_dims = tuple(sorted({h for n in needs for h in n.head_dims} | set(head_dims)))
    return Fa3Plan(
        checkout=checkout,
        arch=resolved,
        arch_reason=reason,
        models=tuple(needs),
        head_dims=all_dims,
        kernels=ks,
        sources=sources,
        jobs=n_jobs,
        nvcc_threads=int(env["NVCC_THREADS"]),
        cores=cores,
        memory_gib=round(mem, 1) if mem is not None else None,
        env=env,
        command=(sys.executable, "setup.py", "build_ext", "--inplace"),
        notes=tuple(notes),
    )


# --- the environment a real build needs -------------------------------------------------------------------


class Toolchain(BaseModel):
    cuda_home: str | None = None
    nvcc: str | None = None
    cuda_version: str | None = None
    torch_version: str | None = None
    torch_cuda: str | None = None


def find_cuda_home() -> str | None:
    """The CUDA toolkit torch's extension builder will use: $CUDA_HOME or $CUDA_PATH, else the one whose
    nvcc is on PATH, else /usr/local/cuda (torch.utils.cpp_extension's order)."""
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home:
        return home
    nvcc = shutil.which("nvcc")
    if nvcc:
        return str(Path(os.path.realpath(nvcc)).parent.parent)
    return "/usr/local/cuda" if Path("/usr/local/cuda").is_dir() else None


def nvcc_version(nvcc: str) -> tuple[int, int] | None:
    try:
        text = subprocess.run([nvcc, "-V"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"release (\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else None


def _torch_cuda() -> str | None:
    import torch  # the caller checked that it imports

    return torch.version.cuda


def probe_toolchain() -> tuple[Toolchain, list[str]]:
    """The build toolchain and every problem with it, in the order a user fixes them."""
    tc = Toolchain()
    problems: list[str] = []
    home = find_cuda_home()
    nvcc = Path(home, "bin", "nvcc") if home else None
    if nvcc is None or not nvcc.is_file():
        where = f"{home}/bin/nvcc does not exist" if home else "CUDA_HOME is unset and nvcc is not on PATH"
        problems.append(
            f"no nvcc ({where}): install the CUDA toolkit 12.3 or newer and put its bin/ on PATH "
            "or set CUDA_HOME"
        )
    else:
        tc.cuda_home, tc.nvcc = str(home), str(nvcc)
        v = nvcc_version(str(nvcc))
        tc.cuda_version = f"{v[0]}.{v[1]}" if v else None
        if v is None:
            problems.append(f"{nvcc} -V did not report a CUDA release; check the CUDA toolkit install")
        elif v < MIN_CUDA:
            problems.append(
                f"{nvcc} is CUDA {v[0]}.{v[1]}: FlashAttention-3 needs CUDA 12.3 or newer; install a newer "
                "toolkit and set CUDA_HOME to it"
            )
    tc.torch_version = hardware.package_version("torch")
    if tc.torch_version is None:
        problems.append("torch is not installed: FA3 builds against this environment's torch "
                        "(pip install 'specq[ml]' with a CUDA build of torch)")  # fmt: skip
    elif reason := hardware.try_import("torch"):
        problems.append(
            f"torch {tc.torch_version} does not import ({reason}): repair this environment's torch "
            "(a CUDA build with the CUDA libraries it was built against)"
        )
    else:
        tc.torch_cuda = _torch_cuda()
        if tc.torch_cuda is None:
            problems.append(
                f"torch {tc.torch_version} has no CUDA: FA3 builds against a CUDA build of torch "
                "(on a GPU machine: make install-gpu)"
            )
        elif tc.cuda_version and tc.torch_cuda.split(".")[0] != tc.cuda_version.split(".")[0]:
            problems.append(
                f"nvcc is CUDA {tc.cuda_version} but torch was built with CUDA {tc.torch_cuda}: the major "
                "versions must match; point CUDA_HOME at a matching toolkit"
            )
    if not _ninja():
        problems.append(
            "ninja is not installed: pip install ninja (without it the build is serial, for hours)"
        )
    if shutil.which("git") is None:
        problems.append("git is not installed: flash-attention's setup.py runs `git submodule update`")
    for module, pkg in (("setuptools", "setuptools"), ("wheel", "wheel"), ("packaging", "packaging")):
        if importlib.util.find_spec(module) is None:
            problems.append(
                f"the Python package '{pkg}' is not installed (setup.py imports it): pip install {pkg}"
            )
    return tc, problems


def _ninja() -> str | None:
    return shutil.which("ninja") or shutil.which("ninja", path=str(Path(sys.executable).parent))


def check_gpu_problem(arch: Arch, gpus: Sequence[hardware.GpuInfo]) -> str | None:
    """Why the self-check cannot run here (it needs a GPU that runs the kernels built), or None."""
    if not gpus:
        return (
            "no NVIDIA GPU here for the numerical self-check: build on the GPU machine, or pass --no-check "
            "--out DIR to cross-compile without installing"
        )
    gpu = gpus[0]
    cc = _cc(gpu)
    runs = arch_of(cc) if cc else None
    # sm90 kernels are always built, so a Hopper GPU can check any build; sm80 kernels only run on sm_8x.
    if runs == "sm90" or (runs == "sm80" and arch == "sm80"):
        return None
    return (
        f"GPU {gpu.index} ({gpu.name}, sm {gpu.compute_capability}) cannot run the {arch} kernels for the "
        "self-check: build with the matching --arch, or pass --no-check --out DIR"
    )
