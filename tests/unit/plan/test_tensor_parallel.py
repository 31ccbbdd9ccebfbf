"""`specq plan --tp N`: memory per GPU as LMDeploy 0.18 shards a model (engines/parallel.py), every GPU
judged, NVML simulated where a test needs GPUs. Planned on paper and on tiny real checkpoints; not yet
compared with two GPUs' NVML readings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specq.pipeline import hardware
from specq.pipeline.checkpoint import Checkpoint
from specq.pipeline.config import resolve_config
from specq.pipeline.errors import EnvironmentMissing, UsageError
from specq.pipeline.hardware import GpuInfo
from specq.pipeline.plan import PlanRequest, fits, plan_memory
from specq.pipeline.plan.planner import LMDEPLOY_BLOCK_SIZE, MemoryPlan

from .reference import QWEN35_27B_DFLASH, QWEN35_27B_TEXT, write_reference

GIB = 2**30
VOCAB, HIDDEN = QWEN35_27B_TEXT["vocab_size"], QWEN35_27B_TEXT["hidden_size"]


@pytest.fixture(scope="module")
def ref(tmp_path_factory: pytest.TempPathFactory) -> tuple[Checkpoint, Checkpoint]:
    t, d = write_reference(tmp_path_factory.mktemp("ref"))
    return Checkpoint(t), Checkpoint(d)


def plan(target: Checkpoint, draft: Checkpoint | None, tp: int, **planned: object) -> MemoryPlan:
    flags = {"engine": {"tp": tp}, "model": {"num_draft_tokens": 5 if draft else 0},
             "plan": {"gpu_memory": "24GiB", "session_len": 8192, **planned}}  # fmt: skip
    return plan_memory(target, draft, PlanRequest.from_config(resolve_config(None, flags=flags)))


def test_one_gpu_is_one_entry(ref: tuple[Checkpoint, Checkpoint]) -> None:
    p = plan(*ref, tp=1)
    assert p.tp == 1 and len(p.gpus) == 1
    g = p.gpus[0]
    assert (g.weights_bytes, g.kv_cache_bytes, g.peak_bytes, g.fits) == (
        p.weights_bytes, p.kv_cache_bytes, p.peak_bytes, p.fits,
    )  # fmt: skip


def test_tp2_splits_weights_kv_and_state(ref: tuple[Checkpoint, Checkpoint]) -> None:
    one, two = plan(*ref, tp=1), plan(*ref, tp=2)
    assert two.tp == 2 and [g.index for g in two.gpus] == [0, 1]
    # embeddings and LM head whole on both GPUs; DFlash's fc over 5 target layers whole too; the rest halved
    t_rep = 2 * VOCAB * HIDDEN * 2
    d_rep = len(QWEN35_27B_DFLASH["dflash_config"]["target_layer_ids"]) * HIDDEN * HIDDEN * 2
    t_all, d_all = one.target.weights_bytes, one.draft.weights_bytes  # type: ignore[union-attr]
    expected = t_rep + -(-(t_all - t_rep) // 2) + d_rep + -(-(d_all - d_rep) // 2)
    assert two.weights_bytes == expected == two.gpus[0].weights_bytes == two.gpus[1].weights_bytes
    assert one.weights_bytes == t_all + d_all
    # 4 KV heads of the target and 8 of the drafter, halved; the Gated-DeltaNet state halved
    assert two.kv_bytes_per_token * 2 == one.kv_bytes_per_token == 65536 + 20480
    assert two.state_bytes_per_sequence * 2 == one.state_bytes_per_sequence
    # the logits reserve is the whole vocabulary on every GPU (the LM head is replicated)
    assert two.runtime_reserve_bytes == (two.max_prefill_token_num + 2) * VOCAB * 2
    assert all(g.runtime_reserve_bytes == two.runtime_reserve_bytes for g in two.gpus)
    # and the KV cache each GPU holds is its block count times its own block size
    assert two.kv_cache_tokens % LMDEPLOY_BLOCK_SIZE == 0
    assert two.gpus[1].kv_cache_bytes == two.kv_cache_tokens * two.gpus[1].kv_bytes_per_token
    assert two.fits and two.max_session_len > 2 * one.max_session_len
    assert all(g.peak_bytes <= 24 * GIB for g in two.gpus)
    assert any("tensor parallel over 2 GPUs" in n for n in two.notes)
    assert two.verdict.startswith("fits on each of 2 GPUs")


def test_a_session_one_gpu_cannot_hold_fits_on_two(ref: tuple[Checkpoint, Checkpoint]) -> None:
    """The serve preflight's question, asked of `--tp 2`: 32768 tokens do not fit one 24 GiB card."""
    flags = {"model": {"model_path": str(ref[0].path), "draft_model_path": str(ref[1].path),
                       "num_draft_tokens": 5},
             "engine": {"session_len": 32768, "cache_max_entry_count": 0.5},
             "plan": {"gpu_memory": "24GiB", "max_prefill_token_num": 2048}}  # fmt: skip
    reason = fits(PlanRequest.from_config(resolve_config(None, flags=flags)))
    assert reason is not None and reason.startswith("VRAM plan: will not fit")
    flags["engine"]["tp"] = 2
    assert fits(PlanRequest.from_config(resolve_config(None, flags=flags))) is None


def eagle3(root: Path, heads: int) -> Checkpoint:
    root.mkdir(parents=True, exist_ok=True)
    cfg = {"architectures": ["Eagle3LlamaForCausalLM"], "model_type": "llama", "hidden_size": HIDDEN,
           "intermediate_size": 17408, "num_hidden_layers": 1, "num_attention_heads": heads,
           "num_key_value_heads": heads, "head_dim": 128, "vocab_size": VOCAB,
           "torch_dtype": "float16"}  # fmt: skip
    (root / "config.json").write_text(json.dumps(cfg))
    return Checkpoint(root)


def test_eagle3_drafter_stays_whole_on_gpu0(ref: tuple[Checkpoint, Checkpoint], tmp_path: Path) -> None:
    """LMDeploy runs an EAGLE-3 drafter unsharded on the first GPU (tp 1): its heads need not divide."""
    d = eagle3(tmp_path / "eagle3", heads=6)
    p = plan(ref[0], d, tp=2, gpu_memory="40GiB")
    g0, g1 = p.gpus
    assert g0.weights_bytes - g1.weights_bytes == p.draft.weights_bytes  # type: ignore[union-attr]
    assert g0.kv_bytes_per_token - g1.kv_bytes_per_token == p.draft.kv_bytes_per_token  # type: ignore[union-attr]
    assert g0.kv_cache_bytes > g1.kv_cache_bytes  # the same blocks, GPU 0's hold the drafter's KV too
    assert g0.activation_bytes > g1.activation_bytes


def test_heads_that_do_not_split_are_refused(ref: tuple[Checkpoint, Checkpoint], tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="linear_num_key_heads 16 .* not divisible by --tp 32"):
        plan(ref[0], None, tp=32)
    with pytest.raises(UsageError, match="num_attention_heads 24 is not divisible by --tp 16"):
        plan(ref[0], None, tp=16)
    plan(ref[0], None, tp=8)  # 24 heads; 4 KV heads, each on two GPUs; 16 and 48 linear heads
    dflash6 = tmp_path / "dflash6"
    dflash6.mkdir()
    (dflash6 / "config.json").write_text(json.dumps({**QWEN35_27B_DFLASH, "num_attention_heads": 6}))
    with pytest.raises(UsageError, match="drafter dflash6: num_attention_heads 6 is not divisible by --tp 4"):
        plan(ref[0], Checkpoint(dflash6), tp=4)


def test_tp_advice_only_where_twice_the_gpus_fit(ref: tuple[Checkpoint, Checkpoint]) -> None:
    """Two 12 GiB cards do not hold the target's shards; four do, and the advice says so. Eight 4 GiB cards
    do not either, and 16 do not divide the 24 attention heads: no --tp advice."""
    p = plan(ref[0], None, tp=2, gpu_memory="12GiB")
    four = plan(ref[0], None, tp=4, gpu_memory="12GiB")
    assert not p.fits and four.fits
    assert [a for a in p.advice if a.startswith("--tp")] == [
        "--tp 4 on GPUs of 12.00 GiB (weights, KV and state split further; fits session_len 8192 at batch 1, "
        f"longest session_len {four.max_session_len}, cache_max_entry_count {four.cache_max_entry_count})"
    ]
    p = plan(ref[0], None, tp=8, gpu_memory="4GiB")
    assert not p.fits and not any("--tp" in a for a in p.advice)


def test_embedded_engine_refuses_tp(ref: tuple[Checkpoint, Checkpoint]) -> None:
    with pytest.raises(UsageError, match="embedded engine runs on one device"):
        plan(ref[0], None, tp=2, engine="embedded")


def h200(i: int, gib: int = 141) -> GpuInfo:
    return GpuInfo(index=i, name="NVIDIA H200", memory_total_bytes=gib * GIB, uuid=f"GPU-{i}")


def test_nvml_gpus_honour_cuda_visible_devices(
    ref: tuple[Checkpoint, Checkpoint], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hardware, "list_gpus", lambda: [h200(0, 80), h200(1, 24), h200(2, 24)])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,1")
    p = plan(ref[0], None, tp=2, gpu_memory=None)
    assert [(g.gpu_memory_bytes, g.gpu_memory_source) for g in p.gpus] == [
        (24 * GIB, "NVML GPU 2: NVIDIA H200"), (24 * GIB, "NVML GPU 1: NVIDIA H200"),
    ]  # fmt: skip
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    with pytest.raises(EnvironmentMissing, match="--tp 2: 1 GPU visible to plan against.*--gpu-memory"):
        plan(ref[0], None, tp=2, gpu_memory=None)


def test_check_judges_every_gpu(
    cli, ref: tuple[Checkpoint, Checkpoint], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two cards of different sizes: the smaller one is where it does not fit, and --check exits 4."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(hardware, "list_gpus", lambda: [h200(0, 24), h200(1, 12)])
    args = ["plan", str(ref[0].path), "--tp", "2", "--session-len", "65536"]
    code, out, err = cli(*args, "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["tp"] == 2 and doc["fits"] is False
    assert [g["fits"] for g in doc["gpus"]] == [True, False]
    assert doc["verdict"].startswith("will not fit on GPU 1 of 2")
    code, out, err = cli(*args)
    assert code == 0 and "GPU 1" in out and "NO" in out
    code, _, err = cli(*args, "--check")
    assert code == 4  # one stderr line: the verdict, then the advice
    (line,) = err.strip().splitlines()
    assert line.startswith(
        "specq: error: will not fit on GPU 1 of 2: session_len 65536 at batch 1; would fit: "
    )
    monkeypatch.setattr(hardware, "list_gpus", lambda: [h200(0, 24), h200(1, 24)])
    assert cli(*args, "--check")[0] == 0


def test_real_headers_keep_norms_whole(hf_models: dict[str, Path]) -> None:
    """A tiny Qwen3.5 saved by transformers: embeddings, LM head and every norm on both GPUs."""
    ck = Checkpoint(hf_models["qwen3_5"])
    whole = sum(
        t.nbytes
        for name, t in ck.tensors.items()
        if "embed_tokens" in name or "lm_head" in name or name.split(".")[-2].endswith("norm")
    )
    assert whole > sum(t.nbytes for n, t in ck.tensors.items() if "embed_tokens" in n or "lm_head" in n)
    one, two = plan(ck, None, tp=1, gpu_memory="1GiB"), plan(ck, None, tp=2, gpu_memory="1GiB")
    assert two.weights_bytes == whole + -(-(one.weights_bytes - whole) // 2)
    assert two.kv_bytes_per_token * 2 == one.kv_bytes_per_token  # 2 KV heads, one per GPU
