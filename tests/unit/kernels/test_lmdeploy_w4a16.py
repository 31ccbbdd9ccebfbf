"""specq's W4A16 linear as LMDeploy builds one (pipeline/kernels/lmdeploy_w4a16.py): which gate/up linears
store silu(gate) * up themselves (`fuse_silu_mul`). Their weights and answers under Triton's interpreter:
tests/unit/engines/test_lmdeploy_w4a16_patch.py and tests/unit/kernels/test_w4a16.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from specq.pipeline.kernels import lmdeploy_w4a16 as L


def gate_up(out_features: int = 64, lora: bool = False) -> SimpleNamespace:
    impl = L.SpecqAwqLinearW4A16Impl(256, out_features, 4, 128)
    return SimpleNamespace(impl=impl, lora_adapters={"a": object()} if lora else {})


def test_off_unless_asked(monkeypatch) -> None:
    monkeypatch.delenv(L.FUSE_SILU_ENV, raising=False)
    linear = gate_up()
    assert not L.fuse_silu_mul(linear, 1) and not linear.impl.silu_mul


def test_asked_on_one_gpu_the_linear_is_marked_before_its_weights_load(monkeypatch) -> None:
    monkeypatch.setenv(L.FUSE_SILU_ENV, "1")
    linear = gate_up()
    assert L.fuse_silu_mul(linear, 1) and linear.impl.silu_mul


@pytest.mark.parametrize(
    ("linear", "tp_world", "why"),
    [
        (gate_up(), 2, "tensor parallelism splits gate and up by rank"),
        (gate_up(lora=True), 1, "LoRA adds to gate_up's own answer"),
        (gate_up(out_features=40), 1, "N not divisible by 16"),
        (SimpleNamespace(impl=object(), lora_adapters={}), 1, "LMDeploy's own linear"),
        (SimpleNamespace(lora_adapters={}), 1, "a 16-bit linear has no W4A16 impl"),
    ],
)
def test_left_to_lmdeploys_activation_where_the_linear_cannot_store_it(
    monkeypatch, linear: SimpleNamespace, tp_world: int, why: str
) -> None:
    monkeypatch.setenv(L.FUSE_SILU_ENV, "1")
    assert not L.fuse_silu_mul(linear, tp_world), why
    assert not getattr(getattr(linear, "impl", None), "silu_mul", False)
