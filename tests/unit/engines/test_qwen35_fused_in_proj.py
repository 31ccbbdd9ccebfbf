"""The `w4a16-specq` patch's second file on LMDeploy 0.18.0's own code, where that LMDeploy imports (its
PyTorch engine's Python modules; no GPU): in a child process started the way specq starts LMDeploy, the
patched `Qwen3_5GatedDeltaNet` is built fused and unfused under an AWQ build context, both load the same AWQ
checkpoint tensors through `Qwen3_5ForConditionalGeneration.load_weights`, the fused linear gives the unfused
bits (specq's W4A16 linear under Triton's interpreter), the fused layer's 16-bit gates run specq's skinny
linear (the unfused layer's LMDeploy's `F.linear`), and the fused layer's forward gives the unfused layer's
bits once that layer's gates run the skinny linear too. The convolution, the
recurrence and the gated norm, which the patch does not touch and which need a GPU, are stood in for. CI's
machines have no LMDeploy 0.18.0 (its wheels are CUDA builds from LMDeploy's own index), so there the patched
text is checked instead (test_lmdeploy_w4a16_patch.py)."""

from __future__ import annotations

from pathlib import Path

from lmdeploy_child import run_patched

HERE = Path(__file__).resolve().parent

CHILD = r"""
import json, sys
import torch
from transformers.configuration_utils import PretrainedConfig
import lmdeploy.pytorch.models.qwen3_5 as M
from specq.pipeline.kernels import skinny as K

sys.path.insert(0, sys.argv[1])
from qwen35_awq_child import AWQ, awq_context, awq_tensors, load

torch.manual_seed(0)

class Conv(torch.nn.Module):
    def __init__(self, *a, **k):
        super().__init__()
    def forward(self, x, conv_state, meta):
        return x * 2

class Delta:
    def __call__(self, q, k, v, **kw):
        return v * 3

class Norm(torch.nn.Module):
    def forward(self, x, z):
        return x * z

M.CausalConv1d, M.GatedDelta, M.build_rmsnorm_gated = Conv, Delta, lambda *a, **k: Norm()
cfg = PretrainedConfig(
    hidden_size=256, linear_num_value_heads=2, linear_num_key_heads=1, linear_key_head_dim=64,
    linear_value_head_dim=64, linear_conv_kernel_dim=4, hidden_act="silu", rms_norm_eps=1e-6,
    quantization_config=AWQ)
with awq_context():
    fused = M.Qwen3_5GatedDeltaNet(cfg, 0, dtype=torch.bfloat16, device="cpu", fuse_qkvz=True)
    plain = M.Qwen3_5GatedDeltaNet(cfg, 0, dtype=torch.bfloat16, device="cpu")

pre = "model.language_model.layers.0.linear_attn."
shapes = (("in_proj_qkv", 256, 256), ("in_proj_z", 256, 128), ("out_proj", 128, 256))
ckpt = [(f"{pre}{mod}.{t}", v) for mod, k, n in shapes for t, v in awq_tensors(k, n).items()]
ckpt += [(f"{pre}in_proj_{x}.weight", torch.randn(2, 256).bfloat16()) for x in "ba"]
ckpt += [(f"{pre}A_log", torch.randn(2)), (f"{pre}dt_bias", torch.randn(2))]

load(fused, pre, ckpt)
load(plain, pre, ckpt)
x = torch.randn(1, 3, 256).bfloat16()
lin = fused.in_proj_qkvz(x)
skinny_linear, calls = K.linear, []
K.linear = lambda *a, **k: calls.append(a[0].shape) or skinny_linear(*a, **k)
plain_out = plain(x, (None, None), None)  # LMDeploy's gates: F.linear
plain_calls = len(calls)
fused_out = fused(x, (None, None), None)
fused_calls = len(calls) - plain_calls
# the unfused layer with its gates on the skinny linear: the fused layer's bits
w_ba = plain.in_proj_ba.weight
ref = x.float() @ w_ba.float().T
plain.in_proj_ba.forward = lambda h: skinny_linear(h, w_ba)
print(json.dumps({
    "patched": getattr(M, "__specq_compat__", None),
    "fused": sorted(n for n, _ in fused.named_children()),
    "plain": sorted(n for n, _ in plain.named_children()),
    "impl": type(fused.in_proj_qkvz.impl).__name__, "shape": list(lin.shape),
    "linear_equal": torch.equal(lin, torch.cat([plain.in_proj_qkv(x), plain.in_proj_z(x)], -1)),
    "skinny": [fused.skinny_ba, plain.skinny_ba], "calls": [plain_calls, fused_calls],
    "gates_err": ((skinny_linear(x, w_ba).float() - ref).abs().max() / ref.abs().max()).item(),
    "forward_equal": torch.equal(fused_out, plain(x, (None, None), None)),
}))
"""


def test_the_fused_layer_loads_and_computes_the_unfused_bits(tmp_path) -> None:
    out = run_patched(tmp_path, CHILD, str(HERE))
    assert out["patched"] == "w4a16-specq"
    assert "in_proj_qkvz" in out["fused"] and not {"in_proj_qkv", "in_proj_z"} & set(out["fused"])
    assert {"in_proj_qkv", "in_proj_z"} <= set(out["plain"]) and "in_proj_qkvz" not in out["plain"]
    assert out["impl"] == "SpecqAwqLinearW4A16Impl" and out["shape"] == [1, 3, 384]
    assert out["linear_equal"] and out["forward_equal"]
    # the fused layer's gates (in_proj_ba, 16-bit) run specq's skinny linear, once a forward; the unfused
    # layer's LMDeploy's own (F.linear)
    assert out["skinny"] == [True, False] and out["calls"] == [0, 1]
    assert out["gates_err"] < 1e-2  # the loaded gates, multiplied
