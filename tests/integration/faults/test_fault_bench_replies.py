"""`specq bench --url` against a server that answers badly: a malformed model list, SSE data of the wrong
shape, impossible token counts, a stream cut short, a key it wants, a reply full of terminal escapes. Each
bad request is marked failed with the reason (a run of nothing but failures exits 5, its report marked
incomplete), a bad server or URL is one line with exit 2, and the report files appear whole or not at all."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from .conftest import assert_one_line
from .hostile_server import Behaviour, chunk, good_stream, hostile_server

pytestmark = pytest.mark.integration
FILES = {"report.json", "runs.csv", "summary.md"}


def _bench(specq, url: str, out: Path, *extra: str, env: dict[str, str] | None = None):
    args = ["-q", "bench", "--url", url, "--requests", "2", "--max-tokens", "8", "--warmup", "0"]
    return specq(*args, "--out", out, *extra, env=env)


def _usage(**usage: object) -> bytes:
    return json.dumps({"choices": [], "usage": usage}).encode()


MALFORMED_STREAMS = {
    "data is a list": ([b"[1, 2]", b"[DONE]"], "a JSON list, not an object"),
    "data is a number": ([b"42", b"[DONE]"], "a JSON int, not an object"),
    "data is not JSON": ([b"{oops", b"[DONE]"], "malformed SSE data"),
    "choices is an object": ([b'{"choices": {"a": 1}}', b"[DONE]"], "choices is not a list"),
    "delta is a string": ([b'{"choices": [{"delta": "x"}]}', b"[DONE]"], "a delta is not an object"),
    "usage as a string": ([chunk(" a"), b'{"choices": [], "usage": "lots"}', b"[DONE]"], "malformed usage"),
    "usage counts as strings": (
        [chunk(" a", usage={"completion_tokens": "1"}), b"[DONE]"],
        'completion_tokens is "1", not an integer',
    ),
    "usage counts as floats": ([chunk(" a"), _usage(completion_tokens=1.5), b"[DONE]"], "not an integer"),
    "prompt_tokens a list": (
        [chunk(" a"), _usage(completion_tokens=1, prompt_tokens=[3]), b"[DONE]"],
        "prompt_tokens",
    ),
}
IMPOSSIBLE = {
    "cut without [DONE]": ([chunk(" a"), chunk(" b")], "ended without [DONE]"),
    "empty stream": ([], "ended without [DONE]"),
    "9999 tokens for a short text": (
        [chunk(" a"), _usage(completion_tokens=9999), b"[DONE]"], "exceeds the request's max_tokens 8"
    ),
    "negative completion tokens": ([chunk(" a"), _usage(completion_tokens=-3), b"[DONE]"], "negative (-3)"),
    "negative prompt tokens": (
        [chunk(" a"), _usage(completion_tokens=1, prompt_tokens=-1), b"[DONE]"], "negative"
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", [*MALFORMED_STREAMS, *IMPOSSIBLE])
def test_bad_replies_fail_their_requests_with_the_reason(case, specq, tmp_path):
    events, reason = {**MALFORMED_STREAMS, **IMPOSSIBLE}[case]
    out = tmp_path / "b"
    with hostile_server(Behaviour(events=events)) as url:
        r = _bench(specq, url, out)
    assert_one_line(r, 5, "measured nothing", "all 2 requests failed", reason)
    report = json.loads((out / "report.json").read_text())
    assert report["complete"] is False
    errors = [q["error"] for q in report["runs"][0]["requests"]]
    assert len(errors) == 2 and all(reason in (e or "") for e in errors)
    assert FILES <= {p.name for p in out.iterdir()}


def test_good_replies_are_measured(specq, tmp_path):
    """The control: the same server answering well gives a complete report."""
    out = tmp_path / "b"
    with hostile_server(Behaviour(events=good_stream(3))) as url:
        r = _bench(specq, url, out)
    assert r.code == 0, r.err
    report = json.loads((out / "report.json").read_text())
    assert report["complete"] is True and report["runs"][0]["aggregate"]["errors"] == 0


MODEL_LISTS = {
    "a list": ([1, 2], "did not answer an OpenAI model list"),
    "data an object": ({"data": {"id": "m"}}, "did not answer an OpenAI model list"),
    "no data": ({"models": ["m"]}, "did not answer an OpenAI model list"),
    "empty data": ({"data": []}, "lists no model"),
    "id a number": ({"data": [{"id": 7}]}, "without a string id"),
    "entry a string": ({"data": ["m"]}, "without a string id"),
    "not JSON": (b"<html>hi</html>", "did not answer an OpenAI model list"),
}


@pytest.mark.parametrize("case", MODEL_LISTS)
def test_malformed_model_list(case, specq, tmp_path):
    body, needle = MODEL_LISTS[case]
    with hostile_server(Behaviour(models=body)) as url:
        r = _bench(specq, url, tmp_path / "b")
    assert_one_line(r, 2, needle, "--model")
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize("status", [404, 500, 503])
def test_model_list_http_error(status, specq, tmp_path):
    with hostile_server(Behaviour(models_status=status)) as url:
        r = _bench(specq, url, tmp_path / "b")
    assert_one_line(r, 2, f"no OpenAI-compatible server answers at /v1/models (HTTP {status})")


@pytest.mark.parametrize(
    ("url", "needle"),
    [
        ("http://127.0.0.1:99999", "Port out of range"),
        ("http://127.0.0.1:0", "port 0"),
        ("http://127.0.0.1:-1", "not a usable URL"),
        ("ftp://127.0.0.1:21", "http:// or https://"),
        ("127.0.0.1:8000", "http:// or https://"),
        ("http://", "with a host"),
        ("http://local host:80", "without spaces"),
        ("http://127.0.0.1:80\x1b[31m", "control characters"),
    ],
)
def test_bad_url_refused_before_anything_is_sent(url, needle, specq, tmp_path):
    r = specq("bench", "--url", url, "--out", tmp_path / "b")
    line = assert_one_line(r, 2, "bench.url", needle)
    assert "\x1b" not in line
    assert not (tmp_path / "b").exists()


# ------------------------------------------------------------------------------------------------ API keys

KEY = "sk-test-4f1d9c"


@pytest.mark.parametrize(
    ("how", "env"),
    [("--api-key", {}), ("SPECQ_API_KEY", {"SPECQ_API_KEY": KEY}),
     ("OPENAI_API_KEY", {"OPENAI_API_KEY": KEY})],
)  # fmt: skip
def test_api_key_is_sent_and_never_recorded(how, env, specq, tmp_path):
    out = tmp_path / "b"
    b = Behaviour(api_key=KEY)
    extra = ["--api-key", KEY] if how == "--api-key" else []
    with hostile_server(b) as url:
        r = _bench(specq, url, out, *extra, env=env)
    assert r.code == 0, r.err
    assert set(b.seen_auth) == {f"Bearer {KEY}"}
    assert KEY not in r.out + r.err
    for p in out.rglob("*"):
        if p.is_file():
            assert KEY.encode() not in p.read_bytes(), p


@pytest.mark.parametrize(
    ("key", "said"), [(None, "wants an API key"), ("wrong", "refused the API key given")]
)
def test_missing_or_wrong_key_says_so(key, said, specq, tmp_path):
    extra = ["--api-key", key] if key else []
    with hostile_server(Behaviour(api_key=KEY)) as url:
        r = _bench(specq, url, tmp_path / "b", *extra)
    line = assert_one_line(r, 2, said, "HTTP 401", "--api-key", "SPECQ_API_KEY", "OPENAI_API_KEY")
    assert "no OpenAI-compatible server" not in line
    assert "wrong" not in line  # the key given is not echoed


def test_key_in_the_environment_is_not_shown_by_help(specq):
    r = specq("bench", "--help", env={"SPECQ_API_KEY": KEY})
    assert r.code == 0 and KEY not in r.out


# --------------------------------------------------------------------------------- escapes from outside data

EVIL = {
    "osc-title": "\x1b]0;owned\x07m",
    "csi-clear": "\x1b[2J\x1b[31mred",
    "bidi": "a\u202etxt.exe",
    "c1-csi": "\x9b31m",
    "hyperlink": "\x1b]8;;http://x\x07link\x1b]8;;\x07",
}
RAW = ("\x1b", "\x07", "\x9b", "\u202e")


@pytest.mark.parametrize("case", ["osc-title", "bidi"])
def test_escapes_in_a_model_id_are_printed_escaped(case, specq, tmp_path):
    out, model_id = tmp_path / "b", EVIL[case]
    with hostile_server(Behaviour(models={"data": [{"id": model_id}]})) as url:
        r = specq(
            "bench", "--url", url, "--requests", "2", "--max-tokens", "8", "--warmup", "0", "--out", out
        )
    assert r.code == 0, r.err
    assert not any(ch in r.out + r.err for ch in RAW)
    assert "\\x1b" in r.out or "\\u202e" in r.out
    assert json.loads((out / "report.json").read_text())["engine"]["model"] == model_id  # data kept as is


@pytest.fixture(scope="module")
def saved_report(tmp_path_factory) -> Path:
    """One good report, measured once for the module, that the tests below copy and tamper with."""
    from typer.testing import CliRunner

    from specq.cli.app import app

    out = tmp_path_factory.mktemp("saved") / "b"
    with hostile_server(Behaviour()) as url:
        args = ["-q", "bench", "--url", url, "--requests", "2", "--max-tokens", "8", "--warmup", "0"]
        r = CliRunner().invoke(app, [*args, "--out", str(out)])
    assert r.exit_code == 0, r.stderr
    return out / "report.json"


@pytest.mark.parametrize("case", ["csi-clear", "c1-csi", "hyperlink"])
@pytest.mark.parametrize("field", ["notes", "label", "reason", "model"])
def test_escapes_in_a_saved_report_are_printed_escaped(field, case, saved_report, specq, tmp_path):
    data = json.loads(saved_report.read_text())
    evil = EVIL[case]
    if field == "notes":
        data["notes"].append(evil)
    elif field == "model":
        data["engine"]["model"] = evil
    else:
        data["runs"][0][field] = evil
    path = tmp_path / "report.json"
    path.write_text(json.dumps(data))
    for fmt in ("table", "md"):
        r = specq("report", "show", path, "--format", fmt)
        assert r.code == 0, r.err
        assert not any(ch in r.out + r.err for ch in RAW), (fmt, r.out)


def test_escapes_in_a_server_error_are_printed_escaped(specq, tmp_path):
    events = [json.dumps({"error": {"message": "boom\x1b[2J\x1b]0;t\x07"}}).encode(), b"[DONE]"]
    with hostile_server(Behaviour(events=events)) as url:
        r = _bench(specq, url, tmp_path / "b")
    line = assert_one_line(r, 5, "server error: boom")
    assert "\x1b" not in r.err and "\\x1b" in line


# ------------------------------------------------------------------------------------ outputs: whole or none


def test_full_disk_leaves_no_half_written_report(specq, full_fs):
    out = full_fs / "b"
    with hostile_server(Behaviour(events=good_stream(400))) as url:
        r = specq(
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
            out,
        )
    assert_one_line(r, 4, "no space left", "--out")
    assert list(full_fs.iterdir()) == []


def test_existing_report_is_replaced_whole(specq, tmp_path):
    out = tmp_path / "b"
    with hostile_server(Behaviour()) as url:
        assert _bench(specq, url, out).code == 0
        first = json.loads((out / "report.json").read_text())["created_at"]
        assert _bench(specq, url, out).code == 0
    names = {p.name for p in out.iterdir()}
    assert FILES <= names and not any(n.startswith(".") for n in names)
    assert json.loads((out / "report.json").read_text())["created_at"] >= first


@pytest.mark.parametrize("mask", [0o022, 0o002, 0o077])
def test_outputs_follow_the_umask(mask, specq, toy_draft, tmp_path):
    """Files and directories specq writes get the modes the user's umask gives (not a forced 0600/0700):
    a bench report (mask 077) and a converted checkpoint (the others)."""
    out = tmp_path / "out"
    old = os.umask(mask)
    try:
        if mask == 0o077:
            with hostile_server(Behaviour()) as url:
                assert _bench(specq, url, out).code == 0
        else:
            r = specq("-q", "convert", toy_draft, "--dtype", "float16", "--out", out)
            assert r.code == 0, r.err
    finally:
        os.umask(old)
    paths = [out, *out.rglob("*")]
    assert len(paths) > 2
    for p in paths:
        want = (0o777 if p.is_dir() else 0o666) & ~mask
        assert p.stat().st_mode & 0o777 == want, (p, oct(p.stat().st_mode))
