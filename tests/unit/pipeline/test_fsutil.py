"""atomic_dir: a complete block renames into place; a failing one leaves nothing behind."""

from __future__ import annotations

import pytest

from specq.pipeline.errors import InputError
from specq.pipeline.fsutil import atomic_dir, atomic_write_text


def test_success_renames_into_place(tmp_path) -> None:
    dest = tmp_path / "out"
    with atomic_dir(dest) as tmp:
        assert tmp != dest and tmp.parent == tmp_path
        (tmp / "f.txt").write_text("done")
        assert not dest.exists()
    assert (dest / "f.txt").read_text() == "done"
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_exception_leaves_nothing(tmp_path) -> None:
    dest = tmp_path / "out"
    with pytest.raises(RuntimeError), atomic_dir(dest) as tmp:
        (tmp / "half.txt").write_text("partial")
        raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


def test_existing_dest_needs_overwrite(tmp_path) -> None:
    dest = tmp_path / "out"
    dest.mkdir()
    (dest / "old.txt").write_text("old")
    with pytest.raises(InputError, match="already exists"), atomic_dir(dest):
        pass
    with atomic_dir(dest, overwrite=True) as tmp:
        (tmp / "new.txt").write_text("new")
    assert sorted(p.name for p in dest.iterdir()) == ["new.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_atomic_write_text(tmp_path) -> None:
    path = atomic_write_text(tmp_path / "a" / "b.txt", "hello")
    assert path.read_text() == "hello" and [p.name for p in path.parent.iterdir()] == ["b.txt"]
