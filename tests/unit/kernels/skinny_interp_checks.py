"""The skinny linear's logic under Triton's interpreter (`TRITON_INTERPRET=1`, CPU tensors): run as a script
by tests/unit/kernels/test_skinny.py, so that the interpreter mode stays out of the test process. Prints one
JSON document: for each case, the relative error against an fp32 reference and that reference's own rounding
to the dtype, and the bitwise checks (determinism, M-invariance, split-K's counters back at zero)."""

from __future__ import annotations

import json
import os
import sys

os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from specq.pipeline.kernels import skinny as S  # noqa: E402
from specq.pipeline.kernels import w4a16 as W  # noqa: E402

# (name, K, N, M, dtype, config, bias): K not a multiple of block_k, N not of block_n, splits that leave
# some blocks without a step
CASES = [
    ("bf16-one-row-split4", 1000, 40, 1, torch.bfloat16, S.Config(block_k=128, split_k=4), False),
    ("bf16-5-rows-split3-bias", 512, 96, 5, torch.bfloat16, S.Config(block_k=64, split_k=3), True),
    ("fp16-16-rows-one-split", 256, 24, 16, torch.float16, S.Config(block_k=128), False),
    ("bf16-7-steps-split5", 448, 16, 3, torch.bfloat16, S.Config(block_k=64, split_k=5), False),
]


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b).norm() / b.norm()).item()


def main() -> int:
    out: dict[str, dict] = {}
    for i, (name, k, n, m, dtype, cfg, with_bias) in enumerate(CASES):
        g = torch.Generator().manual_seed(i)
        x = torch.randn(m, k, generator=g).to(dtype)
        w = (torch.randn(n, k, generator=g) * 0.05).to(dtype)
        bias = torch.randn(n, generator=g).to(dtype) if with_bias else None
        y = S.linear(x, w, bias, cfg=cfg)
        ref = x.float() @ w.float().T + (bias.float() if bias is not None else 0.0)
        out[name] = {
            "shape": list(y.shape),
            "dtype": str(y.dtype),
            "rel_error": rel(y, ref),
            "rounding": rel(ref.to(dtype), ref),
            "deterministic": bool(torch.equal(y, S.linear(x, w, bias, cfg=cfg))),
            "m_invariant": all(torch.equal(S.linear(x[:j], w, bias, cfg=cfg), y[:j]) for j in range(1, m))
            and all(torch.equal(S.linear(x[j : j + 1], w, bias, cfg=cfg)[0], y[j]) for j in range(m)),
            "counters_zero": bool((W._tile_counters(x.device, 1) == 0).all()),
        }
    x3 = torch.randn(2, 3, 256).to(torch.bfloat16)
    w3 = torch.randn(24, 256).to(torch.bfloat16)
    out["leading-dims"] = {"shape": list(S.linear(x3, w3, cfg=S.Config(block_k=128, split_k=2)).shape)}
    x20 = torch.randn(20, 256).to(torch.bfloat16)  # prefill: F.linear's own result
    out["prefill-20"] = {"is_f_linear": bool(torch.equal(S.linear(x20, w3), F.linear(x20, w3)))}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
