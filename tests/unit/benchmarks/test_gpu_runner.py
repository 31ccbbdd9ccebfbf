"""benchmarks/gpu.py, the GPU scenarios' one runner: it lists every scenario, refuses an unknown name, and
hands a scenario its own options (each scenario's --help parses on a CPU machine: its module imports and
its argument parser is whole)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import gpu
from benchmarks.scenarios import SCENARIOS

ROOT = Path(__file__).resolve().parents[3]


def test_every_scenario_module_is_listed_and_listed_once() -> None:
    # helpers of the scenarios start with an underscore
    modules = sorted(p.stem for p in (ROOT / "benchmarks" / "scenarios").glob("*.py") if p.stem[0] != "_")
    assert sorted(module for module, _ in SCENARIOS.values()) == modules


def test_the_runner_lists_the_scenarios_and_refuses_an_unknown_one() -> None:
    res = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu.py")], capture_output=True, text=True
    )
    assert res.returncode == 0 and all(name in res.stdout for name in SCENARIOS)
    res = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu.py"), "nope"], capture_output=True, text=True
    )
    assert res.returncode == 2 and "unknown scenario 'nope'" in res.stderr


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_each_scenario_takes_its_own_options(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        gpu.main([name, "--help"])
    assert done.value.code == 0
    assert f"gpu.py {name}" in capsys.readouterr().out
