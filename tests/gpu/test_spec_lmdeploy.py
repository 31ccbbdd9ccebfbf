"""LMDeploy speculative decoding on a real GPU (needs lmdeploy 0.18, CUDA and FlashAttention-3; run by
`make gpu-check` on the H200): a DFlash drafter served by LMDeploy's PyTorch engine decodes exactly the
baseline's greedy text, and the acceptance `specq bench` reports equals what the test reads itself from the
raw `lmdeploy:spec_decode_*` counters (its own parser, not specq's).

The target and drafter come from `SPECQ_GPU_SPEC_TARGET` / `SPECQ_GPU_SPEC_DRAFTER` when set (the gpu-check
pipeline's own artifacts); otherwise the small toy target and a DFlash drafter trained here on CUDA."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import httpx
import pytest

from specq.pipeline import hardware
from specq.pipeline.config.models import SpecqConfig
from specq.pipeline.serve import ServeRequest, create_engine

pytestmark = pytest.mark.gpu

needs_spec = pytest.mark.skipif(
    not hardware.module_present("lmdeploy") or hardware.flash_attention_3() is not None,
    reason="needs lmdeploy 0.18 and FlashAttention-3",
)

K = 4
PROMPTS = [
    "def fibonacci(n):\n",
    "class Stack:\n    def __init__(self):\n",
    "import os\n\ndef list_files(path):\n",
    "def is_prime(n):\n",
]
_SAMPLE = re.compile(r"^lmdeploy:(spec_decode_\w+?)(?:\{([^}]*)\})?\s+([0-9.eE+-]+)$")


def raw_counters(url: str) -> dict[str, float]:
    """The spec-decode counters as LMDeploy prints them, keyed `name` or `name@position`."""
    out: dict[str, float] = {}
    for line in httpx.get(url, timeout=30).text.splitlines():
        m = _SAMPLE.match(line.strip())
        if not m:
            continue
        name, labels, value = m.groups()
        pos = re.search(r'position="(\d+)"', labels or "")
        key = f"{name}@{pos.group(1)}" if pos else name
        out[key] = out.get(key, 0.0) + float(value)
    return out


def settled(url: str) -> dict[str, float]:
    """Counters lag just after a run: read until two reads 0.5 s apart agree (at most 30 s)."""
    prev = raw_counters(url)
    for _ in range(60):
        time.sleep(0.5)
        cur = raw_counters(url)
        if cur == prev:
            return cur
        prev = cur
    return prev


def _pair(tmp_path: Path) -> tuple[Path, Path]:
    target, drafter = os.environ.get("SPECQ_GPU_SPEC_TARGET"), os.environ.get("SPECQ_GPU_SPEC_DRAFTER")
    if target and drafter:
        return Path(target), Path(drafter)
    from specq.pipeline.draft import DraftTrainRequest, train_drafter
    from specq.pipeline.toy import ToyRequest, build_toy_pair

    pair = build_toy_pair(ToyRequest(size="small", seed=0))
    cfg = SpecqConfig.model_validate({"draft": {"device": "cuda", "steps": 600}})
    train_drafter(DraftTrainRequest.from_config(cfg, target=pair.target, out=tmp_path / "dflash"))
    return pair.target, tmp_path / "dflash"


def _config(target: Path, drafter: Path, k: int) -> SpecqConfig:
    return SpecqConfig.model_validate(
        {
            "model": {"model_path": str(target), "draft_model_path": str(drafter), "model_name": "t",
                      "num_draft_tokens": k},
            "engine": {"engine": "lmdeploy", "backend": "pytorch", "session_len": 2048,
                       "cache_max_entry_count": 0.2, "ready_timeout_s": 600},
            "speculative": {"method": "dflash" if k else None},
            "bench": {"requests": 8, "max_tokens": 96, "warmup": 0, "suite": "code"},
        }
    )  # fmt: skip


def _greedy(base_url: str) -> list[str]:
    texts = []
    for p in PROMPTS:
        r = httpx.post(
            f"{base_url}/v1/completions",
            json={"model": "t", "prompt": p, "max_tokens": 64, "temperature": 0, "ignore_eos": True},
            timeout=120,
        )
        assert r.status_code == 200, r.text
        texts.append(r.json()["choices"][0]["text"])
    return texts


@needs_spec
def test_dflash_is_lossless_and_bench_acceptance_matches_raw_counters(tmp_path: Path) -> None:
    from specq.pipeline.bench import BenchRequest
    from specq.pipeline.bench.runner import run_bench

    target, drafter = _pair(tmp_path)
    with create_engine(ServeRequest.from_config(_config(target, drafter, 0)), tmp_path / "base") as base:
        reference = _greedy(base.base_url)

    cfg = _config(target, drafter, K)
    with create_engine(ServeRequest.from_config(cfg), tmp_path / "spec") as spec:
        assert _greedy(spec.base_url) == reference  # lossless: greedy text identical with speculation
        before = settled(spec.metrics_url)
        cfg.bench.url = spec.base_url
        report = run_bench(BenchRequest.from_config(cfg), out_dir=tmp_path / "bench")
        after = settled(spec.metrics_url)

    acc = report.runs[0].acceptance
    assert acc is not None and acc.settled
    d = {key: after.get(key, 0.0) - before.get(key, 0.0) for key in after}
    drafts = d["spec_decode_num_drafts_total"]
    assert drafts > 0
    assert acc.drafts == pytest.approx(drafts)
    assert acc.draft_tokens == pytest.approx(d["spec_decode_num_draft_tokens_total"])
    assert acc.accepted_tokens == pytest.approx(d["spec_decode_num_accepted_tokens_total"])
    raw_per_pos = [d[f"spec_decode_num_accepted_tokens_per_pos_total@{i}"] / drafts for i in range(K)]
    assert acc.per_position == pytest.approx(raw_per_pos)
    # Acceptance at a later position can never exceed an earlier one (a draft token is accepted only if
    # every one before it was). Equal neighbours are real (no draft stopped between them; the H200 run had
    # 0.85 / 0.85 at k = 7); an increase would betray a bookkeeping error.
    assert all(a >= b - 1e-9 for a, b in zip(raw_per_pos, raw_per_pos[1:], strict=False))
    assert report.runs[0].draft_tokens == K
    print(
        f"drafts {drafts:.0f}, τ {acc.acceptance_length:.2f}, per position "
        f"{' / '.join(f'{p:.3f}' for p in raw_per_pos)} (raw counters), "
        f"lossless {len(PROMPTS)}/{len(PROMPTS)}"
    )
