"""`specq convert` through the Typer app: exit codes, stdout/stderr split, --json, the fix commands."""

from __future__ import annotations

import json
from pathlib import Path


def test_check_gptq_exit_0_with_fix(cli, make_ckpt) -> None:
    d = make_ckpt("gptq", name="t")
    code, out, err = cli("convert", str(d))
    assert code == 0, err
    assert "fixable" in out and "--to awq" in out
    assert "specq-manifest.json" in err


def test_speculative_gptq_not_ready_exit_2(cli, make_ckpt, make_draft) -> None:
    t, d = make_ckpt("gptq", name="t"), make_draft("dflash")
    code, out, err = cli("convert", str(t), "--draft-model", str(d), "--draft-tokens", "5", "--json")
    assert code == 2
    data = json.loads(out)
    assert data["report"]["ready"] is False
    lines = [ln for ln in err.splitlines() if ln.startswith("specq: error")]
    assert len(lines) == 1 and "--to awq" in err and "--dtype float16" in err


def test_repack_then_accepted(cli, make_ckpt, make_draft, tmp_path: Path) -> None:
    t, d = make_ckpt("gptq", name="t"), make_draft("dflash", dtype="float16")
    code, out, err = cli("convert", str(t), "--to", "awq", "--out", str(tmp_path / "t-awq"),
                         "--draft-model", str(d), "--draft-tokens", "5", "--json")  # fmt: skip
    assert code == 0, err
    data = json.loads(out)
    v = {x["engine"]: x["status"] for x in data["report"]["verdicts"]}
    assert v["pytorch"] == "accepted" and data["report"]["engine"] == "lmdeploy/pytorch"
    assert (tmp_path / "t-awq" / "specq-manifest.json").is_file()


def test_cast_cli(cli, make_draft, tmp_path: Path) -> None:
    d = make_draft("dflash")
    code, out, err = cli("convert", str(d), "--dtype", "float16", "--out", str(tmp_path / "fp16"))
    assert code == 0, err and "float16 copy" in out


def test_bad_flags_exit_2(cli, make_ckpt, tmp_path: Path) -> None:
    d = make_ckpt("gptq")
    code, _, err = cli("convert", str(d), "--to", "awq", "--dtype", "float16")
    assert code == 2 and "give one" in err
    code, _, err = cli("convert", str(tmp_path / "missing"))
    assert code == 2 and "not a directory" in err
    code, _, err = cli("convert", str(d), "--to", "gguf")
    assert code == 2


def test_engine_check_without_turbomind_exit_4(cli, make_ckpt) -> None:
    import importlib.util

    if importlib.util.find_spec("_turbomind") is not None:
        import pytest

        pytest.skip("TurboMind's native module is present here")
    code, _, err = cli("convert", str(make_ckpt("awq")), "--engine-check")
    assert code == 4 and "_turbomind" in err


def test_convert_does_not_import_torch(make_ckpt) -> None:
    import subprocess
    import sys

    d = make_ckpt("gptq")
    code = (
        "import sys\nfrom specq.cli.app import app\ntry:\n"
        f" app(['convert', {str(d)!r}, '--json'])\nexcept SystemExit: pass\n"
        "print('HEAVY', [m for m in ('torch', 'transformers', 'safetensors') if m in sys.modules])"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "HEAVY []" in res.stdout


def test_brackets_in_paths_are_printed_as_written(cli, make_ckpt) -> None:
    """Paths and pip extras (specq[quant]) are never read as rich markup."""
    d = make_ckpt("gptq", name="qwen[bold]")
    code, out, err = cli("convert", str(d))
    assert code == 0, err
    assert f"{d}: Qwen3ForCausalLM" in out
    assert f"fix for PyTorch engine: specq convert '{d}' --to awq --out '{d}-awq'" in out
    assert str(d / "specq-manifest.json") in err
