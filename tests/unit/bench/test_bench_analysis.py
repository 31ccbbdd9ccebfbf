"""Aggregates, lossless check, roofline, best-k and NVML summaries."""

from __future__ import annotations

import json
import struct

import pytest

from specq.pipeline.bench.analysis import (
    aggregate,
    lossless,
    predict_best_k,
    roofline,
    weight_bytes_per_token,
)
from specq.pipeline.bench.telemetry import TelemetrySampler, summarize
from specq.pipeline.report.models import Acceptance, RequestRecord, Run, Stats, TelemetrySample


def rec(i: str, text: str, times, tokens, ok=True) -> RequestRecord:
    return RequestRecord(
        id=i,
        category="c",
        ok=ok,
        output_text=text,
        chunk_times=times,
        chunk_tokens=tokens,
        ttft_s=times[0] if times else None,
        e2e_s=(times[-1] if times else 1.0),
        output_tokens=sum(tokens),
        error=None if ok else "boom",
    )


def test_aggregate_counts_tokens_and_errors():
    rs = [
        rec("a", "x", [0.1, 0.2, 0.3], [1, 3, 2]),
        rec("b", "y", [0.1, 0.3], [1, 4]),
        rec("c", "", [], [], ok=False),
    ]
    a = aggregate(rs, wall_s=2.0)
    assert (a.requests, a.ok, a.errors) == (3, 2, 1)
    assert a.error_rate == pytest.approx(1 / 3)
    assert a.output_tokens == 11 and a.output_tokens_per_s == pytest.approx(5.5)
    assert a.itl_s.n == 9  # tokens after each request's first chunk
    assert a.tokens_per_chunk == pytest.approx((3 + 2 + 4) / 3)


def test_stats_percentiles():
    s = Stats.of([float(x) for x in range(1, 101)])
    assert s.n == 100 and s.p50 == pytest.approx(50.5) and s.max == 100.0


def run_with(texts: dict[str, str], **kw) -> Run:
    return Run(
        label=kw.pop("label", "x"),
        draft_tokens=kw.pop("k", 0),
        concurrency=1,
        requests=[rec(i, t, [0.1], [1]) for i, t in texts.items()],
        **kw,
    )


def test_lossless_exact_and_divergent():
    base = run_with({"a": "def f(x):", "b": "return 1"})
    same = run_with({"a": "def f(x):", "b": "return 1"})
    res = lossless(base, same)
    assert res is not None and res.passed and res.exact_match_rate == 1.0 and res.unit == "chars"
    diff = run_with({"a": "def f(x):", "b": "return 2"})
    res = lossless(base, diff)
    assert res is not None and not res.passed and res.exact_matches == 1
    assert res.mismatches[0]["id"] == "b" and res.mismatches[0]["first_divergence"] == 7


def test_best_k_uses_the_shared_speedup_model():
    base = Run(label="baseline", draft_tokens=0, concurrency=1, baseline=True)
    base.aggregate.tpot_s = Stats(n=1, mean=0.010)
    runs = []
    for k, tpot in ((3, 0.0060), (4, 0.0058)):
        r = Run(label=f"k={k}", draft_tokens=k, concurrency=1, speedup=0.010 / tpot)
        per_pos = [0.8, 0.6, 0.4, 0.2][:k]
        r.acceptance = Acceptance(
            source="lmdeploy:",
            drafts=100,
            draft_tokens=100 * k,
            accepted_tokens=100 * sum(per_pos),
            acceptance_length=1 + sum(per_pos),
            per_position=per_pos,
        )
        r.aggregate.tpot_s = Stats(n=1, mean=tpot)
        runs.append(r)
    bk = predict_best_k(base, runs)
    assert bk is not None and bk.recommended_k in (1, 2, 3, 4)
    measured = {row["k"]: row for row in bk.rows}
    # the fitted cost line passes exactly through two points, so prediction = measurement there
    assert measured[3]["predicted_speedup"] == pytest.approx(0.010 / 0.0060, rel=1e-3)
    assert measured[4]["predicted_speedup"] == pytest.approx(0.010 / 0.0058, rel=1e-3)


def write_safetensors(path, tensors: dict[str, tuple[str, list[int]]]) -> None:
    header, off = {}, 0
    for name, (dtype, shape) in tensors.items():
        n = 1
        for d in shape:
            n *= d
        size = n * {"F16": 2, "I32": 4}[dtype]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + size]}
        off += size
    h = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(h)) + h + b"\0" * off)


def test_roofline_from_checkpoint_bytes(tmp_path):
    (tmp_path / "config.json").write_text(
        json.dumps({"architectures": ["Qwen3ForCausalLM"], "tie_word_embeddings": False})
    )
    write_safetensors(
        tmp_path / "model.safetensors",
        {
            "model.embed_tokens.weight": ("F16", [100, 8]),  # a row gather: not read per token
            "model.layers.0.mlp.up_proj.weight": ("F16", [16, 8]),
            "lm_head.weight": ("F16", [100, 8]),
        },
    )
    assert weight_bytes_per_token(tmp_path) == (16 * 8 + 100 * 8) * 2
    r = roofline(tmp_path, decode_tokens_per_s=1e6, bandwidth_gbps=1.856, source="--gpu-bandwidth")
    assert r is not None and r.ceiling_tokens_per_s == pytest.approx(1e6) and r.fraction == pytest.approx(1.0)
    assert roofline(tmp_path, 10.0, None, "unknown") is None


def test_nvml_unavailable_is_recorded_not_fatal():
    s = TelemetrySampler(0.01)
    s.start()
    s.stop()
    t = s.result(100)
    assert t.status == "ok" or t.status.startswith("unavailable")


def test_telemetry_summary_energy_counter_and_integral():
    samples = [
        TelemetrySample(
            t=i * 0.1,
            gpu=0,
            power_w=100.0,
            energy_j=i * 10.0,
            mem_used_bytes=i,
            throttle_reasons=0x4 if i == 2 else 0,
        )
        for i in range(5)
    ]
    t = summarize("ok", 0.1, [0], samples, output_tokens=20, accepted_tokens=10)
    assert t.energy_j == 40.0 and t.energy_source == "counter" and t.joules_per_output_token == 2.0
    assert (
        t.joules_per_accepted_token == 4.0
        and t.mem_peak_bytes == 4
        and t.throttle_reasons_seen == ["sw_power_cap"]
    )
    for s in samples:
        s.energy_j = None
    t = summarize("ok", 0.1, [0], samples, output_tokens=4)
    assert t.energy_source == "power-integral" and t.energy_j == pytest.approx(40.0)


def _spec_run(k: int, tpot: float, per_pos: list[float]) -> Run:
    r = Run(label=f"k={k}", draft_tokens=k, concurrency=1, speedup=0.010 / tpot)
    r.acceptance = Acceptance(
        source="lmdeploy:", drafts=100, draft_tokens=100 * k, accepted_tokens=100 * sum(per_pos),
        acceptance_length=1 + sum(per_pos), per_position=per_pos,
    )  # fmt: skip
    r.aggregate.tpot_s = Stats(n=1, mean=tpot)
    return r


def test_best_k_from_one_k_takes_the_slope_of_the_step_cost_curve_at_the_targets_size():
    """One measured k fixes the height of the cost line; its slope in k is the measured curve's at the
    target's size (the 6.96 B point: 1.61 at k = 7, 1.69 at k = 15), not a constant."""
    from specq.pipeline.speedup import STEP_COST_CURVE

    base = Run(label="baseline", draft_tokens=0, concurrency=1, baseline=True)
    base.aggregate.tpot_s = Stats(n=1, mean=0.010)
    per_pos = [0.9, 0.8, 0.6, 0.4, 0.25, 0.15, 0.1]
    run = _spec_run(7, 0.010 * 1.61 / (1 + sum(per_pos)), per_pos)  # a step that costs 1.61 plain steps
    big = STEP_COST_CURVE.at(13_920_000_000)
    small = STEP_COST_CURVE.at(2_840_000_000)
    at_big = predict_best_k(base, [run], weight_bytes=13_920_000_000)
    at_small = predict_best_k(base, [run], weight_bytes=2_840_000_000)
    assert at_big is not None and at_small is not None
    assert at_big.step_cost_per_token == pytest.approx(big.per_token)
    assert at_small.step_cost_per_token == pytest.approx(small.per_token)
    assert at_big.step_cost_fixed + 7 * at_big.step_cost_per_token == pytest.approx(1.61, rel=1e-6)
    assert "step-cost curve" in (at_big.step_cost_basis or "") and "13.92 GB" in (
        at_big.step_cost_basis or ""
    )
    # the same measurement, two sizes: at 6.96 B (slope 0.01) another draft token is nearly free and the
    # widest k wins; at 1.42 B (slope 0.064) the late, rarely accepted positions do not pay for themselves
    assert at_big.recommended_k == 7
    assert at_small.recommended_k == 5


def test_best_k_from_two_ks_is_measured_only():
    base = Run(label="baseline", draft_tokens=0, concurrency=1, baseline=True)
    base.aggregate.tpot_s = Stats(n=1, mean=0.010)
    runs = [_spec_run(3, 0.0060, [0.8, 0.6, 0.4]), _spec_run(4, 0.0058, [0.8, 0.6, 0.4, 0.2])]
    a = predict_best_k(base, runs, weight_bytes=2_840_000_000)
    b = predict_best_k(base, runs, weight_bytes=13_920_000_000)
    assert a is not None and b is not None and a.step_cost_basis == "measured at k = 3, 4"
    assert (a.step_cost_fixed, a.step_cost_per_token) == (b.step_cost_fixed, b.step_cost_per_token)
