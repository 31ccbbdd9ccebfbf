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


# The one table of OS faults a user fixes, keyed by errno: what it means, said plainly, the error class (and
# so the exit code: 2 for a path to change, 4 for space to free) and the advice when the caller gives none.
_PATH, _SPACE = "use another path", "write somewhere else"
OS_FAULTS: dict[int, tuple[str, type[SpecqError], str]] = {
    errno.EACCES: ("permission denied", InputError, "fix its permissions (chmod/chown) or use another path"),
    errno.EPERM: ("permission denied", InputError, "fix its permissions (chmod/chown) or use another path"),
    errno.EROFS: ("read-only file system", InputError, "write to a writable location instead"),
    errno.ENOSPC: ("no space left on the device", EnvironmentMissing, _SPACE),
    errno.EDQUOT: ("disk quota exceeded, no space left on the device", EnvironmentMissing, _SPACE),
    errno.ENAMETOOLONG: ("a file name is too long (at most 255 bytes per name)", InputError, _PATH),
    errno.ENOTDIR: ("a part of the path is not a directory", InputError, _PATH),
    errno.EEXIST: ("already exists and is in the way", InputError, _PATH),
    errno.ELOOP: ("too many levels of symbolic links", InputError, _PATH),
    errno.EISDIR: ("is a directory where a file was expected", InputError, _PATH),
}
NO_SPACE = {code for code, (_, cls, _) in OS_FAULTS.items() if cls is EnvironmentMissing}


def os_error(
    exc: OSError, path: str | Path | None = None, *, fix: str | None = None, output: bool = False
) -> SpecqError | None:
    """The one-line SpecqError for an OS fault, from `OS_FAULTS` by errno, naming `path` (else
    `exc.filename`); `fix` replaces the default advice (e.g. 'choose another --out'). Any other errno is a
    bug (None), except on an `output` path: whatever stops specq writing where the user pointed it (a
    directory like /proc that takes no new files, a device that refuses writes) is the user's to change,
    exit 2 naming the path (4 for space, as above)."""
    where = path if path is not None else exc.filename
    at = f"{where}: " if where is not None else ""
    if exc.errno in OS_FAULTS:
        words, cls, default = OS_FAULTS[exc.errno]
        advice = fix or default
        if cls is EnvironmentMissing:
            advice = f"free some space or {advice}"
        return cls(f"{at}{words}; {advice}")
    if output and where is not None:
        reason = exc.strerror or type(exc).__name__
        return InputError(f"{at}cannot be written ({reason}); {fix or 'use another path'}")
    return None


def decode_error(exc: UnicodeDecodeError, path: str | Path, offset: int = 0) -> InputError:
    """A text input that is not UTF-8: where the first bad byte is (`offset`: where `exc.object` began in
    the file) and what to do."""
    return InputError(
        f"{path}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {offset + exc.start}); "
        "convert it to UTF-8 (e.g. iconv -t UTF-8) or pass another file"
    )
