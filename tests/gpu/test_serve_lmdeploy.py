"""LMDeploy launch on a real GPU (run by `make gpu-check` on the H200): the toy target served by the PyTorch
engine through `create_engine` answers /v1/models and a completion; a speculative launch is refused by
preflight with the FlashAttention-3 message when FA3 is absent (it is absent on the lent H200)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from specq.pipeline import hardware
from specq.pipeline.config.models import SpecqConfig
from specq.pipeline.errors import EnvironmentMissing
from specq.pipeline.serve import ServeRequest, create_engine

pytestmark = pytest.mark.gpu

lmdeploy_missing = pytest.mark.skipif(not hardware.module_present("lmdeploy"), reason="needs lmdeploy 0.18")


@lmdeploy_missing
def test_pytorch_engine_serves_toy_target(toy_pair, tmp_path: Path) -> None:
    target = toy_pair.target
    cfg = SpecqConfig.model_validate(
        {
            "model": {"model_path": str(target), "model_name": "toy"},
            "engine": {"engine": "lmdeploy", "backend": "pytorch", "eager_mode": True, "session_len": 2048,
                       "cache_max_entry_count": 0.2, "ready_timeout_s": 400},
        }
    )  # fmt: skip
    engine = create_engine(ServeRequest.from_config(cfg), tmp_path)
    with engine:
        models = httpx.get(f"{engine.base_url}/v1/models", timeout=30).json()
        assert [m["id"] for m in models["data"]] == ["toy"]
        r = httpx.post(
            f"{engine.base_url}/v1/completions",
            json={"model": "toy", "prompt": "def main(", "max_tokens": 16, "ignore_eos": True},
            timeout=120,
        )
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["completion_tokens"] == 16
        assert "lmdeploy:generation_tokens_total" in httpx.get(engine.metrics_url, timeout=30).text


@lmdeploy_missing
def test_speculative_launch_refused_without_fa3(tmp_path: Path, toy_pair) -> None:
    if hardware.flash_attention_3() is None:
        pytest.skip("FlashAttention-3 is installed here: the refusal cannot happen")
    target = toy_pair.target
    cfg = SpecqConfig.model_validate(
        {
            "model": {"model_path": str(target), "num_draft_tokens": 2},
            "engine": {"engine": "lmdeploy", "backend": "pytorch"},
            "speculative": {"method": "qwen3_5_mtp"},
        }
    )
    engine = create_engine(ServeRequest.from_config(cfg), tmp_path)
    with pytest.raises(EnvironmentMissing, match="FlashAttention-3.*hopper/"):
        engine.start()
    assert engine.pid is None  # refused before anything was launched
