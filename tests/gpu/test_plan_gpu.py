"""The planner against a measured peak on a CUDA GPU (the goal: within 10 %).

Checked mode: `engine="embedded"` (transformers generation, no preallocated cache). The toy target (and, in
the second case, the toy draft through assisted generation) is loaded on CUDA, generates exactly
`session_len` tokens, and `torch.cuda.max_memory_allocated()` is compared with the plan's
`peak_allocated_bytes`. Both leave out the process-wide cuBLAS/cuBLASLt workspaces: the first GEMM of a
process allocates them inside torch's allocator, so they are warmed up before the measurement and reported
separately (the plan counts them in its fixed per-process overhead, `plan.cuda_context`). NVML's per-device
used memory is recorded next to the plan's `peak_bytes` but not asserted. LMDeploy's preallocated cache is a
different memory model and is not checked here.

Set SPECQ_GPU_REPORT_DIR to write plan_gpu_<case>.json with both figures."""

from __future__ import annotations

import gc
import json
import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

SESSION_LEN = 4096
PROMPT_LEN = 32
DRAFT_TOKENS = 4


@pytest.fixture(scope="module")
def pair() -> tuple[Path, Path]:
    from specq.pipeline.toy import ToyRequest, build_toy_pair

    p = build_toy_pair(ToyRequest(size="small"))
    return Path(p.target), Path(p.draft)


def _warm_cuda_libraries(dtype) -> int:
    """Run the GEMM paths generation uses once, so the process-wide cuBLAS/cuBLASLt workspaces (which the
    caching allocator holds) exist before the measurement starts, whichever case runs first. Returns the
    bytes this added to the allocator."""
    import torch

    before = torch.cuda.memory_allocated()
    x = torch.ones(4, 64, device="cuda", dtype=dtype)
    w = torch.ones(64, 64, device="cuda", dtype=dtype)
    torch.nn.functional.linear(x, w)
    torch.nn.functional.linear(x, w, torch.ones(64, device="cuda", dtype=dtype))
    torch.bmm(x[None], w[None])
    torch.cuda.synchronize()
    del x, w
    return torch.cuda.memory_allocated() - before


def _nvml_used() -> int | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(
            int(os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0] or 0)
        )
        return int(pynvml.nvmlDeviceGetMemoryInfo(h).used)
    except Exception:
        return None


@pytest.mark.parametrize("with_draft", [False, True], ids=["target", "target+draft"])
def test_embedded_peak_within_10_percent(pair: tuple[Path, Path], with_draft: bool) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    from specq.pipeline.checkpoint import Checkpoint
    from specq.pipeline.config import resolve_config
    from specq.pipeline.plan import PlanRequest, plan_memory

    target_dir, draft_dir = pair
    cfg = resolve_config(
        None,
        flags={
            "model": {"num_draft_tokens": DRAFT_TOKENS if with_draft else 0},
            "plan": {
                "engine": "embedded",
                "session_len": SESSION_LEN,
                "batch": 1,
                "prefill_tokens": PROMPT_LEN,
            },
        },
    )
    draft = Checkpoint(draft_dir) if with_draft else None
    plan = plan_memory(Checkpoint(target_dir), draft, PlanRequest.from_config(cfg))

    gc.collect()  # a previous case's objects must not be freed mid-measurement (it would lower the peak)
    workspaces = _warm_cuda_libraries(getattr(torch, str(Checkpoint(target_dir).torch_dtype or "float32")))
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    used_before = _nvml_used()
    target = AutoModelForCausalLM.from_pretrained(target_dir, dtype="auto").to("cuda").eval()
    kwargs = {}
    if with_draft:
        draft = AutoModelForCausalLM.from_pretrained(draft_dir, dtype="auto").to("cuda").eval()
        kwargs = {"assistant_model": draft}
        draft.generation_config.num_assistant_tokens = DRAFT_TOKENS
        draft.generation_config.num_assistant_tokens_schedule = "constant"
        draft.generation_config.assistant_confidence_threshold = 0.0
    vocab = target.config.vocab_size
    ids = torch.randint(10, vocab - 10, (1, PROMPT_LEN), device="cuda")
    new = SESSION_LEN - PROMPT_LEN
    with torch.no_grad():
        out = target.generate(
            ids,
            max_new_tokens=new,
            min_new_tokens=new,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=0,
            **kwargs,
        )
    torch.cuda.synchronize()
    measured = torch.cuda.max_memory_allocated() - base
    used_after = _nvml_used()
    assert out.shape[1] == SESSION_LEN

    error = (plan.peak_allocated_bytes - measured) / measured
    report = {
        "case": "target+draft" if with_draft else "target",
        "gpu": torch.cuda.get_device_name(0),
        "session_len": SESSION_LEN,
        "prompt_len": PROMPT_LEN,
        "plan_peak_allocated_bytes": plan.peak_allocated_bytes,
        "measured_max_memory_allocated_bytes": measured,
        "relative_error": round(error, 4),
        "cuda_library_workspaces_bytes": workspaces,
        "plan_peak_bytes_nvml_view": plan.peak_bytes,
        "nvml_used_before_bytes": used_before,
        "nvml_used_after_bytes": used_after,
        "plan": plan.model_dump(mode="json"),
    }
    out_dir = os.environ.get("SPECQ_GPU_REPORT_DIR")
    if out_dir:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        (Path(out_dir) / f"plan_gpu_{report['case'].replace('+', '_')}.json").write_text(
            json.dumps(report, indent=2)
        )
    print(json.dumps({k: v for k, v in report.items() if k != "plan"}))
    assert abs(error) <= 0.10, report
