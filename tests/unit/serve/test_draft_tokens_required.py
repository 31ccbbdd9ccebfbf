"""`specq serve --draft-model` with no draft-token count anywhere (flag or config) is refused in one line
(exit 2), rather than serving without speculation; an explicit `--draft-tokens 0` or a config's count is
honoured."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECQ_STATE_DIR", str(tmp_path / "state"))


def test_a_drafter_without_draft_tokens_is_refused(cli, ckpts: dict[str, Path]) -> None:
    args = ("serve", str(ckpts["target"]), "--draft-model", str(ckpts["dflash"]), "--engine", "lmdeploy",
            "--port", "24010", "--dry-run")  # fmt: skip
    code, out, err = cli(*args)
    assert code == 2 and out == ""
    assert err.strip().splitlines() == [
        "specq: error: --draft-model without --draft-tokens: give --draft-tokens K (1..15) to speculate "
        "(`specq bench` measures which K is fastest), or --draft-tokens 0 to serve without speculation"
    ]
    code, out, err = cli(*args, "--draft-tokens", "0")
    assert code == 0, err
    assert "--speculative-algorithm" not in out


def test_a_config_count_is_enough(cli, ckpts: dict[str, Path], tmp_path: Path) -> None:
    conf = tmp_path / "c.toml"
    conf.write_text("[model]\nnum_draft_tokens = 3\n")
    code, out, err = cli("serve", str(ckpts["target"]), "--draft-model", str(ckpts["dflash"]), "--engine",
                         "lmdeploy", "--port", "24011", "--dry-run", "-c", str(conf))  # fmt: skip
    assert code == 0, err
    assert "--speculative-num-draft-tokens 3" in out
