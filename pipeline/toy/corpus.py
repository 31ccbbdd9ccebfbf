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


def write_jsonl(path: str | Path, texts: list[str], field: str = "text") -> Path:
    """Write one JSON object per text (`{"text": ...}`), e.g. a calibration file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for text in texts:
            f.write(json.dumps({field: text}, ensure_ascii=False) + "\n")
    return path
