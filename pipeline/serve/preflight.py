"""Preflight for an LMDeploy launch: everything the machine must have, checked before a server spends a
minute starting only to die. Each problem is one line with its fix, raised as EnvironmentMissing (exit 4).
The probes are `specq.pipeline.hardware`'s (NVML, imports), so tests can simulate a machine's pieces."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from .. import hardware
from ..checkpoint import Checkpoint
from ..engines.speculation import recurrent_layer_types
from ..errors import EnvironmentMissing, InputError
from ..fa3.installed import build_command, installed_coverage
from ..fa3.kernels import Dtype, derive_needs
from .spec import ServeRequest

# LMDeploy 0.18 builds TurboMind for sm_70 and newer; the PyTorch engine's Triton kernels need sm_75+.
MIN_COMPUTE_CAPABILITY = {"turbomind": (7, 0), "pytorch": (7, 5)}
TURBOMIND_MODULE = "lmdeploy.lib._turbomind"
# `engine.dtype` (specq serve --dtype) → the FA3 dtype it runs; "auto" derives it from the checkpoint.
ENGINE_DTYPES: dict[str, Dtype] = {"float16": "fp16", "bfloat16": "bf16"}
# LMDeploy 0.18's PyTorch engine runs Gated DeltaNet (linear-attention) layers on CUDA with two packages that
# its wheel requires on Linux x86_64 but a source tree (or a later upgrade) may lack or replace: fla
# (`pytorch/configurations/qwen3_next.py` `_check_env_qwen3_next`: "Qwen3-Next cuda support requires
# https://github.com/fla-org/flash-linear-attention") and tilelang (`pytorch/backends/cuda/
# gated_delta_rule.py`: "fla and tilelang is required for CudaGatedDeltaRuleImpl"; `causal_conv1d.py` takes
# tilelang or Dao's causal-conv1d: "No available implementation for CausalConv1d"). Module → pip name.
LINEAR_ATTENTION_PACKAGES = {"fla": "flash-linear-attention", "tilelang": "tilelang"}
# What LMDeploy 0.18.0's wheel requires of them (its Requires-Dist), for an lmdeploy without metadata (a
# source tree on PYTHONPATH, as on the project's GPU machine); an installed lmdeploy's own metadata wins. The
# pin matters: tilelang 0.1.15 no longer exports `tilelang.language.DataType`, which LMDeploy 0.18's
# causal-conv1d and gated-delta-rule kernels call, so a Qwen3.5 engine died at start-up (H200, 2026-12-01).
LMDEPLOY_018_REQUIRES = {
    "tilelang": "==0.1.11",
    "apache-tvm-ffi": "==0.1.11",
    "flash-linear-attention": ">=0.4.2",
}


def _cc(value: str | None) -> tuple[int, int] | None:
    if not value:
        return None
    try:
        major, minor = value.split(".")[:2]
        return int(major), int(minor)
    except ValueError:
        return None


def lmdeploy_problems(
    backend: str,
    speculative: bool,
    models: Sequence[str | Path] = (),
    dtype: str = "auto",
    tp: int = 1,
    executor: str | None = None,
) -> list[str]:
    """Every reason an LMDeploy launch with `backend` ("turbomind"/"pytorch") would fail on this machine.
    The order is the order a user fixes them in; the first is the one to show. `models` (target, drafter)
    and the engine `dtype` let the FlashAttention-3 check compare what they need with what is installed;
    `tp` and `executor` (engine.distributed_executor_backend) are the tensor-parallel launch's."""
    problems: list[str] = []
    version = hardware.lmdeploy_version()
    if version is None:
        problems.append(
            "lmdeploy is not installed; on a GPU machine run: pip install 'specq[lmdeploy]' "
            "(LMDeploy 0.18.x), or serve with --engine embedded"
        )
        return problems
    if not version.startswith("0.18."):
        problems.append(
            f"lmdeploy {version} is installed but specq needs 0.18.x: pip install 'lmdeploy>=0.18,<0.19'"
        )
        return problems
    gpus = hardware.list_gpus()
    if not gpus:
        problems.append(
            "no NVIDIA GPU found (NVML sees none): LMDeploy needs a CUDA GPU; "
            "use --engine embedded on this machine"
        )
        return problems
    problem = tensor_parallel_problem(backend, tp, executor)
    if problem:
        problems.append(problem)
        return problems
    need = MIN_COMPUTE_CAPABILITY.get(backend, (7, 0))
    for gpu in gpus[:1]:
        cc = _cc(gpu.compute_capability)
        if cc is not None and cc < need:
            problems.append(
                f"GPU {gpu.index} ({gpu.name}) has compute capability {gpu.compute_capability}; LMDeploy's "
                f"{backend} backend needs {need[0]}.{need[1]} or newer; use --engine embedded"
            )
    if backend == "turbomind":
        reason = hardware.try_import(TURBOMIND_MODULE)
        if reason is not None:
            problems.append(
                f"TurboMind's native module does not import ({reason}); "
                "install the lmdeploy build that matches your CUDA runtime, or use --backend pytorch"
            )
    if backend == "pytorch":
        problem = linear_attention_problem(models)
        if problem:
            problems.append(problem)
    if speculative or backend == "pytorch":
        problem = fa3_problem(speculative, models, dtype)
        if problem:
            problems.append(problem)
    return problems


def tensor_parallel_problem(backend: str, tp: int, executor: str | None) -> str | None:
    """Why `--tp tp` cannot start here: fewer GPUs visible to CUDA than it shards over (NVML's list as
    CUDA_VISIBLE_DEVICES filters it), or, on the PyTorch engine, the ray workers LMDeploy 0.18 starts by
    default for tp > 1 on CUDA (`pytorch/engine/executor/__init__.py`; `ray_executor.py` imports ray) when
    ray is not installed."""
    if tp <= 1:
        return None
    visible = hardware.visible_gpus()
    if tp > len(visible):
        env = os.environ.get("CUDA_VISIBLE_DEVICES")
        shown = f" (CUDA_VISIBLE_DEVICES={env})" if env is not None else ""
        return (
            f"--tp {tp} shards the model over {tp} GPUs but {len(visible)} "
            f"{'is' if len(visible) == 1 else 'are'} visible{shown}; use --tp {_fewer(len(visible))} "
            "or a machine with more GPUs"
        )
    chosen = executor or os.environ.get("LMDEPLOY_EXECUTOR_BACKEND") or "ray"
    if backend == "pytorch" and chosen == "ray" and not hardware.module_present("ray"):
        return (
            f"--tp {tp}: LMDeploy's PyTorch engine starts its GPU workers with ray, which is not installed: "
            "pip install ray, or pass --distributed-executor-backend mp"
        )
    return None


def _fewer(gpus: int) -> int:
    """The largest power of two not above `gpus` (at least 1): a --tp that fits the GPUs in hand."""
    return 1 << (max(gpus, 1).bit_length() - 1)


def missing_linear_attention_packages() -> list[str]:
    """The pip names of LINEAR_ATTENTION_PACKAGES whose module does not import here."""
    return [pip for module, pip in LINEAR_ATTENTION_PACKAGES.items() if hardware.try_import(module)]


def linear_attention_problem(models: Sequence[str | Path]) -> str | None:
    """Why LMDeploy's PyTorch engine would die at start-up on a target with linear-attention layers (Qwen3.5,
    Qwen3-Next): the packages it runs them with on CUDA do not import. Seen on the H200 (2026-12-01) with the
    Qwen3.5-shaped toy: first the fla ImportError, then, with fla, the CausalConv1d RuntimeError."""
    if not models:
        return None
    try:
        recurrent = recurrent_layer_types(Checkpoint(models[0]))
    except InputError:  # a target the check cannot read: the serve stage reports it
        return None
    if not recurrent:
        return None
    runs = (
        f"{models[0]} has {'/'.join(recurrent)} layers, which LMDeploy's PyTorch engine runs on CUDA with "
        "flash-linear-attention and tilelang"
    )
    missing = missing_linear_attention_packages()
    if missing:
        return (
            f"{runs}, and {' and '.join(missing)} {'does' if len(missing) == 1 else 'do'} not import: "
            f"pip install {' '.join(missing)}"
        )
    wrong = linear_attention_version_problems()
    if wrong:
        return (
            f"{runs}, and {'; '.join(w.problem for w in wrong)}: pip install {' '.join(w.fix for w in wrong)}"
        )
    return None


class VersionProblem(NamedTuple):
    problem: str  # "tilelang 0.1.15 is installed where LMDeploy 0.18.0 requires tilelang==0.1.11"
    fix: str  # "'tilelang==0.1.11'", an argument for pip install


def linear_attention_version_problems() -> list[VersionProblem]:
    """The linear-attention packages (and tilelang's tvm-ffi) installed at a version the installed LMDeploy
    does not accept: its own metadata's requirement, else LMDEPLOY_018_REQUIRES for 0.18.0 without metadata.
    Packages that are not installed are `missing_linear_attention_packages`'s business."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet
    from packaging.version import InvalidVersion

    lmdeploy = hardware.lmdeploy_version()
    problems: list[VersionProblem] = []
    for pip in LMDEPLOY_018_REQUIRES:
        installed = hardware.package_version(pip)
        spec = hardware.requirement_of("lmdeploy", pip)
        if spec is None and lmdeploy == "0.18.0":
            spec = LMDEPLOY_018_REQUIRES[pip]
        if installed is None or not spec:
            continue
        try:
            accepted = SpecifierSet(spec).contains(installed, prereleases=True)
        except (InvalidSpecifier, InvalidVersion):  # a version pip could not have installed either
            continue
        if not accepted:
            problems.append(
                VersionProblem(
                    f"{pip} {installed} is installed where LMDeploy {lmdeploy} requires {pip}{spec}",
                    f"'{pip}{spec}'",
                )
            )
    return problems


def fa3_problem(speculative: bool, models: Sequence[str | Path] = (), dtype: str = "auto") -> str | None:
    """Why FlashAttention-3 would stop this PyTorch-engine launch: missing for speculation, or installed
    without a head dim, dtype or feature the models need (LMDeploy uses an importable FA3 for every
    attention layer up to head dim 256, so a gap fails the first request, after a minute-long start)."""
    engine_dtype = ENGINE_DTYPES.get(dtype)
    if speculative and hardware.flash_attention_3() is not None:
        command = build_command(models or ["MODEL", "DRAFT"], _fa3_source(), engine_dtype)
        return (
            "LMDeploy speculative decoding on CUDA needs FlashAttention-3, and flash_attn_interface does not "
            f"import: build it for these models with `{command}` (docs/fa3.md), or serve without speculation"
        )
    if not models:
        return None
    coverage = installed_coverage()
    if coverage is None or (not speculative and hardware.flash_attention_3() is not None):
        return None  # plain decoding uses FA3 only when it imports
    try:
        needs = derive_needs(models, engine_dtype)
    except InputError:  # a config the derivation cannot read: LMDeploy reports what it cannot load
        return None
    gaps = coverage.missing(needs)
    if not gaps:
        return None
    command = build_command(models, coverage.source, engine_dtype)
    return (
        f"the installed FlashAttention-3 ({coverage.config_path}) lacks {', '.join(gaps)}: LMDeploy would "
        f"fail on the first request; rebuild it for these models with `{command}`"
    )


def _fa3_source() -> str | None:
    coverage = installed_coverage()
    return coverage.source if coverage else None


def vram_problem(request: ServeRequest) -> str | None:
    """What the VRAM planner (`specq plan`) says about fitting this request on the GPU, or None (fits, or no
    GPU size known). The planner models LMDeploy's --max-prefill-token-num: it is given the value the server
    will be launched with."""
    from ..plan import fits

    try:
        return fits(request.plan_request())
    except InputError:  # a config the planner cannot read: LMDeploy reports what it cannot load
        return None


def require_lmdeploy(backend: str, speculative: bool, request: ServeRequest | None = None) -> None:
    """Raise the first preflight problem as EnvironmentMissing (exit 4)."""
    models = request.served_models() if request is not None else []
    o = request.options if request is not None else None
    problems = lmdeploy_problems(
        backend, speculative, models, o.dtype if o else "auto", o.tp if o else 1,
        o.distributed_executor_backend if o else None,
    )  # fmt: skip
    if not problems and request is not None:
        vram = vram_problem(request)
        if vram:
            problems.append(vram)
    if problems:
        raise EnvironmentMissing(problems[0])
