"""`specq plan` as a user runs it: table and JSON on stdout, exit codes, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .reference import write_reference

PRESET = "rtx3090-qwen3.5-27b-awq-dflash"


@pytest.fixture(scope="module")
def ref(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The reference target with a 2-layer drafter (the public 5-layer one does not fit 24 GiB)."""
    return write_reference(tmp_path_factory.mktemp("cli"), draft_layers=2)


def test_json_parses_and_fits(cli, ref: tuple[Path, Path]) -> None:
    t, d = ref
    code, out, err = cli("plan", str(t), "--draft-model", str(d), "--gpu-memory", "24GiB",
                         "--session-len", "8192", "--draft-tokens", "5", "--json")  # fmt: skip
    assert code == 0, err
    doc = json.loads(out)
    assert doc["fits"] is True and doc["engine"] == "lmdeploy"
    assert doc["draft"]["kind"] == "dflash" and doc["target"]["linear_attention_layers"] == 48
    assert doc["gpu_memory_bytes"] == 24 * 2**30


def test_table_and_recommendation(cli, ref: tuple[Path, Path]) -> None:
    t, d = ref
    code, out, _ = cli("plan", str(t), "--draft-model", str(d), "--config", PRESET)
    assert code == 0
    assert "target weights" in out and "KV cache" in out and "linear-attention state" in out
    assert "recommended: --cache-max-entry-count" in out


def test_will_not_fit_is_data_unless_check(cli, ref: tuple[Path, Path]) -> None:
    t, _ = ref
    code, out, _ = cli("plan", str(t), "--gpu-memory", "16GiB", "--json")
    assert code == 0 and json.loads(out)["fits"] is False
    code, out, err = cli("plan", str(t), "--gpu-memory", "16GiB", "--check", "--json")
    assert code == 4
    assert json.loads(out)["fits"] is False  # the plan is still printed
    assert err.count("\n") == 1 and "will not fit" in err


def test_check_passes_when_it_fits(cli, ref: tuple[Path, Path]) -> None:
    t, _ = ref
    code, _, err = cli("plan", str(t), "--gpu-memory", "80GiB", "--session-len", "8192", "--check")
    assert code == 0, err


@pytest.mark.parametrize("bad", ["24", "lots", "24GiBs"])
def test_bad_gpu_memory_is_one_line_exit_2(cli, ref: tuple[Path, Path], bad: str) -> None:
    code, out, err = cli("plan", str(ref[0]), "--gpu-memory", bad)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "--gpu-memory" in err and "Traceback" not in err


def test_bad_engine_and_missing_model(cli, tmp_path: Path) -> None:
    code, _, err = cli("plan", str(tmp_path), "--gpu-memory", "24GiB")
    assert code == 2 and "config.json" in err
    code, _, err = cli("plan", "--gpu-memory", "24GiB")
    assert code == 2 and "no model" in err
    code, _, err = cli("plan", str(tmp_path), "--engine", "vllm", "--gpu-memory", "24GiB")
    assert code == 2 and "engine" in err


def test_a_given_cache_ratio_is_evaluated_not_recommended(cli, ref: tuple[Path, Path]) -> None:
    """What a server runs with (specq serve: engine.cache_max_entry_count 0.8) is what a plan must be compared
    with: on the H200 the recommended 0.95 read 18 % above the NVML peak of a 0.8 server."""
    t, d = ref
    args = ("plan", str(t), "--draft-model", str(d), "--gpu-memory", "141GiB", "-k", "5", "--json")
    rec = json.loads(cli(*args)[1])
    code, out, err = cli(*args, "--cache-max-entry-count", "0.5")
    assert code == 0, err
    given = json.loads(out)
    assert given["cache_max_entry_count"] == 0.5 and given["cache_max_entry_count_given"] is True
    assert rec["cache_max_entry_count_given"] is False and rec["cache_max_entry_count"] > 0.5
    ratio = given["kv_cache_bytes"] / rec["kv_cache_bytes"]
    assert ratio == pytest.approx(0.5 / rec["cache_max_entry_count"], rel=0.02)
    assert given["peak_bytes"] < rec["peak_bytes"]
    assert cli(*args, "--cache-max-entry-count", "1.5")[0] == 2
