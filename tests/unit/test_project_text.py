"""The project's text speaks of the project: dates and commits, never numbered rounds of work ("the sixth
H200 session", "round 2"), tracker numbers ("issue 18"), device minutes, lent machines, briefs, the lead or
"the issue". This reads every text file a user or a
contributor meets (README, docs, the CLI, the pipeline, benchmarks, configs, tests, the build files) and
fails on the first such phrase, naming the file and line. LMDeploy's "session length" (`--session-len`,
`session_len`), a session per HTTP client and pytest's session-scoped fixtures are not work rounds and pass.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TREES = ("docs", "cli", "pipeline", "benchmarks", "configs", "tests", ".ci")
FILES = ("README.md", "Makefile", "pyproject.toml", "setup.py")
# copied unchanged from other projects (their README says so): their text is theirs
THIRD_PARTY = ("tests/fixtures/lmdeploy-0.18.0/lmdeploy",)
SUFFIXES = {".md", ".py", ".toml", ".ini", ".txt", ".cfg", ".sh", ".jsonl", ".yml", ".yaml", ""}
WORDS = "first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth"
ORDINAL = rf"(?:{WORDS}|\d+(?:st|nd|rd|th))"
NUMBER = r"(?:\d+|one|two|three|four|five|six|seven|eight|nine|ten)"
PATTERNS = [
    re.compile(p, re.IGNORECASE)
    for p in (
        r"\bissues?\s*#?\s*\d+",  # "issue 18", "issues 16 and 18", "issue #7"
        rf"\b{ORDINAL}\s+(?:(?:h200|gpu|device|work|cpu)\s+)?(?:session|round)s?\b",  # "the sixth session"
        rf"\b{ORDINAL}\s+h200\b",  # "the seventh H200 …"
        rf"\bround\s+{NUMBER}\b",  # "round 2"
        r"\b(?:h200|gpu|device|work|lent[- ]machine)\s+sessions?\b",  # "an H200 session"
        r"\b(?:this|that|next|previous|earlier|later|those|these|each)\s+sessions?\b(?!\s*(?:len|length))",
        r"\bsession's\s+(?:\d+\s+)?(?:device|reports?|budget|time|work)\b",
        # how the work was done and who asked, instead of what ran and what it showed
        r"\bdevice[- ]minutes?\b",
        r"\blent[- ]machines?\b",
        r"\bthe\s+brief\b",
        r"\bthe\s+lead\b",
        r"\bthe\s+issue(?:'s)?\b",
    )
]


def project_text_files() -> list[Path]:
    files = [ROOT / f for f in FILES if (ROOT / f).is_file()]
    for tree in TREES:
        for p in sorted((ROOT / tree).rglob("*")):
            if p.is_file() and p.suffix in SUFFIXES and "__pycache__" not in p.parts:
                if not any(p.is_relative_to(ROOT / t) for t in THIRD_PARTY):
                    files.append(p)
    return [p for p in files if p.resolve() != Path(__file__).resolve()]


def offending_lines(text: str) -> list[tuple[int, str]]:
    """(line, phrase) of every match; a phrase may wrap onto the next line ("the sixth\nsession")."""
    found = set()
    for pattern in PATTERNS:
        for m in pattern.finditer(text):
            found.add((text.count("\n", 0, m.start()) + 1, " ".join(m.group(0).split())))
    return sorted(found)


def test_the_patterns_catch_rounds_and_tracker_numbers_and_spare_session_length() -> None:
    for bad in ("in the sixth session", "the seventh H200 run", "(issues 17 and 18)", "issue #18", "round 2",
                "Fifth H200 session, 2026-12-01", "earlier sessions", "served in the sixth\nsession",
                "One\nsession's device minutes", "27 of 30 device minutes", "the lent machine",
                "quoted from the brief", "for the lead", "the issue's goal"):  # fmt: skip
        assert offending_lines(bad), bad
    for good in ("--session-len 8192", "session_len", "the longest session length that fits", "a session",
                 "@pytest.fixture(scope=\"session\")", "aiohttp.ClientSession()", "per session",
                 "start_new_session=True", "rounded to 64", "2026-12-01 21:48 UTC, commit 9715917",
                 "github.com/Dao-AILab/flash-attention/issues/1049", "the group leader is gone",
                 "a leading space"):  # fmt: skip
        assert not offending_lines(good), good


def test_no_project_file_counts_work_rounds_or_cites_tracker_numbers() -> None:
    files = project_text_files()
    assert any(p.name == "README.md" for p in files) and any(p.parts[-2] == "docs" for p in files)
    problems = []
    for p in files:
        try:
            text = p.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        problems += [f"{p.relative_to(ROOT)}:{n}: {phrase!r}" for n, phrase in offending_lines(text)]
    assert not problems, "write dates and commits instead:\n" + "\n".join(problems[:40])
