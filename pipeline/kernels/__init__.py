"""GPU kernels specq ships for the engines it drives (`w4a16`: the W4A16 linear for LMDeploy's PyTorch engine,
`lmdeploy_w4a16`: its LMDeploy-facing object). Importing this package imports nothing heavy; its modules
import torch and Triton."""

# 1: specq's W4A16 gate_up linears of a dense Qwen3.5 MLP store silu(gate) * up themselves, on one GPU
# (`lmdeploy_w4a16.fuse_silu_mul`); read where LMDeploy builds the model, and said by `specq serve`
FUSE_SILU_ENV = "SPECQ_W4A16_FUSE_SILU"
