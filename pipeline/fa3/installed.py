"""What the FlashAttention-3 installed in this environment covers, read from its `flash_attn_config.py`
(written by hopper/setup.py: `CONFIG["build_flags"]`) without importing the CUDA module: the file is found
with importlib's finder and its CONFIG literal parsed. And what a set of models needs that it lacks, with
the `specq fa3 build` command that builds it."""

from __future__ import annotations

import ast
import importlib.util
import json
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from .kernels import HDIM_BUCKETS, Dtype, ModelNeed

CONFIG_MODULE = "flash_attn_config"
INTERFACE_MODULE = "flash_attn_interface"


class Fa3Coverage(BaseModel):
    """The installed FA3's kernels. `head_dims` are the buckets built; a head dim runs in the smallest
    built bucket that holds it."""

    config_path: str
    interface_path: str | None
    head_dims: list[int]
    bf16: bool = True  # setup.py cannot disable bf16
    fp16: bool
    fp8: bool
    paged: bool
    varlen: bool
    sm80: bool
    local: bool
    softcap: bool
    split: bool
    packgqa: bool
    backward: bool
    source: str | None = None  # the checkout specq built it from, when specq built it

    def covers_head_dim(self, head_dim: int) -> bool:
        return any(head_dim <= h for h in self.head_dims)

    def summary(self) -> str:
        on = [f"head dims {'/'.join(map(str, self.head_dims)) or 'none'}"]
        on.append("bf16+fp16" if self.fp16 else "bf16 only")
        for name in ("paged", "varlen", "sm80", "local", "softcap"):
            on.append(f"{name} {'on' if getattr(self, name) else 'off'}")
        return ", ".join(on)

    def missing(self, needs: Sequence[ModelNeed]) -> list[str]:
        """What the models need that this build lacks, one phrase each."""
        gaps: list[str] = []
        for n in needs:
            name = Path(n.path).name
            for h in n.head_dims:
                if not self.covers_head_dim(h):
                    gaps.append(f"head dim {h} ({name})")
            if "fp16" in n.dtypes and not self.fp16:
                gaps.append(f"fp16 ({name}: {n.dtype_reason})")
            if n.local and not self.local:
                gaps.append(f"sliding-window attention ({name})")
            if n.softcap and not self.softcap:
                gaps.append(f"softcap ({name})")
        if needs and not (self.paged and self.varlen):
            gaps.append("paged KV and varlen (LMDeploy calls both)")
        return list(dict.fromkeys(gaps))


def _module_file(name: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    return Path(spec.origin) if spec is not None and spec.origin and spec.origin != "built-in" else None


def read_config(path: Path) -> dict[str, Any] | None:
    """`CONFIG` from a flash_attn_config.py, parsed as a literal (never executed)."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "CONFIG" for t in node.targets
        ):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                return None
            return value if isinstance(value, dict) else None
    return None


def installed_coverage() -> Fa3Coverage | None:
    """The installed FA3's coverage, or None when no readable flash_attn_config is on the path."""
    path = _module_file(CONFIG_MODULE)
    if path is None:
        return None
    config = read_config(path)
    flags = config.get("build_flags") if config else None
    if not isinstance(flags, dict):
        return None

    def off(name: str) -> bool:
        return bool(flags.get(f"FLASHATTENTION_DISABLE_{name}", False))

    interface = _module_file(INTERFACE_MODULE)
    return Fa3Coverage(
        config_path=str(path),
        interface_path=str(interface) if interface else None,
        head_dims=[h for h in HDIM_BUCKETS if not off(f"HDIM{h}")],
        fp16=not off("FP16"),
        fp8=not off("FP8"),
        paged=not off("PAGEDKV"),
        varlen=not off("VARLEN"),
        sm80=not off("SM8x"),
        local=not off("LOCAL"),
        softcap=not off("SOFTCAP"),
        split=not off("SPLIT"),
        packgqa=not off("PACKGQA"),
        backward=not off("BACKWARD"),
        source=_built_from(interface),
    )


def _built_from(interface: Path | None) -> str | None:
    """The checkout a specq-built FA3 came from (its build record beside the package)."""
    if interface is None:
        return None
    record = interface.parent / "flash_attn_3" / "specq_build.json"
    try:
        source = json.loads(record.read_text(encoding="utf-8")).get("source")
    except (OSError, ValueError, AttributeError):
        return None
    return str(source) if source else None


def build_command(models: Sequence[str | Path], source: str | None = None, dtype: Dtype | None = None) -> str:
    """The `specq fa3 build` command for these models (FLASH_ATTENTION_DIR when the checkout is unknown)."""
    argv = ["specq", "fa3", "build", "--source", source or "FLASH_ATTENTION_DIR", *map(str, models)]
    if dtype:
        argv += ["--dtype", dtype]
    return shlex.join(argv)
