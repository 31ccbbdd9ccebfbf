"""A writable copy of LMDeploy 0.18.0's files that specq's compatibility patches change (and stubs around
them): tests/fixtures/lmdeploy-0.18.0."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "lmdeploy-0.18.0"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A site dir holding a copy of the fixture's `lmdeploy/`."""
    site = tmp_path / "site"
    shutil.copytree(FIXTURE, site, ignore=shutil.ignore_patterns("__pycache__", "README.md"))
    return site
