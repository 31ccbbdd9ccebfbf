"""Calibration sources, packing and the one-line errors for bad inputs."""

from __future__ import annotations

import csv as csv_module
from pathlib import Path

import pytest

from specq.pipeline.calibration import load_calibration, parse_source
from specq.pipeline.errors import InputError
from tests.tinymodel import CHAT_TEMPLATE, build_tokenizer, calibration_rows, write_jsonl


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory):
    return build_tokenizer(tmp_path_factory.mktemp("tok"))


def test_parse_source_hub_and_local(tmp_path: Path) -> None:
    assert parse_source("wikitext:wikitext-2-raw-v1:train") == (
        "hub",
        ("wikitext", "wikitext-2-raw-v1", "train"),
    )
    assert parse_source("c4") == ("hub", ("c4", None, "train"))
    f = write_jsonl(tmp_path / "a.jsonl", [{"text": "x"}])
    assert parse_source(str(f)) == ("local", [f])
    assert parse_source(str(tmp_path)) == ("local", [f])


@pytest.mark.parametrize("source", ["missing.jsonl", "./nope", "/no/such/dir/data.parquet"])
def test_missing_file_is_an_input_error(source: str) -> None:
    with pytest.raises(InputError, match="does not exist"):
        parse_source(source)


def test_packs_short_texts_without_dropping(tmp_path: Path, tokenizer) -> None:
    rows = calibration_rows(200)
    f = write_jsonl(tmp_path / "c.jsonl", rows)
    cal = load_calibration(str(f), tokenizer, samples=4, seqlen=64, heldout_samples=2)
    assert cal.report.samples == 4 and all(len(s) == 64 for s in cal.samples)
    assert cal.report.tokens_used == 256 and cal.report.heldout_samples == 2
    assert cal.report.texts_available == len(rows) and 0 < cal.report.texts <= len(rows)
    # everything that was not used is accounted for in the report
    assert cal.report.tokens_total >= cal.report.tokens_used + cal.report.heldout_tokens


def test_long_texts_are_split_not_dropped(tmp_path: Path, tokenizer) -> None:
    f = write_jsonl(tmp_path / "long.jsonl", [{"text": "def f(x):\n    return x\n" * 200}])
    cal = load_calibration(str(f), tokenizer, samples=1000, seqlen=32, heldout_samples=0)
    assert sum(map(len, cal.samples)) == cal.report.tokens_total  # every token used, tail included
    assert any("fewer than" in n for n in cal.report.notes)


def test_seed_changes_order(tmp_path: Path, tokenizer) -> None:
    f = write_jsonl(tmp_path / "c.jsonl", calibration_rows(300))
    a = load_calibration(str(f), tokenizer, samples=2, seqlen=32, seed=0).samples
    b = load_calibration(str(f), tokenizer, samples=2, seqlen=32, seed=1).samples
    assert a != b


def test_text_field_and_formats(tmp_path: Path, tokenizer) -> None:
    rows = [{"body": r["text"]} for r in calibration_rows(300)[:20]]
    f = write_jsonl(tmp_path / "c.jsonl", rows)
    assert load_calibration(str(f), tokenizer, text_field="body", samples=2, seqlen=32).report.samples == 2
    txt = tmp_path / "t" / "a.txt"
    txt.parent.mkdir()
    txt.write_text("\n".join(r["body"] for r in rows))
    assert load_calibration(str(txt.parent), tokenizer, samples=2, seqlen=32).report.kind == "local"
    csv = tmp_path / "c.csv"
    with csv.open("w", newline="") as fh:
        w = csv_module.writer(fh)
        w.writerow(["text"])
        w.writerows([[r["body"][:80]] for r in rows])
    assert load_calibration(str(csv), tokenizer, samples=1, seqlen=32).report.samples == 1


def test_chat_messages_use_the_chat_template(tmp_path: Path, tokenizer) -> None:
    assert tokenizer.chat_template == CHAT_TEMPLATE
    rows = [
        {"messages": [{"role": "user", "content": t["text"][:100]}, {"role": "assistant", "content": "ok"}]}
        for t in calibration_rows(300)[:10]
    ]
    f = write_jsonl(tmp_path / "chat.jsonl", rows)
    cal = load_calibration(str(f), tokenizer, samples=2, seqlen=32)
    assert cal.report.chat_texts == 10
    assert cal.texts[0].startswith("<|im_start|>user\n")


def test_missing_field_names_the_columns(tmp_path: Path, tokenizer) -> None:
    f = write_jsonl(tmp_path / "c.jsonl", [{"body": "x"}])
    with pytest.raises(InputError, match="no field 'text' .*body"):
        load_calibration(str(f), tokenizer)


def test_too_few_tokens(tmp_path: Path, tokenizer) -> None:
    f = write_jsonl(tmp_path / "c.jsonl", [{"text": "tiny"}])
    with pytest.raises(InputError, match="fewer than one sample of --seqlen 512"):
        load_calibration(str(f), tokenizer, seqlen=512)


def test_hub_name_offline_is_one_line(tokenizer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    import datasets.config
    import huggingface_hub.constants

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(InputError, match="could not be loaded from the hub") as e:
        load_calibration("specq-no-such-dataset:cfg:train", tokenizer)
    assert "\n" not in str(e.value)


def test_jsonl_without_datasets_reads_what_datasets_reads(tmp_path: Path, tokenizer) -> None:
    """`.jsonl` is read with the standard library; the same rows as a `.json` file go through `datasets`'
    JSON builder (which also reads JSON Lines): the packed samples must be identical."""
    rows = calibration_rows(300)[:40] + [{"text": ""}, {"text": None, "other": 1}]
    a = write_jsonl(tmp_path / "c.jsonl", rows)
    b = tmp_path / "c.json"
    b.write_text(a.read_text())
    ca = load_calibration(str(a), tokenizer, samples=3, seqlen=32)
    cb = load_calibration(str(b), tokenizer, samples=3, seqlen=32)
    assert ca.samples == cb.samples and ca.heldout == cb.heldout
    assert ca.report.texts_available == cb.report.texts_available == 40


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        ("{not json", r"c\.jsonl:2: not valid JSON"),
        ('"just a string"', r"c\.jsonl:2: expected a JSON object per line, got a str"),
    ],
)
def test_malformed_jsonl_names_the_line(tmp_path: Path, tokenizer, line: str, needle: str) -> None:
    f = tmp_path / "c.jsonl"
    f.write_text('{"text": "fine"}\n' + line + "\n")
    with pytest.raises(InputError, match=needle):
        load_calibration(str(f), tokenizer)
