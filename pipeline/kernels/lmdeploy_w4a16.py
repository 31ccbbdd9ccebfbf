"""specq's W4A16 kernel as LMDeploy's PyTorch engine builds a W4A16 linear: the object that specq's
`w4a16-specq` compatibility patch returns from `lmdeploy/pytorch/backends/cuda/awq_modules.py`'s
`_build_linear_w4a16` (engine.w4a16_kernel = specq).

LMDeploy's `AwqLinear` holds the AWQ gemm tensors it loaded (qweight int32 [K, N/8], scales fp16 [K/g, N],
qzeros int32 [K/g, N/8]) and, once every weight is loaded, hands them to `update_weights`, whose return values
it keeps as its parameters; every forward then passes them back. So `update_weights` repacks them once into
specq's layout (`w4a16.pack`, lossless; the AWQ tensors are released) and makes sure a launch configuration
is chosen for the shape before any CUDA graph is captured (`w4a16.prepare`); `forward` runs the kernel in the
activations' dtype (bf16 or fp16), with no cast around it. Only this file and the patch know LMDeploy's
calling convention; it imports nothing of LMDeploy unless a tensor-parallel all-reduce is asked for.

With `SPECQ_W4A16_FUSE_SILU=1`, the patch asks `fuse_silu_mul` whether a dense Qwen3.5 MLP's gate_up linear
can store silu(gate) * up itself (one launch a layer fewer: LMDeploy's `silu_and_mul` kernel is not run); it
can when it is this linear on one GPU. Off by default: not yet run on a GPU (docs/w4a16.md)."""

from __future__ import annotations

import os
from typing import Any

import torch

from . import FUSE_SILU_ENV, w4a16


class SpecqAwqLinearW4A16Impl:
    """LMDeploy's `LinearW4A16Impl` interface (`update_weights`, `forward`) on specq's kernel."""

    def __init__(self, in_features: int, out_features: int, w_bit: int, group_size: int) -> None:
        if w_bit != 4:
            raise ValueError(f"specq's W4A16 kernel runs 4-bit weights, not {w_bit}-bit")
        self.in_features = in_features
        self.out_features = out_features
        self.w_bit = w_bit
        self.group_size = group_size
        self._qweight_ptr: int | None = None
        self._order = w4a16.ORDER_WGMMA  # the repacked words' k order (`w4a16.pack` picks it for the GPU)
        self.silu_mul = False  # a gate/up linear that answers silu(gate) * up (`fuse_silu_mul`)

    def update_weights(
        self,
        qweight: torch.Tensor,
        scales: torch.Tensor,
        qzeros: torch.Tensor,
        bias: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
        packed = w4a16.pack(qweight, qzeros, scales, silu_mul=self.silu_mul)
        if packed.n != self.out_features or packed.k != self.in_features:
            raise ValueError(
                f"AWQ weights of {packed.k}x{packed.n} for a {self.in_features}x{self.out_features} linear"
            )
        if bias is not None and self.silu_mul:
            bias = bias[w4a16.silu_mul_columns(packed.n, bias.device)]
        w4a16.prepare(packed)
        self._qweight_ptr = packed.qweight.data_ptr()
        self._order = packed.order
        return packed.qweight, packed.scales, packed.zeros, bias

    def forward(
        self,
        x: torch.Tensor,
        qweight: torch.Tensor,
        scales: torch.Tensor,
        qzeros: torch.Tensor,
        bias: torch.Tensor | None = None,
        all_reduce: bool = False,
        group: Any = None,
    ) -> torch.Tensor:
        if qweight.data_ptr() != self._qweight_ptr:
            raise RuntimeError(
                "specq's W4A16 linear got weights it has not repacked (update_weights was not called after "
                "loading); serve with engine.w4a16_kernel = lmdeploy to use LMDeploy's kernel"
            )
        packed = w4a16.PackedW4(
            qweight=qweight,
            scales=scales,
            zeros=qzeros,
            group=self.group_size,
            order=self._order,
            silu_mul=self.silu_mul,
        )
        out = w4a16.linear(x, packed, bias)
        if out.dim() == 2:  # LMDeploy's linears answer 3-D for a 2-D input
            out = out.unsqueeze(0)
        if all_reduce:
            import lmdeploy.pytorch.distributed as dist

            dist.all_reduce(out, group=group)
        return out


def fuse_silu_mul(linear: Any, tp_world: int) -> bool:
    """Whether the gate_up linear `linear` that LMDeploy built for an MLP (gate columns, then up) answers
    silu(gate) * up itself, N/2 wide, so the MLP skips its activation kernel: where `SPECQ_W4A16_FUSE_SILU` is
    1, the linear is specq's W4A16 linear, on one GPU (tensor parallelism splits gate and up by rank) and
    without LoRA adapters, and N divides by 16. Marks the linear so (before its weights load, which repacks
    them: `update_weights`)."""
    impl = getattr(linear, "impl", None)
    if os.environ.get(FUSE_SILU_ENV) != "1" or not isinstance(impl, SpecqAwqLinearW4A16Impl):
        return False
    if tp_world != 1 or getattr(linear, "lora_adapters", None) or impl.out_features % 16:
        return False
    impl.silu_mul = True
    return True
