"""Every stage's request is frozen and built once from the resolved config: what the command typed reaches
the request, and a missing required input is a usage error (exit 2) before any work."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from specq.pipeline.config import resolve_config
from specq.pipeline.convert import ConvertRequest
from specq.pipeline.draft import DraftEvalRequest, DraftTrainRequest
from specq.pipeline.errors import UsageError
from specq.pipeline.fa3 import Fa3Request
from specq.pipeline.plan import PlanRequest
from specq.pipeline.quantize import QuantizeRequest
from specq.pipeline.toy import ToyRequest


def test_requests_are_built_from_the_resolved_config() -> None:
    cfg = resolve_config(
        None,
        flags={
            "model": {"model_path": "m", "draft_model_path": "d", "num_draft_tokens": 5},
            "quantize": {"model": "m", "out": "q", "calib": "c.jsonl", "for": "plain"},
            "convert": {"engine_check": True},
            "plan": {"gpu_memory": "24GiB"},
            "draft": {"steps": 7},
        },
    )
    q = QuantizeRequest.from_config(cfg)
    assert (q.model, q.out, q.calib, q.target) == ("m", "q", "c.jsonl", "plain")
    assert q.section.model_dump() == cfg.quantize.model_dump()
    c = ConvertRequest.from_config(cfg)
    assert (c.model, c.draft_model, c.draft_tokens, c.engine_check) == ("m", "d", 5, True)
    p = PlanRequest.from_config(cfg)
    assert (p.model, p.draft_model, p.draft_tokens, p.plan.gpu_memory) == ("m", "d", 5, "24GiB")
    t = DraftTrainRequest.from_config(cfg, target="m", out="o")
    assert (t.target, t.out, t.steps) == ("m", "o", 7)
    e = DraftEvalRequest.from_config(cfg, target="m", draft="d", suite="code")
    assert (e.draft, e.suite, e.prompts, e.steps) == ("d", "code", None, 7)


def test_no_speculation_checks_no_draft_token_count() -> None:
    cfg = resolve_config(None, flags={"model": {"model_path": "m"}})
    assert ConvertRequest.from_config(cfg).draft_tokens is None


@pytest.mark.parametrize(
    "request_",
    [
        QuantizeRequest(model="m", out="o"),
        ConvertRequest(model="m"),
        PlanRequest(model="m"),
        DraftTrainRequest(target="m", out="o"),
        DraftEvalRequest(target="m", draft="d"),
        ToyRequest(),
        Fa3Request(source="fa"),
    ],
    ids=lambda r: type(r).__name__,
)
def test_requests_are_frozen(request_) -> None:
    field = next(iter(type(request_).model_fields))
    with pytest.raises(ValidationError, match="frozen"):
        setattr(request_, field, getattr(request_, field))


def test_missing_output_directory_is_a_usage_error() -> None:
    cfg = resolve_config(None, flags={"quantize": {"model": "m"}})
    with pytest.raises(UsageError, match="--out"):
        QuantizeRequest.from_config(cfg)
    with pytest.raises(UsageError, match="--out"):
        DraftTrainRequest.from_config(cfg, target="m", out=None)
