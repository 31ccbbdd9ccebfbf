"""Shared fixtures. GPU tests skip cleanly on machines without a CUDA GPU."""

from __future__ import annotations

import contextlib
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

# Under pytest-xdist every worker, and every process its tests start (servers, specq commands), computes on
# one CPU thread: the workers already fill the cores, and torch's default of a thread per core in each would
# oversubscribe them, where OpenMP's spin-waiting makes a step several times slower (docs/performance.md,
# "Threads on a shared CPU"; docs/ci.md). Set before any test imports torch, which reads it once.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")


# What a module waits for on a cold cache, in the order a run should start them: the Qwen3.5 toy (about 4
# minutes, the longest chain of the run), the small toy pair (about 2 minutes), nothing.
TOYS = ("toy35", "toy_pair")


def _module_of(item: pytest.Item) -> str:
    return item.nodeid.split("::")[0]


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> Iterator[None]:
    from specq.pipeline.hardware import cuda_usable

    if any("gpu" in item.keywords for item in items) and not cuda_usable():
        skip = pytest.mark.skip(reason="needs a CUDA GPU")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)
    yield
    # After every other hook (pytest's own reordering for parametrized fixtures included), the order for a
    # cold cache on few cores; every test still runs, and each module's tests stay together and in their
    # order. `make test` runs pytest-xdist with `--dist loadfile --no-loadscope-reorder`: each module goes
    # to one worker (its module fixtures are built once) in this order. First one module that needs the
    # Qwen3.5 toy and one that needs the small pair, so the two workers start the two builds at once (one
    # thread each); then the modules that need no toy, those that need the small pair, the Qwen3.5 toy's.
    rank: dict[str, int] = {}
    for item in items:
        names = set(item.fixturenames)
        r = min((i for i, toy in enumerate(TOYS) if toy in names), default=len(TOYS))
        rank[_module_of(item)] = min(rank.get(_module_of(item), len(TOYS)), r)
    mods = list(rank)  # in collection order
    starters = [m for m in (next((m for m in mods if rank[m] == i), None) for i in range(len(TOYS))) if m]
    rest = sorted((m for m in mods if m not in starters), key=lambda m: (-rank[m], mods.index(m)))
    order = {m: i for i, m in enumerate(starters + rest)}
    items.sort(key=lambda item: order[_module_of(item)])


@contextlib.contextmanager
def _once_per_run(tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator[tuple[Path, bool]]:
    """A directory for a session fixture's output that all pytest-xdist workers of this run share, held
    under a lock: yields (path, already built); the fixture builds it when it was not. A worker's basetemp
    is one `popen-gwN` folder in the run's; without xdist the session's own basetemp is used."""
    import fcntl

    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    out, done = root / name, root / f".{name}.complete"
    with (root / f".{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        built = done.is_file()
        yield out, built
        if not built:
            done.touch()


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

    # one per run, shared by the workers: `qwen35_quantized` (also shared) is quantized from these files
    with _once_per_run(tmp_path_factory, "qwen35") as (root, built):
        if not built:
            build_tiny_qwen35(root / "model")
    return root / "model"


@pytest.fixture(scope="session")
def qwen35_quantized(tiny_qwen35: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The tiny Qwen3.5 quantized by `specq quantize`'s `quantize()` with gptqmodel, once per session:
    "gptq" (--for plain) and "awq" (--for speculative: the AWQ LMDeploy's PyTorch engine speculates with,
    through specq's compatibility patch), as gptqmodel writes them."""
    pytest.importorskip("gptqmodel")
    from specq.pipeline.config.models import QuantizeSection
    from specq.pipeline.quantize import QuantizeRequest, quantize
    from tests.tinymodel import calibration_rows, write_jsonl

    # built once a run: the two modules that use it may run on different pytest-xdist workers
    with _once_per_run(tmp_path_factory, "qwen35-q") as (root, built):
        out = {method: root / method for method in ("gptq", "awq")}
        if not built:
            root.mkdir()
            calib = write_jsonl(root / "calib.jsonl", calibration_rows(1500))
            for method, target in (("gptq", "plain"), ("awq", "speculative")):
                cfg = QuantizeSection.model_validate(
                    {"method": method, "for": target, "backend": "gptqmodel", "calib": str(calib),
                     "device": "cpu", "samples": 4, "seqlen": 64, "eval_samples": 2}
                )  # fmt: skip
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
