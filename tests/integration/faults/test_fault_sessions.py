"""A session longer than the model's positions: `plan` refuses it with exit 2 and one line naming both
numbers and the longest it may ask for, instead of recommending the impossible; at the positions, or within
what a `rope_scaling` factor extends them to, it plans as usual."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from .conftest import assert_one_line

pytestmark = pytest.mark.integration
QWEN35_27B = Path(__file__).parents[2] / "fixtures" / "twin" / "qwen3_5-27b-config.json"


@pytest.fixture
def qwen35(tmp_path: Path) -> Path:
    """Qwen3.5-27B's config.json alone (262144 positions): a directory `plan` reads without weights."""
    d = tmp_path / "qwen3.5-27b"
    d.mkdir()
    shutil.copy(QWEN35_27B, d / "config.json")
    return d


@pytest.mark.parametrize("session", ["262145", "10000000"])
def test_plan_refuses_a_session_beyond_the_positions(session, specq, qwen35):
    r = specq("plan", qwen35, "--gpu-memory", "80GiB", "--session-len", session)
    assert_one_line(r, 2, f"--session-len {session}", "262144 positions", "--session-len 262144 or less")
    assert r.out == ""  # no plan recommending it


def test_a_session_beyond_the_positions_from_the_config_file_is_refused_too(specq, qwen35, tmp_path):
    (tmp_path / "c.toml").write_text("[engine]\nsession_len = 300000\n")
    r = specq("plan", qwen35, "--gpu-memory", "80GiB", "-c", tmp_path / "c.toml", "--json")
    assert_one_line(r, 2, "--session-len 300000", "262144 positions")


def test_a_session_at_the_positions_is_planned(specq, qwen35):
    r = specq("plan", qwen35, "--gpu-memory", "80GiB", "--session-len", "262144", "--json")
    assert r.code == 0, r.err
    plan = json.loads(r.out)
    assert plan["session_len"] == 262144 and plan["max_position_embeddings"] == 262144
    assert plan["max_session_len"] <= 262144


def test_rope_scaling_extends_the_positions_a_session_may_use(specq, toy_target):
    """A YaRN factor of 4 over 2048 positions: an 8192-token session is the model's to serve."""
    cfg = json.loads((toy_target / "config.json").read_text())
    cfg["rope_scaling"] = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048}
    (toy_target / "config.json").write_text(json.dumps(cfg))
    r = specq("plan", toy_target, "--gpu-memory", "24GiB", "--session-len", "8192", "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["max_position_embeddings"] == 8192
    r = specq("plan", toy_target, "--gpu-memory", "24GiB", "--session-len", "8193")
    assert_one_line(r, 2, "8192 positions")
