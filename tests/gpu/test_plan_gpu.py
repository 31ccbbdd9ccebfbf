"""The planner against a measured peak on a CUDA GPU (issue 5/8: within 10 %).

Checked mode: `engine="embedded"` (transformers generation, no preallocated cache). The toy target (and, in
the second case, the toy draft through assisted generation) is loaded on CUDA, generates exactly
`session_len` tokens, and `torch.cuda.max_memory_allocated()` is compared with the plan's
`peak_allocated_bytes`. NVML's per-device used memory is recorded next to the plan's `peak_bytes` (which adds
the assumed CUDA context) but not asserted: the context size is an assumption the run should calibrate.
LMDeploy's preallocated cache is a different memory model and is not checked here.

Set SPECQ_GPU_REPORT_DIR to write plan_gpu_<case>.json with both figures."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

SESSION_LEN = 4096
PROMPT_LEN = 32
DRAFT_TOKENS = 4


def _pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The project's toy pair when the toy stage is present; else a small random Qwen3 pair built here."""
    try:
        from specq.pipeline.toy import build_toy_pair  # type: ignore[attr-defined]

        pair = build_toy_pair("small")
        return Path(pair.target), Path(pair.draft)
    except ImportError:
        pass
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    root = tmp_path_factory.mktemp("plan-gpu")
    torch.manual_seed(0)
    common = {"vocab_size": 32000, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 64,
              "tie_word_embeddings": False, "max_position_embeddings": 8192}  # fmt: skip
    for name, hidden, layers in (("target", 512, 8), ("draft", 256, 2)):
        c = Qwen3Config(hidden_size=hidden, intermediate_size=3 * hidden, num_hidden_layers=layers, **common)
        Qwen3ForCausalLM(c).half().save_pretrained(root / name)
    return root / "target", root / "draft"


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return _pair(tmp_path_factory)


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
    from specq.pipeline.plan import plan_memory

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
    plan = plan_memory(Checkpoint(target_dir), Checkpoint(draft_dir) if with_draft else None, cfg)

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
