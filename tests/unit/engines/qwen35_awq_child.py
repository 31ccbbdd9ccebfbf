"""What the child processes of test_qwen35_fused_in_proj.py and test_qwen35_fused_mlp.py share (imported
there, where LMDeploy 0.18.0's Python modules import): the AWQ build context a Qwen3.5 layer is built under,
random AWQ checkpoint tensors, and loading a layer's tensors the way LMDeploy loads a model's
(`Qwen3_5ForConditionalGeneration.load_weights`, then each linear's `update_weights`, where specq's W4A16
linears repack)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import lmdeploy.pytorch.models.qwen3_5 as M
import torch
from lmdeploy.pytorch.config import QuantizationConfig
from lmdeploy.pytorch.model_inputs import BuildModelContext
from lmdeploy.pytorch.models.patch import build_model_context

from specq.pipeline.kernels import w4a16 as W

AWQ = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"}


def awq_context() -> Any:
    """The context LMDeploy builds a 4-bit AWQ model's layers under."""
    config = QuantizationConfig.from_config(SimpleNamespace(quantization_config=AWQ))
    return build_model_context(BuildModelContext(quant_config=config))


def awq_tensors(k: int, n: int) -> dict[str, torch.Tensor]:
    """A random AWQ gemm linear of k inputs and n outputs, group 128, as a checkpoint holds it."""
    q = torch.randint(0, 16, (k, n), dtype=torch.uint8)
    z = torch.randint(0, 16, (k // 128, n), dtype=torch.uint8)
    s = (torch.rand(k // 128, n) * 0.02).half()
    return {"qweight": W.pack_awq(q), "qzeros": W.pack_awq(z), "scales": s}


def load(mod: torch.nn.Module, prefix: str, ckpt: list[tuple[str, torch.Tensor]]) -> None:
    """`mod`'s tensors from `ckpt` (names under `prefix`), as LMDeploy loads a model, then each linear's
    `update_weights`, as LMDeploy calls it once every weight is loaded."""
    model = SimpleNamespace(
        config=SimpleNamespace(text_config=SimpleNamespace(num_hidden_layers=1), tie_word_embeddings=False),
        named_parameters=lambda: [(prefix + n, p) for n, p in mod.named_parameters()],
    )
    M.Qwen3_5ForConditionalGeneration.load_weights(model, [(n, v.clone()) for n, v in ckpt])
    for m in mod.modules():
        if m is not mod and hasattr(m, "update_weights"):
            m.update_weights()
