"""benchmarks/scenarios/w4a16_e2e.py on the CPU: its server list and its report. The servers themselves run on
a GPU machine (docs/w4a16.md); here a run with no wave still writes what the servers' environment has."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.scenarios import w4a16_e2e as E
from specq.pipeline import hardware


def test_the_waves_name_each_server_and_an_unknown_one_is_refused() -> None:
    waves = E.parse_waves("plain:specq,mtp3;dflash7")
    assert [[s["name"] for s in w] for w in waves] == [["plain-specq", "mtp3"], ["dflash7"]]
    assert waves[0][1] == {"name": "mtp3", "kind": "mtp", "k": 3, "kernel": "specq"}
    with pytest.raises(ValueError, match="unknown server"):
        E.parse_server("eagle3")
    assert E.parse_server("alt") == {"name": "alt", "kind": "plain", "k": 0, "kernel": "specq", "alt": True}
    # +silu: the same server with the gate_up linears storing silu(gate) * up
    silu = E.parse_server("plain:specq+silu")
    assert silu == {"name": "plain-specq-silu", "kind": "plain", "k": 0, "kernel": "specq", "silu": True}
    assert E.parse_server("mtp3+silu")["name"] == "mtp3-silu"
    with pytest.raises(ValueError, match="unknown server"):
        E.parse_server("bf16+silu")
    # a server named again (an A/B/A) gets its own name: its port, run directory and report are its own
    aba = E.parse_waves("plain:specq,plain:specq+silu,plain:specq;plain:specq")
    assert [[s["name"] for s in w] for w in aba] == [
        ["plain-specq", "plain-specq-silu", "plain-specq-2"],
        ["plain-specq-3"],
    ]
    assert aba[0][2]["kernel"] == "specq" and "silu" not in aba[0][2]


def test_an_alt_server_needs_a_directory_with_a_specq_package(tmp_path: Path, capsys) -> None:
    args = ["--out", str(tmp_path / "w"), "--report-dir", str(tmp_path / "r"), "--waves", "plain:specq,alt"]
    with pytest.raises(SystemExit) as exc:
        E.main([*args, "--alt", str(tmp_path)])
    assert exc.value.code == 2 and "needs --alt DIR" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()  # refused before anything ran
    with pytest.raises(SystemExit) as exc:
        E.main(["--out", str(tmp_path / "w"), "--report-dir", str(tmp_path / "r"), "--prompts", "0"])
    assert exc.value.code == 2 and "--prompts must be 1 or more" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_the_report_says_whether_flash_attention_3_is_on_the_servers_path(tmp_path: Path) -> None:
    (tmp_path / "w" / "twin27" / "target").mkdir(parents=True)  # a twin already there: nothing is built
    assert E.main(["--out", str(tmp_path / "w"), "--report-dir", str(tmp_path / "r"), "--waves", ""]) == 0
    report = json.loads((tmp_path / "r" / "e2e.json").read_text())
    has_fa3 = hardware.flash_attention_3() is None
    assert report["fa3"] is has_fa3 and report["servers"] == []
    first = (tmp_path / "r" / "e2e.md").read_text().splitlines()[0]
    assert first == f"FlashAttention-3 on the servers' path: {'yes' if has_fa3 else 'no'}"
    # 8 prompts unless told: the bars count agreeing outputs out of 8
    assert len((tmp_path / "r" / "prompts.jsonl").read_text().splitlines()) == 8
    three = ["--out", str(tmp_path / "w"), "--report-dir", str(tmp_path / "r3"), "--waves", ""]
    three += ["--prompts", "3"]
    assert E.main(three) == 0
    assert len((tmp_path / "r3" / "prompts.jsonl").read_text().splitlines()) == 3
