"""specq's LMDeploy compatibility layer on LMDeploy 0.18.0's own two files (tests/fixtures/lmdeploy-0.18.0,
stubs around them): the version and hash guard, the diff applied in memory to the recorded sha256, the hook
inert without its variable, and a spawned child process (as api_server starts its engine) running the
patched `_update_torch_dtype`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specq.pipeline.engines import lmdeploy_compat as compat
from specq.pipeline.engines.lmdeploy_compat import hook
from specq.pipeline.errors import EnvironmentMissing

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "lmdeploy-0.18.0"

CONFIG = "lmdeploy/pytorch/config.py"
AWQ = "lmdeploy/pytorch/backends/cuda/turbomind_awq_modules.py"


@pytest.mark.parametrize("rel", [CONFIG, AWQ])
def test_the_diff_applies_in_memory_to_the_recorded_patched_hash(rel: str) -> None:
    original = (FIXTURE / rel).read_bytes()
    patched = hook.patched_source(compat.PATCH, rel, original)
    assert hook.sha256(patched.encode()) == compat.PATCH.files[rel][1]
    assert patched != original.decode()


def test_patched_text_is_the_change_the_notes_describe() -> None:
    cfg = hook.patched_source(compat.PATCH, CONFIG, (FIXTURE / CONFIG).read_bytes())
    assert "if quant_method == 'awq' and dtype != 'bfloat16':" in cfg
    awq = hook.patched_source(compat.PATCH, AWQ, (FIXTURE / AWQ).read_bytes())
    assert "x = x.half()" in awq and "out = out.to(dtype=input_dtype)" in awq


def test_a_changed_original_is_refused_by_hash() -> None:
    original = (FIXTURE / CONFIG).read_bytes() + b"\n# local edit\n"
    with pytest.raises(hook.PatchError, match="not lmdeploy 0.18.0's original"):
        hook.patched_source(compat.PATCH, CONFIG, original)


def test_hunks_must_match_their_context_exactly() -> None:
    hunks = hook.parse_diff(compat.PATCH.text())[CONFIG]
    text = (
        (FIXTURE / CONFIG)
        .read_text()
        .replace("    if quant_method == 'awq':", "    if quant_method == 'AWQ':")
    )
    with pytest.raises(hook.PatchError, match="does not match"):
        hook.apply_hunks(text, hunks)


def test_status_applies_to_the_original_tree(tree: Path) -> None:
    s = compat.status(tree / "lmdeploy")
    assert (s.state, s.ok, s.needs_hook, s.version) == ("applies", True, True, "0.18.0")
    assert set(s.files.values()) == {"original"}
    assert "specq applies qwen35-awq-bf16" in s.summary()


def test_status_of_a_tree_patched_on_disk_needs_no_hook(tree: Path) -> None:
    for rel in compat.PATCH.files:
        path = tree / rel
        path.write_text(hook.patched_source(compat.PATCH, rel, path.read_bytes()))
    s = compat.status(tree / "lmdeploy")
    assert (s.state, s.ok, s.needs_hook) == ("patched-on-disk", True, False)
    assert compat.launch_env({"A": "1"}, s) == {"A": "1"}


@pytest.mark.parametrize("version", ["0.18.1", "0.19.0", "0.17.2"])
def test_another_version_is_refused_in_one_line_naming_the_supported_one(tree: Path, version: str) -> None:
    v = tree / "lmdeploy" / "version.py"
    v.write_text(v.read_text().replace("'0.18.0'", f"'{version}'"))
    s = compat.status(tree / "lmdeploy")
    assert s.state == "unknown-version" and not s.ok
    why = compat.refusal(s, "a 4-bit Qwen3.5 target")
    assert why is not None and "\n" not in why
    assert f"lmdeploy {version}" in why and "lmdeploy==0.18.0" in why


def test_a_modified_file_is_refused_naming_it(tree: Path) -> None:
    (tree / AWQ).write_text((tree / AWQ).read_text() + "\n# changed\n")
    s = compat.status(tree / "lmdeploy")
    assert s.state == "modified" and s.files[AWQ] == "other" and s.files[CONFIG] == "original"
    why = compat.refusal(s, "X")
    assert why is not None and AWQ in why and "--force-reinstall" in why


def test_absent_lmdeploy_is_left_to_the_lmdeploy_preflight(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compat, "lmdeploy_dir", lambda: None)
    s = compat.status()
    assert s.state == "absent" and compat.refusal(s, "X") is None


def test_require_raises_environment_missing(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    v = tree / "lmdeploy" / "version.py"
    v.write_text(v.read_text().replace("'0.18.0'", "'0.19.1'"))
    monkeypatch.syspath_prepend(str(tree))
    with pytest.raises(EnvironmentMissing, match=r"lmdeploy 0\.19\.1 .*lmdeploy==0\.18\.0"):
        compat.require("Q (quantized, Gated DeltaNet)")


def test_launch_env_puts_the_boot_dir_first_and_names_the_patch(tree: Path) -> None:
    s = compat.status(tree / "lmdeploy")
    env = compat.launch_env({"PYTHONPATH": "/a:/b", "X": "y"}, s)
    assert env["PYTHONPATH"].split(os.pathsep) == [str(compat.BOOT_DIR), "/a", "/b"]
    assert env[compat.ENV] == "qwen35-awq-bf16" and env["X"] == "y"
    assert (compat.BOOT_DIR / "sitecustomize.py").is_file()


CHILD = r"""
import json, multiprocessing as mp, sys, types

def dtype_in_this_process(_=None):
    import lmdeploy.pytorch.config as c
    cfg = types.SimpleNamespace(
        hf_config=types.SimpleNamespace(quantization_config={"quant_method": "awq"}, torch_dtype="bfloat16",
                                        dtype="bfloat16"), dtype=None)
    c._update_torch_dtype(cfg, "bfloat16")
    return [str(cfg.dtype), getattr(c, "__specq_compat__", None)]

if __name__ == "__main__":
    ctx = mp.get_context("spawn")  # as api_server starts its engine process
    with ctx.Pool(1) as pool:
        spawned = pool.apply(dtype_in_this_process)
    print(json.dumps({"parent": dtype_in_this_process(), "spawned": spawned}))
"""


def _run_child(tree: Path, tmp_path: Path, env: dict[str, str]) -> dict:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    base = {k: v for k, v in os.environ.items() if k not in (compat.ENV, hook.LOG_ENV, "PYTHONPATH")}
    env = {**base, **env}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), str(tree)) if p)
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_spawned_engine_process_runs_the_patched_code(tree: Path, tmp_path: Path) -> None:
    log = tmp_path / "compat.log"
    env = compat.launch_env({}, compat.status(tree / "lmdeploy"))
    out = _run_child(tree, tmp_path, {**env, hook.LOG_ENV: str(log)})
    assert out["parent"] == ["torch.bfloat16", "qwen35-awq-bf16"]
    assert out["spawned"] == ["torch.bfloat16", "qwen35-awq-bf16"]
    lines = log.read_text().splitlines()
    pids = {ln.rpartition("pid=")[2] for ln in lines}
    assert all(ln.startswith("patched lmdeploy.pytorch.config (qwen35-awq-bf16)") for ln in lines)
    assert len(pids) == 2  # the parent and the spawned child, each patched itself


def test_without_the_variable_the_stock_code_runs(tree: Path, tmp_path: Path) -> None:
    out = _run_child(tree, tmp_path, {"PYTHONPATH": str(compat.BOOT_DIR)})
    assert out["parent"] == ["torch.float16", None] and out["spawned"] == ["torch.float16", None]


def test_a_file_that_does_not_match_is_imported_unpatched_with_a_warning(tree: Path, tmp_path: Path) -> None:
    (tree / CONFIG).write_text((tree / CONFIG).read_text() + "\n")
    env = {"PYTHONPATH": str(compat.BOOT_DIR), compat.ENV: compat.PATCH.name}
    script = tmp_path / "one.py"
    script.write_text("import lmdeploy.pytorch.config as c; print(getattr(c, '__specq_compat__', None))")
    base = {k: v for k, v in os.environ.items() if k not in (compat.ENV, "PYTHONPATH")}
    proc = subprocess.run(
        [sys.executable, str(script)],
        env={**base, **env, "PYTHONPATH": f"{compat.BOOT_DIR}{os.pathsep}{tree}"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "None"
    assert "qwen35-awq-bf16 not applied to lmdeploy.pytorch.config" in proc.stderr


def test_doctor_says_whether_the_patch_applies(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from specq.pipeline.doctor import _compat_check

    monkeypatch.syspath_prepend(str(tree))
    ok = _compat_check()
    assert ok.name == "lmdeploy-compat" and ok.status == "ok" and "specq applies qwen35-awq-bf16" in ok.detail
    assert "spec-step (engine.step_patch) applies too" in ok.detail
    fa3 = tree / "lmdeploy/pytorch/backends/cuda/attention/fa3.py"
    fa3.write_text(fa3.read_text() + "# local edit\n")
    step_off = _compat_check()  # the opt-in patch cannot apply: said, but no warning for it alone
    assert step_off.status == "ok" and "attention/fa3.py" in step_off.detail
    assert "spec-step (engine.step_patch, opt-in) does not apply" in step_off.detail
    v = tree / "lmdeploy" / "version.py"
    v.write_text(v.read_text().replace("'0.18.0'", "'0.18.2'"))
    bad = _compat_check()
    assert bad.status == "warn" and "lmdeploy 0.18.2" in bad.detail
    assert bad.fix is not None and "lmdeploy==0.18.0" in bad.fix
