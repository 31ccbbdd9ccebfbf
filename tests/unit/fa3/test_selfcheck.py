"""The self-check harness on the CPU. FA3's kernels need a CUDA GPU, so a plain-torch implementation of the
two calls LMDeploy makes (`flash_attn_varlen_func`, `flash_attn_with_kvcache` with a page table) stands in for
`flash_attn_interface` here; the real kernels are checked by tests/gpu/test_fa3_selfcheck.py and by every
`specq fa3 build`. It shows the harness passes a correct attention and catches a wrong one."""

from __future__ import annotations

import sys
import types

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from specq.pipeline.fa3 import selfcheck  # noqa: E402


def _attend(q, k, v, causal: bool, skew: int = 0):
    """q (Lq, Hq, D), k/v (Lk, Hkv, D) → (Lq, Hq, D); causal aligned bottom-right (+ skew: a broken one)."""
    rep = q.shape[1] // k.shape[1]
    k, v = (t.repeat_interleave(rep, dim=1).transpose(0, 1).float() for t in (k, v))
    mask = None
    if causal:
        i = torch.arange(q.shape[0])[:, None]
        j = torch.arange(k.shape[1])[None, :]
        mask = j <= i + k.shape[1] - q.shape[0] + skew
    out = F.scaled_dot_product_attention(q.transpose(0, 1).float(), k, v, attn_mask=mask)
    return out.transpose(0, 1).to(q.dtype)


def torch_fa3(skew: int = 0, shuffle_pages: bool = False) -> types.ModuleType:
    fa = types.ModuleType("flash_attn_interface")

    def varlen(q, k, v, cu_q, cu_k, max_q, max_k, causal=False, **_):
        out = torch.empty_like(q)
        for b in range(len(cu_q) - 1):
            s = slice(int(cu_q[b]), int(cu_q[b + 1]))
            out[s] = _attend(q[s], k[s], v[s], causal, skew)
        return out

    def with_kvcache(
        q, k_cache, v_cache, cache_seqlens, page_table, max_seqlen_q, scheduler_metadata, causal
    ):
        out = torch.empty_like(q)
        for b, n in enumerate(cache_seqlens.tolist()):
            pages = page_table[b].long().flip(0) if shuffle_pages else page_table[b].long()
            k = k_cache[pages].flatten(0, 1)[:n]
            v = v_cache[pages].flatten(0, 1)[:n]
            out[b] = _attend(q[b], k, v, causal, skew)
        return out

    fa.flash_attn_varlen_func = varlen
    fa.flash_attn_with_kvcache = with_kvcache
    fa.get_scheduler_metadata = lambda *a, **kw: None
    return fa


@pytest.fixture(autouse=True)
def _cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(selfcheck, "DEVICE", "cpu")


def test_a_correct_attention_passes_every_case(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "flash_attn_interface", torch_fa3())
    results = selfcheck.run_cases(["bf16", "fp16"], [64])
    assert [r.name for r in results] == [
        f"{call} {kind} {dt} hdim64"
        for dt in ("bf16", "fp16")
        for call, kind in (("varlen", "causal"), ("paged", "causal"), ("paged", "non-causal"))
    ]
    assert all(r.ok for r in results), [r for r in results if not r.ok]
    assert all(r.max_abs_err is not None and r.max_abs_err < r.tolerance for r in results)


def test_a_misaligned_causal_mask_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "flash_attn_interface", torch_fa3(skew=-1))
    results = selfcheck.run_cases(["bf16"], [64])
    assert [r.ok for r in results] == [False, False, True]  # non-causal is unaffected


def test_pages_read_in_the_wrong_order_fail(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "flash_attn_interface", torch_fa3(shuffle_pages=True))
    results = selfcheck.run_cases(["fp16"], [64])
    assert [r.ok for r in results] == [True, False, False]


def test_a_missing_kernel_is_a_failed_case_not_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    fa = torch_fa3()

    def no_kernel(*a, **kw):
        raise RuntimeError("This flash attention build does not support headdim 256")

    fa.flash_attn_with_kvcache = no_kernel
    monkeypatch.setitem(sys.modules, "flash_attn_interface", fa)
    results = selfcheck.run_cases(["bf16"], [256])
    assert [r.ok for r in results] == [True, False, False]
    assert results[1].error == "RuntimeError: This flash attention build does not support headdim 256"
