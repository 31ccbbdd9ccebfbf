"""`specq serve` through the Typer app: routing of MODEL vs. subcommands, --dry-run output, exit codes."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECQ_STATE_DIR", str(tmp_path / "state"))


def test_dry_run_prints_exact_command(cli, ckpts: dict[str, Path]) -> None:
    code, out, err = cli(
        "serve",
        str(ckpts["target"]),
        "--draft-model",
        str(ckpts["dflash"]),
        "--draft-tokens",
        "4",
        "--engine",
        "lmdeploy",
        "--port",
        "24000",
        "--dry-run",
    )
    assert code == 0, err
    line = out.strip().splitlines()[0]
    assert line.startswith(
        f"{sys.executable} -m lmdeploy serve api_server {ckpts['target']} --backend pytorch"
    )
    assert "--speculative-algorithm dflash" in line and "--speculative-num-draft-tokens 4" in line
    assert "[model]" in err and "num_draft_tokens = 4" in err


def test_dry_run_json(cli, ckpts: dict[str, Path]) -> None:
    code, out, _ = cli(
        "serve", str(ckpts["target"]), "--engine", "embedded", "--port", "24001", "--dry-run", "--json"
    )
    assert code == 0
    data = json.loads(out)
    assert data["engine"] == "embedded" and data["url"] == "http://127.0.0.1:24001"
    assert data["command"][1:3] == ["-m", "specq.pipeline.serve.embedded"]
    assert data["config"]["engine"]["port"] == 24001


def test_dry_run_lets_go_of_the_port_it_picked(cli, ckpts: dict[str, Path]) -> None:
    """A port `free_port` picks is held until its server is ready; a dry run starts none, so it holds none."""
    from specq.pipeline.serve import process

    code, out, _ = cli("serve", str(ckpts["target"]), "--engine", "embedded", "--dry-run", "--json")
    assert code == 0
    port = int(json.loads(out)["url"].rsplit(":", 1)[1])
    assert port not in process._HELD


def test_bench_checks_let_go_of_the_ports_they_picked(ckpts: dict[str, Path], tmp_path: Path) -> None:
    """bench checks every planned server before it writes anything, starting none: no port stays held, even
    when a check refuses (these checkpoints have no weights)."""
    from specq.pipeline.bench import BenchRequest
    from specq.pipeline.bench.runner import check_servers
    from specq.pipeline.config.models import SpecqConfig
    from specq.pipeline.errors import InputError
    from specq.pipeline.serve import process

    cfg = SpecqConfig()
    cfg.model.model_path = str(ckpts["target"])
    cfg.engine.engine = "embedded"
    held = set(process._HELD)
    with pytest.raises(InputError, match="no .safetensors weights"):
        check_servers(BenchRequest.from_config(cfg), None, tmp_path / "out")
    assert set(process._HELD) == held


def test_dry_run_masks_api_keys(cli, ckpts: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SERVE_KEY", "topsecret")
    code, out, err = cli("serve", str(ckpts["target"]), "--engine", "lmdeploy", "--api-keys-env", "SERVE_KEY",
                         "--dry-run")  # fmt: skip
    assert code == 0
    assert "topsecret" not in out + err
    assert "--api-keys '***'" in out


def test_dry_run_reports_incompatibility_exit_2(cli, ckpts: dict[str, Path]) -> None:
    code, out, err = cli("serve", str(ckpts["target"]), "--draft-model", str(ckpts["dflash"]), "-k", "9",
                         "--engine", "lmdeploy", "--dry-run")  # fmt: skip
    assert code == 2
    assert "block_size 8 allows at most 7 draft tokens" in err
    assert len(err.strip().splitlines()) == 1


def test_method_needing_draft_without_one(cli, ckpts: dict[str, Path]) -> None:
    code, _, err = cli("serve", str(ckpts["target"]), "--method", "dflash", "-k", "4", "--engine", "lmdeploy",
                       "--dry-run")  # fmt: skip
    assert code == 2 and "needs a draft model" in err


def test_gptq_speculative_dry_run_gives_repack_advice(cli, ckpts: dict[str, Path]) -> None:
    code, _, err = cli("serve", str(ckpts["gptq"]), "--draft-model", str(ckpts["dflash"]), "-k", "4",
                       "--engine", "lmdeploy", "--dry-run")  # fmt: skip
    assert code == 2 and "specq convert" in err and "--to awq" in err


def test_missing_model_is_exit_2(cli, tmp_path: Path) -> None:
    code, _, err = cli("serve", str(tmp_path / "nope"), "--dry-run")
    assert code == 2 and "not a directory" in err
    code, _, err = cli("serve", "--dry-run")
    assert code == 2 and "no model to serve" in err


def test_launch_without_lmdeploy_is_exit_4(
    cli, ckpts: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from specq.pipeline import hardware

    monkeypatch.setattr(hardware, "lmdeploy_version", lambda: None)
    code, _, err = cli("serve", str(ckpts["target"]), "--engine", "lmdeploy")
    assert code == 4 and "lmdeploy is not installed" in err


def test_port_in_use_is_one_line_error(cli, ckpts: dict[str, Path]) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        code, _, err = cli("serve", str(ckpts["target"]), "--engine", "embedded", "--port", str(port))
    assert code == 2
    assert f"port {port} on 127.0.0.1 is already in use" in err
    assert len(err.strip().splitlines()) == 1


def test_status_and_stop_with_nothing_running(cli) -> None:
    code, out, err = cli("serve", "status", "--json")
    assert code == 0 and json.loads(out) == []
    code, _, err = cli("serve", "stop", "--port", "1")
    assert code == 2 and "no detached specq server on port 1" in err


def test_help_shows_model_options_and_subcommands(cli) -> None:
    code, out, _ = cli("serve", "--help")
    assert code == 0
    for needle in ("--draft-tokens", "--dry-run", "--detach", "serve status", "serve stop", "Example"):
        assert needle in out
