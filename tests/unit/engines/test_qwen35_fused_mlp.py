"""The `w4a16-specq` patch's MLP on LMDeploy 0.18.0's own code, where that LMDeploy imports (its PyTorch
engine's Python modules; no GPU): in a child process started the way specq starts LMDeploy, a dense Qwen3.5
MLP is built under an AWQ build context with `SPECQ_W4A16_FUSE_SILU=1` and without, both load the same AWQ
checkpoint tensors through `Qwen3_5ForConditionalGeneration.load_weights`, and the fused MLP (its gate_up
linear storing silu(gate) * up, specq's W4A16 kernel under Triton's interpreter) gives the bits of the
unfused one's gate_up, LMDeploy's activation and down_proj. LMDeploy's own activation kernel is Triton, and
the interpreter multiplies 16-bit values wrongly, so the unfused MLP's activation runs as that kernel does
with the product taken in fp32, where it is exact (tests/unit/kernels/interp_checks.py). CI's machines have
no LMDeploy 0.18.0, so there the patched text is checked instead (test_lmdeploy_w4a16_patch.py)."""

from __future__ import annotations

from pathlib import Path

from lmdeploy_child import run_patched

HERE = Path(__file__).resolve().parent
KERNEL_TESTS = HERE.parent / "kernels"

CHILD = r"""
import json, os, sys
import torch
from transformers.configuration_utils import PretrainedConfig
import lmdeploy.pytorch.models.qwen3_5 as M

sys.path[:0] = sys.argv[1:3]
from interp_checks import silu_and_mul  # LMDeploy's activation kernel, the product in fp32
from qwen35_awq_child import AWQ, awq_context, awq_tensors, load

torch.manual_seed(0)
cfg = PretrainedConfig(hidden_size=256, intermediate_size=384, hidden_act="silu", quantization_config=AWQ)
with awq_context():
    os.environ["SPECQ_W4A16_FUSE_SILU"] = "1"
    fused = M.Qwen3_5MLP(cfg, dtype=torch.bfloat16, device="cpu")
    del os.environ["SPECQ_W4A16_FUSE_SILU"]
    plain = M.Qwen3_5MLP(cfg, dtype=torch.bfloat16, device="cpu")

pre = "model.language_model.layers.0.mlp."
shapes = (("gate_proj", 256, 384), ("up_proj", 256, 384), ("down_proj", 384, 256))
ckpt = [(f"{pre}{mod}.{t}", v) for mod, k, n in shapes for t, v in awq_tensors(k, n).items()]
load(fused, pre, ckpt)
load(plain, pre, ckpt)
calls = []
fused.act_fn.forward = lambda *a, **k: calls.append(1)
x = torch.randn(1, 3, 256).bfloat16()
ref = plain.down_proj(silu_and_mul(plain.gate_up_proj(x)[0]).unsqueeze(0))
y = fused(x)
print(json.dumps({
    "patched": getattr(M, "__specq_compat__", None),
    "flags": [fused.fuse_silu, plain.fuse_silu],
    "silu_mul": [fused.gate_up_proj.impl.silu_mul, plain.gate_up_proj.impl.silu_mul],
    "gate_up_width": fused.gate_up_proj(x).shape[-1],
    "act_calls": len(calls),
    "shape": list(y.shape),
    "same_bits": torch.equal(y, ref),
}))
"""


def test_the_fused_mlp_gives_the_unfused_mlps_bits(tmp_path) -> None:
    out = run_patched(tmp_path, CHILD, str(KERNEL_TESTS), str(HERE))
    assert out["patched"] == "w4a16-specq"
    assert out["flags"] == [True, False] and out["silu_mul"] == [True, False]
    # the fused gate_up answers the activation (384 wide, not 768), and LMDeploy's activation is not run
    assert out["gate_up_width"] == 384 and out["act_calls"] == 0
    assert out["shape"] == [1, 3, 256] and out["same_bits"]
