"""Artifacts are written to a temporary place beside their destination and moved into place only when
complete, so an error or Ctrl-C never leaves a half-written output behind."""

from __future__ import annotations

import contextlib
import fcntl
import glob
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

from .errors import EnvironmentMissing, InputError, SpecqError, os_error
from .progress import Progress, null_progress


@contextlib.contextmanager
def atomic_dir(
    dest: str | Path, *, overwrite: bool = False, progress: Progress = null_progress
) -> Iterator[Path]:
    """Yield a fresh temporary directory next to `dest`; rename it to `dest` when the block succeeds.

    With `overwrite`, an existing `dest` is replaced only after the new one is complete. Concurrent
    writers of the same `dest` are safe: the first complete one wins, later ones are discarded. What an
    earlier run killed beside `dest` left (its temporaries) is removed first, and `progress` says so."""
    dest = Path(dest)
    if dest.exists() and not overwrite:
        raise InputError(f"{dest} already exists; choose another --out or remove it")
    say_removed(dest, remove_stale_temporaries(dest), progress)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        held = temporary_dir(dest, ".partial")
        tmp = held.__enter__()
        os.chmod(tmp, 0o777 & ~umask())  # mkdtemp makes it 0700; the result is the user's, as mkdir's
    except OSError as e:
        raise (os_error(e, dest.parent, fix=_OUT_FIX, output=True) or e) from None
    try:
        try:
            yield tmp
        except OSError as e:  # writing the artifact: a full disk or read-only FS names the destination
            mapped = os_error(e, dest, fix=_OUT_FIX, output=True)
            if mapped is None:
                raise
            raise mapped from None
        apply_umask(tmp)
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
        held.__exit__(None, None, None)


# Every temporary a writer makes beside its destination is named `.{dest name}.{pid}.{random}{suffix}` and is
# held under an flock for the writer's life. The kernel drops the lock when the process dies, however it
# died (SIGKILL, an OOM kill, a power cut), so a later run tells an abandoned temporary (unlocked, its
# process gone) from a live writer's and removes it.
TEMP_SUFFIXES = (".partial", ".work")


@contextlib.contextmanager
def temporary_dir(dest: str | Path, suffix: str = ".work") -> Iterator[Path]:
    """A fresh directory beside `dest` in specq's temporary naming, held (flock) while in use and removed
    afterwards: scratch space that a killed run's successor can recognise as abandoned."""
    dest = Path(dest)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.{os.getpid()}.", suffix=suffix, dir=dest.parent))
    fd = _hold(tmp)
    try:
        yield tmp
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
        os.close(fd)


def _hold(path: Path | str) -> int:
    fd = os.open(path, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _abandoned(path: Path, name: str) -> bool:
    """No process holds `path` (a temporary of `name`'s) and the one its name records is gone."""
    m = re.match(rf"\.{re.escape(name)}\.(\d+)\.", path.name)
    pid = int(m.group(1)) if m is not None else None
    if pid is not None and (pid == os.getpid() or _alive(pid)):
        return False  # its writer lives (it may be between creating it and taking the lock)
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False  # held: a live writer's
    finally:
        os.close(fd)
    return True


def remove_stale_temporaries(dest: str | Path) -> list[str]:
    """Remove what runs killed while writing `dest` left beside it: specq's `.partial` and `.work`
    temporaries that no live process holds, and `.old-PID` copies whose process is gone. Returns their
    names (a caller says so); anything else, and anything in use, is left alone."""
    dest = Path(dest)
    if not dest.parent.is_dir():
        return []
    removed = []
    for p in sorted(dest.parent.glob(glob.escape(f".{dest.name}.") + "*")):
        rest = p.name[len(dest.name) + 2 :]
        old = re.fullmatch(r"old-(\d+)", rest)
        if old is not None:
            stale = not _alive(int(old.group(1)))
        elif p.name.endswith(TEMP_SUFFIXES):
            stale = _abandoned(p, dest.name)
        else:
            continue
        if not stale:
            continue
        try:
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            else:
                p.unlink()
        except OSError:
            continue
        removed.append(p.name)
    return removed


def say_removed(dest: Path, removed: list[str], progress: Progress) -> None:
    if removed:
        what = "temporary" if len(removed) == 1 else f"{len(removed)} temporaries"
        progress(f"removed the {what} an interrupted run left beside {dest}: {', '.join(removed)}")


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write a file through a temporary sibling and an atomic rename. OS faults of the path (permission,
    read-only, full disk, a directory that takes no files) come back as one-line SpecqErrors naming `path`.
    A rename replaces what it lands on, so what is not a regular file is never renamed over: a device or a
    pipe (/dev/stdout, /dev/null, a FIFO) is written in place, and a symbolic link keeps pointing where it
    did, its target written through a sibling of the target."""
    given = path = Path(path)
    try:
        mode = os.stat(path).st_mode  # follows links
    except OSError:
        mode = None
    if mode is not None and stat.S_ISDIR(mode):
        raise InputError(f"{path}: is a directory where a file was expected; name a file")
    if mode is not None and not stat.S_ISREG(mode):
        try:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        except OSError as e:
            raise (os_error(e, path, output=True) or e) from None
        return given
    if path.is_symlink():  # a dangling one too: it names where the file goes
        path = path.resolve()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(path)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=".partial", dir=path.parent)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        raise (os_error(e, given, output=True) or e) from e
    try:
        os.fchmod(fd, 0o666 & ~umask())  # mkstemp makes it 0600; the result is the user's, as open()'s
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError):
            raise (os_error(e, given, output=True) or e) from e
        raise
    return given


_OUT_FIX = "choose another --out"


def cache_root() -> Path:
    """specq's cache: $SPECQ_CACHE, else ~/.cache/specq. One that exists and is not a directory (or sits
    under a file) is an InputError naming the variable."""
    env = os.environ.get("SPECQ_CACHE")
    root = Path(env) if env else Path.home() / ".cache" / "specq"
    anc = root
    while not anc.exists() and anc != anc.parent:
        anc = anc.parent
    if not anc.is_dir():
        where = f"SPECQ_CACHE={env}" if env else str(root)
        raise InputError(f"{where}: {anc} is not a directory; point SPECQ_CACHE at a directory")
    return root


def apply_umask(root: Path) -> None:
    """Give everything under `root` the mode a fresh file or directory would get under the user's umask
    (copies keep their source's mode, temporary files start at 0600/0700); executables stay executable."""
    mask = umask()
    for dirpath, _dirnames, filenames in os.walk(root):
        os.chmod(dirpath, 0o777 & ~mask)
        for name in filenames:
            p = os.path.join(dirpath, name)
            if not os.path.islink(p):
                executable = os.stat(p).st_mode & 0o111
                os.chmod(p, (0o777 if executable else 0o666) & ~mask)


def umask() -> int:
    """The process's umask (read from /proc where it can be, so it is never changed, even briefly)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_files(dest_dir: str | Path) -> Iterator[Path]:
    """Yield a temporary directory inside `dest_dir`; when the block succeeds, move everything written there
    into `dest_dir` (files and directories replace those of the same name), so a set of files (a report,
    its table and plots) appears whole or not at all. OS faults name `dest_dir`."""
    dest_dir = Path(dest_dir)
    try:
        dest_dir.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(dest_dir / "specq-files")  # `.specq-files.PID.*.partial` of killed runs
        tmp = Path(tempfile.mkdtemp(prefix=f".specq-files.{os.getpid()}.", suffix=".partial", dir=dest_dir))
        held = _hold(tmp)
        os.chmod(tmp, 0o777 & ~umask())
    except OSError as e:
        raise (os_error(e, dest_dir, fix=_OUT_FIX, output=True) or e) from None
    try:
        try:
            yield tmp
            for item in sorted(tmp.iterdir()):
                target = dest_dir / item.name
                if item.is_dir() and target.is_dir():
                    remove_stale_temporaries(target)  # an `.old-PID` copy a killed run left
                    old = dest_dir / f".{item.name}.old-{os.getpid()}"
                    target.rename(old)
                    item.rename(target)
                    shutil.rmtree(old, ignore_errors=True)
                else:
                    os.replace(item, target)
        except (OSError, SpecqError) as e:
            # a fault while writing names the destination, not the temporary file it happened in
            cause = e if isinstance(e, OSError) else e.__cause__
            if not isinstance(cause, OSError):
                raise
            mapped = os_error(OSError(cause.errno, cause.strerror), dest_dir, fix=_OUT_FIX, output=True)
            if mapped is None:
                raise
            raise mapped from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        os.close(held)


def check_writable(dest: str | Path, *, need_bytes: int = 0, what: str = "--out") -> None:
    """Fail fast, before long work, when `dest` could not be written: its nearest existing ancestor must be a
    writable directory (probed by creating and removing a file there, which is what the kernel will judge,
    read-only file systems and root included) with at least `need_bytes` free."""
    dest = Path(dest).absolute()
    fix = f"choose another {what}"
    if dest.is_symlink() and not dest.exists():
        raise InputError(
            f"{what} {dest}: a dangling symbolic link (to {os.readlink(dest)}); remove it or {fix}"
        )
    if any(len(os.fsencode(part)) > 255 for part in dest.parts):
        raise InputError(f"{what} {dest}: a file name is too long (at most 255 bytes per name); {fix}")
    if dest.exists() and not dest.is_dir():
        raise InputError(f"{what} {dest}: exists and is not a directory; {fix}")
    anc = dest.parent
    while not anc.exists() and anc != anc.parent:
        anc = anc.parent
    if not anc.is_dir():
        raise InputError(f"{what} {dest}: {anc} is not a directory; choose another {what}")
    try:
        fd, probe = tempfile.mkstemp(prefix=".specq-probe-", dir=anc)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        mapped = os_error(e, anc, fix=fix)
        raise (
            mapped or InputError(f"{what} {dest}: cannot create files in {anc} ({e.strerror}); {fix}")
        ) from None
    if need_bytes:
        free = shutil.disk_usage(anc).free
        if free < need_bytes:
            raise EnvironmentMissing(
                f"{anc}: {free / 2**20:.0f} MiB free, {what} {dest} needs about {need_bytes / 2**20:.0f} MiB;"
                f" free some space or {fix}"
            )
