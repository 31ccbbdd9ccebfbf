"""The `specq` Typer app: registers one module per command and maps every `SpecqError` to one line on
stderr and its exit code (tracebacks only with SPECQ_DEBUG=1)."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import sys
import traceback
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import typer
from rich.text import Text
from typer.core import TyperGroup, TyperOption

from specq.pipeline import __version__
from specq.pipeline.errors import SpecqError, Terminated, os_error
from specq.pipeline.printable import printable

from . import _common, _options


def _flag_type(self: TyperOption, ctx: Any) -> str | None:
    """Help shows a flag as its names (`--eval/--no-eval`, `--json`), without a `<bool>` type beside them."""
    return None if self.is_flag else _option_type(self, ctx)


_option_type = TyperOption.display_type_rich
TyperOption.display_type_rich = _flag_type  # type: ignore[method-assign]


class SpecqGroup(TyperGroup):
    """Root group whose invoke() is the one place where errors become exit codes."""

    def invoke(self, ctx: Any) -> Any:  # Typer's vendored click Context
        previous = _terminate_like_interrupt()
        unraisable_hook = sys.unraisablehook
        interrupted = False
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort, typer.TyperException):  # exits and usage errors: Typer's own
            raise
        except Terminated as e:
            interrupted = _interrupted()
            _fail(e, f"terminated by {signal.Signals(e.signum).name}", 128 + e.signum)
        except KeyboardInterrupt as e:
            interrupted = _interrupted()
            _fail(e, "interrupted", 130)
        except BrokenPipeError:
            # stdout was closed early (`specq ... | head`): not an error of ours; stop quietly
            _quiet_broken_pipe()
        except Exception as e:  # the one place a blind except belongs: nothing else may reach the user
            _fail(e, *error_line(e))
        finally:
            # after an interrupt the specq process is on its way out: a signal arriving now (a third
            # Ctrl-C) must not raise inside some destructor ("Exception ignored in ... __del__"), so they
            # stay ignored; an in-process caller (tests, CliRunner) gets its handlers back
            if not (interrupted and _Entry.running):
                for sig, old in previous.items():
                    signal.signal(sig, old)
                sys.unraisablehook = unraisable_hook

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        """Usage errors (unknown option, missing argument, bad choice) as one line on stderr, exit 2,
        instead of Typer's framed panel."""
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        try:
            rv = super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        except typer.Abort:
            _error_line("aborted")
            sys.exit(1)
        except typer.TyperException as e:  # click's usage errors (Typer's public base class)
            if not e.format_message().strip():  # bare `specq` / `specq toy`: the help is already shown
                sys.exit(e.exit_code)
            ctx = getattr(e, "ctx", None)
            hint = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
            _error_line(" ".join(e.format_message().split()) + hint)
            sys.exit(e.exit_code)
        # Without standalone mode an explicit exit comes back as its code; a command's return is not one.
        sys.exit(rv if isinstance(rv, int) else 0)


def _unexpected(e: BaseException) -> str:
    return f"unexpected error: {type(e).__name__}: {e} (rerun with SPECQ_DEBUG=1 and report it)"


def _os_fault(e: OSError) -> tuple[str, int] | None:
    mapped = os_error(e)  # by errno, from the one table of OS faults (pipeline/errors.py, OS_FAULTS)
    return (str(mapped), mapped.exit_code) if mapped is not None else None


def _rust_os_fault(e: Exception) -> tuple[str, int] | None:
    """safetensors' Rust core raises one exception type for every failure and states an I/O error's errno
    only as Rust's std::io::Error prints it, `(os error N)`: N is looked up like any errno."""
    found = re.search(r"\(os error (\d+)\)", str(e))
    if found is None:
        return None
    fault = OSError(int(found.group(1)), os.strerror(int(found.group(1))))
    mapped = _os_fault(fault)
    return (f"{mapped[0]} ({type(e).__name__})", mapped[1]) if mapped is not None else None


def _not_utf8(e: UnicodeDecodeError) -> tuple[str, int]:
    return f"an input is not UTF-8 text ({e.reason} at byte {e.start}); convert it to UTF-8", 2


# The one map from an error that reached the command line to its line and exit code, keyed by exception type
# (the first row whose type matches, checked for the error and then for each error it was raised from: a
# backend that wraps an OSError is judged by the OSError) and, for OS errors, by errno (OS_FAULTS: 2 for a
# path to change, 4 for a full disk). Rows that find nothing leave the error to the next; an error no row
# maps is a bug: exit 1 and the request to report it. Exits, usage errors and signals are handled before.
# A type of an optional package is named "module.QualName", so that the map imports nothing heavy.
ERRORS: tuple[tuple[type[BaseException] | str, Callable[[Any], tuple[str, int] | None]], ...] = (
    (SpecqError, lambda e: (str(e), e.exit_code)),
    (OSError, _os_fault),
    (UnicodeDecodeError, _not_utf8),
    ("safetensors._safetensors_rust.SafetensorError", _rust_os_fault),
)


def _is(e: BaseException, kind: type[BaseException] | str) -> bool:
    if isinstance(kind, str):
        return any(f"{t.__module__}.{t.__qualname__}" == kind for t in type(e).__mro__)
    return isinstance(e, kind)


def error_line(e: BaseException) -> tuple[str, int]:
    """(the one stderr line, the exit code) for `e`, from ERRORS."""
    seen: set[int] = set()
    cause: BaseException | None = e
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        for kind, describe in ERRORS:
            if _is(cause, kind) and (found := describe(cause)) is not None:
                return found
        cause = cause.__cause__ or cause.__context__
    return _unexpected(e), 1


def _terminate_like_interrupt() -> dict[int, Any]:
    """SIGTERM (`kill`, `timeout`, a CI runner) and SIGHUP (a closed terminal) unwind like Ctrl-C: every
    `finally` runs, so partial reports are written and managed servers stopped. Further INT/TERM/HUP
    signals are ignored while that cleanup runs."""

    def handler(signum: int, frame: Any) -> None:
        _interrupted()
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise Terminated(signum)

    previous: dict[int, Any] = {}
    for name in ("SIGINT", "SIGTERM", "SIGHUP"):
        sig = getattr(signal, name, None)
        if sig is None:  # no SIGHUP on Windows
            continue
        if name == "SIGINT" and signal.getsignal(sig) is not signal.default_int_handler:
            continue  # an ignored SIGINT (a background job) stays ignored, as its user asked
        try:
            previous[sig] = signal.signal(sig, handler)
        except (ValueError, OSError):  # not the main thread: nothing to install
            pass
    return previous


def _ignore_further_signals() -> bool:
    """Once one interrupt is being handled, a second Ctrl-C (or TERM/HUP) does not cut the cleanup short
    with a second traceback ("Exception ignored ..."): cleanup is bounded (servers get SIGKILL after a grace
    period)."""
    for name in ("SIGINT", "SIGTERM", "SIGHUP"):
        sig = getattr(signal, name, None)
        if sig is not None:
            with contextlib.suppress(ValueError, OSError):
                signal.signal(sig, signal.SIG_IGN)
    return True


def _interrupted() -> bool:
    """An interrupt is being handled: further signals are ignored, and what it left half-built is not
    reported (`_quiet_unraisable`)."""
    if os.environ.get("SPECQ_DEBUG") != "1":
        sys.unraisablehook = _quiet_unraisable
    return _ignore_further_signals()


def _quiet_unraisable(unraisable: Any) -> None:
    """An interrupt raises wherever Python happens to be, also inside a constructor (an event loop's, seen
    when Ctrl-C landed as `bench` started its requests); the half-built object's destructor then fails when
    it is collected, and Python prints "Exception ignored in ..." with a traceback after the one error
    line. The process is on its way out and the user has nothing to act on, so after an interrupt these
    stay unprinted (SPECQ_DEBUG=1 prints them)."""


def _quiet_broken_pipe() -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    raise typer.Exit(141)


def _fail(exc: BaseException, message: str, code: int) -> None:
    if os.environ.get("SPECQ_DEBUG") == "1":
        traceback.print_exception(exc)
    _error_line(" ".join(message.split("\n")[0].split()) or type(exc).__name__)
    raise typer.Exit(code)


def _error_line(line: str) -> None:
    """The one form every failure takes on stderr."""
    _common.err.print(Text.assemble(("specq: error: ", "bold red"), printable(line)), highlight=False)


app = typer.Typer(
    name="specq",
    cls=SpecqGroup,
    help="From checkpoint to a measured, faster LLM service on one GPU: quantize, convert, serve with "
    "speculative decoding, benchmark.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)


def _version(value: bool) -> None:
    if value:
        _common.out.print(f"specq {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    verbose: _options.VerboseOpt = False,
    quiet: _options.QuietOpt = False,
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Show the version."
    ),
) -> None:
    _common.State.verbose = verbose
    _common.State.quiet = quiet
    if not verbose:
        # Backends such as gptqmodel set the root logger to INFO; one line per HTTP request drowns progress.
        for name in ("httpx", "httpcore"):
            logging.getLogger(name).setLevel(logging.WARNING)
        # torchao (pulled in by gptqmodel) warns at import about CUDA-only kernels it cannot load on a CPU
        # build, and torch about its enum registrations: noise for every command that imports transformers.
        for name in ("torchao", "torch.utils._pytree"):
            logging.getLogger(name).setLevel(logging.ERROR)
        _quiet_data_libraries()


def _quiet_data_libraries() -> None:
    """datasets draws a "Generating train split" bar for every local file it reads (and logs "Failed to read
    schema" before it raises for a damaged Parquet file, which specq reports in its own line),
    huggingface_hub logs each retry of an unreachable hub, transformers draws a "Loading weights" bar for
    every model it loads and warns as it loads a tokenizer, and pyarrow may warn as it is imported: stderr
    noise around the one line that matters (with --verbose all of it is shown)."""
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # transformers' loading bars read it too
    os.environ.setdefault("HF_HUB_VERBOSITY", "error")  # the libraries set their own levels at import
    os.environ.setdefault("DATASETS_VERBOSITY", "critical")  # its errors are raised as well as logged
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # e.g. its model-type notice for a tokenizer
    for name in ("huggingface_hub", "fsspec", "pyarrow"):
        logging.getLogger(name).setLevel(logging.ERROR)
    logging.getLogger("datasets").setLevel(logging.CRITICAL)
    if "transformers" in sys.modules:  # imported already (an in-process caller): its bar is decided
        sys.modules["transformers"].utils.logging.disable_progress_bar()
    warnings.filterwarnings("ignore", module=r"pyarrow(\.|$)")
    warnings.filterwarnings("ignore", message=r".*pyarrow.*", category=FutureWarning)


def _register() -> None:
    """The one place commands join the app: a function becomes `specq NAME`, a Typer app a group of
    subcommands (`specq NAME SUB`), each declared with decorators in its own module. Command modules stay
    light: heavy imports live in the pipeline functions they call."""
    from . import bench, config, convert, demo, doctor, draft, fa3, plan, quantize, report, serve, toy, twin

    commands: dict[str, Callable[..., Any] | typer.Typer] = {
        "quantize": quantize.quantize, "convert": convert.convert, "serve": serve.serve_app,
        "bench": bench.bench, "plan": plan.plan, "report": report.report_app, "doctor": doctor.doctor,
        "config": config.config_app, "toy": toy.toy_app, "draft": draft.draft_app, "fa3": fa3.fa3_app,
        "demo": demo.demo, "twin": twin.twin,
    }  # fmt: skip
    for name, entry in commands.items():
        if isinstance(entry, typer.Typer):
            app.add_typer(entry, name=name)
        else:
            app.command(name)(entry)


_register()


def _quiet_unawaited_coroutines() -> None:
    """A Ctrl-C or SIGTERM that lands while httpx is connecting leaves anyio's happy-eyeballs attempts
    (`connect_tcp.<locals>.try_connect`) never awaited, and Python warns about each when it collects them,
    on stderr, after the one-line error (seen in the SIGINT fault test). Harmless, and not the user's to act
    on: keep stderr to the one line."""
    warnings.filterwarnings("ignore", message=r"coroutine '.*' was never awaited", category=RuntimeWarning)


class _Entry:
    running = False  # set by `main`, the console script: the process ends when the command does


def main() -> None:
    """Console-script entry point."""
    _Entry.running = True
    _quiet_unawaited_coroutines()
    try:
        app()
    except BrokenPipeError:  # raised while Typer itself writes (--help | head)
        _quiet_broken_pipe()
    finally:  # a Ctrl-C while the interpreter shuts down would print "Exception ignored in ..."
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            _ignore_further_signals()
