"""The toy corpus is a deterministic, disjoint train/held-out split of the standard library's sources."""

from __future__ import annotations

import json

from specq.pipeline.toy.corpus import load_corpus, write_jsonl


def test_split_is_deterministic_and_disjoint(toy_corpus, tmp_path) -> None:
    assert len(toy_corpus.train) > 100 and len(toy_corpus.heldout) > 10
    assert not set(toy_corpus.train_files) & set(toy_corpus.heldout_files)
    assert toy_corpus.train_files == sorted(toy_corpus.train_files)
    assert all("/test/" not in f and not f.startswith("test/") for f in toy_corpus.train_files)
    again = load_corpus.__wrapped__()  # bypass the per-process cache: read the files again
    assert again.digest == toy_corpus.digest and again.heldout == toy_corpus.heldout


def test_corpus_of_another_root_has_another_digest(toy_corpus, tmp_path) -> None:
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "b.py").write_text("def f():\n    return 2\n")
    other = load_corpus(tmp_path)
    assert other.train_files == ["a.py", "b.py"] and other.digest != toy_corpus.digest


def test_write_jsonl(tmp_path) -> None:
    path = write_jsonl(tmp_path / "sub" / "calib.jsonl", ["a = 1\n", 'print("é")'])
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert rows == [{"text": "a = 1\n"}, {"text": 'print("é")'}]
    custom = write_jsonl(tmp_path / "c.jsonl", ["x"], field="content")
    assert json.loads(custom.read_text()) == {"content": "x"}
