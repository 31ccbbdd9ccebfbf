"""Damaged 4-bit checkpoints (GPTQ and AWQ of the small toy, made by `specq quantize`): a header entry gone
with its bytes left behind (a gap in the offsets), two entries over the same bytes, bytes past the last
tensor, a quantized linear without its `qweight` or an AWQ one without its `qzeros` (the file rewritten
whole, so its offsets are clean). Each is refused with exit 2 and one line naming the file or the linear,
before any loader meets it (safetensors' loader dies with "invalid offset", gptqmodel with a traceback and
its banner), by every command that reads or loads the checkpoint, and nothing is written."""

from __future__ import annotations

import json
import shutil
import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from .conftest import assert_one_line

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ST = "model.safetensors"
LINEAR = "model.layers.1.mlp.down_proj"
DRAFT_TOML = "[draft]\nsamples = 4\nprompt_tokens = 16\ngen_tokens = 16\neval_prompts = 2\neval_tokens = 12\n"


@pytest.fixture(scope="module")
def quantized(toy_pair, tmp_path_factory) -> dict[str, Path]:
    """The small toy target quantized by specq itself, GPTQ and AWQ (no quality pass: seconds each)."""
    from typer.testing import CliRunner

    from specq.cli.app import app

    root = tmp_path_factory.mktemp("quantized")
    calib = root / "calib.jsonl"
    texts = [json.dumps({"text": f"def f{i}(x):\n    return x + {i}\n"}) for i in range(8)]
    calib.write_text("\n".join(texts) + "\n")
    out = {}
    for method, use in (("gptq", "plain"), ("awq", "speculative")):
        out[method] = root / method
        args = ["-q", "quantize", str(toy_pair.target), "--calib", str(calib), "--seqlen", "32", "--samples",
                "2", "--no-eval", "--method", method, "--for", use, "--out", str(out[method])]  # fmt: skip
        r = CliRunner().invoke(app, args, catch_exceptions=False)
        assert r.exit_code == 0, r.stderr
    # a DFlash drafter for `draft eval`: one training step is enough to have the contract's shape
    (root / "d.toml").write_text(DRAFT_TOML)
    out["dflash"] = root / "dflash"
    args = ["-q", "draft", "train", str(toy_pair.target), "--out", str(out["dflash"]), "--steps", "1", "-c",
            str(root / "d.toml")]  # fmt: skip
    r = CliRunner().invoke(app, args, catch_exceptions=False)
    assert r.exit_code == 0, r.stderr
    return out


def _header(path: Path) -> tuple[dict, bytes]:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8 : 8 + n]), raw[8 + n :]


def _write(path: Path, header: dict, data: bytes) -> None:
    blob = json.dumps(header).encode()
    blob += b" " * (-len(blob) % 8)
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + data)


def drop_entry(d: Path) -> str:
    """The header loses one qweight's entry; its bytes stay: a gap in the offsets."""
    header, data = _header(d / ST)
    del header[f"{LINEAR}.qweight"]
    _write(d / ST, header, data)
    return "a gap before it"


def overlap(d: Path) -> str:
    """One entry claims the bytes of the tensor before it (and the last bytes are nobody's)."""
    header, data = _header(d / ST)
    names = sorted((k for k in header if k != "__metadata__"), key=lambda k: header[k]["data_offsets"][0])
    a, b = header[names[0]], header[names[1]]
    size = b["data_offsets"][1] - b["data_offsets"][0]
    if a["data_offsets"][1] - a["data_offsets"][0] >= size:
        b["data_offsets"] = [a["data_offsets"][0], a["data_offsets"][0] + size]
    _write(d / ST, header, data)
    return "overlaps" if b["data_offsets"][0] == a["data_offsets"][0] else "starts at data byte"


def trailing_bytes(d: Path) -> str:
    header, data = _header(d / ST)
    _write(d / ST, header, data + b"\0" * 64)
    return "bytes of tensor data but the file holds"


def without(suffix: str) -> Callable[[Path], str]:
    """The file rewritten whole without one linear's tensor: clean offsets, a linear that cannot load."""

    def damage(d: Path) -> str:
        from specq.pipeline.convert.st_io import read_tensors, write_tensors

        tensors, meta = read_tensors(d / ST)
        kept = [(n, t.dtype, t.array.copy()) for n, t in tensors.items() if n != f"{LINEAR}.{suffix}"]
        write_tensors(d / ST, kept, meta)
        return f"{LINEAR}: missing {suffix}"

    return damage


def _commands(target: Path, draft: Path, toy_target: Path, tmp: Path) -> dict[str, list]:
    (tmp / "d.toml").write_text(DRAFT_TOML)
    return {
        "draft eval": ["draft", "eval", target, draft, "-c", tmp / "d.toml"],
        "draft train --teacher": [
            "draft",
            "train",
            toy_target,
            "--teacher",
            target,
            "--out",
            tmp / "out",
            "--steps",
            "1",
            "-c",
            tmp / "d.toml",
        ],  # fmt: skip
        "serve": ["serve", target, "--engine", "embedded", "--run-dir", tmp / "out"],
        "bench": [
            "bench",
            target,
            "--engine",
            "embedded",
            "--draft-tokens",
            "0",
            "--requests",
            "1",
            "--out",
            tmp / "out",
        ],  # fmt: skip
        "plan": ["plan", target, "--gpu-memory", "24GiB"],
        "convert": ["convert", target],
    }


def _damaged(quantized, method: str, damage: Callable[[Path], str], tmp: Path) -> tuple[Path, str]:
    d = tmp / f"{method}-damaged"
    shutil.copytree(quantized[method], d)
    return d, damage(d)


EVERY = ["draft eval", "draft train --teacher", "serve", "bench", "plan", "convert"]


@pytest.mark.parametrize("command", EVERY)
def test_a_gap_in_the_offsets_is_refused_by_every_command(command, specq, quantized, toy_pair, tmp_path):
    target, needle = _damaged(quantized, "gptq", drop_entry, tmp_path)
    args = _commands(target, quantized["dflash"], toy_pair.target, tmp_path)[command]
    line = assert_one_line(specq("-q", *args), 2, str(target / ST), needle)
    assert "SafetensorError" not in line and not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("damage", "method"),
    [(overlap, "gptq"), (trailing_bytes, "gptq"), (drop_entry, "awq")],
    ids=["overlap", "trailing bytes", "awq gap"],
)
def test_offsets_that_do_not_tile_the_data_are_refused(damage, method, specq, quantized, toy_pair, tmp_path):
    target, needle = _damaged(quantized, method, damage, tmp_path)
    args = _commands(target, quantized["dflash"], toy_pair.target, tmp_path)["draft eval"]
    assert_one_line(specq("-q", *args), 2, str(target / ST), needle, "damaged")


@pytest.mark.parametrize("command", ["draft eval", "draft train --teacher", "serve", "bench"])
def test_a_linear_without_its_qweight_is_refused_before_loading(
    command, specq, quantized, toy_pair, tmp_path
):
    target, needle = _damaged(quantized, "gptq", without("qweight"), tmp_path)
    args = _commands(target, quantized["dflash"], toy_pair.target, tmp_path)[command]
    line = assert_one_line(specq("-q", *args), 2, str(target), needle, "damaged")
    assert "gptqmodel" not in line.lower() and not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", ["draft eval", "serve"])
def test_an_awq_linear_without_its_qzeros_is_refused_before_loading(
    command, specq, quantized, toy_pair, tmp_path
):
    target, needle = _damaged(quantized, "awq", without("qzeros"), tmp_path)
    args = _commands(target, quantized["dflash"], toy_pair.target, tmp_path)[command]
    assert_one_line(specq("-q", *args), 2, str(target), needle)
    assert not (tmp_path / "out").exists()


def test_convert_gives_its_verdicts_on_a_linear_without_qweight(specq, quantized, tmp_path):
    """Readiness is convert's subject: the checkpoint is judged, each engine refuses it naming the linear."""
    target, needle = _damaged(quantized, "gptq", without("qweight"), tmp_path)
    r = specq("-q", "convert", target, "--json")
    assert r.code == 2 and "Traceback" not in r.err
    verdicts = {v["engine"]: v for v in json.loads(r.out)["report"]["verdicts"]}
    assert verdicts["embedded"]["status"] == "refused" and needle in verdicts["embedded"]["reasons"][0]
    assert len([ln for ln in r.err.splitlines() if ln.strip()]) == 1


def test_a_sound_quantized_target_loads_without_its_loaders_banner(specq, quantized, toy_pair, tmp_path):
    """gptqmodel prints some 25 lines while it loads: none reach stdout (the data) or stderr (progress)."""
    (tmp_path / "d.toml").write_text(DRAFT_TOML)
    r = specq("draft", "eval", quantized["gptq"], quantized["dflash"], "-c", tmp_path / "d.toml", "--json")
    assert r.code == 0, r.err
    json.loads(r.out)  # the JSON alone
    assert all(ln.startswith("•") for ln in r.err.splitlines() if ln.strip()), r.err
