"""Carrying out an FA3 build plan: copy the parts of the checkout setup.py needs into a temporary directory
(it writes files there and reads ../README.md), run `python setup.py build_ext --inplace` as a supervised
subprocess (argument list, own process group, terminate → wait → kill on interrupt) whose ninja lines
`[N/M]` become progress, run the numerical self-check in a separate Python process with the built module
first on sys.path, and only when both pass install flash_attn_interface.py, flash_attn_config.py and the
flash_attn_3 package into this environment's site-packages (each written beside its destination and
renamed into place)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections import deque
from datetime import datetime, timezone
from pathlib import Path

from pydantic import BaseModel

from .. import hardware
from ..errors import EnvironmentMissing, ProcessFailed, UsageError
from ..progress import Progress, null_progress
from .plan import Fa3Plan, Fa3Request, check_gpu_problem, make_plan, probe_toolchain
from .selfcheck import CaseResult

NINJA_STEP = re.compile(r"^\[(\d+)/(\d+)\]\s*(.*)")
INSTALLED_NAMES = ("flash_attn_interface.py", "flash_attn_config.py", "flash_attn_3")
BUILD_RECORD = "specq_build.json"  # written into the installed flash_attn_3/: what specq built, from where
SELF_CHECK_TIMEOUT_S = 900


class Fa3BuildResult(BaseModel):
    schema_version: int = 1
    plan: Fa3Plan
    build_seconds: float
    compiled: int  # ninja steps done
    checked: bool
    check_device: str | None = None
    cases: list[CaseResult] = []
    installed: list[str] = []  # paths written in site-packages
    out: str | None = None  # --out copy


def site_packages() -> Path:
    """The active environment's site-packages (this interpreter's purelib)."""
    return Path(sysconfig.get_paths()["purelib"])


def build_fa3(
    request: Fa3Request, *, plan: Fa3Plan | None = None, progress: Progress = null_progress
) -> Fa3BuildResult:
    """Build, self-check, install (or, with `request.out`, write the modules to that new directory instead).
    `plan` is the request's plan when the caller already made it (`make_plan(request)`, to show its notes).
    Raises EnvironmentMissing (4) before starting when the toolchain or the self-check's GPU is missing,
    ProcessFailed (5) when the build or the self-check fails (nothing is installed then; the build
    directory and its log are kept)."""
    plan = plan or make_plan(request)
    check, out = request.check, Path(request.out) if request.out else None
    if not check and out is None:
        raise UsageError("--no-check skips the self-check, so nothing is installed: pass --out DIR to keep "
                         "the unchecked build")  # fmt: skip
    if out is not None and out.exists():
        raise UsageError(f"{out} already exists; choose another --out or remove it")
    toolchain, problems = probe_toolchain()
    if out is None and not os.access(site_packages(), os.W_OK):
        problems.append(
            f"cannot write to {site_packages()} to install FA3: run as its owner, or pass --out DIR "
            "and put DIR on PYTHONPATH"
        )
    if check:
        gpu_problem = check_gpu_problem(plan.arch, hardware.list_gpus())
        if gpu_problem:
            problems.append(gpu_problem)
    if problems:
        raise EnvironmentMissing(problems[0])
    env = dict(os.environ, **plan.env)
    if toolchain.cuda_home:
        env["CUDA_HOME"] = toolchain.cuda_home
    # ninja and the python scripts of this environment first, as in an activated virtualenv
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"

    work = Path(tempfile.mkdtemp(prefix="specq-fa3-"))
    hopper = _stage(plan, work)
    # setup.py runs `git submodule update`; stop git from finding a repository above the temporary copy
    env["GIT_CEILING_DIRECTORIES"] = str(work)
    log = work / "build.log"
    progress(
        f"building FA3 ({plan.arch}; head dims {', '.join(map(str, plan.kernels.hdims))}; "
        f"{'+'.join(plan.kernels.dtypes)}; {len(plan.kernel_files)} kernel files) in {work} "
        f"with {plan.jobs} jobs"
    )
    t0 = time.monotonic()
    compiled = _run_build(list(plan.command), hopper, env, log, len(plan.sources), t0, progress)
    seconds = time.monotonic() - t0
    built = sorted((hopper / "flash_attn_3").glob("_C*.so"))
    if not built or not (hopper / "flash_attn_config.py").is_file():
        raise ProcessFailed(f"the build finished but left no flash_attn_3/_C*.so; see {log}")
    progress(f"built in {seconds:.0f}s: {built[0].name}")

    result = Fa3BuildResult(plan=plan, build_seconds=round(seconds, 1), compiled=compiled, checked=check)
    if check:
        device, cases = _self_check(plan, hopper, env, work, progress)
        result.check_device, result.cases = device, cases
        bad = [c for c in cases if not c.ok]
        if not cases:
            raise ProcessFailed(f"FA3 self-check ran no case; nothing installed; build kept in {hopper}")
        if bad:
            first = bad[0]
            why = first.error or f"max abs error {first.max_abs_err:.3g} > {first.tolerance:g}"
            raise ProcessFailed(
                f"FA3 self-check failed: {len(bad)} of {len(cases)} cases ({first.name}: {why}); "
                f"nothing installed; the build is kept in {hopper}"
            )
    record = _record(plan, result)
    if out is not None:
        _copy_tree_atomic(hopper, out, record)
        result.out = str(out)
        progress(f"wrote the build to {out} (PYTHONPATH={out})")
    else:
        result.installed = [str(p) for p in install(hopper, site_packages(), record)]
        progress(f"installed into {site_packages()}")
    shutil.rmtree(work, ignore_errors=True)
    return result


def _stage(plan: Fa3Plan, work: Path) -> Path:
    """The temporary copy: hopper/ (without earlier build outputs), README.md, and csrc/ linked (CUTLASS
    headers are only read)."""
    src = Path(plan.checkout.root)
    dst = work / "flash-attention"
    ignore = shutil.ignore_patterns("build", "*.so", "__pycache__", "*.egg-info", ".git")
    shutil.copytree(src / "hopper", dst / "hopper", ignore=ignore, symlinks=True)
    readme = src / "README.md"
    if readme.is_file():
        shutil.copy2(readme, dst / "README.md")
    else:
        (dst / "README.md").write_text("FlashAttention-3\n")
    (dst / "csrc").symlink_to(src / "csrc", target_is_directory=True)
    return dst / "hopper"


def _run_build(
    argv: list[str], cwd: Path, env: dict[str, str], log: Path, expected: int, t0: float, progress: Progress
) -> int:
    tail: deque[str] = deque(maxlen=20)
    done = 0
    with open(log, "w", encoding="utf-8") as logf:
        proc = subprocess.Popen(
            argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            errors="replace", start_new_session=True,
        )  # fmt: skip
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                logf.write(line)
                line = line.rstrip()
                if line:
                    tail.append(line)
                m = NINJA_STEP.match(line)
                if m:
                    done, total = int(m.group(1)), int(m.group(2))
                    what = _compiled_file(m.group(3))
                    progress(f"compiled {done}/{total or expected} {what} ({time.monotonic() - t0:.0f}s)")
            rc = proc.wait()
        finally:
            _stop(proc)
    if rc != 0:
        last = next((t for t in reversed(tail) if "error" in t.lower()), tail[-1] if tail else "")
        raise ProcessFailed(f"FA3 build failed (exit {rc}): {last[:300]}; full log: {log}")
    return done


def _compiled_file(command: str) -> str:
    """The source a ninja step compiles (torch runs ninja -v: the line is the whole nvcc/c++ command)."""
    words = command.split()
    if "-c" in words[:-1]:
        return Path(words[words.index("-c") + 1]).name
    return Path(words[-1]).name if words else ""


def _stop(proc: subprocess.Popen[str]) -> None:
    """terminate → wait → kill, for the whole process group (ninja and its nvcc children)."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _self_check(
    plan: Fa3Plan, hopper: Path, env: dict[str, str], work: Path, progress: Progress
) -> tuple[str | None, list[CaseResult]]:
    argv = [sys.executable, "-m", "specq.pipeline.fa3.selfcheck"]
    for dt in plan.kernels.dtypes:
        argv += ["--dtype", dt]
    for hd in plan.head_dims:
        argv += ["--head-dim", str(hd)]
    check_env = dict(env, PYTHONPATH=os.pathsep.join(filter(None, [str(hopper), env.get("PYTHONPATH")])))
    progress(
        f"self-check: FA3 vs torch SDPA, {len(plan.kernels.dtypes)} dtype(s) × "
        f"{len(plan.head_dims)} head dim(s)"
    )
    try:
        proc = subprocess.run(
            argv, cwd=work, env=check_env, capture_output=True, text=True, timeout=SELF_CHECK_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        raise ProcessFailed(
            f"FA3 self-check did not finish in {SELF_CHECK_TIMEOUT_S}s; nothing installed"
        ) from None
    try:
        doc = json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise ProcessFailed(
            f"FA3 self-check crashed (exit {proc.returncode}): {last[:300]}; nothing installed"
        ) from None
    cases = [CaseResult.model_validate(c) for c in doc.get("cases", [])]
    for c in cases:
        err = f"max abs err {c.max_abs_err:.2e}" if c.max_abs_err is not None else c.error
        progress(f"  {'ok  ' if c.ok else 'FAIL'} {c.name}: {err} (tolerance {c.tolerance:g})")
    return doc.get("device"), cases


def _record(plan: Fa3Plan, result: Fa3BuildResult) -> str:
    return json.dumps(
        {
            "built_by": "specq fa3 build",
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "source": plan.checkout.root,
            "arch": plan.arch,
            "models": [m.path for m in plan.models],
            "head_dims": list(plan.head_dims),
            "env": plan.env,
            "checked_on": result.check_device,
        },
        indent=2,
    )


def _copy_tree_atomic(hopper: Path, out: Path, record: str) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".partial", dir=out.parent))
    try:
        _copy_package(hopper, tmp, record)
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _copy_package(hopper: Path, dest: Path, record: str) -> None:
    shutil.copy2(hopper / "flash_attn_interface.py", dest / "flash_attn_interface.py")
    shutil.copy2(hopper / "flash_attn_config.py", dest / "flash_attn_config.py")
    shutil.copytree(
        hopper / "flash_attn_3", dest / "flash_attn_3", ignore=shutil.ignore_patterns("__pycache__")
    )
    (dest / "flash_attn_3" / BUILD_RECORD).write_text(record + "\n", encoding="utf-8")


def install(hopper: Path, site: Path, record: str) -> list[Path]:
    """Put the built modules into `site`: everything is first copied into a temporary sibling directory,
    then each of the three entries is renamed into place (a replaced package is moved aside first and
    removed after), so an interrupted install never leaves a half-copied module."""
    staging = Path(tempfile.mkdtemp(prefix=".specq-fa3-install.", dir=site))
    try:
        _copy_package(hopper, staging, record)
        placed: list[Path] = []
        for name in INSTALLED_NAMES:
            dest = site / name
            if dest.is_dir() and not dest.is_symlink():
                old = site / f".{name}.old-{os.getpid()}"
                dest.rename(old)
                (staging / name).rename(dest)
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.replace(staging / name, dest)
            placed.append(dest)
        return placed
    finally:
        shutil.rmtree(staging, ignore_errors=True)
