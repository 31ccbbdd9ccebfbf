"""The recommended session length never exceeds the model's positions: a 2048-position toy on a 24 GiB card
is told --session-len 2048, not the millions of tokens its KV would fit."""

from __future__ import annotations

import json
from pathlib import Path

from .conftest import SMALL


def _model(tmp: Path, positions: int | None) -> Path:
    tmp.mkdir(parents=True)
    cfg = dict(SMALL, **({"max_position_embeddings": positions} if positions else {}))
    (tmp / "config.json").write_text(json.dumps(cfg))
    return tmp


def test_the_session_length_stops_at_max_position_embeddings(cli, tmp_path: Path) -> None:
    model = _model(tmp_path / "m", 2048)
    code, out, err = cli("plan", str(model), "--engine", "lmdeploy", "--gpu-memory", "24GiB", "--json")
    assert code == 0, err
    plan = json.loads(out)
    assert plan["max_session_len"] == 2048 and plan["max_position_embeddings"] == 2048
    assert plan["max_session_len_memory"] > 2048
    assert any("capped at the model's max_position_embeddings 2048" in n for n in plan["notes"])
    code, out, _ = cli("plan", str(model), "--engine", "lmdeploy", "--gpu-memory", "24GiB")
    assert code == 0 and "--session-len 2048" in out


def test_without_positions_in_the_config_memory_decides(cli, tmp_path: Path) -> None:
    model = _model(tmp_path / "m", None)
    code, out, err = cli("plan", str(model), "--engine", "lmdeploy", "--gpu-memory", "24GiB", "--json")
    assert code == 0, err
    plan = json.loads(out)
    assert plan["max_position_embeddings"] is None and plan["max_session_len_memory"] is None
    assert plan["max_session_len"] > 2048
