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

This module reads files only (no lmdeploy import, no torch), so `specq doctor`, `convert` and `plan` can ask
it on any machine."""

from __future__ import annotations

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
SUPPORTED_VERSION = PATCH.version

State = Literal["applies", "patched-on-disk", "absent", "unknown-version", "modified"]


@dataclass(frozen=True)
class CompatStatus:
    """What the layer can do with the LMDeploy installed here."""

    state: State
    version: str | None = None
    location: str | None = None
    detail: str = ""
    files: dict[str, str] = field(default_factory=dict)  # relative path -> "original" | "patched" | "other"

    @property
    def ok(self) -> bool:
        """4-bit Qwen3.5 can be served: the hook will patch the files, or they are patched on disk already."""
        return self.state in ("applies", "patched-on-disk")

    @property
    def needs_hook(self) -> bool:
        return self.state == "applies"

    def summary(self) -> str:
        """One line for doctor and for refusals."""
        where = f" at {self.location}" if self.location else ""
        if self.state == "applies":
            return f"lmdeploy {self.version}{where}: specq applies {PATCH.name} to the processes it starts"
        if self.state == "patched-on-disk":
            return f"lmdeploy {self.version}{where}: {PATCH.name} is already applied on disk"
        if self.state == "absent":
            return "lmdeploy is not installed"
        return f"lmdeploy {self.version or '(unknown version)'}{where}: {self.detail}"


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


def status(pkg: Path | None = None) -> CompatStatus:
    """The layer against the LMDeploy at `pkg` (default: the installed one)."""
    pkg = pkg if pkg is not None else lmdeploy_dir()
    if pkg is None:
        return CompatStatus(state="absent")
    version, location = installed_version(pkg), str(pkg)
    if version != SUPPORTED_VERSION:
        return CompatStatus(
            state="unknown-version",
            version=version,
            location=location,
            detail=f"specq's {PATCH.name} patch knows lmdeploy=={SUPPORTED_VERSION} only; "
            f"install it with: pip install 'lmdeploy=={SUPPORTED_VERSION}'",
        )
    files = {rel: hook.file_state(pkg.parent / rel, PATCH.files[rel]) for rel in PATCH.files}
    if all(s == "original" for s in files.values()):
        return CompatStatus(state="applies", version=version, location=location, files=files)
    if all(s == "patched" for s in files.values()):
        return CompatStatus(state="patched-on-disk", version=version, location=location, files=files)
    other = ", ".join(sorted(rel for rel, s in files.items() if s != "original"))
    return CompatStatus(
        state="modified",
        version=version,
        location=location,
        files=files,
        detail=f"{other} differ from lmdeploy {SUPPORTED_VERSION}'s recorded sha256, so specq's "
        f"{PATCH.name} patch cannot be applied; reinstall it: pip install --force-reinstall "
        f"'lmdeploy=={SUPPORTED_VERSION}'",
    )


def launch_env(env: dict[str, str], compat: CompatStatus) -> dict[str, str]:
    """`env` for an LMDeploy server whose engine needs the patch: `boot/` first on PYTHONPATH and the patch
    named in `SPECQ_LMDEPLOY_COMPAT`. Unchanged when the files are patched on disk already."""
    if not compat.needs_hook:
        return env
    path = [str(BOOT_DIR), *(p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p)]
    return {**env, "PYTHONPATH": os.pathsep.join(path), ENV: PATCH.name}


def refusal(compat: CompatStatus, what: str) -> str | None:
    """None when `what` (e.g. 'a 4-bit Qwen3.5 target') can be served with `compat`; else one line."""
    if compat.ok or compat.state == "absent":  # absent: the lmdeploy preflight says so on its own
        return None
    return (
        f"{what} needs specq's LMDeploy compatibility patch ({PATCH.name}), which does not apply here: "
        f"{compat.summary()}"
    )


def require(what: str) -> CompatStatus:
    """The status, when `what` can be served with it; else EnvironmentMissing (exit 4) with one line."""
    compat = status()
    why = refusal(compat, what)
    if why:
        raise EnvironmentMissing(why)
    return compat
