"""Preflight for an LMDeploy launch: everything the machine must have, checked before a server spends a
minute starting only to die. Each problem is one line with its fix, raised as EnvironmentMissing (exit 4).
The probes are `specq.pipeline.hardware`'s (NVML, imports), so tests can simulate a machine's pieces."""

from __future__ import annotations

from .. import hardware
from ..config.models import SpecqConfig
from ..errors import EnvironmentMissing, InputError

# LMDeploy 0.18 builds TurboMind for sm_70 and newer; the PyTorch engine's Triton kernels need sm_75+.
MIN_COMPUTE_CAPABILITY = {"turbomind": (7, 0), "pytorch": (7, 5)}
TURBOMIND_MODULE = "lmdeploy.lib._turbomind"


def _cc(value: str | None) -> tuple[int, int] | None:
    if not value:
        return None
    try:
        major, minor = value.split(".")[:2]
        return int(major), int(minor)
    except ValueError:
        return None


def lmdeploy_problems(backend: str, speculative: bool) -> list[str]:
    """Every reason an LMDeploy launch with `backend` ("turbomind"/"pytorch") would fail on this machine.
    The order is the order a user fixes them in; the first is the one to show."""
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
    if speculative:
        reason = hardware.flash_attention_3()
        if reason is not None:
            problems.append(
                "LMDeploy speculative decoding on CUDA needs FlashAttention-3, "
                "and flash_attn_interface does not import: "
                "install FA3 from the flash-attention project's hopper/ directory "
                "(git clone https://github.com/Dao-AILab/flash-attention && cd flash-attention/hopper && "
                "python setup.py install), or serve without speculation"
            )
    return problems


def vram_problem(cfg: SpecqConfig) -> str | None:
    """What the VRAM planner (`specq plan`) says about fitting this serve config on the GPU, or None (fits,
    or no GPU size known). The planner models LMDeploy's --max-prefill-token-num: give it the value the
    server will be launched with."""
    from ..plan import fits

    prefill = cfg.engine.max_prefill_token_num
    if prefill is not None:
        cfg = cfg.model_copy(deep=True)
        cfg.plan.max_prefill_token_num = prefill
    try:
        return fits(cfg)
    except InputError:  # a config the planner cannot read: LMDeploy reports what it cannot load
        return None


def require_lmdeploy(backend: str, speculative: bool, cfg: SpecqConfig | None = None) -> None:
    """Raise the first preflight problem as EnvironmentMissing (exit 4)."""
    problems = lmdeploy_problems(backend, speculative)
    if not problems and cfg is not None:
        vram = vram_problem(cfg)
        if vram:
            problems.append(vram)
    if problems:
        raise EnvironmentMissing(problems[0])
