"""What an installed FA3 covers, read from a real `flash_attn_config.py` on sys.path (written the way
hopper/setup.py writes it, never imported), as `specq doctor` (and --json) reports it, and the gaps
`specq serve`'s preflight refuses on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specq.pipeline.fa3.installed import build_command, installed_coverage
from specq.pipeline.fa3.kernels import derive_needs
from tests.fa3files import AWQ, QWEN35_27B, README_BUILD, toy_configs, write_config, write_fa3_config

pytest.importorskip("transformers")


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Install a fake FA3 config (with these flags disabled) at the front of sys.path."""

    def put(disabled: set[str], source: str | None = None) -> Path:
        site = tmp_path / "site"
        path = write_fa3_config(site, disabled)
        (site / "flash_attn_interface.py").write_text("raise ImportError('not a real FA3')\n")
        if source:
            (site / "flash_attn_3").mkdir()
            (site / "flash_attn_3" / "specq_build.json").write_text(json.dumps({"source": source}))
        monkeypatch.syspath_prepend(str(site))
        return path

    return put


def test_coverage_of_the_readme_build(installed) -> None:
    path = installed(README_BUILD, source="/data/flash-attention")
    cov = installed_coverage()
    assert cov is not None and cov.config_path == str(path)
    assert cov.head_dims == [64] and cov.fp16 and cov.paged and cov.varlen
    assert not cov.sm80 and not cov.local and not cov.backward and not cov.fp8
    assert cov.source == "/data/flash-attention"
    assert cov.summary().startswith("head dims 64, bf16+fp16, paged on, varlen on, sm80 off")


def test_an_unreadable_config_is_no_coverage(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "flash_attn_config.py").write_text("CONFIG = compute()\n")  # not a literal: never executed
    monkeypatch.syspath_prepend(str(tmp_path))
    assert installed_coverage() is None


def test_gaps_for_models(installed, tmp_path: Path) -> None:
    installed(README_BUILD | {"FP16"})
    cov = installed_coverage()
    assert cov is not None
    target, _, dflash = toy_configs(tmp_path / "toy")
    assert cov.missing(derive_needs([target, dflash])) == []
    cfg = json.loads((target / "config.json").read_text())
    awq = write_config(tmp_path / "awq", cfg | {"quantization_config": AWQ})
    assert cov.missing(derive_needs([awq, dflash])) == [
        "fp16 (awq: AWQ target: LMDeploy's PyTorch engine runs it in fp16)",
        "fp16 (dflash: drafter runs in the target's dtype)",
    ]
    q35 = write_config(tmp_path / "q35", QWEN35_27B)
    assert cov.missing(derive_needs([q35])) == ["head dim 256 (q35)"]


def test_build_command_quotes_paths() -> None:
    assert build_command(["/m/my target", "/m/d"], None) == (
        "specq fa3 build --source FLASH_ATTENTION_DIR '/m/my target' /m/d"
    )
    assert build_command(["t"], "/src", "fp16") == "specq fa3 build --source /src t --dtype fp16"


def test_doctor_reports_the_installed_fa3(installed, cli) -> None:
    path = installed(README_BUILD)
    code, out, _ = cli("doctor", "--json")
    assert code in (0, 4)
    report = json.loads(out)
    assert report["fa3"]["config_path"] == str(path) and report["fa3"]["head_dims"] == [64]
    assert report["fa3"]["fp16"] is True and report["fa3"]["sm80"] is False
    check = next(c for c in report["checks"] if c["name"] == "flash-attention-3")
    assert check["status"] == "warn" and "not importable" in check["detail"]  # the fake interface raises
    assert "covers head dims 64, bf16+fp16" in check["detail"]
    assert "specq fa3 build --source" in check["fix"]
