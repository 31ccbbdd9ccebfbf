"""Shared fixtures. GPU tests skip cleanly on machines without a CUDA GPU."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

# A test run started in the background by a non-interactive shell (`make test &`, `nohup`) inherits SIGINT
# ignored, and so would every specq process the tests start: the tests that press Ctrl-C on one then wait
# in vain (a fresh-clone check started that way failed exactly those two, 2026-12-02). An ignored SIGINT is
# what a user who starts specq that way asks for, so specq keeps it; the test run restores the default,
# which its children then start with.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


# Session fixtures that cost tens of seconds each (quantizing on CPU): with pytest-xdist (`make test` runs
# `-n 2 --dist loadgroup`), every module that uses one goes to the same worker, so each is built once a run.
SHARED_FIXTURES = ("qwen35_quantized", "gptq_checkpoint")
# What a module waits for, in the order a run should start them: the Qwen3.5 toy (about 4 minutes cold,
# the longest chain of the run), the small toy pair (about 2 minutes cold), nothing.
TOYS = ("toy35", "toy_pair")


def _module_needs(items: list[pytest.Item]) -> tuple[dict[str, int], dict[str, str]]:
    """Per module: the first toy in TOYS any of its tests needs (its index; len(TOYS) for none) and its
    xdist group (a shared fixture's name, else the module itself)."""
    rank: dict[str, int] = {}
    group: dict[str, str] = {}
    for item in items:
        mod = item.nodeid.split("::")[0]
        names = set(item.fixturenames)
        r = min((i for i, toy in enumerate(TOYS) if toy in names), default=len(TOYS))
        rank[mod] = min(rank.get(mod, len(TOYS)), r)
        shared = next((f for f in SHARED_FIXTURES if f in names), None)
        if shared is not None or mod not in group:
            group[mod] = shared or group.get(mod, mod)
    return rank, group


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> Iterator[None]:
    """Before the other hooks (xdist's reads the xdist_group marks): the GPU skips and the groups; after
    them (pytest's own reordering for parametrized fixtures included): the order for a cold cache."""
    from specq.pipeline.hardware import cuda_usable

    if any("gpu" in item.keywords for item in items) and not cuda_usable():
        skip = pytest.mark.skip(reason="needs a CUDA GPU")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)
    _, group = _module_needs(items)
    for item in items:
        item.add_marker(pytest.mark.xdist_group(group[item.nodeid.split("::")[0]]))
    yield
    # Order for a cold cache on few cores (every test still runs, each module's tests stay together and
    # in their order): first one module that builds the Qwen3.5 toy and one that builds the small pair, so
    # two workers start the two builds at once; then the modules that need no toy, then those that need
    # the small pair, then the Qwen3.5 toy's. Each module is one xdist unit (its module fixtures are built
    # once), and the modules that share an expensive session fixture are one unit together.
    rank, group = _module_needs(items)
    mods = list(dict.fromkeys(item.nodeid.split("::")[0] for item in items))
    first = [next((m for m in mods if rank[m] == i), None) for i in range(len(TOYS))]
    starters = [m for m in first if m is not None]
    order = {m: i for i, m in enumerate(starters + sorted(
        (m for m in mods if m not in starters), key=lambda m: (-rank[m], mods.index(m))
    ))}  # fmt: skip
    # a group runs where its first module is in the order; its other modules follow it there
    group_pos = {}
    for m in sorted(mods, key=order.__getitem__):
        group_pos.setdefault(group[m], order[m])
    items.sort(key=lambda it: (group_pos[group[it.nodeid.split("::")[0]]], order[it.nodeid.split("::")[0]]))


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
def tiny_qwen35(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Qwen3.5 (`tests/tinymodel.py build_tiny_qwen35`: 3 linear : 1 full attention, head dim
    256, vision tower, MTP tensors), built once per session."""
    pytest.importorskip("transformers")
    from tests.tinymodel import build_tiny_qwen35

    return build_tiny_qwen35(tmp_path_factory.mktemp("qwen35") / "model")


@pytest.fixture(scope="session")
def qwen35_quantized(tiny_qwen35: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The tiny Qwen3.5 quantized by `specq quantize`'s `quantize()` with gptqmodel, once per session:
    "gptq" and "awq", both --for plain (--for speculative refuses Qwen3.5: engines/qwen35.py), as gptqmodel
    writes them."""
    pytest.importorskip("gptqmodel")
    from specq.pipeline.config.models import QuantizeSection
    from specq.pipeline.quantize import QuantizeRequest, quantize
    from tests.tinymodel import calibration_rows, write_jsonl

    root = tmp_path_factory.mktemp("qwen35-q")
    calib = write_jsonl(root / "calib.jsonl", calibration_rows(1500))
    out = {}
    for method, target in (("gptq", "plain"), ("awq", "plain")):
        cfg = QuantizeSection.model_validate(
            {"method": method, "for": target, "backend": "gptqmodel", "calib": str(calib), "device": "cpu",
             "samples": 4, "seqlen": 64, "eval_samples": 2}
        )  # fmt: skip
        out[method] = root / method
        quantize(QuantizeRequest.from_config(cfg, model=tiny_qwen35, out=out[method]))
    return out


@pytest.fixture(scope="session")
def toy35():
    """The Qwen3.5-shaped toy (`specq toy build --arch qwen3.5`: hybrid target with its MTP head in
    target/, a Qwen3 draft in draft/), built once and cached like `toy_pair` (about 4 minutes cold)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from specq.pipeline.toy import ToyRequest, build_toy_pair

    return build_toy_pair(ToyRequest(arch="qwen3.5", seed=0))
