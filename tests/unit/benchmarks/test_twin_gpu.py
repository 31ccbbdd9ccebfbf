"""The twin scenario's arithmetic and its contract with specq: the emulated memory fraction, the peaks
set against the plan for the same draft-token count, and a step-cost curve file that bench and draft eval
read (`SPECQ_STEP_COST_CURVE`)."""

import json

import pytest

from benchmarks.scenarios.twin import (
    QWEN3_SHAPES,
    STEPS,
    MemoryTimeline,
    curve_document,
    decode_rate,
    drafter_comparison,
    drafter_name,
    emulated_ratio,
    long_prompt_tokens,
    markdown,
    parse_waves,
    peaks_vs_plan,
    plan_terms,
    qwen3_config,
    twin27_flags,
    twin_size,
    wave_points,
)


def test_the_emulated_ratio_leaves_this_gpu_the_cards_kv_cache():
    card = {"kv_cache_bytes": 4 * 2**30}
    here = {"free_after_weights_bytes": 100 * 2**30}
    assert emulated_ratio(card, here) == pytest.approx(0.04)
    assert emulated_ratio({"kv_cache_bytes": 0}, here) is None  # the card holds no cache: nothing to emulate
    assert emulated_ratio(card, {"free_after_weights_bytes": 2**30}) == 0.99  # LMDeploy's range


def test_peaks_are_set_against_the_plan_for_their_draft_tokens():
    report = {"runs": [
        {"label": "baseline", "draft_tokens": 0, "status": "ok", "telemetry": {"mem_peak_bytes": 20 * 2**30}},
        {"label": "k=3", "draft_tokens": 3, "status": "ok", "telemetry": {"mem_peak_bytes": 22 * 2**30}},
    ]}  # fmt: skip
    rows = peaks_vs_plan({"peak_bytes": 21 * 2**30}, report, 3)
    assert [r["run"] for r in rows] == ["k=3"] and rows[0]["rel_diff"] == pytest.approx(-1 / 22, abs=1e-4)
    text = markdown({"memory": {"m": {"ratio": 0.04, "gpu_memory": "24GiB", "rows": rows}}, "curve": []})
    assert "| k=3 | 3 | ok | 22.00 | 21.00 | -4.5% |" in text


def test_the_curve_file_is_what_specq_predicts_with(tmp_path, monkeypatch):
    from specq.pipeline.speedup import load_curve

    reports = {
        0: _url_report(0, 200.0, None),
        7: _url_report(7, 125.0, 1.0),
        15: _url_report(15, 200 / 1.7, 1.0),
    }
    reports[3] = _url_report(3, 20.0, 1.0)
    reports[3]["runs"][0]["status"] = "failed"  # a failed run gives no point
    points = wave_points("twin", 14 * 10**9, reports)
    assert [(p["k"], p["cost"]) for p in points] == [(7, 1.6), (15, 1.7)]
    path = tmp_path / "step_cost_curve.json"
    path.write_text(json.dumps(curve_document(points, "NVIDIA H200", "abc1234")))
    monkeypatch.setenv("SPECQ_STEP_COST_CURVE", str(path))
    curve = load_curve()
    assert curve.commit == "abc1234" and curve.at(14 * 10**9)(15) == pytest.approx(1.7)


def test_curve_twins_have_the_public_qwen3_layer_shapes(tmp_path):
    from specq.pipeline.twin.spec import read_source, target_tensors

    for size, expect in (("1.7b", 1.42e9), ("8b", 6.96e9)):  # the layers of the measured 1.42 B and 6.96 B
        cfg = qwen3_config(size)
        assert (cfg["hidden_size"], cfg["num_hidden_layers"]) == QWEN3_SHAPES[size][:2]
        path = tmp_path / f"{size}.json"
        path.write_text(json.dumps(cfg))
        params = sum(t.numel for t in target_tensors(read_source(path), "bf16"))
        assert params == pytest.approx(expect, rel=0.01)


def test_waves_name_their_sizes_and_draft_token_counts():
    assert parse_waves("27b:0,3,1;1.7b:0,7+8b:7,0") == [
        [("27b", [0, 1, 3])],
        [("1.7b", [0, 7]), ("8b", [0, 7])],
    ]
    for bad in ("70b:0,3", "8b:0,16", "8b:"):
        with pytest.raises(ValueError):
            parse_waves(bad)


def _url_report(k: int, server_rate: float, tau: float | None) -> dict:
    """A `specq bench --url` report as the waves read it: one run, its trial's server decode rate, τ."""
    from specq.pipeline.report.models import Acceptance, Consistency, Run, Trial

    run = Run(
        label="external", draft_tokens=k, concurrency=1, engine="external",
        trials=[Trial(index=0, consistency=Consistency(tolerance=0.1,
                                                       server_decode_tokens_per_s=server_rate))],
        acceptance=Acceptance(source="lmdeploy:", drafts=100, draft_tokens=100 * k, accepted_tokens=0,
                              acceptance_length=tau) if tau else None,
    )  # fmt: skip
    return {"runs": [run.model_dump(mode="json")]}


def test_wave_points_are_tau_over_the_decode_rate_speedup_against_the_same_sizes_plain_server():
    reports = {
        0: _url_report(0, 200.0, None),
        7: _url_report(7, 125.0, 1.0),
        15: _url_report(15, 100.0, 1.25),
    }
    points = wave_points("twin", 14 * 10**9, reports)
    assert [(p["k"], p["cost"]) for p in points] == [(7, 1.6), (15, 2.5)]
    assert points[0]["source"] == "server" and points[1]["decode_speedup"] == 0.5
    assert decode_rate(reports[0]) == 200.0
    assert wave_points("twin", 1, {7: reports[7]}) == []  # no plain server of that size: no point


def test_the_memory_runs_long_prompt_fills_the_prefill_budget(tmp_path):
    """One prompt of the card's prefill budget (less a margin) in the twin's own tokenizer, so the run
    reaches the logits reserve and activations the plan counts; three short ones beside it."""
    from benchmarks.scenarios.twin import write_prompts
    from specq.pipeline.twin.tokenizer import write_tokenizer

    cfg = {
        **qwen3_config("0.6b"),
        "vocab_size": 512,
        "eos_token_id": 500,
        "pad_token_id": 500,
        "bos_token_id": 500,
    }
    write_tokenizer(cfg, 512, tmp_path)
    path = tmp_path / "prompts.jsonl"
    n = write_prompts(tmp_path, 1000, path)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(rows) == 4 and all("prompt" in r for r in rows)
    assert 950 <= n <= 1000


def test_the_memory_timeline_splits_the_peak_by_process():
    """What the H200 showed (2026-12-03): 615 MiB used with no process, a short-lived process with its own
    CUDA context, then the engine's; the device peak is the engine's plus what was there before."""
    tl = MemoryTimeline()
    mib = 2**20
    tl.samples = [
        [0.0, 615 * mib, {}],
        [50.8, 1227 * mib, {"1105": 612 * mib}],
        [71.1, 1203 * mib, {"1084": 588 * mib}],
        [170.6, 23790 * mib, {"1084": 23166 * mib}],
        [191.9, 615 * mib, {}],
    ]
    s = tl.summary()
    assert s["device_first_bytes"] == 615 * mib and s["device_peak_bytes"] == 23790 * mib
    assert s["process_peak_bytes"] == {"1105": 612 * mib, "1084": 23166 * mib}
    assert MemoryTimeline().summary() == {}  # no NVML here: no samples, no figures
    text = markdown({"memory": {"m": {"ratio": 0.01, "gpu_memory": "24GiB", "rows": [], "timeline": s}}})
    assert "device 0.60 GiB used before the server, peak 23.23 GiB" in text and "pid 1084 22.62" in text


def test_the_timeline_samples_device_and_process_memory_through_nvml(monkeypatch):
    """bench's NVML sampler carries the timeline: one sample as it starts and one as it stops, each the
    device's used memory and every compute process's (a fake NVML stands in for the GPU)."""
    import sys
    from types import SimpleNamespace as NS

    used = iter(range(600, 10**6, 100))
    procs = [NS(pid=7, usedGpuMemory=500), NS(pid=8, usedGpuMemory=None)]
    nv = NS(
        nvmlInit=lambda: None, nvmlDeviceGetCount=lambda: 1, nvmlDeviceGetHandleByIndex=lambda i: f"gpu{i}",
        nvmlDeviceGetMemoryInfo=lambda h: NS(used=next(used)),
        nvmlDeviceGetComputeRunningProcesses=lambda h: procs,
    )  # fmt: skip
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    with MemoryTimeline(interval_s=3600) as tl:
        pass
    assert [s[1] for s in tl.samples] == [600, 700]
    assert all(s[2] == {"7": 500, "8": 0} for s in tl.samples)
    assert tl.summary()["device_peak_bytes"] == 700


def test_plan_terms_keep_what_the_timeline_is_set_against():
    plan = {"peak_bytes": 5, "kv_cache_bytes": 2, "weights_bytes": 1, "verdict": "fits", "rows": []}
    terms = plan_terms(plan)
    assert terms["peak_bytes"] == 5 and terms["kv_cache_bytes"] == 2 and "verdict" not in terms
    assert terms["cuda_graph_bytes"] is None  # a term the plan lacks stays visible as missing


def test_the_long_prompt_fills_small_prefill_budgets_too():
    """The card's plan for the 27B + DFlash halves the prefill budget to 256 tokens: the long prompt must
    still have tokens (an empty one killed the engine on the H200, 2026-12-03)."""
    assert long_prompt_tokens(4096) == 3840  # the 27B + MTP run's prompt
    assert long_prompt_tokens(256) == 240
    assert all(0 < long_prompt_tokens(p) < p for p in (64, 128, 256, 1024, 8192))


def test_the_27b_twin_carries_both_dflash_drafters_and_a_wave_serves_the_4bit_one():
    """`twins` builds the 5-layer DFlash drafter in bf16 and in 4 bit beside the 27B-AWQ twin; a wave's
    `27b-awqd` servers speculate with TWIN/dflash-awq on the 27B target, and memory-dflash4 is a step."""
    flags = twin27_flags("cuda")
    assert flags[flags.index("--quant") + 1] == "awq" and flags[flags.index("--draft-layers") + 1] == "5"
    quants = [flags[i + 1] for i, f in enumerate(flags) if f == "--draft-quant"]
    assert quants == ["bf16", "awq"] and "dflash" in flags and "mtp" in flags
    assert STEPS.index("memory-dflash") < STEPS.index("memory-dflash4") < STEPS.index("curve")
    assert parse_waves("27b:0,7,15+27b-awqd:15,7") == [[("27b", [0, 7, 15]), ("27b-awqd", [7, 15])]]
    assert (twin_size("27b-awqd"), drafter_name("27b-awqd")) == ("27b", "dflash-awq")
    assert (twin_size("8b"), drafter_name("8b"), drafter_name("27b")) == ("8b", "dflash", "dflash")


def test_the_4bit_drafters_step_cost_is_set_against_the_bf16_ones():
    """A `27b-awqd` size has no plain server of its own: its points are against the 27B's k = 0 run. The
    comparison pairs each k; the curve file keeps the bf16 drafter's points only."""
    plain = _url_report(0, 40.0, None)
    bf16 = wave_points("twin", 19 * 10**9, {0: plain, 7: _url_report(7, 40 / 1.2, 1.0)})
    awq = wave_points("twin, 4-bit", 19 * 10**9, {7: _url_report(7, 40 / 1.1, 1.0)}, base=plain)
    assert [(p["k"], p["cost"]) for p in bf16] == [(7, 1.2)] and [(p["k"], p["cost"]) for p in awq] == [
        (7, 1.1)
    ]
    assert wave_points("twin", 1, {7: _url_report(7, 30.0, 1.0)}) == []  # no plain run at all: no point
    points = [{**p, "drafter": "bf16"} for p in bf16] + [{**p, "drafter": "awq"} for p in awq]
    rows = drafter_comparison(points)
    assert rows == [{"weight_bytes": 19 * 10**9, "k": 7, "bf16_cost": 1.2, "awq_cost": 1.1, "ratio": 0.9167}]
    text = markdown({"curve": points})
    assert (
        "4-bit DFlash drafter against the bf16 one" in text and "| 19.00 | 7 | 1.20 | 1.10 | 0.917 |" in text
    )
    doc = curve_document(points, "NVIDIA H200", "abc")
    assert [p["cost"] for p in doc["curve"]["points"]] == [1.2]


def test_the_4bit_drafters_memory_run_is_tabled_like_the_others():
    report = {"runs": [{"label": "k=7", "draft_tokens": 7, "status": "ok",
                        "telemetry": {"mem_peak_bytes": 23 * 2**30}}]}  # fmt: skip
    rows = peaks_vs_plan({"peak_bytes": 23.46 * 2**30}, report, 7)
    text = markdown({"memory": {"27b-awq-dflash4": {"ratio": 0.05, "gpu_memory": "24GiB", "rows": rows}}})
    assert "## Memory: 27b-awq-dflash4" in text and "| k=7 | 7 | ok | 23.00 | 23.46 | +2.0% |" in text
