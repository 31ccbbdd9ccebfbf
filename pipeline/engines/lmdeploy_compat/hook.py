"""The import hook that applies a recorded LMDeploy patch in memory (standard library only: it runs at the
start-up of every Python process that specq launches LMDeploy in, before anything else is imported).

`install()` does nothing unless the environment variable `SPECQ_LMDEPLOY_COMPAT` names known patches
(comma-separated; no two touch the same module). Then a meta-path finder per patch intercepts its modules:
it reads each installed file, requires the sha256 recorded for LMDeploy's original, applies the unified diff
(exact context, no fuzz), requires the sha256 recorded for the patched file, and executes that source in
place of the file's (never its cached bytecode). On any mismatch the module is imported unpatched and one
line on stderr says why. Each patched module gets `__specq_compat__` (the patch name), and with
`SPECQ_LMDEPLOY_COMPAT_LOG` set, one line per patched module and process is appended to that file (how a GPU
test shows that the engine's own process ran the patch)."""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from dataclasses import dataclass
from pathlib import Path

ENV = "SPECQ_LMDEPLOY_COMPAT"
LOG_ENV = "SPECQ_LMDEPLOY_COMPAT_LOG"
HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Patch:
    name: str
    version: str  # the one lmdeploy version whose files the hashes describe
    diff: str  # file name beside this module
    files: dict[str, tuple[str, str]]  # path relative to site-packages -> (original sha256, patched sha256)

    def text(self) -> str:
        return (HERE / self.diff).read_text(encoding="utf-8")

    def modules(self) -> dict[str, str]:
        """module name -> relative path (`lmdeploy/pytorch/config.py` -> `lmdeploy.pytorch.config`)."""
        return {rel.removesuffix(".py").replace("/", "."): rel for rel in self.files}


PATCHES = {
    "qwen35-awq-bf16": Patch(
        name="qwen35-awq-bf16",
        version="0.18.0",
        diff="qwen35-awq-bf16.diff",
        files={
            "lmdeploy/pytorch/config.py": (
                "131bb0c0d03fa2c9504b1768c91c0febfe128d7a163799df8cbdde63915518a9",
                "60c90439e313ab4bd0598bba3b80535879421a1fdf063d6d734a50696581a3ef",
            ),
            "lmdeploy/pytorch/backends/cuda/turbomind_awq_modules.py": (
                "627ac6edcea20484a2e6c91fbb395c67a5f271f5ab2340c3ca04dd6511e3da36",
                "ad9e9d47452ff307f9b38aa5e36caebef0874efd4590212e224f7e175d54a88d",
            ),
        },
    ),
    # opt-in (engine.step_patch): less host work in the PyTorch engine's speculative step; what each of its
    # three parts does and what it was measured to save: docs/step-cost.md
    "spec-step": Patch(
        name="spec-step",
        version="0.18.0",
        diff="spec-step.diff",
        files={
            "lmdeploy/pytorch/spec_decode/spec_agent.py": (
                "d4a6c0ab96ecdfa0b7c7d3c36f97657864989ad7bf2a8cf64eff5e1d9288b15b",
                "a7c19690eeac46c4a5819b57cef78d654c595b986bd524b2770daab951e2a9d9",
            ),
            "lmdeploy/pytorch/backends/cuda/attention/fa3.py": (
                "31f6ae15836eab10336abe5859541b72d04e71ff89e30778cfccdbd6d9c58245",
                "13d32efa2a956a18cfb213cff2dd69851e1dbaa26aedb9c7bcd21ac46004f49a",
            ),
            "lmdeploy/pytorch/engine/model_agent/agent.py": (
                "99fb1968a3fb086d99eb018e352b1db4df2c5900a2b7fc461438da585f406913",
                "dd9f9ec3e4338a0f03e7f50b863a2f8aeaa36cbdeb1b5464288f07744806ebcc",
            ),
        },
    ),
    # engine.w4a16_kernel = specq (the default where it applies): the PyTorch engine's W4A16 linears run
    # specq's deterministic kernel (specq.pipeline.kernels.w4a16) instead of LMDeploy's Triton AWQ kernel,
    # and on one GPU a dense Qwen3.5's Gated DeltaNet runs in_proj_qkv and in_proj_z as one linear and its
    # 16-bit gates in_proj_ba on specq's skinny linear (specq.pipeline.kernels.skinny)
    "w4a16-specq": Patch(
        name="w4a16-specq",
        version="0.18.0",
        diff="w4a16-specq.diff",
        files={
            "lmdeploy/pytorch/backends/cuda/awq_modules.py": (
                "b274e960f9caf7e779ae5e2a468b3e6630be7aac0fa6a82de01ff3ac6a36c9cb",
                "6a81542cb987c1df33fcaf6f1baf5a110b0b7b244652b1261dc7133a574028e6",
            ),
            "lmdeploy/pytorch/models/qwen3_5.py": (
                "7248df2de93fb44ffce7570a7b5d174b7fb2df007bc545774ef4611eef583657",
                "b03624471b515573ea4a4ffeb870d9bb6b96b0b559c30cac1f77d8aaf129cc21",
            ),
        },
    ),
    # a 4-bit (AWQ) DFlash drafter: the proposer builds the drafter's linears from the drafter's own
    # quantization_config, not the target's (docs/lmdeploy-patch.md, "dflash-awq")
    "dflash-awq": Patch(
        name="dflash-awq",
        version="0.18.0",
        diff="dflash-awq.diff",
        files={
            "lmdeploy/pytorch/spec_decode/proposers/dflash.py": (
                "cd1daf8550a8743d52e1df1fcd972f443093c24c30d1d406622ee61e50240434",
                "612a6e6fc96587c8328baa810734d0c0a25f97ba8e1ad41e57c8db689487a0c7",
            ),
        },
    ),
}


class PatchError(ValueError):
    """The diff does not apply to the text it was given."""


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def file_state(path: Path, hashes: tuple[str, str]) -> str:
    """'original', 'patched', 'other' or 'missing' for one file against its recorded hashes."""
    try:
        digest = sha256(path.read_bytes())
    except OSError:
        return "missing"
    return {hashes[0]: "original", hashes[1]: "patched"}.get(digest, "other")


Hunk = tuple[int, list[str]]  # (old start line, 1-based; the hunk's lines with their ' ', '-', '+' marks)


def parse_diff(text: str) -> dict[str, list[Hunk]]:
    """A unified diff (`--- a/X`, `+++ b/X`, `@@ -l,n +l,n @@` hunks) as relative path -> hunks."""
    files: dict[str, list[Hunk]] = {}
    current: list[Hunk] | None = None
    for line in text.splitlines():
        if line.startswith("--- "):
            current = None
        elif line.startswith("+++ "):
            name = line[4:].split("\t")[0].strip()
            current = files.setdefault(name[2:] if name.startswith("b/") else name, [])
        elif line.startswith("@@"):
            if current is None:
                raise PatchError("hunk before a file header")
            try:
                old = line.split()[1]  # -l,n
                start = int(old[1:].split(",")[0])
            except (IndexError, ValueError):
                raise PatchError(f"bad hunk header: {line!r}") from None
            current.append((start, []))
        elif current and line[:1] in (" ", "-", "+"):
            current[-1][1].append(line)
        elif current and line == "":  # an empty context line whose space was stripped
            current[-1][1].append(" ")
    return files


def apply_hunks(text: str, hunks: list[Hunk]) -> str:
    """`text` with `hunks` applied where their headers say, every context and removed line matching exactly
    (raises PatchError otherwise)."""
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    pos = 0  # index into lines
    for start, body in hunks:
        at = start - 1
        if at < pos:
            raise PatchError(f"overlapping hunk at line {start}")
        out.extend(lines[pos:at])
        pos = at
        for mark_line in body:
            mark, content = mark_line[0], mark_line[1:]
            if mark in (" ", "-"):
                if pos >= len(lines) or lines[pos].rstrip("\r\n") != content:
                    raise PatchError(f"line {pos + 1} does not match the diff's context")
                if mark == " ":
                    out.append(lines[pos])
                pos += 1
            else:
                out.append(content + "\n")
    out.extend(lines[pos:])
    return "".join(out)


def patched_source(patch: Patch, rel: str, original: bytes) -> str:
    """The patched text of `rel` from its installed bytes, both ends checked against the recorded sha256."""
    want_orig, want_patched = patch.files[rel]
    if sha256(original) != want_orig:
        raise PatchError(f"{rel} is not lmdeploy {patch.version}'s original (sha256 differs)")
    hunks = parse_diff(patch.text()).get(rel)
    if not hunks:
        raise PatchError(f"{patch.diff} has no hunks for {rel}")
    new = apply_hunks(original.decode("utf-8"), hunks)
    if sha256(new.encode("utf-8")) != want_patched:
        raise PatchError(f"{rel} patched does not have the recorded sha256")
    return new


class _PatchedLoader(importlib.machinery.SourceFileLoader):
    """Runs the patched source; never the file's cached bytecode (which is the original's)."""

    def __init__(self, fullname: str, path: str, source: str, patch: Patch) -> None:
        super().__init__(fullname, path)
        self._source = source
        self._patch = patch

    def get_code(self, fullname: str):  # type: ignore[override]
        return compile(self._source, self.path, "exec", dont_inherit=True)

    def get_source(self, fullname: str) -> str:
        return self._source

    def exec_module(self, module) -> None:  # type: ignore[no-untyped-def]
        super().exec_module(module)
        module.__specq_compat__ = self._patch.name
        _record(f"patched {module.__name__} ({self._patch.name}) pid={os.getpid()}")


def _record(line: str) -> None:
    log = os.environ.get(LOG_ENV)
    if log:
        try:
            with open(log, "a", encoding="utf-8") as f:
                f.write(line + "\n")
        except OSError:
            pass


class Finder(importlib.abc.MetaPathFinder):
    def __init__(self, patch: Patch) -> None:
        self.patch = patch
        self.modules = patch.modules()

    def find_spec(self, fullname, path=None, target=None):  # type: ignore[no-untyped-def]
        rel = self.modules.get(fullname)
        if rel is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or not spec.origin:
            return None
        try:
            source = patched_source(self.patch, rel, Path(spec.origin).read_bytes())
        except (OSError, UnicodeDecodeError, PatchError) as e:
            sys.stderr.write(f"specq: warning: {self.patch.name} not applied to {fullname}: {e}\n")
            _record(f"not applied {fullname} ({self.patch.name}) pid={os.getpid()}: {e}")
            return None
        loader = _PatchedLoader(fullname, spec.origin, source, self.patch)
        return importlib.util.spec_from_file_location(fullname, spec.origin, loader=loader)


def install() -> list[Finder]:
    """Put each patch named in `SPECQ_LMDEPLOY_COMPAT` (comma-separated) in front of the import system, once;
    unknown names are ignored. Returns the finders of the named patches."""
    finders = []
    for name in os.environ.get(ENV, "").split(","):
        patch = PATCHES.get(name.strip())
        if patch is None:
            continue
        mine = (f for f in sys.meta_path if isinstance(f, Finder) and f.patch.name == patch.name)
        finder = next(mine, None)
        if finder is None:
            finder = Finder(patch)
            sys.meta_path.insert(0, finder)
        finders.append(finder)
    return finders
