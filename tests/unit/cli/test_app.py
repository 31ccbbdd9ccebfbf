"""The CLI contract: commands exist, exit codes, one-line errors, stdout/stderr split, no torch on --help."""

from __future__ import annotations

import json
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


def _options_by_flag() -> dict[str, dict[tuple, list[str]]]:
    """Every option of every command, grouped by its first flag: (flags, help, parameter name) → commands."""
    import typer.main

    from specq.cli.app import app

    found: dict[str, dict[tuple, list[str]]] = {}

    def walk(cmd, path: str) -> None:
        for name, sub in (getattr(cmd, "commands", None) or {}).items():
            walk(sub, f"{path} {name}")
        for p in cmd.params:
            if p.param_type_name == "option":
                key = (tuple(p.opts), p.help, p.name)
                found.setdefault(p.opts[0], {}).setdefault(key, []).append(path)

    walk(typer.main.get_command(app), "specq")
    return found


def test_shared_options_have_one_declaration() -> None:
    found = _options_by_flag()
    for flag in ("--draft-model", "--draft-tokens", "--engine", "--backend", "--out", "--config", "--json"):
        assert len(found[flag]) == 1, f"{flag} is declared differently: {found[flag]}"
    # --method: the speculative method everywhere, except quantize's quantization method
    methods = {k: v for k, v in found["--method"].items() if v != ["specq quantize"]}
    assert len(methods) == 1, methods
    backend_users = [c for commands in found["--backend"].values() for c in commands]
    assert found["--quant-backend"] and "specq quantize" not in backend_users
    ((flags, _, name),) = found["--draft-tokens"]
    assert "-k" in flags and name == "draft_tokens"
    assert [name for (_, _, name) in found["--json"]] == ["as_json"]
