"""Configuration mistakes from every layer read as specq's own one line: the key, what is wrong, the value
once (ranges compacted), and where it came from (the SPECQ_* variable by name, the file, the command line);
and serving beyond loopback without an API key is called out."""

from __future__ import annotations

import json

import pytest

from .conftest import assert_one_line

pytestmark = pytest.mark.integration
URL = ["bench", "--url", "http://127.0.0.1:9"]


@pytest.mark.parametrize(
    ("env", "needles"),
    [
        ({"SPECQ_ENGINE__CACHE_MAX_ENTRY_COUNT": "7"},
         ["engine.cache_max_entry_count", "got 7", "variable SPECQ_ENGINE__CACHE_MAX_ENTRY_COUNT"]),
        ({"SPECQ_BENCH__REQUESTS": "abc"}, ["bench.requests", "'abc'", "SPECQ_BENCH__REQUESTS"]),
        ({"SPECQ_BENCH__DRAFT_TOKENS": "2..40"}, ["not 16..40", "SPECQ_BENCH__DRAFT_TOKENS"]),
        ({"SPECQ_BENCH__MAX_ERROR_RATE": "lots"}, ["bench.max_error_rate", "SPECQ_BENCH__MAX_ERROR_RATE"]),
        ({"SPECQ_BENCH__NOPE": "1"}, ["unknown key 'bench.nope'", "environment variable SPECQ_BENCH__NOPE"]),
    ],
    ids=["range", "type", "int-range", "fraction", "unknown"],
)  # fmt: skip
def test_bad_environment_variable_is_named(env, needles, specq, tmp_path):
    line = assert_one_line(specq(*URL, "--out", tmp_path / "b", env=env), 2, *needles)
    assert "Input should be" not in line or "got" in line


@pytest.mark.parametrize(
    ("flags", "needles", "absent"),
    [
        (["--draft-tokens", "3..88"], ["bench.draft_tokens", "not 16..88", "the command line"], "17, 18"),
        (["--draft-tokens", "-3..2"], ["not -3..-1"], "-2, -1"),
        (["--max-error-rate", "abc"], ["expected a fraction", "'abc'"], "(got 'abc'"),
        (["--concurrency", "0,2"], ["concurrency values must be >= 1, not 0"], "[0"),
        (["--draft-tokens", "6..3"], ["got '6..3'"], "Value error"),
        (["--requests", "0"], ["bench.requests", "greater than or equal to 1", "got 0"], "Value error"),
    ],
    ids=["range", "negative", "fraction", "concurrency", "empty-range", "ge"],
)  # fmt: skip
def test_bad_flag_value_reads_as_one_plain_line(flags, needles, absent, specq, tmp_path):
    line = assert_one_line(specq(*URL, *flags, "--out", tmp_path / "b"), 2, *needles)
    assert absent not in line
    assert line.count("'abc'") <= 1


def test_bad_value_in_config_file_names_the_file(specq, tmp_path):
    cfg = tmp_path / "my.toml"
    cfg.write_text("[engine]\ncache_max_entry_count = 3.0\n")
    assert_one_line(
        specq("config", "show", "--config", cfg), 2, "cache_max_entry_count", f"config file {cfg}"
    )


def test_serving_beyond_loopback_without_a_key_warns(specq, toy_pair):
    r = specq("serve", toy_pair.target, "--engine", "embedded", "--host", "0.0.0.0", "--dry-run", "--json")
    assert r.code == 0, r.err
    assert "warning: --host 0.0.0.0" in r.err and "no API key" in r.err
    assert json.loads(r.out)["command"]  # stdout stays pure JSON


def test_serving_beyond_loopback_with_a_key_is_quiet(specq, toy_pair):
    r = specq(
        "serve", toy_pair.target, "--engine", "embedded", "--host", "0.0.0.0", "--dry-run",
        "--api-keys-env", "MY_KEYS", env={"MY_KEYS": "sk-test"},
    )  # fmt: skip
    assert r.code == 0, r.err
    assert "warning" not in r.err and "sk-test" not in r.err + r.out


def test_loopback_is_quiet(specq, toy_pair):
    r = specq("serve", toy_pair.target, "--engine", "embedded", "--dry-run")
    assert r.code == 0 and "warning" not in r.err
