"""The compatibility layer's third patch, `dflash-awq`, on LMDeploy 0.18.0's own DFlash proposer
(tests/fixtures/lmdeploy-0.18.0/lmdeploy/pytorch/spec_decode/proposers/dflash.py, stubs around it): the diff
applied in memory to the recorded sha256, and, in a child process that imports the proposer through the
hook, `DFlash.build_model` handing the drafter's own quantization config to the draft build while the
target's build context stays as it was. That the 4-bit drafter then loads and serves is a GPU run
(benchmarks/scenarios/twin.py, step memory-dflash4)."""

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
DFLASH = "lmdeploy/pytorch/spec_decode/proposers/dflash.py"
# the modules the other patches own (and the one the W4A16-kernel patch owns): never this patch's
OTHERS = {
    "lmdeploy/pytorch/config.py",
    "lmdeploy/pytorch/backends/cuda/turbomind_awq_modules.py",
    "lmdeploy/pytorch/backends/cuda/awq_modules.py",
    "lmdeploy/pytorch/kernels/cuda/awq_kernels.py",
    "lmdeploy/pytorch/spec_decode/spec_agent.py",
    "lmdeploy/pytorch/backends/cuda/attention/fa3.py",
    "lmdeploy/pytorch/engine/model_agent/agent.py",
}


def patched() -> str:
    return hook.patched_source(compat.DFLASH_AWQ_PATCH, DFLASH, (FIXTURE / DFLASH).read_bytes())


def test_it_patches_only_the_dflash_proposer() -> None:
    assert set(compat.DFLASH_AWQ_PATCH.files) == {DFLASH}
    assert not set(compat.DFLASH_AWQ_PATCH.files) & OTHERS
    assert set(hook.parse_diff(compat.DFLASH_AWQ_PATCH.text())) == {DFLASH}


def test_the_diff_applies_in_memory_to_the_recorded_patched_hash() -> None:
    new = patched()
    assert hook.sha256((FIXTURE / DFLASH).read_bytes()) == compat.DFLASH_AWQ_PATCH.files[DFLASH][0]
    assert hook.sha256(new.encode()) == compat.DFLASH_AWQ_PATCH.files[DFLASH][1]
    compile(new, DFLASH, "exec", dont_inherit=True)
    build = new[new.index("def build_model") : new.index("def get_target_hidden_size")]
    assert "build_model_ctx = copy(build_model_ctx)" in build
    assert "build_model_ctx.quant_config = self.specdecode_config.model_config.quant_config" in build
    assert build.index("copy(build_model_ctx)") < build.index("super().build_model(")


def test_a_changed_original_is_refused_by_hash() -> None:
    with pytest.raises(hook.PatchError, match="not lmdeploy 0.18.0's original"):
        hook.patched_source(compat.DFLASH_AWQ_PATCH, DFLASH, (FIXTURE / DFLASH).read_bytes() + b"# edit\n")


def test_status_and_launch_env(tree: Path) -> None:
    s = compat.status(tree / "lmdeploy", compat.DFLASH_AWQ_PATCH)
    assert (s.state, s.patch) == ("applies", "dflash-awq") and "specq applies dflash-awq" in s.summary()
    q35 = compat.status(tree / "lmdeploy")
    env = compat.launch_env({}, q35, s)
    assert env[compat.ENV] == "qwen35-awq-bf16,dflash-awq"
    (tree / DFLASH).write_text((tree / DFLASH).read_text() + "# a local edit\n")
    s = compat.status(tree / "lmdeploy", compat.DFLASH_AWQ_PATCH)
    assert s.state == "modified" and not s.ok
    assert "pip install --force-reinstall 'lmdeploy==0.18.0'" in (compat.refusal(s, "a 4-bit drafter") or "")


CHILD = r"""
import json, sys
from dataclasses import dataclass, field
from types import SimpleNamespace
import lmdeploy.pytorch.spec_decode.proposers.dflash as d

@dataclass
class Ctx:  # LMDeploy's BuildModelContext is a dataclass too (model_inputs.py)
    quant_config: object = None
    num_spec_tokens: int = 0
    spec_model_ctx: object = field(default_factory=dict)

target_q, draft_q = SimpleNamespace(quant_method="awq", name="target"), SimpleNamespace(name="drafter")
spec = SimpleNamespace(model_config=SimpleNamespace(quant_config=draft_q))
target_ctx = Ctx(quant_config=target_q, num_spec_tokens=7, spec_model_ctx={"layers": [1, 2]})
proposer = d.DFlash(spec)
embed = object()
proposer.build_model(False, target_model=SimpleNamespace(get_input_embeddings=lambda: embed),
                     build_model_ctx=target_ctx)
built = proposer.built_with
print(json.dumps({
    "compat": getattr(d, "__specq_compat__", None),
    "draft_quant": built.quant_config.name,
    "target_quant_after": target_ctx.quant_config.name,
    "kept": [built.num_spec_tokens, built.spec_model_ctx is target_ctx.spec_model_ctx],
    "separate": built is not target_ctx,
    "embeddings_shared": proposer.model.get_input_embeddings() is embed,
}))
"""


def _run_child(tree: Path, tmp_path: Path, patches: str) -> dict:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    base = {k: v for k, v in os.environ.items() if k not in (compat.ENV, hook.LOG_ENV, "PYTHONPATH")}
    env = {**base, compat.ENV: patches, "PYTHONPATH": f"{compat.BOOT_DIR}{os.pathsep}{tree}"}
    proc = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_patched_proposer_builds_the_drafter_with_its_own_quant_config(
    tree: Path, tmp_path: Path
) -> None:
    out = _run_child(tree, tmp_path, "dflash-awq")
    assert out["compat"] == "dflash-awq"
    assert out["draft_quant"] == "drafter" and out["target_quant_after"] == "target"
    assert out["kept"] == [7, True] and out["separate"] and out["embeddings_shared"]


def test_without_the_patch_the_drafter_is_built_with_the_targets_quant_config(
    tree: Path, tmp_path: Path
) -> None:
    """LMDeploy 0.18.0 as released: the draft is built under the target's context (what the patch fixes)."""
    out = _run_child(tree, tmp_path, "")
    assert out["compat"] is None and out["draft_quant"] == "target" and not out["separate"]
