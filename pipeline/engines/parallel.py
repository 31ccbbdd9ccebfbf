"""Tensor parallelism (`--tp N`) as LMDeploy 0.18 shards a model over N GPUs of one host, for `specq serve`,
`specq bench` and `specq plan`: which head counts must divide by N, how many heads each GPU then holds, and
where a drafter runs. Read from config.json only (no torch). Sources, LMDeploy 0.18.0:

- Attention (both engines): the query heads are split evenly over the ranks (`pytorch/nn/linear/utils.py`
  `QKVMixin`; TurboMind `builders/attention.py` `fuse_qkv` views them as `(tp, -1)`). KV heads are split too;
  when N exceeds them, each is replicated N / kv_heads times so every GPU holds one, which needs N to be a
  multiple of the KV-head count (`pytorch/configurations/builder.py` `update_num_kv_heads`: `assert tp %
  num_key_value_heads == 0`; TurboMind `_repeat_kv_heads`).
- Gated DeltaNet (Qwen3.5, Qwen3-Next): `linear_num_key_heads // tp` and `linear_num_value_heads // tp` heads
  per GPU, and their conv/recurrent state shaped from those (`pytorch/configurations/qwen3_5.py`).
- Drafters (`pytorch/engine/config_builder.py` `_build_draft_dist_ctx`): DFlash and the MTP methods run with
  the target's tensor parallelism (sharded like it); EAGLE and EAGLE-3 drafters run unsharded on the first
  GPU only (`DistConfig()`, tp 1), except a DeepSeek EAGLE-3 drafter, which is sharded.
- Embeddings and the LM head are replicated on every GPU (`nn.Embedding`; `build_lm_head` builds a rowwise
  linear without `is_tp`), and so are norms; every other linear layer is split.
- LMDeploy's help says tp "Should be 2^n", but neither engine checks it: the head rules above are what fail.
"""

from __future__ import annotations

from ..checkpoint import Checkpoint

# EAGLE-3 drafters of this architecture are sharded like the target (LMDeploy's _EAGLE3_DEEPSEEK_ARCH).
EAGLE3_SHARDED_ARCH = "Eagle3DeepseekV2ForCausalLM"


def draft_is_sharded(method: str | None, draft: Checkpoint | None) -> bool:
    """Whether LMDeploy shards the drafter over the target's GPUs (True) or runs it on GPU 0 alone."""
    if method in ("eagle", "eagle3"):
        return draft is not None and EAGLE3_SHARDED_ARCH in draft.architectures
    return True


def kv_heads_per_gpu(kv_heads: int, tp: int) -> int:
    """KV heads each GPU caches: kv_heads / tp, or 1 when they are replicated (tp > kv_heads)."""
    return max(1, kv_heads // tp) if tp > 1 else kv_heads


def _int(cfg: dict, key: str) -> int | None:
    v = cfg.get(key)
    try:
        return int(v) if v is not None else None
    except (TypeError, ValueError):
        return None


def head_problems(ckpt: Checkpoint, tp: int, role: str) -> list[str]:
    """Every head count of `ckpt` that LMDeploy cannot split over `tp` GPUs, one line each."""
    if tp <= 1:
        return []
    tc = ckpt.text_config
    problems: list[str] = []
    heads = _int(tc, "num_attention_heads")
    kv = _int(tc, "num_key_value_heads") or heads
    what = f"{role} {ckpt.name}"
    if heads and heads % tp:
        problems.append(f"{what}: num_attention_heads {heads} is not divisible by --tp {tp}")
    if kv and kv % tp and tp % kv:
        problems.append(
            f"{what}: num_key_value_heads {kv} is neither divisible by --tp {tp} nor a divisor of it "
            "(LMDeploy replicates KV heads only when tp is a multiple of their count)"
        )
    for key in ("linear_num_key_heads", "linear_num_value_heads"):
        n = _int(tc, key)
        if n and n % tp:
            problems.append(f"{what}: {key} {n} (Gated DeltaNet) is not divisible by --tp {tp}")
    return problems


def tp_problems(
    target: Checkpoint, draft: Checkpoint | None, method: str | None, tp: int, server: str
) -> list[str]:
    """Every reason `target` (and `draft`, with `method`) cannot be served with `--tp tp` by `server`."""
    if tp <= 1:
        return []
    if server != "lmdeploy":
        return [
            f"--tp {tp}: the embedded engine runs on one device; tensor parallelism needs --engine lmdeploy"
        ]
    problems = head_problems(target, tp, "target")
    if draft is not None and draft_is_sharded(method, draft):
        problems += head_problems(draft, tp, "drafter")
    if problems:
        problems[-1] += "; pick a --tp that divides every head count"
    return problems
