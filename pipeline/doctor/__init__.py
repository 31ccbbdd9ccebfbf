"""`specq doctor`: what this machine can and cannot do for each stage, each check ok/warn/fail with a fix."""

from __future__ import annotations

import os
import platform
import shutil
import sys
from typing import Literal

from pydantic import BaseModel

from .. import hardware
from ..fa3.installed import Fa3Coverage, build_command, installed_coverage

Status = Literal["ok", "warn", "fail"]


class Check(BaseModel):
    name: str
    status: Status
    detail: str
    fix: str | None = None


class DoctorReport(BaseModel):
    schema_version: int = 1
    checks: list[Check]
    gpus: list[hardware.GpuInfo]
    # What the installed FlashAttention-3 was built with (its flash_attn_config.CONFIG); None: none found.
    fa3: Fa3Coverage | None = None

    @property
    def worst(self) -> Status:
        order = {"ok": 0, "warn": 1, "fail": 2}
        return max((c.status for c in self.checks), key=order.__getitem__, default="ok")


def _mem_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def run_doctor(path: str = ".") -> DoctorReport:
    gpus = hardware.list_gpus()
    coverage = installed_coverage()
    checks = [
        *_system_checks(path),
        *_torch_checks(gpus),
        *_lmdeploy_checks(),
        _fa3_check(coverage),
        *_quant_checks(),
    ]
    return DoctorReport(checks=checks, gpus=gpus, fa3=coverage)


def _system_checks(path: str) -> list[Check]:
    """Python, platform, CPUs, memory and free disk at `path`."""
    checks: list[Check] = []
    add = checks.append
    py = sys.version_info
    add(
        Check(
            name="python",
            status="ok" if py >= (3, 10) else "fail",
            detail=platform.python_version(),
            fix=None if py >= (3, 10) else "use Python 3.10 or newer",
        )
    )
    add(Check(name="platform", status="ok", detail=f"{platform.system()} {platform.machine()}"))
    cpus = os.cpu_count() or 1
    add(Check(name="cpus", status="ok" if cpus >= 2 else "warn", detail=str(cpus)))
    mem = _mem_bytes()
    add(
        Check(
            name="memory",
            status="ok" if mem and mem >= 8 * 2**30 else "warn",
            detail=f"{mem / 2**30:.1f} GiB" if mem else "unknown",
            fix=None if mem and mem >= 8 * 2**30 else "8 GiB or more is needed to quantize the toy models",
        )
    )
    free = shutil.disk_usage(path).free
    add(
        Check(
            name="disk",
            status="ok" if free >= 10 * 2**30 else "warn",
            detail=f"{free / 2**30:.1f} GiB free",
            fix=None if free >= 10 * 2**30 else "free disk space: checkpoints take GBs",
        )
    )
    return checks


def _torch_checks(gpus: list[hardware.GpuInfo]) -> list[Check]:
    """torch and whether it sees CUDA, then one line per NVIDIA GPU (or a warning that there is none)."""
    checks: list[Check] = []
    add = checks.append
    torch_v = hardware.package_version("torch")
    if torch_v is None:
        add(
            Check(
                name="torch",
                status="warn",
                detail="not installed",
                fix="pip install 'specq[ml]' (needed to quantize, train toys and run the embedded engine)",
            )
        )
    else:
        cuda = hardware.cuda_usable()
        add(Check(name="torch", status="ok", detail=f"{torch_v}, CUDA {'usable' if cuda else 'not usable'}"))

    if not gpus:
        add(
            Check(
                name="gpu",
                status="warn",
                detail="no NVIDIA GPU found through NVML",
                fix="CPU-only: the embedded engine and the demo work; LMDeploy needs an NVIDIA GPU",
            )
        )
    for g in gpus:
        bw = f", {g.bandwidth_gbps:.0f} GB/s" if g.bandwidth_gbps else ""
        add(
            Check(
                name=f"gpu{g.index}",
                status="ok",
                detail=f"{g.name}, {g.memory_total_bytes / 2**30:.1f} GiB, driver {g.driver}, "
                f"sm {g.compute_capability}{bw}",
            )
        )
    return checks


def _lmdeploy_checks() -> list[Check]:
    """lmdeploy's version and, when it is installed, whether its two engines import."""
    checks: list[Check] = []
    add = checks.append
    lmd = hardware.lmdeploy_version()
    if lmd is None:
        add(
            Check(
                name="lmdeploy",
                status="warn",
                detail="not installed",
                fix="on a GPU machine: make install-gpu in a clone, or pip install 'specq[lmdeploy]' "
                "(lmdeploy 0.18.x)",
            )
        )
    else:
        ok = lmd.startswith("0.18")
        add(
            Check(
                name="lmdeploy",
                status="ok" if ok else "warn",
                detail=lmd,
                fix=None if ok else "specq is built for lmdeploy 0.18.x",
            )
        )
        tm = hardware.try_import("lmdeploy.lib._turbomind")
        add(
            Check(
                name="turbomind",
                status="ok" if tm is None else "warn",
                detail="native module imports" if tm is None else tm,
                fix=None
                if tm is None
                else "TurboMind needs lmdeploy's CUDA build matching your CUDA runtime",
            )
        )
        pt = hardware.try_import("lmdeploy.pytorch.engine")
        add(
            Check(
                name="pytorch-engine",
                status="ok" if pt is None else "warn",
                detail="imports" if pt is None else pt,
                fix=None if pt is None else "reinstall lmdeploy with a matching torch (<= 2.12.1)",
            )
        )
        add(_linear_attention_check())
        add(_compat_check())
    return checks


def _compat_check() -> Check:
    """specq's LMDeploy compatibility patch (engines/lmdeploy_compat): installed with specq, and whether it
    applies to the LMDeploy here, which a 4-bit Qwen3.5 target on the PyTorch engine needs."""
    from ..engines import lmdeploy_compat

    compat = lmdeploy_compat.status()
    detail = compat.summary()
    step = lmdeploy_compat.status(patch=lmdeploy_compat.STEP_PATCH)
    if compat.ok and step.ok:
        detail += f"; {step.patch} (engine.step_patch) applies too"
    elif compat.ok and step.state != "absent":
        detail += f"; {step.patch} (engine.step_patch, opt-in) does not apply: {step.detail}"
    w4 = lmdeploy_compat.status(patch=lmdeploy_compat.W4A16_PATCH)
    if compat.ok and w4.ok:
        detail += f"; 4-bit AWQ linears run specq's W4A16 kernel ({w4.patch}, engine.w4a16_kernel)"
    elif compat.ok and w4.state != "absent":
        detail += f"; {w4.patch} does not apply ({w4.detail}): 4-bit linears run LMDeploy's Triton kernel"
    draft4 = lmdeploy_compat.status(patch=lmdeploy_compat.DFLASH_AWQ_PATCH)
    if compat.ok and draft4.ok:
        detail += f"; {draft4.patch} (4-bit DFlash drafters) applies too"
    elif compat.ok and draft4.state != "absent":
        detail += f"; {draft4.patch} (4-bit DFlash drafters) does not apply: {draft4.detail}"
    if compat.ok:
        return Check(name="lmdeploy-compat", status="ok", detail=detail, fix=None)
    return Check(
        name="lmdeploy-compat",
        status="warn",
        detail=detail,
        fix=f"4-bit Qwen3.5 on the PyTorch engine needs lmdeploy=={lmdeploy_compat.SUPPORTED_VERSION}: "
        f"pip install 'lmdeploy=={lmdeploy_compat.SUPPORTED_VERSION}'",
    )


def _linear_attention_check() -> Check:
    """The packages LMDeploy's PyTorch engine runs linear-attention layers (Qwen3.5, Qwen3-Next) with on CUDA:
    importable, and at the versions the installed LMDeploy requires (`serve.preflight`)."""
    from ..serve.preflight import linear_attention_version_problems, missing_linear_attention_packages

    need = "Qwen3.5/Qwen3-Next on LMDeploy's PyTorch engine need them"
    missing = missing_linear_attention_packages()
    if missing:
        return Check(
            name="linear-attention",
            status="warn",
            detail=f"{', '.join(missing)} not importable",
            fix=f"{need}: pip install {' '.join(missing)}",
        )
    wrong = linear_attention_version_problems()
    if wrong:
        return Check(
            name="linear-attention",
            status="warn",
            detail="; ".join(w.problem for w in wrong),
            fix=f"{need} at the versions LMDeploy requires: pip install {' '.join(w.fix for w in wrong)}",
        )
    return Check(name="linear-attention", status="ok", detail="fla and tilelang import", fix=None)


def _fa3_check(coverage: Fa3Coverage | None) -> Check:
    """FlashAttention-3, which LMDeploy's speculative decoding needs on CUDA, and what it was built for."""
    fa3_reason = hardware.flash_attention_3()
    covers = f"; covers {coverage.summary()}" if coverage else ""
    if fa3_reason is None:
        fa3_check = Check(
            name="flash-attention-3", status="ok", detail=f"flash_attn_interface imports{covers}"
        )
    else:
        found = f" (found {coverage.config_path}{covers})" if coverage else ""
        fa3_check = Check(
            name="flash-attention-3",
            status="warn",
            detail=f"not importable: {fa3_reason}{found}",
            fix="LMDeploy speculative decoding on CUDA needs it: build the kernels your models need with "
            + build_command(["MODEL", "DRAFT"], coverage.source if coverage else None)
            + " (see docs/fa3.md)",
        )
    return fa3_check


def _quant_checks() -> list[Check]:
    """One line per quantization backend."""
    checks: list[Check] = []
    add = checks.append
    from ..quantize.backends import BACKENDS  # the quantize stage's own registry: one list of backends

    for b in BACKENDS.values():
        present = b.installed
        add(
            Check(
                name=f"quant:{b.name}",
                status="ok" if present else "warn",
                detail="installed" if present else "not installed",
                fix=None if present else b.install_hint,
            )
        )
    return checks


def doctor_text(report: DoctorReport, width: int = 100) -> str:
    from rich.table import Table

    from ..report.text import table_text

    table = Table(title="specq doctor")
    for col in ("check", "status", "detail", "fix"):
        table.add_column(col, overflow="fold")  # never cut a path or a command short
    for c in report.checks:
        table.add_row(c.name, c.status, c.detail, c.fix or "")
    return table_text(table, width)
