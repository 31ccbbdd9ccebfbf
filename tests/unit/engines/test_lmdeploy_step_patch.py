"""The compatibility layer's second patch, `spec-step`, on LMDeploy 0.18.0's own three files
(tests/fixtures/lmdeploy-0.18.0): the diff applied in memory to the recorded sha256, the changes it makes, and
the hook carrying two patches at once (`SPECQ_LMDEPLOY_COMPAT=qwen35-awq-bf16,spec-step`) into a child
process. Whether it pays is a GPU measurement: docs/step-cost.md."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specq.pipeline.engines import lmdeploy_compat as compat
from specq.pipeline.engines.lmdeploy_compat import hook

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "lmdeploy-0.18.0"
SPEC_AGENT = "lmdeploy/pytorch/spec_decode/spec_agent.py"
FA3 = "lmdeploy/pytorch/backends/cuda/attention/fa3.py"
AGENT = "lmdeploy/pytorch/engine/model_agent/agent.py"


def patched(rel: str) -> str:
    return hook.patched_source(compat.STEP_PATCH, rel, (FIXTURE / rel).read_bytes())


@pytest.mark.parametrize("name", sorted(hook.PATCHES))
def test_fixture_files_are_lmdeploy_0180_originals(name: str) -> None:
    for rel, (orig, _) in hook.PATCHES[name].files.items():
        assert hook.file_state(FIXTURE / rel, (orig, "")) == "original", rel


def test_no_two_patches_touch_the_same_module() -> None:
    seen = [rel for p in hook.PATCHES.values() for rel in p.files]
    assert len(seen) == len(set(seen))


@pytest.mark.parametrize("rel", [SPEC_AGENT, FA3, AGENT])
def test_the_diff_applies_in_memory_to_the_recorded_patched_hash(rel: str) -> None:
    new = patched(rel)
    assert hook.sha256(new.encode()) == compat.STEP_PATCH.files[rel][1]
    assert new != (FIXTURE / rel).read_text()
    compile(new, rel, "exec", dont_inherit=True)


def test_patched_text_is_the_change_the_notes_describe() -> None:
    agent = patched(SPEC_AGENT)
    fast = agent.index("# Greedy fast path")
    assert agent.index("si.max_top_k == 1 and si.temperature is None") < fast  # greedy, no penalties only
    assert "forward_greedy(" in agent[fast:] and "_process_bad_words_, _torch_topk" in agent
    assert agent.index("_expand_sampling_inputs(sampling_inputs, num_expand_sampling)") > fast
    fa3 = patched(FA3)
    assert "return build_fa3_metadata(" not in fa3 and "FA3AttentionMetadata(max_kv_seqlen=" in fa3
    poll = patched(AGENT)
    assert "await asyncio.sleep(0 if polls < 4096 else 0.001)" in poll


def test_status_and_launch_env_carry_both_patches(tree: Path) -> None:
    q35, step = compat.status(tree / "lmdeploy"), compat.status(tree / "lmdeploy", compat.STEP_PATCH)
    assert (q35.state, step.state, step.patch) == ("applies", "applies", "spec-step")
    assert "specq applies spec-step" in step.summary()
    env = compat.launch_env({"PYTHONPATH": "/a"}, q35, step)
    assert env[compat.ENV] == "qwen35-awq-bf16,spec-step"
    assert env["PYTHONPATH"].split(os.pathsep) == [str(compat.BOOT_DIR), "/a"]
    for rel in compat.STEP_PATCH.files:  # spec-step patched on disk: only the other one is left to the hook
        (tree / rel).write_text(patched(rel))
    step = compat.status(tree / "lmdeploy", compat.STEP_PATCH)
    assert step.state == "patched-on-disk"
    assert compat.launch_env({}, q35, step)[compat.ENV] == "qwen35-awq-bf16"


def test_install_puts_one_finder_per_named_patch_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    monkeypatch.setenv(compat.ENV, "qwen35-awq-bf16, spec-step,no-such-patch")
    first = hook.install()
    assert [f.patch.name for f in first] == ["qwen35-awq-bf16", "spec-step"]
    again = hook.install()
    assert [id(f) for f in again] == [id(f) for f in first]
    assert sum(isinstance(f, hook.Finder) for f in sys.meta_path) == 2
    monkeypatch.setenv(compat.ENV, "")
    assert hook.install() == []


CHILD = r"""
import importlib.machinery, json, sys
import lmdeploy.pytorch.config as c
finders = [f for f in sys.meta_path if hasattr(f, "patch")]
step = next(f for f in finders if f.patch.name == "spec-step")
spec = step.find_spec("lmdeploy.pytorch.spec_decode.spec_agent", [sys.argv[1]])
print(json.dumps({"finders": [f.patch.name for f in finders], "config": getattr(c, "__specq_compat__", None),
                  "fast_path": "# Greedy fast path" in spec.loader.get_source(spec.name)}))
"""


def test_a_child_process_gets_both_patches_from_one_variable(tree: Path, tmp_path: Path) -> None:
    """What the spawned engine sees: the config module patched by qwen35-awq-bf16 on import, and spec-step's
    finder handing out the patched `spec_agent.py` (its import needs the whole engine, so only the source is
    checked here; the GPU run that measured it is in docs/step-cost.md)."""
    env = compat.launch_env(
        {}, compat.status(tree / "lmdeploy"), compat.status(tree / "lmdeploy", compat.STEP_PATCH)
    )
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    base = {k: v for k, v in os.environ.items() if k not in (compat.ENV, hook.LOG_ENV, "PYTHONPATH")}
    env = {**base, **env, "PYTHONPATH": f"{env['PYTHONPATH']}{os.pathsep}{tree}"}
    where = str(tree / "lmdeploy" / "pytorch" / "spec_decode")
    proc = subprocess.run(
        [sys.executable, str(script), where], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["finders"] == ["spec-step", "qwen35-awq-bf16"]  # each inserted first, in the order named
    assert out["config"] == "qwen35-awq-bf16" and out["fast_path"] is True
