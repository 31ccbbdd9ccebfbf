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


def test_completion_prompts_are_whole_lines_of_heldout_files(toy_corpus) -> None:
    from specq.pipeline.toy.corpus import completion_prompts

    prompts = completion_prompts(toy_corpus, count=12, chars=500)
    assert len(prompts) == 12 and [p["id"] for p in prompts] == [f"heldout-{i:02d}" for i in range(1, 13)]
    sources = dict(zip(toy_corpus.heldout_files, toy_corpus.heldout, strict=True))
    for p in prompts:
        assert p["source"] in sources and p["source"] not in toy_corpus.train_files
        text = sources[p["source"]]
        assert 250 <= len(p["prompt"]) <= 500 and p["prompt"].endswith("\n")
        at = text.find(p["prompt"])
        assert at >= len(text) // 3 and (at == 0 or text[at - 1] == "\n")  # whole lines, past the header
    assert completion_prompts(toy_corpus, count=12, chars=500) == prompts  # deterministic
    assert completion_prompts(toy_corpus, count=3, chars=500) == prompts[:3]


def test_completion_prompts_refuse_what_cannot_be_met(tmp_path) -> None:
    import pytest

    from specq.pipeline.errors import InputError, UsageError
    from specq.pipeline.toy.corpus import completion_prompts

    for i in range(12):  # file 3 is held out (stride 10, offset 3): one short line
        (tmp_path / f"m{i:02d}.py").write_text("x = 1\n")
    small = load_corpus(tmp_path)
    with pytest.raises(InputError, match="no held-out file is long enough"):
        completion_prompts(small)
    with pytest.raises(UsageError, match="--count 0"):
        completion_prompts(small, count=0)
    with pytest.raises(UsageError, match="--chars 10"):
        completion_prompts(small, chars=10)


def test_toy_prompts_command_writes_a_bench_prompts_file(cli, tmp_path) -> None:
    from specq.pipeline.workload import build_workload

    out = tmp_path / "w" / "heldout.jsonl"
    code, stdout, _ = cli("toy", "prompts", str(out), "--count", "5", "--json")
    assert code == 0 and json.loads(stdout)["prompts"] == 5
    work = build_workload(suite=None, prompts_file=str(out), dataset=None, field="text", requests=5)
    assert [p.id for p in work.prompts] == [f"heldout-{i:02d}" for i in range(1, 6)]
    assert all(p.category == "code-completion" and p.as_text() == p.prompt for p in work.prompts)
    assert [f.name for f in out.parent.iterdir()] == ["heldout.jsonl"]  # no temporary left behind
    code, stdout, stderr = cli("toy", "prompts", str(tmp_path / "x.jsonl"), "--count", "0")
    assert code == 2 and stdout == ""
    assert stderr.strip() == "specq: error: --count 0: ask for at least 1 prompt"
    assert not (tmp_path / "x.jsonl").exists()
