"""The serve stage stops a speculative launch on a GPTQ target before start-up with convert's repack advice
(as `specq convert` decides), through `pytorch_engine_refusal`; an AWQ target with a bf16 drafter gets an
fp16 copy planned."""

from __future__ import annotations

import pytest

from specq.pipeline.config import SpecqConfig
from specq.pipeline.errors import UsageError


def _cfg(target, draft) -> SpecqConfig:
    return SpecqConfig.model_validate(
        {
            "model": {"model_path": str(target), "draft_model_path": str(draft), "num_draft_tokens": 4},
            "engine": {"engine": "lmdeploy", "backend": "pytorch"},
        }
    )


def test_speculative_serve_on_gptq_refused_with_repack_advice(make_ckpt, make_draft) -> None:
    from specq.pipeline.serve.spec import ServeRequest, resolve_spec

    target = make_ckpt("gptq", name="tgt")
    with pytest.raises(UsageError, match=r"Unsupported quant method: gptq.*--to awq --out .*tgt-awq"):
        resolve_spec(ServeRequest.from_config(_cfg(target, make_draft("dflash", dtype="float16"))))


def test_awq_target_bf16_drafter_gets_fp16_copy(make_ckpt, make_draft, tmp_path, monkeypatch) -> None:
    from specq.pipeline.convert.st_io import read_tensors
    from specq.pipeline.serve.spec import ServeRequest, resolve_spec, write_fp16_copy

    monkeypatch.setenv("SPECQ_CACHE", str(tmp_path / "cache"))
    spec = resolve_spec(
        ServeRequest.from_config(_cfg(make_ckpt("awq"), make_draft("dflash", dtype="bfloat16")))
    )
    assert spec.draft_fp16 is not None
    write_fp16_copy(spec)
    t, _ = read_tensors(spec.draft_fp16 / "model.safetensors")
    assert {x.dtype for x in t.values()} == {"F16"}
