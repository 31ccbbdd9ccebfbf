"""Booleans are booleans. A TOML setting that is on or off takes true or false: "yes", "maybe", "1" (a
string) and 1 (a number) are all refused in one line naming the key and where it was set, where pydantic
would have taken "yes" for true and refused only "maybe". An environment variable or INI value is text,
so there true/false, yes/no, on/off and 1/0 spell a boolean (as docs/serve.md's
`SPECQ_ENGINE__STEP_PATCH=1` does), and anything else is refused the same way."""

from __future__ import annotations

import json

import pytest

from .conftest import assert_one_line

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    ("key", "value"),
    [("engine.step_patch", '"yes"'), ("engine.step_patch", '"maybe"'), ("engine.step_patch", '"true"'),
     ("engine.step_patch", "1"), ("quantize.evaluate", '"no"'), ("bench.baseline", "0"),
     ("bench.ignore_eos", '"on"'), ("model.trust_remote_code", "[true]")],
)  # fmt: skip
def test_a_toml_boolean_that_is_not_one(key, value, specq, tmp_path):
    section, name = key.split(".")
    (tmp_path / "c.toml").write_text(f"[{section}]\n{name} = {value}\n")
    r = specq("config", "show", "-c", tmp_path / "c.toml")
    assert_one_line(r, 2, f"{key}: must be true or false", "c.toml")
    assert r.out == ""


@pytest.mark.parametrize(("spelled", "meant"), [("1", True), ("yes", True), ("on", True), ("0", False),
                                                 ("false", False), ("off", False)])  # fmt: skip
def test_an_environment_boolean_is_spelled_in_words_or_digits(spelled, meant, specq):
    r = specq("config", "show", "--json", env={"SPECQ_ENGINE__STEP_PATCH": spelled})
    assert r.code == 0, r.err
    assert json.loads(r.out)["engine"]["step_patch"] is meant


@pytest.mark.parametrize("spelled", ["maybe", "2", "yes please"])
def test_an_environment_boolean_that_is_not_one(spelled, specq):
    r = specq("config", "show", env={"SPECQ_ENGINE__STEP_PATCH": spelled})
    assert_one_line(r, 2, "engine.step_patch: must be true or false", "SPECQ_ENGINE__STEP_PATCH")


def test_an_ini_boolean_is_spelled_like_an_environment_one(specq, tmp_path):
    (tmp_path / "c.ini").write_text("[engine]\nstep_patch = 1\n[quantize]\nevaluate = no\n")
    r = specq("config", "show", "-c", tmp_path / "c.ini", "--json")
    assert r.code == 0, r.err
    cfg = json.loads(r.out)
    assert cfg["engine"]["step_patch"] is True and cfg["quantize"]["evaluate"] is False
    (tmp_path / "c.ini").write_text("[engine]\nstep_patch = sometimes\n")
    assert_one_line(specq("config", "show", "-c", tmp_path / "c.ini"), 2, "engine.step_patch", "c.ini")
