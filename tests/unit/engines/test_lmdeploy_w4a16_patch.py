"""The compatibility layer's third patch, `w4a16-specq`, on LMDeploy 0.18.0's own
`backends/cuda/awq_modules.py` (tests/fixtures/lmdeploy-0.18.0): the diff applied in memory to the recorded
sha256, and, in a child process started the way specq starts LMDeploy, the patched module building specq's
W4A16 linear, which then repacks an AWQ layer and multiplies with it (Triton's interpreter on the CPU). The
GPU run of the same path is in docs/w4a16.md."""

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
AWQ = "lmdeploy/pytorch/backends/cuda/awq_modules.py"
QWEN35 = "lmdeploy/pytorch/models/qwen3_5.py"


def test_the_diff_applies_in_memory_to_the_recorded_patched_hash() -> None:
    new = hook.patched_source(compat.W4A16_PATCH, AWQ, (FIXTURE / AWQ).read_bytes())
    assert hook.sha256(new.encode()) == compat.W4A16_PATCH.files[AWQ][1]
    compile(new, AWQ, "exec", dont_inherit=True)
    build = new[new.index("def _build_linear_w4a16") :]
    # specq's linear comes before LMDeploy's own choice, and only for layers the kernel can run
    assert build.index("SpecqAwqLinearW4A16Impl") < build.index("if provider in ('auto', 'turbomind')")
    assert "spec.group_size % 32 == 0" in build and "spec.w_bit == 4" in build


def test_a_dense_qwen35_runs_in_proj_qkv_and_z_as_one_linear_on_one_gpu() -> None:
    assert set(compat.W4A16_PATCH.files) == {AWQ, QWEN35}
    new = hook.patched_source(compat.W4A16_PATCH, QWEN35, (FIXTURE / QWEN35).read_bytes())
    assert hook.sha256(new.encode()) == compat.W4A16_PATCH.files[QWEN35][1]
    compile(new, QWEN35, "exec", dont_inherit=True)
    gdn = new[new.index("class Qwen3_5GatedDeltaNet") : new.index("class Qwen3_5Attention")]
    # fused only when asked and on one GPU: under tensor parallelism qkv's sections split unevenly
    assert "fuse_qkvz: bool = False" in gdn
    assert "self.fuse_qkvz = fuse_qkvz and get_tp_world_rank()[0] == 1" in gdn
    fused = gdn[gdn.index("if self.fuse_qkvz:") : gdn.index("else:")]
    assert "build_merged_colwise_linear" in fused and "[projection_size_qkv, self.value_dim]" in fused
    assert "quant_config=quantization_config" in fused  # quantized like the two it replaces
    forward = gdn[gdn.index("def forward") :]
    assert (
        "self.in_proj_qkvz(hidden_states).split(" in forward
        and "projected_states_qkv.contiguous()" in forward
    )
    # the dense decoder layer asks for it; Qwen3.5-MoE and the other models build their own layers, unfused
    layer = new[new.index("class Qwen3_5DecoderLayer") : new.index("class Qwen3_5TextModel")]
    assert layer.count("fuse_qkvz=True") == 1
    # the checkpoint's two tensors load into the fused linear's shards 0 and 1 (LMDeploy's merged AWQ linear
    # takes no shard names), only where the model has it (on LMDeploy's code: test_qwen35_fused_in_proj.py)
    load = new[new.index("    def load_weights") :]
    assert "name.replace('.in_proj_qkv.', '.in_proj_qkvz.'), 0" in load
    assert "name.replace('.in_proj_z.', '.in_proj_qkvz.'), 1" in load
    assert "fused_name in params_dict" in load
    assert load.index("fused_name in params_dict") < load.index("for (param_name, weight_name, shard_id)")


def test_a_dense_qwen35_mlp_asks_specqs_gate_up_linear_to_store_the_activation() -> None:
    new = hook.patched_source(compat.W4A16_PATCH, QWEN35, (FIXTURE / QWEN35).read_bytes())
    mlp = new[new.index("class Qwen3_5MLP") : new.index("class Qwen3_5GatedDeltaNet")]
    # specq decides (SPECQ_W4A16_FUSE_SILU, specq's linear, one GPU: fuse_silu_mul), before the weights load
    init = mlp[: mlp.index("def forward")]
    assert "self.fuse_silu = fuse_silu_mul(self.gate_up_proj, get_tp_world_rank()[0] if is_tp else 1)" in init
    assert init.index("self.gate_up_proj = ") < init.index("fuse_silu_mul(")
    forward = mlp[mlp.index("def forward") :]
    # fused: gate_up_proj's answer is the activation, straight into down_proj; otherwise LMDeploy's own path
    assert "if self.fuse_silu:" in forward and "return self.down_proj(self.gate_up_proj(x))" in forward
    assert forward.index("if self.fuse_silu:") < forward.index("act = self.act_fn(gate_up)")


CHILD = r"""
import json, sys
import torch
import lmdeploy.pytorch.backends.cuda.awq_modules as m
from lmdeploy.pytorch.backends.awq_modules import LinearW4A16BuildSpec
from specq.pipeline.kernels import w4a16 as W

impl = m._build_linear_w4a16(LinearW4A16BuildSpec(in_features=256, out_features=64, w_bit=4, group_size=128,
                                                  bias=False, output_dtype=torch.float16))
other = m._build_linear_w4a16(LinearW4A16BuildSpec(in_features=256, out_features=64, w_bit=4, group_size=8,
                                                   bias=False, output_dtype=torch.float16))
head = {"impl": type(impl).__name__, "other": type(other).__name__,
        "patched": getattr(m, "__specq_compat__", None)}
if head["impl"] != "SpecqAwqLinearW4A16Impl":  # LMDeploy's own kernel is Triton on CUDA: not run here
    print(json.dumps(head))
    sys.exit(0)
q = torch.randint(0, 16, (256, 64), dtype=torch.uint8)
z = torch.randint(0, 16, (2, 64), dtype=torch.uint8)
s = (torch.rand(2, 64) * 0.02).half()
params = impl.update_weights(W.pack_awq(q), s, W.pack_awq(z), None)
x = torch.randn(1, 3, 256).bfloat16()
y = impl.forward(x, *params[:3])
ref = x.float() @ ((q.float() - z.float().repeat_interleave(128, 0)) * s.float().repeat_interleave(128, 0))
try:
    impl.forward(x, W.pack_awq(q), s, W.pack_awq(z))
    unrepacked = None
except RuntimeError as e:
    unrepacked = str(e)
W.fragment_order = lambda device: W.ORDER_MMA  # as on a GPU before Hopper: the layer keeps its order
mma = m._build_linear_w4a16(LinearW4A16BuildSpec(in_features=256, out_features=64, w_bit=4, group_size=128,
                                                 bias=False, output_dtype=torch.float16))
y_mma = mma.forward(x, *mma.update_weights(W.pack_awq(q), s, W.pack_awq(z), None)[:3])
# a gate/up linear (gate columns 0-31, up 32-63) marked to store silu(gate) * up, with a bias
from types import SimpleNamespace
from specq.pipeline.kernels.lmdeploy_w4a16 import fuse_silu_mul
gu = m._build_linear_w4a16(LinearW4A16BuildSpec(in_features=256, out_features=64, w_bit=4, group_size=128,
                                                bias=True, output_dtype=torch.float16))
fused = fuse_silu_mul(SimpleNamespace(impl=gu, lora_adapters={}), 1)
b = torch.randn(64).bfloat16()
y_gu = gu.forward(x, *gu.update_weights(W.pack_awq(q), s, W.pack_awq(z), b))
h = ref + b.float()
act = torch.nn.functional.silu(h[..., :32]) * h[..., 32:]
print(json.dumps({**head, "shape": list(y.shape), "dtype": str(y.dtype),
                  "rel": ((y.float() - ref).norm() / ref.norm()).item(), "unrepacked": unrepacked,
                  "mma_order_same_bits": bool(torch.equal(y, y_mma)), "fused": fused,
                  "silu_shape": list(y_gu.shape),
                  "silu_rel": ((y_gu.float() - act).norm() / act.norm()).item()}))
"""


def _child(tree: Path, tmp_path: Path, env: dict[str, str]) -> dict:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    base = {k: v for k, v in os.environ.items() if k not in (compat.ENV, hook.LOG_ENV, "PYTHONPATH")}
    env = {**base, "TRITON_INTERPRET": "1", **env}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), str(tree)) if p)
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_patched_engine_builds_and_runs_specqs_w4a16_linear(tree: Path, tmp_path: Path) -> None:
    log = tmp_path / "compat.log"
    env = compat.launch_env({}, compat.status(tree / "lmdeploy", patch=compat.W4A16_PATCH))
    assert env[compat.ENV] == "w4a16-specq"
    out = _child(tree, tmp_path, {**env, hook.LOG_ENV: str(log), "SPECQ_W4A16_FUSE_SILU": "1"})
    assert out["impl"] == "SpecqAwqLinearW4A16Impl" and out["patched"] == "w4a16-specq"
    assert out["other"] == "AwqLinearW4A16Impl"  # a group size the kernel cannot run keeps LMDeploy's kernel
    assert out["shape"] == [1, 3, 64] and out["dtype"] == "torch.bfloat16"  # the activations' dtype, no cast
    assert out["rel"] < 0.01
    assert "update_weights was not called" in out["unrepacked"]
    assert out["mma_order_same_bits"]  # repacked in mma.sync's k order, run in it (the interpreter's bits)
    # SPECQ_W4A16_FUSE_SILU=1: a gate/up linear answers silu(gate + its bias) * (up + its bias), half as wide
    assert out["fused"] and out["silu_shape"] == [1, 3, 32] and out["silu_rel"] < 0.02
    assert log.read_text().startswith("patched lmdeploy.pytorch.backends.cuda.awq_modules (w4a16-specq)")


def test_without_the_patch_lmdeploy_builds_its_own_kernel(tree: Path, tmp_path: Path) -> None:
    out = _child(tree, tmp_path, {"PYTHONPATH": str(compat.BOOT_DIR)})
    assert out["impl"] == "AwqLinearW4A16Impl" and out["patched"] is None


@pytest.mark.parametrize("state", ["original", "edited"])
def test_status_says_whether_the_patch_applies(tree: Path, state: str) -> None:
    if state == "edited":
        (tree / AWQ).write_text((tree / AWQ).read_text() + "# local edit\n")
    s = compat.status(tree / "lmdeploy", patch=compat.W4A16_PATCH)
    assert s.ok == (state == "original")
    if state == "edited":
        assert "backends/cuda/awq_modules.py" in s.detail and "\n" not in s.detail
