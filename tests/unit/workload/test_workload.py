"""Built-in suites, prompt files, datasets, and the bench option parsing."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from specq.pipeline.config.models import BenchSection
from specq.pipeline.errors import InputError
from specq.pipeline.workload import build_workload, load_prompts_file, load_suite, select, suite_names

CATEGORIES = {"code", "math", "chat", "summarization", "translation", "qa", "retrieval"}


def test_every_category_has_at_least_eight_prompts_with_ids():
    assert CATEGORIES <= set(suite_names())
    seen = set()
    for cat in CATEGORIES:
        prompts = load_suite(cat)
        assert len(prompts) >= 8
        for p in prompts:
            assert p.category == cat and p.id not in seen
            assert p.prompt or p.messages
            seen.add(p.id)
    assert all(p.messages and len(p.messages) >= 3 for p in load_suite("chat"))
    assert min(len(p.prompt or "") for p in load_suite("retrieval")) > 800


def test_mixed_round_robins_over_categories():
    w = build_workload(suite="mixed", prompts_file=None, dataset=None, field="prompt", requests=7)
    assert {p.category for p in w.prompts} == CATEGORIES
    assert len(w.digest) == 16
    again = build_workload(suite="mixed", prompts_file=None, dataset=None, field="prompt", requests=7)
    assert again.digest == w.digest


def test_select_cycles_when_asked_for_more():
    prompts = load_suite("code")
    assert len(select(prompts, 25)) == 25


def test_unknown_suite_lists_the_known_ones():
    with pytest.raises(InputError, match="available: .*code"):
        load_suite("nope")


def test_prompts_file(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text(
        json.dumps({"prompt": "hello"})
        + "\n\n"
        + json.dumps({"id": "m1", "category": "chat", "messages": [{"role": "user", "content": "hi"}]})
        + "\n"
    )
    ps = load_prompts_file(f)
    assert ps[0].id == "p-1" and ps[0].as_messages() == [{"role": "user", "content": "hello"}]
    assert ps[1].id == "m1" and ps[1].as_text().endswith("assistant:")


@pytest.mark.parametrize(
    "content,match",
    [("{not json\n", "not valid JSON"), ('{"x": 1}\n', "neither"), ('{"messages": "hi"}\n', "list of")],
)
def test_bad_prompts_files(tmp_path, content, match):
    f = tmp_path / "p.jsonl"
    f.write_text(content)
    with pytest.raises(InputError, match=match):
        load_prompts_file(f)
    with pytest.raises(InputError, match="no such"):
        load_prompts_file(tmp_path / "missing.jsonl")


def test_dataset_from_a_local_file_offline(tmp_path, monkeypatch):
    pytest.importorskip("datasets")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    f = tmp_path / "d.jsonl"
    f.write_text("".join(json.dumps({"question": f"q{i}", "category": "qa"}) + "\n" for i in range(3)))
    w = build_workload(suite=None, prompts_file=None, dataset=str(f), field="question", requests=3)
    assert [p.prompt for p in w.prompts] == ["q0", "q1", "q2"] and w.source.startswith("dataset:")
    with pytest.raises(InputError, match="no field 'text'"):
        build_workload(suite=None, prompts_file=None, dataset=str(f), field="text", requests=3)


@pytest.mark.parametrize(
    "value,expected", [("3..6", [3, 4, 5, 6]), ("3,4,6", [3, 4, 6]), ("4", [4]), (5, [5]), ([2, 3], [2, 3])]
)
def test_draft_token_syntax(value, expected):
    assert BenchSection(draft_tokens=value).draft_tokens == expected


def test_bad_draft_tokens_and_fractions():
    with pytest.raises(ValidationError):
        BenchSection(draft_tokens="6..3")
    with pytest.raises(ValidationError):
        BenchSection(draft_tokens="3..20")
    assert BenchSection(max_regression="5%").max_regression == pytest.approx(0.05)
    assert BenchSection(max_error_rate="0.2").max_error_rate == pytest.approx(0.2)
    assert BenchSection(baseline_engine="turbomind,pytorch").baseline_engine == ["turbomind", "pytorch"]
    assert BenchSection(concurrency="1,4,8").concurrency == [1, 4, 8]
