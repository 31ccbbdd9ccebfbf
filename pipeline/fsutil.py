"""Artifacts are written to a temporary place beside their destination and moved into place only when
complete, so an error or Ctrl-C never leaves a half-written output behind."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from .errors import InputError


@contextlib.contextmanager
def atomic_dir(dest: str | Path, *, overwrite: bool = False) -> Iterator[Path]:
    """Yield a fresh temporary directory next to `dest`; rename it to `dest` when the block succeeds.

    With `overwrite`, an existing `dest` is replaced only after the new one is complete. Concurrent
    writers of the same `dest` are safe: the first complete one wins, later ones are discarded."""
    dest = Path(dest)
    if dest.exists() and not overwrite:
        raise InputError(f"{dest} already exists; choose another --out or remove it")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".partial", dir=dest.parent))
    try:
        yield tmp
        if dest.exists() and overwrite:
            old = dest.with_name(f".{dest.name}.old-{os.getpid()}")
            dest.rename(old)
            tmp.rename(dest)
            shutil.rmtree(old, ignore_errors=True)
        else:
            try:
                tmp.rename(dest)
            except OSError:
                if not dest.exists():
                    raise
                # another writer finished first; its result is equivalent
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write a file through a temporary sibling and an atomic rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path
