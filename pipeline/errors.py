"""The one error hierarchy of specq. Library code raises these with a message a user can act on; the CLI
maps each class once to its documented exit code (see README, "Exit codes")."""

from __future__ import annotations


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
    4: "missing environment (GPU, lmdeploy, FlashAttention-3, a quantization backend)",
    5: "a managed process (server, backend) failed",
}


def missing_package(package: str, extra: str) -> EnvironmentMissing:
    """The standard error for an optional dependency that is not installed."""
    return EnvironmentMissing(
        f"the Python package '{package}' is not installed; install it with: pip install 'specq[{extra}]'"
    )
