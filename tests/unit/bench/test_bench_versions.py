"""A bench report's package versions (`pipeline/bench/runner.py`): LMDeploy on the path as a source tree,
without package metadata (as on the project's GPU machine), is named by its `version.py`."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from specq.pipeline import hardware
from specq.pipeline.bench import runner


def test_lmdeploy_without_metadata_is_named_by_its_version_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pkg = tmp_path / "lmdeploy"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "version.py").write_text("__version__ = '0.18.0'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "lmdeploy", raising=False)
    metadata = hardware.package_version  # whatever this machine has installed, the tree has no metadata
    monkeypatch.setattr(hardware, "package_version", lambda n: None if n == "lmdeploy" else metadata(n))
    versions = runner._versions()
    assert versions["lmdeploy"] == "0.18.0"
    assert set(versions) == {"specq", "lmdeploy", "vllm", "transformers", "torch", "httpx"}
