"""`specq bench` on a CUDA GPU (skipped without one): the embedded engine on the GPU with a target/draft
pair, k = 0 and 3, NVML telemetry sampled (non-empty, energy per token), the roofline fraction of the
baseline from NVML's bandwidth, and the client's tokens agreeing with the server's counters."""

from __future__ import annotations

import pytest

from specq.pipeline.bench import BenchRequest
from specq.pipeline.bench.runner import run_bench
from specq.pipeline.config.models import SpecqConfig

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def gpu_pair():
    from specq.pipeline.toy import ToyRequest, build_toy_pair

    pair = build_toy_pair(ToyRequest(size="medium"))
    return pair.target, pair.draft


def test_embedded_cuda_sweep_with_telemetry_and_roofline(gpu_pair, tmp_path):
    target, draft = gpu_pair
    cfg = SpecqConfig.model_validate(
        {
            "model": {"model_path": str(target), "draft_model_path": str(draft)},
            "engine": {"engine": "embedded", "device": "cuda", "ready_timeout_s": 600},
            "bench": {"draft_tokens": [3], "requests": 6, "max_tokens": 128, "warmup": 1, "suite": "code",
                      "out": str(tmp_path / "out")},
        }
    )  # fmt: skip
    report = run_bench(BenchRequest.from_config(cfg))
    assert [r.status for r in report.runs] == ["ok", "ok"], [r.reason for r in report.runs]
    base, spec = report.runs
    for run in report.runs:
        tel = run.telemetry
        assert tel.status == "ok" and tel.samples, tel.status
        assert tel.mem_peak_bytes and tel.power_mean_w and tel.energy_j and tel.joules_per_output_token
        assert run.server is not None and run.server.generation_tokens == run.aggregate.output_tokens
    assert base.roofline is not None and 0 < base.roofline.fraction < 1.5
    assert spec.acceptance is not None and spec.lossless is not None
    print(
        f"baseline {base.aggregate.output_tokens_per_s:.1f} tok/s, roofline {base.roofline.fraction:.3f}; "
        f"k=3 {spec.aggregate.output_tokens_per_s:.1f} tok/s, speedup {spec.speedup:.2f}, "
        f"τ {spec.acceptance.acceptance_length:.2f}, lossless {spec.lossless.exact_match_rate:.0%}, "
        f"server decode tok/s diff {base.server.rate_rel_diff if base.server else None}"
    )
