"""Fixtures for bench's integration tests: the toy pair when the `toy_pair` fixture exists, else serve's tiny
random Qwen3 pair (same tokenizer), so the sweep runs on real models either way."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def bench_pair(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    try:
        pair = request.getfixturevalue("toy_pair")
        return Path(pair.target), Path(pair.draft)
    except pytest.FixtureLookupError:
        from tests.integration.serve.tiny import build_tiny_pair

        return build_tiny_pair(tmp_path_factory.mktemp("bench-pair"))
