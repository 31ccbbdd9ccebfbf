"""Shared fixtures. GPU tests skip cleanly on machines without a CUDA GPU."""

from __future__ import annotations

import os

import pytest
from typer.testing import CliRunner


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    from specq.pipeline.hardware import cuda_usable

    if any("gpu" in item.keywords for item in items) and not cuda_usable():
        skip = pytest.mark.skip(reason="needs a CUDA GPU")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)


@pytest.fixture
def cli():
    """Invoke the specq app like a user would; returns (exit_code, stdout, stderr)."""
    from specq.cli.app import app

    runner = CliRunner()

    def invoke(*args: str, env: dict[str, str] | None = None):
        result = runner.invoke(app, list(args), env=env, catch_exceptions=False)
        return result.exit_code, result.stdout, result.stderr

    return invoke


@pytest.fixture(autouse=True)
def _no_debug(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPECQ_DEBUG", raising=False)
    for name in list(os.environ):
        if name.startswith("SPECQ_") and "__" in name:
            monkeypatch.delenv(name)


@pytest.fixture(scope="session")
def toy_corpus():
    """The toy code corpus (this interpreter's standard library): `.train` and `.heldout` lists of texts."""
    from specq.pipeline.toy.corpus import load_corpus

    return load_corpus()


@pytest.fixture(scope="session")
def toy_pair():
    """The small toy target/draft pair (ToyPair: .root, .target, .draft, .report), built once and cached
    under ${SPECQ_CACHE:-~/.cache/specq}/toy; later runs reuse it. Skips if torch/transformers are missing."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from specq.pipeline.toy import ToyRequest, build_toy_pair

    return build_toy_pair(ToyRequest(size="small", seed=0))


@pytest.fixture(scope="session")
def toy35():
    """The Qwen3.5-shaped toy (`specq toy build --arch qwen3.5`: hybrid target with its MTP head in
    target/, a Qwen3 draft in draft/), built once and cached like `toy_pair` (about 4 minutes cold)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from specq.pipeline.toy import ToyRequest, build_toy_pair

    return build_toy_pair(ToyRequest(arch="qwen3.5", seed=0))
