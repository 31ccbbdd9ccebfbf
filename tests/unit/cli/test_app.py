"""The CLI contract: commands exist, exit codes, one-line errors, stdout/stderr split, no torch on --help."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

COMMANDS = [
    "quantize",
    "convert",
    "serve",
    "bench",
    "plan",
    "report",
    "doctor",
    "config",
    "toy",
    "draft",
    "demo",
    "twin",
]


def test_help_lists_every_command(cli) -> None:
    code, out, _ = cli("--help")
    assert code == 0
    for name in COMMANDS:
        assert name in out


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_has_help_with_example(cli, name: str) -> None:
    code, out, _ = cli(name, "--help")
    assert code == 0, out
    assert "Example" in out or "Commands" in out


def test_help_does_not_import_torch() -> None:
    code = (
        "import sys; from specq.cli.app import app\ntry:\n app(['--help'])\nexcept SystemExit: pass\n"
        "bad = [m for m in ('torch', 'transformers', 'datasets', 'lmdeploy') if m in sys.modules]\n"
        "print('HEAVY', bad)"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "HEAVY []" in res.stdout


def test_config_show_reference_preset(cli) -> None:
    code, out, err = cli("config", "show", "--config", "rtx3090-qwen3.5-27b-awq-dflash", "--stage", "serve")
    assert code == 0, err
    assert "num_draft_tokens = 5" in out
    assert "[quantize]" not in out


def test_config_show_json_parses(cli) -> None:
    code, out, _ = cli("config", "show", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["engine"]["host"] == "127.0.0.1"


def test_unknown_key_one_line_exit_2(cli, tmp_path: Path) -> None:
    f = tmp_path / "c.toml"
    f.write_text("[model]\nnum_draft_token = 3\n")
    code, out, err = cli("config", "show", "--config", str(f))
    assert code == 2
    assert out == ""
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "num_draft_tokens" in lines[0]
    assert "Traceback" not in err


def test_unknown_stage_exit_2(cli) -> None:
    code, _, err = cli("config", "show", "--stage", "nope")
    assert code == 2 and "unknown stage" in err


def test_doctor_json_without_gpu(cli) -> None:
    code, out, _ = cli("doctor", "--json")
    assert code == 0
    data = json.loads(out)
    names = {c["name"] for c in data["checks"]}
    assert {"python", "torch", "flash-attention-3", "lmdeploy"} <= names
    if not data["gpus"]:
        gpu = next(c for c in data["checks"] if c["name"] == "gpu")
        assert gpu["status"] == "warn" and "no NVIDIA GPU" in gpu["detail"]


def test_version(cli) -> None:
    code, out, _ = cli("--version")
    assert code == 0 and out.startswith("specq ")


def test_console_script_installed() -> None:
    exe = Path(sys.executable).parent / "specq"
    res = subprocess.run([str(exe), "config", "show", "--stage", "nope"], capture_output=True, text=True)
    assert res.returncode == 2
    assert res.stderr.strip().count("\n") == 0


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["toy", "build"], "Missing argument 'OUT'. (see `specq toy build --help`)"),
        (["nope"], "No such command 'nope'."),
        (["bench", "--no-such-option"], "No such option: --no-such-option"),
    ],
)
def test_usage_errors_are_one_line(args: list[str], needle: str) -> None:
    exe = Path(sys.executable).parent / "specq"
    res = subprocess.run([str(exe), *args], capture_output=True, text=True)
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.count("\n") == 1 and res.stderr.startswith("specq: error: "), res.stderr
    assert needle in res.stderr


def test_import_noise_of_backends_is_quieted(cli) -> None:
    import logging

    code, _, _ = cli("config", "show", "--stage", "serve")
    assert code == 0
    assert logging.getLogger("torchao").getEffectiveLevel() == logging.ERROR
    assert logging.getLogger("torch.utils._pytree").getEffectiveLevel() == logging.ERROR


@pytest.mark.parametrize("quieted", [False, True])
def test_unawaited_coroutines_after_an_interrupt_do_not_reach_stderr(quieted: bool) -> None:
    # what anyio's cancelled connection attempts leave behind when Ctrl-C lands while httpx connects
    code = (
        "import gc\n"
        "from specq.cli.app import _quiet_unawaited_coroutines\n"
        + ("_quiet_unawaited_coroutines()\n" if quieted else "")
        + "async def try_connect(): pass\n"
        "c = try_connect(); del c; gc.collect()\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0
    assert ("was never awaited" in res.stderr) is not quieted, res.stderr


@pytest.mark.parametrize("debug", [False, True])
def test_what_an_interrupt_leaves_half_built_is_not_reported(debug: bool) -> None:
    # Ctrl-C landing inside a constructor (an event loop's, as `bench` started its requests) leaves an
    # object whose destructor fails when it is collected: "Exception ignored in ..." after the error line
    code = (
        "import os, signal\n"
        "from specq.cli.app import _terminate_like_interrupt\n"
        "_terminate_like_interrupt()\n"
        "class HalfBuilt:\n"
        "    def __init__(self):\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "        self.ready = True\n"
        "    def __del__(self):\n"
        "        self.ready\n"
        "try:\n"
        "    HalfBuilt()\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted')\n"
    )
    env = {**os.environ, "SPECQ_DEBUG": "1" if debug else "0"}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert res.returncode == 0 and res.stdout == "interrupted\n"
    assert ("Exception ignored" in res.stderr) is debug, res.stderr


def _options_by_flag() -> dict[str, dict[tuple, list[str]]]:
    """Every option of every command, grouped by its first flag: (flags, help, what it sets) → commands, where
    what it sets is the config key or request field it is made from (cli/_fields.py), else its parameter."""
    import typer.main

    from specq.cli._fields import flags_of
    from specq.cli.app import app

    found: dict[str, dict[tuple, list[str]]] = {}

    def walk(cmd, path: str) -> None:
        for name, sub in (getattr(cmd, "commands", None) or {}).items():
            walk(sub, f"{path} {name}")
        fields = {f.name: f.key for f in flags_of(getattr(cmd, "callback", None))}
        for p in cmd.params:
            if p.param_type_name == "option":
                key = (tuple(p.opts), p.help, fields.get(p.name, p.name))
                found.setdefault(p.opts[0], {}).setdefault(key, []).append(path)

    walk(typer.main.get_command(app), "specq")
    return found


def test_shared_options_have_one_declaration() -> None:
    found = _options_by_flag()
    for flag in ("--draft-model", "--backend", "--out", "--config", "--json"):
        assert len(found[flag]) == 1, f"{flag} is declared differently: {found[flag]}"
    # --method: the speculative method everywhere, except quantize's quantization method
    methods = {k: v for k, v in found["--method"].items() if v != ["specq quantize"]}
    assert len(methods) == 1, methods
    backend_users = [c for commands in found["--backend"].values() for c in commands]
    assert found["--quant-backend"] and "specq quantize" not in backend_users
    # --draft-tokens: the one K served or checked (model.draft_tokens), except bench's sweep of several
    tokens = {k: commands for k, commands in found["--draft-tokens"].items() if commands != ["specq bench"]}
    ((flags, _, name),) = tokens
    assert "-k" in flags and name == "model.draft_tokens"
    ((bench_flags, _, bench_key),) = [k for k, v in found["--draft-tokens"].items() if v == ["specq bench"]]
    assert bench_flags == flags and bench_key == "bench.draft_tokens"
    # --engine: the server to start, except plan's memory model
    engines = {key: commands for key, commands in found["--engine"].items() if commands != ["specq plan"]}
    assert len(engines) == 1, engines
    assert [name for (_, _, name) in found["--json"]] == ["as_json"]


def test_the_error_map_is_keyed_by_type_and_errno_not_by_message_text() -> None:
    """One table (cli/app.py ERRORS, OS faults by errno from pipeline/errors.py OS_FAULTS): a full disk is
    ENOSPC wherever it comes from; words that merely say so in a message decide nothing."""
    import errno

    from specq.cli.app import ERRORS, error_line
    from specq.pipeline.errors import GateFailed

    assert error_line(GateFailed("gate failed: x")) == ("gate failed: x", 3)
    line, code = error_line(OSError(errno.ENOSPC, "No space left on device", "/data/q"))
    assert code == 4 and line.startswith("/data/q: no space left on the device; free some space")
    assert error_line(PermissionError(errno.EACCES, "Permission denied", "/x"))[1] == 2
    assert error_line(OSError(errno.EROFS, "Read-only file system"))[1] == 2
    # a backend's own exception raised from (or while handling) the OSError: judged by its errno
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError as inner:
            raise RuntimeError("PytorchStreamWriter failed writing file") from inner
    except RuntimeError as wrapped:
        assert error_line(wrapped)[1] == 4
    # the message text alone is not an errno: a bug stays a bug (exit 1), whatever it says
    line, code = error_line(RuntimeError("No space left on device"))
    assert code == 1 and line.startswith("unexpected error: RuntimeError")
    assert error_line(OSError(errno.EIO, "Input/output error"))[1] == 1  # not a user's fault: a bug
    assert [kind for kind, _ in ERRORS][:2] == [GateFailed.__mro__[1], OSError]  # SpecqError first


def test_the_rust_io_error_of_safetensors_is_judged_by_its_errno(tmp_path: Path) -> None:
    """safetensors states an I/O failure's errno only as `(os error N)`: N decides, through OS_FAULTS."""
    torch = pytest.importorskip("torch")
    safetensors_torch = pytest.importorskip("safetensors.torch")
    from specq.cli.app import error_line

    try:  # a directory where the file goes: EISDIR from the Rust writer
        safetensors_torch.save_file({"a": torch.zeros(2)}, str(tmp_path))
    except Exception as e:
        line, code = error_line(e)
    assert code == 2 and "is a directory where a file was expected" in line and "SafetensorError" in line


def test_the_cli_imports_no_private_typer_module() -> None:
    """Usage errors are caught as `typer.TyperException`, Typer's public base, not through typer._click."""
    import specq.cli.app as app_module

    assert "typer._click" not in Path(app_module.__file__).read_text()
