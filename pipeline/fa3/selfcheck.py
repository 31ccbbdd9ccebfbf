"""The numerical self-check of a FlashAttention-3 build: FA3 against torch's scaled_dot_product_attention on
random q/k/v, for every dtype × head dim built, through the two calls LMDeploy's PyTorch engine makes
(`flash_attn_varlen_func` for prefill over contiguous varlen K/V, and `flash_attn_with_kvcache` with a
`page_table` and `get_scheduler_metadata` for multi-token speculative decoding), causal with GQA, plus the
non-causal paged call DFlash drafters make.

`specq fa3 build` runs it as `python -m specq.pipeline.fa3.selfcheck --dtype ... --head-dim ...` in a
separate process with the freshly built module first on sys.path, so a crash in the new kernels cannot take
specq down and the check sees exactly the files that would be installed. It prints one JSON document; exit
status 0 only when every case is within tolerance. Needs CUDA."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from pydantic import BaseModel

# Max abs error vs an fp32 reference on N(0, 1) inputs (or twice torch SDPA's own error in that dtype, if
# larger, as flash-attention's tests allow). FA3 keeps P in the input dtype, so the error is a few ulps of
# the output: bf16 has 8 mantissa bits, fp16 11.
TOLERANCE = {"bf16": 3e-2, "fp16": 5e-3}
HEADS_Q, HEADS_KV = 8, 2  # GQA 4:1, as in the toys and Qwen3.5's full attention (24:4 → 6:1)
PAGE_SIZE = 64  # LMDeploy's default block size
DEVICE = "cuda"  # FA3 runs on CUDA only; the unit tests run the harness on the CPU


class CaseResult(BaseModel):
    name: str
    dtype: str
    head_dim: int
    call: str  # varlen | paged
    causal: bool
    max_abs_err: float | None = None
    tolerance: float
    ok: bool
    error: str | None = None


def _reference(q: Any, k: Any, v: Any, causal_offset: int | None, exact: bool = True) -> Any:
    """SDPA for one sequence, in fp32 (`exact`) or in the inputs' dtype. q: (Lq, Hq, D), k/v: (Lk, Hkv, D).
    With `causal_offset`, query i sees keys 0..offset+i (FA3 aligns the causal mask bottom-right)."""
    import torch
    import torch.nn.functional as F

    rep = q.shape[1] // k.shape[1]
    cast = (lambda t: t.float()) if exact else (lambda t: t)
    qf = cast(q).transpose(0, 1)
    kf = cast(k).repeat_interleave(rep, dim=1).transpose(0, 1)
    vf = cast(v).repeat_interleave(rep, dim=1).transpose(0, 1)
    mask = None
    if causal_offset is not None:
        i = torch.arange(q.shape[0], device=q.device)[:, None]
        j = torch.arange(k.shape[0], device=q.device)[None, :]
        mask = j <= i + causal_offset
    return F.scaled_dot_product_attention(qf, kf, vf, attn_mask=mask).transpose(0, 1).float()


def _errors(out: Any, q: Any, k: Any, v: Any, causal_offset: int | None) -> tuple[float, float]:
    """(FA3's max abs error, torch SDPA's own max abs error in the low dtype), both against fp32 SDPA."""
    ref = _reference(q, k, v, causal_offset)
    low = _reference(q, k, v, causal_offset, exact=False)
    return (out.float() - ref).abs().max().item(), (low - ref).abs().max().item()


def _varlen_case(fa: Any, dtype: Any, head_dim: int, causal: bool) -> tuple[float, float]:
    import torch

    lens = [17, 64, 130]
    cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device=DEVICE)
    total = sum(lens)
    q = torch.randn(total, HEADS_Q, head_dim, dtype=dtype, device=DEVICE)
    k = torch.randn(total, HEADS_KV, head_dim, dtype=dtype, device=DEVICE)
    v = torch.randn(total, HEADS_KV, head_dim, dtype=dtype, device=DEVICE)
    out = fa.flash_attn_varlen_func(q, k, v, cu, cu, max(lens), max(lens), causal=causal)
    out = out[0] if isinstance(out, tuple) else out  # older API returned (out, lse)
    errs = [
        _errors(out[s], q[s], k[s], v[s], 0 if causal else None)
        for s in (slice(int(cu[b]), int(cu[b + 1])) for b in range(len(lens)))
    ]
    return max(e[0] for e in errs), max(e[1] for e in errs)


def _paged_case(fa: Any, dtype: Any, head_dim: int, causal: bool) -> tuple[float, float]:
    """LMDeploy's `_decoding_speculative`: q (B, q_len, H, D), paged caches, cache_seqlens, page_table,
    max_seqlen_q and the scheduler metadata it builds with get_scheduler_metadata."""
    import torch

    seqlens, q_len, blocks_per_seq = [70, 129, 200], 5, 4
    batch = len(seqlens)
    num_blocks = batch * blocks_per_seq + 3
    k_cache = torch.randn(num_blocks, PAGE_SIZE, HEADS_KV, head_dim, dtype=dtype, device=DEVICE)
    v_cache = torch.randn(num_blocks, PAGE_SIZE, HEADS_KV, head_dim, dtype=dtype, device=DEVICE)
    page_table = torch.randperm(num_blocks, device=DEVICE)[: batch * blocks_per_seq]
    page_table = page_table.view(batch, blocks_per_seq).to(torch.int32)
    cache_seqlens = torch.tensor(seqlens, dtype=torch.int32, device=DEVICE)
    q = torch.randn(batch, q_len, HEADS_Q, head_dim, dtype=dtype, device=DEVICE)
    meta = fa.get_scheduler_metadata(
        batch, q_len, blocks_per_seq * PAGE_SIZE, HEADS_Q, HEADS_KV, head_dim, cache_seqlens,
        qkv_dtype=dtype, headdim_v=head_dim, page_size=PAGE_SIZE, causal=causal,
    )  # fmt: skip
    out = fa.flash_attn_with_kvcache(
        q, k_cache, v_cache, cache_seqlens=cache_seqlens, page_table=page_table, max_seqlen_q=q_len,
        scheduler_metadata=meta, causal=causal,
    )  # fmt: skip
    out = out[0] if isinstance(out, tuple) else out
    errs = []
    for b, n in enumerate(seqlens):
        k = k_cache[page_table[b].long()].reshape(-1, HEADS_KV, head_dim)[:n]
        v = v_cache[page_table[b].long()].reshape(-1, HEADS_KV, head_dim)[:n]
        errs.append(_errors(out[b], q[b], k, v, n - q_len if causal else None))
    return max(e[0] for e in errs), max(e[1] for e in errs)


def run_cases(dtypes: list[str], head_dims: list[int], seed: int = 0) -> list[CaseResult]:
    """Every case; an exception in one case is its failure, not the end of the check."""
    import flash_attn_interface as fa  # the build under test: first on sys.path
    import torch

    torch_dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16}
    results: list[CaseResult] = []
    cases = [("varlen", True), ("paged", True), ("paged", False)]
    for dt in dtypes:
        for hd in head_dims:
            for call, causal in cases:
                torch.manual_seed(seed)
                name = f"{call} {'causal' if causal else 'non-causal'} {dt} hdim{hd}"
                tol = TOLERANCE[dt]
                try:
                    fn = _varlen_case if call == "varlen" else _paged_case
                    err, torch_err = fn(fa, torch_dtypes[dt], hd, causal)
                    if DEVICE == "cuda":
                        torch.cuda.synchronize()
                    # flash-attention's own tests allow twice torch's low-precision error; never less than tol
                    tol = max(tol, 2 * torch_err)
                    ok = err <= tol  # NaN fails too
                    results.append(CaseResult(name=name, dtype=dt, head_dim=hd, call=call, causal=causal,
                                              max_abs_err=err, tolerance=tol, ok=ok))  # fmt: skip
                except Exception as e:  # a kernel the build lacks raises here: that case fails
                    msg = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                    results.append(CaseResult(name=name, dtype=dt, head_dim=hd, call=call, causal=causal,
                                              tolerance=tol, ok=False, error=msg))  # fmt: skip
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dtype", action="append", choices=sorted(TOLERANCE), required=True)
    parser.add_argument("--head-dim", action="append", type=int, required=True)
    args = parser.parse_args(argv)
    import flash_attn_interface

    results = run_cases(args.dtype, args.head_dim)
    doc = {
        "module": flash_attn_interface.__file__,
        "device": _device(),
        "cases": [r.model_dump() for r in results],
    }
    sys.stdout.write(json.dumps(doc) + "\n")
    return 0 if results and all(r.ok for r in results) else 1


def _device() -> str:
    import torch

    p = torch.cuda.get_device_properties(0)
    return f"{p.name} (sm {p.major}.{p.minor})"


if __name__ == "__main__":
    raise SystemExit(main())
