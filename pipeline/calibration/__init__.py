"""Calibration data for quantization: read texts from a hub dataset (`name[:config[:split]]`) or local
`.json/.parquet/.csv/.txt` files (or a directory of them) through `datasets` (`.jsonl` with the standard
library, the same rows without `datasets`' import), render chat `messages`
with the model's chat template, tokenize, and pack everything into `seqlen`-token samples so no text is
silently dropped (several backends skip texts longer than their sequence length). A held-out slice of the
same packed stream is kept apart for the quality report. Every bad source is an `InputError` (exit 2)."""

from __future__ import annotations

import codecs
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from ..errors import InputError, decode_error, missing_package, os_error
from ..jsonl import read_record
from ..progress import Progress, null_progress

TOKENIZE_BATCH = 32
BATCH_CHARS = 1 << 21  # at most ~2M characters per tokenizer call, however long the texts
MIN_TEXT_CHARS = 1 << 16  # a text is cut to max(this, 8 characters per token the samples need)
MAX_LINE_BYTES = 256 << 20  # one JSON Lines row longer than this is refused, not parsed
LOCAL_FORMATS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv", ".txt": "text"}


class CalibrationReport(BaseModel):
    source: str
    kind: str  # "local" | "hub"
    files: list[str] = []
    texts: int  # texts tokenized (shuffled; the rest were not needed to fill the samples)
    texts_available: int = 0  # non-empty texts in the source
    chat_texts: int = 0  # of which rendered from `messages` with the chat template
    tokens_total: int  # tokens of all texts, packed
    samples: int  # calibration samples used
    samples_requested: int
    seqlen: int
    tokens_used: int  # tokens in the calibration samples
    heldout_samples: int
    heldout_tokens: int
    notes: list[str] = []


@dataclass
class Calibration:
    """Packed token-id samples (each at most `seqlen` long) and a held-out slice for evaluation."""

    samples: list[list[int]]
    heldout: list[list[int]]
    report: CalibrationReport
    texts: list[str] = field(default_factory=list, repr=False)


def parse_source(source: str) -> tuple[str, list[Path] | tuple[str, str | None, str]]:
    """('local', files) or ('hub', (name, config, split)). A path-like source that does not exist is an
    error rather than a hub lookup, so a typo in a file name never turns into a network request."""
    path = Path(source).expanduser()
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in LOCAL_FORMATS)
        if not files:
            raise InputError(f"calibration directory {path} holds no {'/'.join(sorted(LOCAL_FORMATS))} files")
        kinds = {LOCAL_FORMATS[p.suffix.lower()] for p in files}
        if len(kinds) > 1:
            raise InputError(
                f"calibration directory {path} mixes formats ({', '.join(sorted(kinds))}); use one format"
            )
        return "local", files
    if path.is_file():
        if path.suffix.lower() not in LOCAL_FORMATS:
            raise InputError(
                f"calibration file {path}: unsupported type '{path.suffix}'; use one of "
                f"{', '.join(sorted(LOCAL_FORMATS))}"
            )
        return "local", [path]
    looks_local = (
        source.startswith((".", "/", "~"))
        or Path(source).suffix.lower() in LOCAL_FORMATS
        or source.count("/") > 1
    )
    if looks_local:
        raise InputError(f"calibration file {source} does not exist")
    name, _, rest = source.partition(":")
    config, _, split = rest.partition(":")
    if not name:
        raise InputError(f"calibration source '{source}': expected NAME[:CONFIG[:SPLIT]] or a file")
    return "hub", (name, config or None, split or "train")


class _Columns:
    """JSON Lines rows as the two things `_texts` asks of a `datasets.Dataset`: `column_names` and
    `ds[column]`."""

    def __init__(self, rows: list[dict[str, Any]]):
        self.rows = rows
        self.column_names = list(dict.fromkeys(k for row in rows for k in row))

    def __getitem__(self, column: str) -> list[Any]:
        return [row.get(column) for row in self.rows]


def _read_jsonl(files: list[Path]) -> _Columns:
    """Local `.jsonl` files read with the standard library, one line at a time: the common case, without
    `datasets`' import and Arrow conversion. A line above MAX_LINE_BYTES is refused before it is parsed."""
    rows: list[dict[str, Any]] = []
    for f in files:
        offset = 0
        with open(f, "rb") as fh:
            for n, raw in enumerate(iter(lambda: fh.readline(MAX_LINE_BYTES + 1), b""), 1):
                if len(raw) > MAX_LINE_BYTES:
                    raise InputError(
                        f"{f}:{n}: a line longer than {MAX_LINE_BYTES / 2**20:g} MiB; split the text into "
                        "rows (calibration uses at most --samples x --seqlen tokens)"
                    )
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    raise decode_error(e, f, offset) from None
                offset += len(raw)
                rec = read_record(line, str(f), n)
                if rec is not None:
                    rows.append(rec)
    return _Columns(rows)


TEXT_FORMATS = (".txt", ".json", ".jsonl", ".csv")


def _check_readable(files: list[Path]) -> None:
    """Local calibration files open for reading and text ones are UTF-8 (a problem is the user's, named
    with its path, before a backend reports it as its own error)."""
    for f in files:
        try:
            with open(f, "rb") as fh:
                if f.suffix.lower() in TEXT_FORMATS:
                    decoder = codecs.getincrementaldecoder("utf-8")()
                    offset = 0
                    while chunk := fh.read(1 << 20):
                        try:
                            decoder.decode(chunk)
                        except UnicodeDecodeError as e:
                            raise decode_error(e, f, offset) from None
                        offset += len(chunk)
                else:
                    fh.read(1)
        except OSError as e:
            raise (os_error(e, f, fix="make it readable (chmod u+r) or pass another --calib") or e) from None


def _load_rows(source: str) -> tuple[str, list[str], Any]:
    kind, spec = parse_source(source)
    if isinstance(spec, list):
        _check_readable(spec)
    if isinstance(spec, list) and all(p.suffix.lower() == ".jsonl" for p in spec):
        return kind, [str(p) for p in spec], _read_jsonl(spec)
    try:
        import datasets
    except ImportError:
        raise missing_package("datasets", "ml") from None
    datasets.disable_progress_bars()
    if kind == "local":
        assert isinstance(spec, list)
        builder = LOCAL_FORMATS[spec[0].suffix.lower()]
        try:
            ds = datasets.load_dataset(builder, data_files=[str(p) for p in spec], split="train")
        except Exception as e:  # datasets raises many types for malformed files
            cause = e.__cause__ or e
            msg = " ".join(str(cause).split())[:200]
            raise InputError(
                f"calibration source {source}: cannot read it ({type(cause).__name__}: {msg})"
            ) from None
        return kind, [str(p) for p in spec], ds
    assert isinstance(spec, tuple)
    name, config, split = spec
    try:
        ds = datasets.load_dataset(name, config, split=split)
    except Exception as e:
        msg = " ".join(str(e).split())[:160]
        raise InputError(
            f"calibration dataset '{source}' could not be loaded from the hub (no network, or no such "
            f"dataset/config/split): {type(e).__name__}: {msg}"
        ) from None
    return kind, [], ds


def _texts(
    ds: Any, source: str, text_field: str, tokenizer: Any, max_chars: int
) -> tuple[list[str], int, int]:
    """(texts, how many were rendered from chat messages, how many were cut to `max_chars`)."""
    columns = list(getattr(ds, "column_names", None) or [])
    if text_field in columns:
        use = text_field
    elif "messages" in columns:
        use = "messages"
    else:
        raise InputError(
            f"calibration source {source}: no field '{text_field}' "
            f"(columns: {', '.join(columns) or 'none'}); "
            "pass --text-field NAME, or give chat data a 'messages' column"
        )
    texts: list[str] = []
    chats = cut = 0
    for i, value in enumerate(ds[use]):
        if use == "messages":
            if getattr(tokenizer, "chat_template", None) is None:
                raise InputError(
                    f"calibration source {source}: rows have 'messages' but the model's tokenizer has no "
                    "chat template; pass --text-field with a plain-text column"
                )
            try:
                value = tokenizer.apply_chat_template(value, tokenize=False)
            except Exception as e:
                raise InputError(
                    f"calibration source {source}: row {i}: 'messages' could not be rendered with the chat "
                    f"template ({type(e).__name__}: {e})"
                ) from None
            chats += 1
        if value is None:
            continue
        if not isinstance(value, str):
            raise InputError(
                f"calibration source {source}: field '{use}' of row {i} is {type(value).__name__}, not text"
            )
        if len(value) > max_chars:
            value, cut = value[:max_chars], cut + 1
        if value.strip():
            texts.append(value)
    return texts, chats, cut


def load_calibration(
    source: str,
    tokenizer: Any,
    *,
    text_field: str = "text",
    samples: int = 128,
    seqlen: int = 512,
    seed: int = 0,
    heldout_samples: int = 8,
    progress: Progress = null_progress,
) -> Calibration:
    """Read, tokenize and pack `source` for `tokenizer` (a transformers tokenizer or a model directory).

    Texts are shuffled with `seed`, joined with the EOS token and cut into `seqlen`-token samples; the first
    `samples` go to calibration, up to `heldout_samples` of the rest (or a tenth of them when the source is
    small) are held out for perplexity."""
    if isinstance(tokenizer, (str, Path)):
        tokenizer = load_tokenizer(Path(tokenizer))
    kind, files, ds = _load_rows(source)
    need = (samples + heldout_samples) * seqlen
    max_chars = max(MIN_TEXT_CHARS, 8 * need)
    texts, chats, cut = _texts(ds, source, text_field, tokenizer, max_chars)
    del ds
    if not texts:
        raise InputError(f"calibration source {source}: no non-empty texts in field '{text_field}'")
    random.Random(seed).shuffle(texts)
    if cut:
        progress(
            f"calibration: {cut} text(s) longer than {max_chars:,} characters cut to their first "
            f"{max_chars:,} (more than the samples need)"
        )
    progress(f"calibration: read {len(texts)} texts from {source}; tokenizing")
    stream, read = _token_stream(texts, tokenizer, need=need)
    if len(stream) < seqlen:
        raise InputError(
            f"calibration source {source}: only {len(stream)} tokens, fewer than one sample of --seqlen "
            f"{seqlen}; add data or lower --seqlen"
        )
    calib, held = _pack(stream, seqlen, samples, heldout_samples)
    notes: list[str] = []
    if cut:
        notes.append(f"{cut} text(s) longer than {max_chars} characters were cut to their first {max_chars}")
    if len(calib) < samples:
        notes.append(
            f"the source gives {len(calib)} samples of {seqlen} tokens, fewer than the {samples} requested"
        )
    if heldout_samples and not held:
        notes.append("the source is too small to hold out data: no perplexity on held-out text")
    if read < len(texts):
        notes.append(f"{len(texts) - read} of {len(texts)} texts were not needed to fill the samples")
    unused = len(stream) - sum(map(len, calib)) - sum(map(len, held))
    if unused > 0:
        notes.append(f"{unused} tokens beyond --samples x --seqlen were not needed")
    report = CalibrationReport(
        source=source,
        kind=kind,
        files=files,
        texts=read,
        texts_available=len(texts),
        chat_texts=chats,
        tokens_total=len(stream),
        samples=len(calib),
        samples_requested=samples,
        seqlen=seqlen,
        tokens_used=sum(map(len, calib)),
        heldout_samples=len(held),
        heldout_tokens=sum(map(len, held)),
        notes=notes,
    )
    return Calibration(samples=calib, heldout=held, report=report, texts=texts)


def _token_stream(texts: list[str], tokenizer: Any, need: int) -> tuple[list[int], int]:
    """The texts' tokens joined by EOS, tokenized in batches until `need` tokens are there (a large source
    is read, not tokenized, in full): (tokens, texts read)."""
    eos = tokenizer.eos_token_id
    stream: list[int] = []
    read = 0
    while read < len(texts) and len(stream) < need:
        batch: list[str] = []
        chars = 0
        while read < len(texts) and len(batch) < TOKENIZE_BATCH and (not batch or chars < BATCH_CHARS):
            batch.append(texts[read])
            chars += len(texts[read])
            read += 1
        for ids in tokenizer(batch, add_special_tokens=False, verbose=False)["input_ids"]:
            stream.extend(ids)
            if eos is not None:
                stream.append(int(eos))
    return stream, read


def _pack(
    stream: list[int], seqlen: int, samples: int, heldout_samples: int
) -> tuple[list[list[int]], list[list[int]]]:
    """Cut the stream into `seqlen` chunks: (calibration samples, held-out samples). Whole chunks are held
    out, never more than a tenth of a source that cannot fill both."""
    chunks = [stream[i : i + seqlen] for i in range(0, len(stream), seqlen)]
    full = len(stream) // seqlen
    spare = max(0, full - samples)
    n_held = min(heldout_samples, spare) if spare else min(heldout_samples, full // 10)
    held = chunks[full - n_held : full] if n_held else []
    calib_pool = chunks[: full - n_held]
    if len(stream) % seqlen and full - n_held < samples:
        calib_pool.append(chunks[-1])  # the short tail is used rather than dropped
    return calib_pool[:samples], held


def load_tokenizer(model: Path) -> Any:
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise missing_package("transformers", "ml") from None
    try:
        return AutoTokenizer.from_pretrained(str(model))
    except Exception as e:
        raise InputError(f"{model}: cannot load its tokenizer ({type(e).__name__}: {e})") from None


__all__ = ["Calibration", "CalibrationReport", "load_calibration", "load_tokenizer", "parse_source"]
