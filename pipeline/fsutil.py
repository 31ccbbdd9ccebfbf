"""Artifacts are written to a temporary place beside their destination and moved into place only when
complete, so an error or Ctrl-C never leaves a half-written output behind."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from .errors import EnvironmentMissing, InputError, os_error


@contextlib.contextmanager
def atomic_dir(dest: str | Path, *, overwrite: bool = False) -> Iterator[Path]:
    """Yield a fresh temporary directory next to `dest`; rename it to `dest` when the block succeeds.

    With `overwrite`, an existing `dest` is replaced only after the new one is complete. Concurrent
    writers of the same `dest` are safe: the first complete one wins, later ones are discarded."""
    dest = Path(dest)
    if dest.exists() and not overwrite:
        raise InputError(f"{dest} already exists; choose another --out or remove it")
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".partial", dir=dest.parent))
    except OSError as e:
        raise (os_error(e, dest.parent, fix=_OUT_FIX) or e) from None
    try:
        try:
            yield tmp
        except OSError as e:  # writing the artifact: a full disk or read-only FS names the destination
            mapped = os_error(e, dest, fix=_OUT_FIX)
            if mapped is None:
                raise
            raise mapped from None
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
    """Write a file through a temporary sibling and an atomic rename. OS faults a user can fix (permission,
    read-only, full disk) come back as one-line SpecqErrors naming `path`."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    except OSError as e:
        raise (os_error(e, path) or e) from e
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError):
            raise (os_error(e, path) or e) from e
        raise
    return path


_OUT_FIX = "choose another --out"


def check_writable(dest: str | Path, *, need_bytes: int = 0, what: str = "--out") -> None:
    """Fail fast, before long work, when `dest` could not be written: its nearest existing ancestor must be a
    writable directory (probed by creating and removing a file there, which is what the kernel will judge,
    read-only file systems and root included) with at least `need_bytes` free."""
    dest = Path(dest).absolute()
    anc = dest.parent
    while not anc.exists() and anc != anc.parent:
        anc = anc.parent
    if not anc.is_dir():
        raise InputError(f"{what} {dest}: {anc} is not a directory; choose another {what}")
    fix = f"choose another {what}"
    try:
        fd, probe = tempfile.mkstemp(prefix=".specq-probe-", dir=anc)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise (os_error(e, anc, fix=fix) or e) from None
    if need_bytes:
        free = shutil.disk_usage(anc).free
        if free < need_bytes:
            raise EnvironmentMissing(
                f"{anc}: {free / 2**20:.0f} MiB free, {what} {dest} needs about {need_bytes / 2**20:.0f} MiB;"
                f" free some space or {fix}"
            )
