"""Group-wise 4-bit quantization of one weight matrix, for the drafters specq quantizes itself (the backends
load causal LMs only): round-to-nearest, and GPTQ (Frantar et al., 2022: columns quantized in order, each
one's error spread over the columns not yet quantized through the inverse Hessian of the layer's inputs).
Asymmetric groups along the input dimension, scales rounded to fp16 before the codes are chosen, so the codes
are exactly what an fp16-scale kernel (AWQ gemm) dequantizes. No act-order (the AWQ layout has no g_idx).
Imports torch: import it lazily."""

from __future__ import annotations

from dataclasses import dataclass

import torch

BLOCK = 128  # columns per lazy batch update


@dataclass
class Quantized:
    """A [out, in] weight as `bits`-bit codes, per (output, group) scales and zero points, and its
    dequantized float32 value."""

    codes: torch.Tensor  # uint8 [out, in]
    scales: torch.Tensor  # float32 (fp16-representable) [out, in / group]
    zeros: torch.Tensor  # uint8 [out, in / group]
    dequantized: torch.Tensor  # float32 [out, in]


def group_params(w: torch.Tensor, bits: int, sym: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Scale and zero point of each row of `w` [rows, group] (min-max; symmetric: zero at the middle code)."""
    maxq = 2**bits - 1
    if sym:
        half = w.abs().amax(-1)
        scale = (2 * half / maxq).clamp(min=1e-8).half().float()
        return scale, torch.full_like(scale, (maxq + 1) // 2)
    lo, hi = w.amin(-1), w.amax(-1)
    scale = ((hi - lo) / maxq).clamp(min=1e-8).half().float()
    zero = torch.round(-lo / scale).clamp(0, maxq)
    return scale, zero


def _quant(w: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, maxq: int) -> torch.Tensor:
    return torch.clamp(torch.round(w / scale) + zero, 0, maxq)


def rtn(w: torch.Tensor, bits: int, group: int, sym: bool) -> Quantized:
    """Round-to-nearest of every group of `group` input columns."""
    out_f, in_f = w.shape
    maxq = 2**bits - 1
    wg = w.float().reshape(out_f, in_f // group, group)
    scale, zero = group_params(wg.reshape(-1, group), bits, sym)
    scale, zero = scale.view(out_f, -1), zero.view(out_f, -1)
    codes = _quant(wg, scale[..., None], zero[..., None], maxq)
    deq = ((codes - zero[..., None]) * scale[..., None]).reshape(out_f, in_f)
    return Quantized(codes.reshape(out_f, in_f).to(torch.uint8), scale, zero.to(torch.uint8), deq)


def gptq(
    w: torch.Tensor, hessian: torch.Tensor, bits: int, group: int, sym: bool, damp: float = 0.01
) -> Quantized:
    """GPTQ of `w` [out, in] with `hessian` = Σ xᵀx over its calibration inputs x [tokens, in]."""
    out_f, in_f = w.shape
    maxq = 2**bits - 1
    W = w.float().clone()
    H = hessian.float().clone()
    dead = torch.diag(H) == 0
    H[dead, dead] = 1.0
    W[:, dead] = 0.0
    H += damp * torch.mean(torch.diag(H)) * torch.eye(in_f, device=H.device)
    hinv = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(H)), upper=True)
    codes = torch.zeros(out_f, in_f, dtype=torch.uint8, device=W.device)
    scales = torch.zeros(out_f, in_f // group, device=W.device)
    zeros = torch.zeros(out_f, in_f // group, device=W.device)
    deq = torch.zeros_like(W)
    block = max(BLOCK // group, 1) * group  # a whole number of groups: each group's columns are in one block
    for i1 in range(0, in_f, block):
        i2 = min(i1 + block, in_f)
        W1 = W[:, i1:i2].clone()
        err1 = torch.zeros_like(W1)
        h1 = hinv[i1:i2, i1:i2]
        scale = zero = torch.zeros(out_f, device=W.device)
        for i in range(i2 - i1):
            col = i1 + i
            if col % group == 0:  # the group's parameters from its columns as GPTQ has updated them so far
                scale, zero = group_params(W1[:, i : i + group], bits, sym)
                scales[:, col // group], zeros[:, col // group] = scale, zero
            q = _quant(W1[:, i], scale, zero, maxq)
            codes[:, col] = q.to(torch.uint8)
            d = (q - zero) * scale
            deq[:, col] = d
            e = (W1[:, i] - d) / h1[i, i]
            W1[:, i:] -= e[:, None] * h1[i, i:][None, :]
            err1[:, i] = e
        W[:, i2:] -= err1 @ hinv[i1:i2, i2:]
    return Quantized(codes, scales, zeros.to(torch.uint8), deq)


def output_error(w: torch.Tensor, deq: torch.Tensor, hessian: torch.Tensor | None) -> float:
    """How far the quantized linear's outputs are from the original's: ‖(W − Ŵ) X‖² / ‖W X‖² over the
    calibration inputs (from their Σ xᵀx), or, without inputs, the same of the weights themselves."""
    e, wf = w.float() - deq, w.float()
    if hessian is None:
        return float((e * e).sum() / (wf * wf).sum().clamp(min=1e-30))
    h = hessian.float()
    num, den = ((e @ h) * e).sum(), ((wf @ h) * wf).sum()
    return float(num / den.clamp(min=1e-30))
