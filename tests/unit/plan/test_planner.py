"""The plan itself: the reference case on paper, LMDeploy's cache_max_entry_count semantics, verdicts and
advice, the embedded engine's dynamic model, and the serve preflight hook."""

from __future__ import annotations

from pathlib import Path

import pytest

from specq.pipeline.checkpoint import Checkpoint
from specq.pipeline.config import resolve_config
from specq.pipeline.errors import ConfigError, EnvironmentMissing
from specq.pipeline.plan import PlanRequest, fits, parse_memory, plan_memory
from specq.pipeline.plan.planner import LMDEPLOY_BLOCK_SIZE, MemoryPlan

from .conftest import write_quantized
from .reference import write_reference

GIB = 2**30
PRESET = "rtx3090-qwen3.5-27b-awq-dflash"
# Qwen3.5-27B's Gated-DeltaNet state per sequence in LMDeploy 0.18 at K = 5 draft tokens (the preset's), bf16:
# 48 linear layers; conv: conv_dim 2*16*128 + 48*128 = 10240 channels x (kernel 4 + K) x 2 B; recurrent:
# (1 + K) x 48 value heads x 128 x 128 x 2 B (pytorch/configurations/qwen3_5.py), each a multiple of 256 B.
QWEN35_27B_STATE_K5 = 48 * 10240 * (4 + 5) * 2 + 48 * (1 + 5) * 48 * 128 * 128 * 2
assert QWEN35_27B_STATE_K5 == 8_847_360 + 452_984_832 == 461_832_192


@pytest.fixture(scope="module")
def ref(tmp_path_factory: pytest.TempPathFactory) -> tuple[Checkpoint, Checkpoint]:
    """The target with a 2-layer drafter of the public drafter's shape: what the 24 GiB preset is for."""
    t, d = write_reference(tmp_path_factory.mktemp("ref"), draft_layers=2)
    return Checkpoint(t), Checkpoint(d)


@pytest.fixture(scope="module")
def ref5(tmp_path_factory: pytest.TempPathFactory) -> tuple[Checkpoint, Checkpoint]:
    """The target with the public 5-layer drafter."""
    t, d = write_reference(tmp_path_factory.mktemp("ref5"))
    return Checkpoint(t), Checkpoint(d)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("24GiB", 24 * GIB),
        ("24 GB", 24 * 10**9),
        ("24576MiB", 24 * GIB),
        ("80G", 80 * GIB),
        ("1.5TiB", int(1.5 * 2**40)),
    ],
)
def test_parse_memory(text: str, expected: int) -> None:
    assert parse_memory(text) == expected


@pytest.mark.parametrize("text", ["24", "GiB", "24 parsecs", "-3GiB", ""])
def test_parse_memory_rejects(text: str) -> None:
    with pytest.raises(ConfigError, match="--gpu-memory"):
        parse_memory(text)


def test_reference_case_fits_24gib_with_recommended_settings(ref: tuple[Checkpoint, Checkpoint]) -> None:
    cfg = resolve_config(PRESET)
    p = plan_memory(*ref, PlanRequest.from_config(cfg))
    assert p.engine == "lmdeploy" and p.batch == 1 and p.session_len == 8192 and p.draft_tokens == 5
    assert p.kv_bytes_per_token == 65536 + 8192  # 16 full-attention layers + 2 drafter layers
    assert p.state_cache_bytes == QWEN35_27B_STATE_K5 * 3  # max_batch_size + 2 slots
    assert p.fits, p.verdict
    assert p.max_session_len >= 8192
    assert 0.3 <= (p.cache_max_entry_count or 0) <= 0.95
    # LMDeploy's runtime reserve for the recommended prefill budget
    assert p.runtime_reserve_bytes == (p.max_prefill_token_num + 2) * 248320 * 2
    # KV blocks: cache_max_entry_count of what is free after weights, state and runtime reserve
    free = p.free_after_weights_bytes - p.state_cache_bytes - p.runtime_reserve_bytes
    blocks = int(free * p.cache_max_entry_count) // (p.kv_bytes_per_token * LMDEPLOY_BLOCK_SIZE)
    assert p.kv_cache_tokens == blocks * LMDEPLOY_BLOCK_SIZE
    assert p.peak_bytes <= p.gpu_memory_bytes
    # the peak holds the fixed costs and not the runtime reserve, which generation never fills
    fixed = p.driver_reserved_bytes + p.cuda_context_bytes + p.load_overhead_bytes
    assert fixed == (615 + 588 + 480) * 2**20
    terms = p.weights_bytes + p.state_cache_bytes + p.kv_cache_bytes + p.activation_bytes + p.cuda_graph_bytes
    assert p.peak_bytes == fixed + terms


def test_the_public_5_layer_drafter_does_not_fit_24gib(ref5: tuple[Checkpoint, Checkpoint]) -> None:
    """At the fixed costs measured on the H200 (2026-12-03) the 27B-AWQ target with the 5-layer DFlash
    drafter leaves no room for a session on a 24 GiB card (its scale twin peaked at 25.9 GiB with the card's
    KV cache); the advice names serving without the drafter."""
    p = plan_memory(*ref5, PlanRequest.from_config(resolve_config(PRESET)))
    assert not p.fits and p.max_session_len == 0
    # the target alone (no draft tokens: its MTP head does not draft either) fits, and the advice says how far
    alone = plan_memory(
        ref5[0],
        None,
        PlanRequest.from_config(resolve_config(PRESET, flags={"model": {"num_draft_tokens": 0}})),
    )
    assert alone.fits
    assert (
        f"serve without the drafter (frees its weights and KV; fits session_len 8192 at batch 1, "
        f"longest session_len {alone.max_session_len}, cache_max_entry_count {alone.cache_max_entry_count})"
    ) in p.advice
    assert not any("int8" in a for a in p.advice)  # no KV room at all: halving KV bytes would not fit it
    # the weights and fixed costs leave no room that a smaller prefill budget could free
    assert not any("prefill" in a for a in p.advice)
    short = resolve_config(PRESET, flags={"plan": {"session_len": 256}})
    assert not plan_memory(*ref5, PlanRequest.from_config(short)).fits


def test_reference_case_lmdeploy_defaults_do_not_fit(ref: tuple[Checkpoint, Checkpoint]) -> None:
    """cache_max_entry_count 0.8 with the default 8192-token prefill budget leaves no room for activations."""
    defaults = resolve_config(PRESET, flags={"plan": {"max_prefill_token_num": 8192}})
    p = plan_memory(*ref, PlanRequest.from_config(defaults), cache_max_entry_count=0.8)
    assert not p.fits
    # LMDeploy halves 8192 until 16 blocks fit: 3.54 GiB free after weights - 1.29 GiB state leaves 2.25 GiB,
    # less than the 8192-token reserve (3.79 GiB); the 4096-token one (1.90 GiB) leaves room for 16 blocks
    assert p.max_prefill_token_num == 4096


def test_preflight_fits_names_the_fix(ref: tuple[Checkpoint, Checkpoint]) -> None:
    t, d = ref
    flags = {
        "model": {"model_path": str(t.path), "draft_model_path": str(d.path)},
        "engine": {"cache_max_entry_count": 0.8},  # LMDeploy's defaults, as the tutorial uses them
        "plan": {"max_prefill_token_num": 8192},
    }
    reason = fits(PlanRequest.from_config(resolve_config(PRESET, flags=flags)))
    assert reason is not None and reason.startswith("VRAM plan: will not fit")
    assert "cache_max_entry_count" in reason and "--max-prefill-token-num" in reason
    flags["engine"] = {"cache_max_entry_count": 0.41}
    flags["plan"] = {"max_prefill_token_num": 512}
    assert fits(PlanRequest.from_config(resolve_config(PRESET, flags=flags))) is None
    del flags["engine"], flags["plan"]  # the packaged preset carries settings that fit
    assert fits(PlanRequest.from_config(resolve_config(PRESET, flags=flags))) is None
    assert fits(PlanRequest.from_config(resolve_config(None))) is None  # no model: nothing to judge


def test_weights_alone_do_not_fit(ref: tuple[Checkpoint, Checkpoint]) -> None:
    p = plan_memory(
        *ref, PlanRequest.from_config(resolve_config(PRESET, flags={"plan": {"gpu_memory": "16GiB"}}))
    )
    assert not p.fits and "weights alone" in p.verdict and p.advice


def test_too_long_session_gets_advice(ref: tuple[Checkpoint, Checkpoint]) -> None:
    p = plan_memory(
        *ref, PlanRequest.from_config(resolve_config(PRESET, flags={"plan": {"session_len": 131072}}))
    )
    assert not p.fits
    assert any(a.startswith(f"--session-len {p.max_session_len}") for a in p.advice)
    int8 = plan_memory(
        *ref,
        PlanRequest.from_config(
            resolve_config(PRESET, flags={"plan": {"session_len": 131072, "kv_dtype": "int8"}})
        ),
    )
    assert int8.kv_bytes_per_token < p.kv_bytes_per_token * 0.6
    assert int8.max_session_len > p.max_session_len * 1.6
    # int8 does not fit 131072 either, so its advice says how far it goes
    assert any(
        a.startswith("int8") and a.endswith(f"longest session_len {int8.max_session_len}") for a in p.advice
    )


def prefill_plan(ref: tuple[Checkpoint, Checkpoint], prefill: int, ratio: float) -> MemoryPlan:
    flags = {"plan": {"max_prefill_token_num": prefill}}
    return plan_memory(
        *ref, PlanRequest.from_config(resolve_config(PRESET, flags=flags)), cache_max_entry_count=ratio
    )


def test_smaller_prefill_advice_names_the_budget_that_fits(ref: tuple[Checkpoint, Checkpoint]) -> None:
    """cache_max_entry_count 0.41 with an 8192-token prefill budget: LMDeploy halves it to 4096, whose
    activations do not fit the 59 % left beside the KV cache; 1024 does not either, 512 does."""
    p = prefill_plan(ref, 8192, 0.41)
    assert not p.fits and p.max_prefill_token_num == 4096
    assert not prefill_plan(ref, 1024, 0.41).fits
    fit = prefill_plan(ref, 512, 0.41)
    assert fit.fits
    advice = [a for a in p.advice if "--max-prefill-token-num" in a]
    assert advice == [
        "LMDeploy --max-prefill-token-num 512 (engine.max_prefill_token_num = 512; fits session_len 8192 at "
        f"batch 1, longest session_len {fit.max_session_len})"
    ]


def test_no_prefill_advice_where_no_budget_fits(ref: tuple[Checkpoint, Checkpoint]) -> None:
    """LMDeploy's default cache_max_entry_count 0.8 leaves too little beside the KV cache at every budget
    down to 256, so the advice does not name a smaller one (it used to, for any budget over 1024)."""
    p = prefill_plan(ref, 8192, 0.8)
    assert not p.fits and p.max_prefill_token_num == 4096
    assert not any(prefill_plan(ref, n, 0.8).fits for n in (2048, 1024, 512, 256))
    assert not any("prefill" in a for a in p.advice)
    assert p.advice  # what does help is still named
    assert not any("without the drafter" in a for a in p.advice)  # 0.8 leaves too little without it too
    alone = plan_memory(
        ref[0],
        None,
        PlanRequest.from_config(
            resolve_config(
                PRESET, flags={"model": {"num_draft_tokens": 0}, "plan": {"max_prefill_token_num": 8192}}
            )
        ),
        cache_max_entry_count=0.8,
    )
    assert not alone.fits


def test_drafter_advice_only_where_the_target_alone_fits(ref5: tuple[Checkpoint, Checkpoint]) -> None:
    """On 21 GiB the weights of both do not fit and the target's alone leave room for the session: the advice
    names the drafter. On 20 GiB the target alone does not fit either, nor does a 131072-token session on
    24 GiB: no drafter advice."""

    def at(**planned: object) -> MemoryPlan:
        return plan_memory(*ref5, PlanRequest.from_config(resolve_config(PRESET, flags={"plan": planned})))

    p = at(gpu_memory="21GiB")
    assert not p.fits and "weights alone" in p.verdict
    assert p.advice[0] == "use a GPU with more memory or a smaller quantization"
    assert any(
        a.startswith("serve without the drafter (frees its weights and KV; fits session_len 8192")
        for a in p.advice
    )
    for p in (at(gpu_memory="20GiB"), at(session_len=131072)):
        assert not p.fits
        assert not any("drafter" in a for a in p.advice), p.advice


def test_batch_scales_kv_and_state(ref: tuple[Checkpoint, Checkpoint]) -> None:
    one = plan_memory(
        *ref, PlanRequest.from_config(resolve_config(PRESET, flags={"plan": {"session_len": 4096}}))
    )
    four = plan_memory(
        *ref,
        PlanRequest.from_config(resolve_config(PRESET, flags={"plan": {"session_len": 4096, "batch": 4}})),
    )
    assert four.state_cache_bytes == QWEN35_27B_STATE_K5 * 6
    # each sequence adds a 0.43 GiB state slot (K = 5): 4096-token sessions fit at batch 2, not at 4
    assert one.max_batch_at_session_len == 2
    assert four.max_session_len < one.max_session_len


def test_without_draft_more_kv(ref: tuple[Checkpoint, Checkpoint]) -> None:
    target, draft = ref
    with_draft = plan_memory(target, draft, PlanRequest.from_config(resolve_config(PRESET)))
    alone = plan_memory(target, None, PlanRequest.from_config(resolve_config(PRESET)))
    assert alone.draft is None and alone.kv_bytes_per_token == 65536
    assert alone.max_session_len > with_draft.max_session_len


def test_no_gpu_and_no_size_is_environment_missing(ref: tuple[Checkpoint, Checkpoint], monkeypatch) -> None:
    from specq.pipeline import hardware

    monkeypatch.setattr(hardware, "list_gpus", lambda: [])
    with pytest.raises(EnvironmentMissing, match="--gpu-memory"):
        plan_memory(ref[0], None, PlanRequest.from_config(resolve_config(None)))


def test_embedded_engine_grows_with_session(tmp_path: Path) -> None:
    d = write_quantized(tmp_path, "awq")
    ck = Checkpoint(d)
    base = {"engine": "embedded", "gpu_memory": "2GiB", "prefill_tokens": 16}  # 1.17 GiB fixed costs
    short = plan_memory(
        ck, None, PlanRequest.from_config(resolve_config(None, flags={"plan": {**base, "session_len": 1024}}))
    )
    long = plan_memory(
        ck, None, PlanRequest.from_config(resolve_config(None, flags={"plan": {**base, "session_len": 2048}}))
    )
    kv_token = 2 * 2 * 2 * 64 * 2  # 2 layers, K+V, 2 KV heads, head_dim 64, fp16
    assert short.kv_bytes_per_token == kv_token
    assert long.kv_cache_bytes - short.kv_cache_bytes >= 1024 * kv_token
    assert short.runtime_reserve_bytes == 0 and short.cache_max_entry_count is None
    assert short.fits and short.max_session_len > 100_000
    assert short.load_overhead_bytes == 0  # LMDeploy's; transformers loads the weight files as they are
    assert (
        short.peak_bytes
        == short.peak_allocated_bytes + short.cuda_context_bytes + short.driver_reserved_bytes
    )
    with pytest.raises(ConfigError, match="int8"):
        plan_memory(
            ck,
            None,
            PlanRequest.from_config(resolve_config(None, flags={"plan": {**base, "kv_dtype": "int8"}})),
        )


def test_plan_json_round_trips(ref: tuple[Checkpoint, Checkpoint]) -> None:
    from specq.pipeline.plan import MemoryPlan

    p = plan_memory(*ref, PlanRequest.from_config(resolve_config(PRESET)))
    again = MemoryPlan.model_validate_json(p.model_dump_json())
    assert again == p and again.rows[-1].item == "predicted peak"


def test_reference_case_states_its_assumptions(ref: tuple[Checkpoint, Checkpoint]) -> None:
    p = plan_memory(*ref, PlanRequest.from_config(resolve_config(PRESET)))
    text = " ".join(p.notes)
    assert "weights estimated from config.json" in text
    assert "sized for 5 draft tokens" in text and "max_batch_size + 2 slots" in text
    assert "fixed costs measured on one H200" in text and "other GPUs and models may differ" in text


def test_qwen35_mtp_plan_counts_its_kv_layer_and_state(ref: tuple[Checkpoint, Checkpoint]) -> None:
    """--method qwen3_5_mtp, K = 3, no drafter checkpoint: KV per token of 16 full-attention layers plus the
    MTP layer (fp16, AWQ target): 2 x 4 KV heads x 256 x 2 B x (16 + 1) = 69632; state sized for K = 3."""
    target, _ = ref
    flags = {"speculative": {"method": "qwen3_5_mtp"}, "model": {"num_draft_tokens": 3}}
    p = plan_memory(target, None, PlanRequest.from_config(resolve_config(PRESET, flags=flags)))
    assert p.kv_bytes_per_token == 2 * 4 * 256 * 2 * (16 + 1) == 69632
    state_k3 = 48 * 10240 * (4 + 3) * 2 + 48 * (1 + 3) * 48 * 128 * 128 * 2
    assert p.state_bytes_per_sequence == state_k3 == 308_871_168
    assert p.state_cache_bytes == 3 * state_k3
    assert p.target.weights_breakdown["mtp"] > 0  # the MTP layer's weights are loaded with the method
