"""specq's compatibility layer for LMDeploy: small, hash-pinned patches that specq applies at run time to the
LMDeploy processes it starts, without ever changing LMDeploy's own files.

The one patch today, `qwen35-awq-bf16` (for lmdeploy==0.18.0 only), makes a 4-bit AWQ Qwen3.5 target
speculate on the PyTorch engine. Stock 0.18.0 forces every AWQ model to fp16 (`_update_torch_dtype` in
`lmdeploy/pytorch/config.py`) while `pytorch/configurations/qwen3_5.py` keeps the Gated DeltaNet conv and
recurrent states in bf16, so the first prefill dies in `backends/cuda/causal_conv1d.py`. The patch lets AWQ
honour `--dtype bfloat16`, and makes the TurboMind W4A16 linear (fp16-only) cast a non-fp16 input to fp16 and
its result back, as LMDeploy's Triton AWQ path (`backends/cuda/awq_modules.py`) already does. The diff is
`qwen35-awq-bf16.diff` beside this file; docs/lmdeploy-patch.md writes it up for upstream.

How it reaches the engine: `api_server` runs the engine in a `spawn`ed process (ray workers for tensor
parallel), so a monkeypatch in specq's own process would never reach it. specq launches LMDeploy with
`boot/` first on PYTHONPATH and `SPECQ_LMDEPLOY_COMPAT` naming the patch (`launch_env`); every Python
process started from that environment, the spawned engine and ray workers included, imports
`boot/sitecustomize.py` at start-up, which installs `hook.py`'s import hook. When LMDeploy imports one of the
patched modules, the hook reads the installed file, checks its sha256 against the recorded original, applies
the diff in memory, checks the result's sha256, and runs that source instead. Without the variable the hook
does nothing; on any mismatch it leaves the module as it is and says so on stderr. specq itself refuses
before any launch when the installed LMDeploy is not the one the patch knows (`status`), in one line.

The second patch, `spec-step` (0.18.0 only, opt-in with `engine.step_patch`), cuts host work from the
speculative decode step: a greedy rejection path that does not expand every sampling field to k + 1 rows,
no eager FA3 scheduler metadata for a step that a CUDA graph replays (the graph builds its own), and an
output poll that yields without a 1 ms timer (`spec-step.diff`; measured in docs/step-cost.md). It goes
through the same hook: `SPECQ_LMDEPLOY_COMPAT` then names both patches, comma-separated.

The third, `w4a16-specq` (0.18.0 only; engine.w4a16_kernel, default `auto`: on where it applies), makes
`backends/cuda/awq_modules.py` build specq's own W4A16 linear (`pipeline/kernels/lmdeploy_w4a16.py`) for
every 4-bit AWQ layer the PyTorch engine loads: deterministic and M-invariant, for decode's 1-16 rows
(docs/w4a16.md); and `models/qwen3_5.py` run a dense Qwen3.5's `in_proj_qkv` and `in_proj_z` as one linear on
one GPU (one launch a Gated DeltaNet layer instead of two) and its 16-bit gates `in_proj_ba` on specq's skinny
linear (pipeline/kernels/skinny.py; docs/lmdeploy-patch.md).

The fourth, `dflash-awq` (0.18.0 only), serves a 4-bit (AWQ gemm) DFlash drafter: the DFlash proposer
(`spec_decode/proposers/dflash.py`) builds the drafter under the target's build context, whose
`quant_config` is the target's, so a 4-bit drafter beside an unquantized target gets plain linears and
its `qweight` fails to load, and beside an AWQ target the drafter's modules are matched against the
target's `modules_to_not_convert` (an entry `mtp.layers.0.self_attn.qkv_proj` also names the drafter's
`layers.0.self_attn.qkv_proj`). The patch builds the drafter with its own quantization config, as LMDeploy
already does for one EAGLE-3 architecture (`proposers/eagle3.py`); the drafter's linears are then
LMDeploy's `AwqLinear`. specq adds it to a launch whose drafter is quantized (`dflash-awq.diff`).

This module reads files only (no lmdeploy import, no torch), so `specq doctor`, `convert` and `plan` can ask
it on any machine."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from ...errors import EnvironmentMissing
from . import hook

ENV = hook.ENV
BOOT_DIR = Path(__file__).resolve().parent / "boot"
PATCH = hook.PATCHES["qwen35-awq-bf16"]
STEP_PATCH = hook.PATCHES["spec-step"]
W4A16_PATCH = hook.PATCHES["w4a16-specq"]
DFLASH_AWQ_PATCH = hook.PATCHES["dflash-awq"]
SUPPORTED_VERSION = PATCH.version

State = Literal["applies", "patched-on-disk", "absent", "unknown-version", "modified"]


@dataclass(frozen=True)
class CompatStatus:
    """What the layer can do with the LMDeploy installed here."""

    state: State
    patch: str = PATCH.name
    version: str | None = None
    location: str | None = None
    detail: str = ""
    files: dict[str, str] = field(default_factory=dict)  # relative path -> "original" | "patched" | "other"

    @property
    def ok(self) -> bool:
        """The patch's code will run: the hook will patch the files, or they are patched on disk already."""
        return self.state in ("applies", "patched-on-disk")

    @property
    def needs_hook(self) -> bool:
        return self.state == "applies"

    def summary(self) -> str:
        """One line for doctor and for refusals."""
        where = f" at {self.location}" if self.location else ""
        if self.state == "applies":
            return f"lmdeploy {self.version}{where}: specq applies {self.patch} to the processes it starts"
        if self.state == "patched-on-disk":
            return f"lmdeploy {self.version}{where}: {self.patch} is already applied on disk"
        if self.state == "absent":
            return "lmdeploy is not installed"
        return f"lmdeploy {self.version or '(unknown version)'}{where}: {self.detail}"


def turbomind_module(pkg: Path | None = None) -> bool:
    """Whether the LMDeploy at `pkg` (default: the installed one) has its TurboMind native module."""
    pkg = pkg if pkg is not None else lmdeploy_dir()
    return pkg is not None and any((pkg / "turbomind").glob("_turbomind*"))


def lmdeploy_dir() -> Path | None:
    """The installed `lmdeploy` package directory, found without importing it (None: not installed)."""
    try:
        spec = importlib.util.find_spec("lmdeploy")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


_VERSION = re.compile(r"""^__version__\s*=\s*['"]([^'"]+)['"]""", re.M)


def installed_version(pkg: Path) -> str | None:
    """`lmdeploy/version.py`'s `__version__`, read as text (a source tree without metadata has it too)."""
    try:
        m = _VERSION.search((pkg / "version.py").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        return None
    return m.group(1) if m else None


def status(pkg: Path | None = None, patch: hook.Patch = PATCH) -> CompatStatus:
    """`patch` (default: qwen35-awq-bf16) against the LMDeploy at `pkg` (default: the installed one)."""
    pkg = pkg if pkg is not None else lmdeploy_dir()
    if pkg is None:
        return CompatStatus(state="absent", patch=patch.name)
    version, location = installed_version(pkg), str(pkg)
    if version != patch.version:
        return CompatStatus(
            state="unknown-version",
            patch=patch.name,
            version=version,
            location=location,
            detail=f"specq's {patch.name} patch knows lmdeploy=={patch.version} only; "
            f"install it with: pip install 'lmdeploy=={patch.version}'",
        )
    files = {rel: hook.file_state(pkg.parent / rel, patch.files[rel]) for rel in patch.files}
    found = CompatStatus(state="modified", patch=patch.name, version=version, location=location, files=files)
    if all(s == "original" for s in files.values()):
        return dataclasses.replace(found, state="applies")
    if all(s == "patched" for s in files.values()):
        return dataclasses.replace(found, state="patched-on-disk")
    other = ", ".join(sorted(rel for rel, s in files.items() if s != "original"))
    return dataclasses.replace(
        found,
        detail=f"{other} differ from lmdeploy {patch.version}'s recorded sha256, so specq's "
        f"{patch.name} patch cannot be applied; reinstall it: pip install --force-reinstall "
        f"'lmdeploy=={patch.version}'",
    )


def launch_env(env: dict[str, str], *compat: CompatStatus) -> dict[str, str]:
    """`env` for an LMDeploy server whose engine needs these patches: `boot/` first on PYTHONPATH and the
    patches the hook must apply named in `SPECQ_LMDEPLOY_COMPAT`. Unchanged when none needs the hook (each is
    patched on disk already)."""
    names = [c.patch for c in compat if c.needs_hook]
    if not names:
        return env
    path = [str(BOOT_DIR), *(p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p)]
    return {**env, "PYTHONPATH": os.pathsep.join(path), ENV: ",".join(names)}


def refusal(compat: CompatStatus, what: str) -> str | None:
    """None when `what` (e.g. 'a 4-bit Qwen3.5 target') can be served with `compat`; else one line."""
    if compat.ok or compat.state == "absent":  # absent: the lmdeploy preflight says so on its own
        return None
    return (
        f"{what} needs specq's LMDeploy compatibility patch ({compat.patch}), which does not apply here: "
        f"{compat.summary()}"
    )


def require(what: str, patch: hook.Patch = PATCH) -> CompatStatus:
    """`patch`'s status, when `what` can be served with it; else EnvironmentMissing (exit 4) with one line."""
    compat = status(patch=patch)
    why = refusal(compat, what)
    if why:
        raise EnvironmentMissing(why)
    return compat
