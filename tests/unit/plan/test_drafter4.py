"""The reference case with its drafter in 4 bit, on paper: the public 5-layer DFlash drafter's config with
the AWQ `quantization_config` that `specq quantize DRAFTER --for speculative` writes fits beside the 27B-AWQ
on a 24 GiB card (in bf16 it does not: test_planner.py), and what `specq plan` recommends for it is what the
RTX 3090 preset `rtx3090-qwen3.5-27b-awq-dflash-awq` ships."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specq.pipeline.checkpoint import Checkpoint
from specq.pipeline.config import resolve_config
from specq.pipeline.plan import PlanRequest, plan_memory
from specq.pipeline.plan.shapes import quantized_linear_bytes

from .reference import QWEN35_27B_DFLASH, write_reference

GIB = 2**30
PRESET4 = "rtx3090-qwen3.5-27b-awq-dflash-awq"
DRAFT_AWQ = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm",
             "modules_to_not_convert": None}  # fmt: skip


@pytest.fixture(scope="module")
def ref4(tmp_path_factory: pytest.TempPathFactory) -> tuple[Checkpoint, Checkpoint, Checkpoint]:
    """The 27B-AWQ target, the public 5-layer drafter (bf16) and the same drafter's config in 4 bit."""
    root = tmp_path_factory.mktemp("ref4")
    t, d = write_reference(root)
    d4 = root / "qwen3.5-27b-dflash-awq"
    d4.mkdir()
    (d4 / "config.json").write_text(json.dumps({**QWEN35_27B_DFLASH, "quantization_config": DRAFT_AWQ}))
    return Checkpoint(t), Checkpoint(d), Checkpoint(d4)


def test_the_4bit_drafters_bytes_are_every_linear_and_fc_in_4_bit(ref4) -> None:
    _, d16, d4 = ref4
    plan = plan_memory(ref4[0], d4, PlanRequest.from_config(resolve_config(PRESET4)))
    assert plan.draft is not None and plan.draft.weights_source == "config estimate"
    q = d4.quantization
    assert q is not None
    h, inter, layers = 5120, 17408, 5
    qd, kvd = 32 * 128, 8 * 128
    linears = [(h, qd), (h, kvd), (h, kvd), (qd, h), (h, inter), (h, inter), (inter, h)]
    expect = layers * sum(quantized_linear_bytes(i, o, q) for i, o in linears)
    expect += quantized_linear_bytes(5 * h, h, q)  # fc over the five target layers' features
    expect += (
        layers * (2 * h + 2 * 128) + 2 * h
    ) * 2  # the norms (two per layer, q/k norms, final, fc's), fp16
    assert plan.draft.weights_bytes == expect
    assert 0.8 * GIB < expect < 0.9 * GIB  # 0.84 GiB, against 3.22 GiB in bf16
    bf16 = plan_memory(ref4[0], d16, PlanRequest.from_config(resolve_config(PRESET4)))
    assert bf16.draft is not None and bf16.draft.weights_bytes > 3.8 * expect


def test_it_fits_24gib_and_the_preset_ships_what_plan_recommends(ref4) -> None:
    cfg = resolve_config(PRESET4)
    assert (cfg.model.draft_tokens, cfg.plan.gpu_memory, cfg.plan.session_len) == (7, "24GiB", 8192)
    rec = plan_memory(ref4[0], ref4[2], PlanRequest.from_config(cfg))
    assert rec.fits, rec.verdict
    assert rec.cache_max_entry_count == cfg.engine.cache_max_entry_count
    assert rec.max_prefill_token_num == cfg.plan.max_prefill_token_num
    assert rec.max_session_len >= 8192 and rec.peak_bytes <= 24 * GIB
    for k in cfg.bench.draft_tokens:  # every k the preset's sweep serves fits at its settings
        c = resolve_config(PRESET4, flags={"model": {"num_draft_tokens": k}})
        p = plan_memory(ref4[0], ref4[2], PlanRequest.from_config(c),
                        cache_max_entry_count=cfg.engine.cache_max_entry_count)  # fmt: skip
        assert p.fits and p.max_session_len >= 8192, (k, p.verdict)
    bf16 = plan_memory(ref4[0], ref4[1], PlanRequest.from_config(cfg))
    assert not bf16.fits  # the same drafter in bf16 does not


def test_the_cli_says_it_fits_with_the_presets_settings(cli, ref4) -> None:
    t, _, d4 = ref4
    code, out, err = cli("plan", str(t.path), "--draft-model", str(d4.path), "--config", PRESET4, "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["fits"] is True and doc["draft"]["quantization"].startswith("awq")
    assert "cache_max_entry_count 0.45, max_prefill_token_num 512" in doc["verdict"]
    assert Path(doc["draft"]["path"]) == d4.path
