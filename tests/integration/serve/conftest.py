"""Fixtures for serve's integration tests: a target/draft pair (the toy pair when the `toy_pair` fixture
exists, else a tiny random Qwen3 pair) and a speculative embedded server on it, started once per module."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def serve_pair(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(target, draft) directories that share a tokenizer."""
    try:
        pair = request.getfixturevalue("toy_pair")
        return Path(pair.target), Path(pair.draft)
    except pytest.FixtureLookupError:
        from .tiny import build_tiny_pair

        return build_tiny_pair(tmp_path_factory.mktemp("tiny-pair"))
