"""The toy corpus: the running interpreter's own standard-library `.py` sources, a code corpus every
machine has. The selection is deterministic (sorted relative paths, fixed exclusions, fixed held-out
stride), so the same interpreter always yields the same train/held-out split and the same digest. The
calibration stage and the tests use it as well (`write_jsonl` makes calibration files from it)."""

from __future__ import annotations

import hashlib
import json
import sysconfig
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from ..errors import InputError, UsageError

# Directories that are not ordinary library code (tests, bundled apps, vendored wheels) or are huge.
EXCLUDED_DIRS = frozenset(
    {
        "site-packages",
        "dist-packages",
        "test",
        "tests",
        "idlelib",
        "lib2to3",
        "turtledemo",
        "ensurepip",
        "__pycache__",
        "config-3",
    }
)
MAX_FILE_BYTES = 200_000  # generated tables (e.g. pydoc_data/topics.py) say little about code
HELDOUT_STRIDE = 10  # every 10th file (sorted order) is held out for evaluation
HELDOUT_OFFSET = 3


@dataclass(frozen=True)
class Corpus:
    """Train and held-out code texts, with their file names and one digest of the whole selection."""

    root: Path
    train: list[str] = field(repr=False)
    heldout: list[str] = field(repr=False)
    train_files: list[str] = field(repr=False)
    heldout_files: list[str] = field(repr=False)
    digest: str = ""

    @property
    def train_chars(self) -> int:
        return sum(len(t) for t in self.train)

    @property
    def heldout_chars(self) -> int:
        return sum(len(t) for t in self.heldout)

    def summary(self) -> dict[str, object]:
        return {
            "source": str(self.root),
            "digest": self.digest,
            "train_files": len(self.train),
            "heldout_files": len(self.heldout),
            "train_chars": self.train_chars,
            "heldout_chars": self.heldout_chars,
        }


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def _selected_files(root: Path) -> list[str]:
    files = []
    for path in root.rglob("*.py"):
        rel = path.relative_to(root)
        if any(part in EXCLUDED_DIRS or part.startswith("config-") for part in rel.parts[:-1]):
            continue
        try:
            if not path.is_file() or path.stat().st_size > MAX_FILE_BYTES or path.stat().st_size == 0:
                continue
        except OSError:
            continue
        files.append(rel.as_posix())
    return sorted(files)


@lru_cache(maxsize=4)
def load_corpus(root: str | Path | None = None) -> Corpus:
    """Read the corpus (default: this interpreter's standard library). Cached per process."""
    base = Path(root) if root is not None else stdlib_root()
    train: list[str] = []
    heldout: list[str] = []
    train_files: list[str] = []
    heldout_files: list[str] = []
    digest = hashlib.sha256()
    for i, rel in enumerate(_selected_files(base)):
        try:
            text = (base / rel).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        text = text.replace("\r\n", "\n")
        digest.update(rel.encode() + b"\0" + text.encode() + b"\0")
        if i % HELDOUT_STRIDE == HELDOUT_OFFSET:
            heldout.append(text)
            heldout_files.append(rel)
        else:
            train.append(text)
            train_files.append(rel)
    return Corpus(base, train, heldout, train_files, heldout_files, digest.hexdigest())


def completion_prompts(corpus: Corpus, count: int = 16, chars: int = 600) -> list[dict[str, str]]:
    """The toy's own workload for `specq bench --mode completion --prompts`: `count` held-out code prefixes
    (files the toy never trained on), each the whole lines that start a third of the way into a file, up to
    `chars` characters and ending at a line end, from held-out files in sorted order (a file too short for
    one is skipped). Deterministic. The toy targets were trained on raw code: a chat prompt in English is
    foreign to them and their greedy answers loop, whereas a code prefix mostly gets code-like text that a
    drafter has to predict (2026-12-02, 128 greedy tokens: median distinct 8-gram fraction 0.36 for the
    Qwen3.5 toy and 0.29 for the small Qwen3 toy, against 0.02 on the code suite's chats; but 7 and 2 of the
    16 prompts still loop, where a block or a comment line is to begin)."""
    if count < 1:
        raise UsageError(f"--count {count}: ask for at least 1 prompt")
    if chars < 40:
        raise UsageError(f"--chars {chars}: a prompt needs at least 40 characters")
    out: list[dict[str, str]] = []
    for rel, text in zip(corpus.heldout_files, corpus.heldout, strict=True):
        if len(text) < 3 * chars:
            continue
        lines = text[len(text) // 3 :].splitlines(keepends=True)[1:]  # from the next whole line
        prompt = ""
        for line in lines:
            if len(prompt) + len(line) > chars:
                break
            prompt += line
        if len(prompt) < chars // 2 or not prompt.strip():
            continue  # a very long line (a table, a blob) there
        out.append({"id": f"heldout-{len(out) + 1:02d}", "category": "code-completion", "source": rel,
                    "prompt": prompt})  # fmt: skip
        if len(out) == count:
            break
    if not out:
        raise InputError(f"{corpus.root}: no held-out file is long enough for a {chars}-character prompt")
    return out


def write_completion_prompts(
    path: str | Path, corpus: Corpus, count: int = 16, chars: int = 600
) -> list[dict[str, str]]:
    """`completion_prompts` written atomically to `path`, one JSON record per line (a bench prompts file);
    returns the records."""
    from ..fsutil import atomic_write_text

    records = completion_prompts(corpus, count, chars)
    atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
    return records


def write_jsonl(path: str | Path, texts: list[str], field: str = "text") -> Path:
    """Write one JSON object per text (`{"text": ...}`), e.g. a calibration file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for text in texts:
            f.write(json.dumps({field: text}, ensure_ascii=False) + "\n")
    return path
