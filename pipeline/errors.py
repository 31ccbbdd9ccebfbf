"""The one error hierarchy of specq. Library code raises these with a message a user can act on; the CLI
maps each class once to its documented exit code (see README, "Exit codes")."""

from __future__ import annotations

import errno
from pathlib import Path


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP reached specq: handled like Ctrl-C (partial results kept and marked incomplete,
    managed servers stopped), then exit 128 + the signal number."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


class SpecqError(Exception):
    """Base class. `exit_code` is what the CLI exits with; the message is shown as one line."""

    exit_code = 1


class UsageError(SpecqError):
    """Bad usage, configuration or input (exit 2)."""

    exit_code = 2


class ConfigError(UsageError):
    """A configuration file, variable or flag is invalid (exit 2)."""


class InputError(UsageError):
    """An input (model directory, data file, report) is missing or malformed (exit 2)."""


class GateFailed(SpecqError):
    """A benchmark gate (--min-speedup, --max-regression) was violated (exit 3)."""

    exit_code = 3


class EnvironmentMissing(SpecqError):
    """Something the machine lacks: a GPU, lmdeploy, FlashAttention-3, a backend (exit 4)."""

    exit_code = 4


class ProcessFailed(SpecqError):
    """A managed process (a server, a backend) failed (exit 5)."""

    exit_code = 5


EXIT_CODES = {
    0: "success",
    1: "unexpected error (a bug: rerun with SPECQ_DEBUG=1 and report it)",
    2: "bad usage, configuration or input",
    3: "a benchmark gate failed",
    4: "missing environment (GPU, lmdeploy, FlashAttention-3, a quantization backend, disk space)",
    5: "a managed process (server, backend) failed",
    129: "hung up (SIGHUP): partial results kept, managed servers stopped",
    130: "interrupted (Ctrl-C): partial results kept, managed servers stopped",
    143: "terminated (SIGTERM): partial results kept, managed servers stopped",
}


def missing_package(package: str, extra: str) -> EnvironmentMissing:
    """The standard error for an optional dependency that is not installed."""
    return EnvironmentMissing(
        f"the Python package '{package}' is not installed; install it with: pip install 'specq[{extra}]'"
    )


# errno values that are about the machine, not a bug: read-only file systems, full disks, permissions.
NO_SPACE = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}


def os_error(exc: OSError, path: str | Path | None = None, *, fix: str | None = None) -> SpecqError | None:
    """The one-line SpecqError for an OS fault a user can fix (permission denied, read-only file system,
    no space left), naming the path (`exc.filename`, else `path`); None for any other OSError (a bug).
    `fix` replaces the default advice (e.g. 'choose another --out')."""
    where = exc.filename if exc.filename is not None else path
    at = f"{where}: " if where is not None else ""
    if isinstance(exc, PermissionError) or exc.errno in (errno.EACCES, errno.EPERM):
        return InputError(
            f"{at}permission denied; {fix or 'fix its permissions (chmod/chown) or use another path'}"
        )
    if exc.errno == errno.EROFS:
        return InputError(f"{at}read-only file system; {fix or 'write to a writable location instead'}")
    if exc.errno in NO_SPACE:
        return EnvironmentMissing(
            f"{at}no space left on the device; free some space or {fix or 'write somewhere else'}"
        )
    if exc.errno in PATH_FAULTS:
        return InputError(f"{at}{PATH_FAULTS[exc.errno]}; {fix or 'use another path'}")
    return None


# Path faults a user fixes by naming another path: what each errno means, said plainly.
PATH_FAULTS = {
    errno.ENAMETOOLONG: "a file name is too long (at most 255 bytes per name)",
    errno.ENOTDIR: "a part of the path is not a directory",
    errno.EEXIST: "already exists and is in the way",
    errno.ELOOP: "too many levels of symbolic links",
    errno.EISDIR: "is a directory where a file was expected",
}


def decode_error(exc: UnicodeDecodeError, path: str | Path, offset: int = 0) -> InputError:
    """A text input that is not UTF-8: where the first bad byte is (`offset`: where `exc.object` began in
    the file) and what to do."""
    return InputError(
        f"{path}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {offset + exc.start}); "
        "convert it to UTF-8 (e.g. iconv -t UTF-8) or pass another file"
    )
