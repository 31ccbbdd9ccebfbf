"""What the benchmark sends (and `specq draft eval --suite` decodes offline): built-in prompt suites (data
files in `suites/`, one per category, written for this project), a user's `--prompts FILE.jsonl`, or a
`--dataset NAME_OR_PATH --field F` read through the `datasets` library. Every prompt has an id and a
category; the workload has a digest so two reports can be checked to have measured the same thing."""

from __future__ import annotations

import hashlib
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from ..errors import InputError, decode_error, missing_package
from ..jsonl import read_records

Mode = Literal["chat", "completion"]


class Prompt(BaseModel):
    id: str
    category: str = "custom"
    prompt: str | None = None
    messages: list[dict[str, str]] | None = None

    def as_messages(self) -> list[dict[str, str]]:
        if self.messages:
            return self.messages
        return [{"role": "user", "content": self.prompt or ""}]

    def as_text(self) -> str:
        """Completion mode: a chat becomes a plain transcript ending with the assistant's turn."""
        if self.prompt is not None and not self.messages:
            return self.prompt
        lines = [f"{m.get('role', 'user')}: {m.get('content', '')}" for m in self.as_messages()]
        return "\n".join(lines) + "\nassistant:"


class Workload(BaseModel):
    source: str
    prompts: list[Prompt]

    @property
    def digest(self) -> str:
        h = hashlib.sha256()
        for p in self.prompts:
            h.update(p.model_dump_json().encode())
        return h.hexdigest()[:16]

    @property
    def categories(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for p in self.prompts:
            out[p.category] = out.get(p.category, 0) + 1
        return out


def suite_names() -> list[str]:
    files = resources.files(__name__).joinpath("suites").iterdir()
    return sorted(f.name[:-6] for f in files if f.name.endswith(".jsonl")) + ["mixed"]


def _to_prompt(rec: dict[str, Any], source: str, n: int, default_category: str) -> Prompt:
    prompt, messages = rec.get("prompt"), rec.get("messages")
    if prompt is None and messages is None:
        raise InputError(f"{source}: record {n} has neither 'prompt' nor 'messages'")
    if messages is not None and (
        not isinstance(messages, list) or not all(isinstance(m, dict) and "content" in m for m in messages)
    ):
        raise InputError(f"{source}: record {n}: 'messages' must be a list of {{role, content}} objects")
    return Prompt(
        id=str(rec.get("id", f"{Path(source).stem}-{n}")),
        category=str(rec.get("category", default_category)),
        prompt=None if prompt is None else str(prompt),
        messages=messages,
    )


def load_suite(name: str) -> list[Prompt]:
    """A built-in suite by category name, or `mixed` (every category)."""
    if name == "mixed":
        return [p for n in suite_names() if n != "mixed" for p in load_suite(n)]
    ref = resources.files(__name__).joinpath("suites", f"{name}.jsonl")
    if not ref.is_file():
        raise InputError(f"no built-in suite '{name}'; available: {', '.join(suite_names())}")
    recs = read_records(ref.read_text(encoding="utf-8"), f"suite {name}")
    return [_to_prompt(r, f"suite {name}", i, name) for i, r in enumerate(recs, 1)]


def load_prompts_file(path: str | Path) -> list[Prompt]:
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{p}: no such prompts file (expected JSONL with 'prompt' or 'messages' per line)")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise decode_error(e, p) from None
    recs = read_records(text, str(p))
    if not recs:
        raise InputError(f"{p}: no prompts in the file")
    return [_to_prompt(r, str(p), i, "custom") for i, r in enumerate(recs, 1)]


def load_dataset_prompts(name: str, field: str, limit: int | None = None) -> list[Prompt]:
    """Prompts from a `datasets` source: a local file/dir (offline) or a hub name `name[:config[:split]]`."""
    try:
        import datasets
    except ImportError:
        raise missing_package("datasets", "ml") from None
    path = Path(name)
    try:
        if path.exists():
            files = sorted(str(f) for f in path.iterdir() if f.is_file()) if path.is_dir() else [str(path)]
            ext = Path(files[0]).suffix.lstrip(".") if files else ""
            builder = {"jsonl": "json", "txt": "text"}.get(ext, ext)
            ds = datasets.load_dataset(builder, data_files=files, split="train")
        else:
            parts = name.split(":")
            ds = datasets.load_dataset(
                parts[0], parts[1] if len(parts) > 1 and parts[1] else None,
                split=parts[2] if len(parts) > 2 else "train",
            )  # fmt: skip
    except Exception as e:  # datasets raises many kinds (FileNotFound, ConnectionError, DatasetNotFound)
        raise InputError(
            f"dataset '{name}' could not be loaded: {type(e).__name__}: {e}".split("\n")[0]
        ) from None
    if field not in ds.column_names:
        raise InputError(f"dataset '{name}' has no field '{field}'; fields: {', '.join(ds.column_names)}")
    out = []
    for i, row in enumerate(ds):
        if limit is not None and i >= limit:
            break
        value = row[field]
        rec: dict[str, Any] = {"id": str(row.get("id", f"{path.stem or name}-{i + 1}"))}
        rec["category"] = str(row.get("category", "dataset"))
        rec["messages" if isinstance(value, list) else "prompt"] = value
        out.append(_to_prompt(rec, name, i + 1, "dataset"))
    if not out:
        raise InputError(f"dataset '{name}' is empty")
    return out


def select(prompts: list[Prompt], n: int) -> list[Prompt]:
    """`n` prompts, round-robin over categories so a short run still covers every category; cycles when
    fewer prompts than requests exist."""
    by_cat: dict[str, list[Prompt]] = {}
    for p in prompts:
        by_cat.setdefault(p.category, []).append(p)
    order: list[Prompt] = []
    i = 0
    while len(order) < len(prompts):
        for items in by_cat.values():
            if i < len(items):
                order.append(items[i])
        i += 1
    return [order[j % len(order)] for j in range(n)]


def build_workload(
    *, suite: str | None, prompts_file: str | None, dataset: str | None, field: str, requests: int
) -> Workload:
    given = [x for x in (prompts_file, dataset) if x]
    if len(given) > 1:
        raise InputError("give only one of --prompts and --dataset")
    if prompts_file:
        prompts, source = load_prompts_file(prompts_file), f"file:{prompts_file}"
    elif dataset:
        prompts, source = load_dataset_prompts(dataset, field), f"dataset:{dataset}:{field}"
    else:
        name = suite or "mixed"
        prompts, source = load_suite(name), f"suite:{name}"
    return Workload(source=source, prompts=select(prompts, requests))
