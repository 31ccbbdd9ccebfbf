"""`specq twin --draft-quant awq`: the 4-bit DFlash twin drafter is what `specq quantize DRAFTER --for
speculative` writes from the bf16 twin drafter (names, shapes, dtypes, quantization_config), it keeps the
DFlash contract against the twin target, and `specq plan` counts its bytes from its headers, equal to its
config-only estimate. Tiny configs: each build takes seconds on a CPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specq.pipeline.checkpoint import Checkpoint
from specq.pipeline.twin import TwinRequest, build_twin
from tests.unit.test_twin import qwen35_config, write


@pytest.fixture(scope="module")
def twin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("twin-d4")
    src = write(root / "src", qwen35_config())
    request = TwinRequest(
        config=str(src), out=str(root / "awq"), quant="awq", drafters=("dflash",),
        draft_quants=("bf16", "awq"), draft_layers=2, device="cpu",
    )  # fmt: skip
    build_twin(request)
    return root / "awq"


def test_the_4bit_twin_drafter_keeps_the_contract(twin: Path) -> None:
    from specq.pipeline.draft.contract import check_drafter, quantized_prefixes
    from specq.pipeline.twin.spec import drafter_quantization_config

    target, d4 = Checkpoint(twin / "target"), Checkpoint(twin / "dflash-awq")
    assert check_drafter(d4, target, draft_tokens=15) == []
    assert d4.config["quantization_config"] == drafter_quantization_config()
    assert len(quantized_prefixes(d4.config)) == 2 * 7 + 1  # every projection of both layers, and fc
    report = json.loads((twin / "twin_report.json").read_text())
    parts = {(p["kind"], p["quant"]): p for p in report["drafters"]}
    assert set(parts) == {("dflash", "bf16"), ("dflash", "awq")}
    assert parts[("dflash", "awq")]["path"].endswith("dflash-awq")
    assert parts[("dflash", "awq")]["params"] == parts[("dflash", "bf16")]["params"]  # 8 codes per int32
    assert parts[("dflash", "awq")]["weight_bytes"] < parts[("dflash", "bf16")]["weight_bytes"] / 3


def test_it_is_what_specq_quantize_writes_from_the_bf16_twin_drafter(twin: Path, tmp_path: Path) -> None:
    from specq.pipeline.config.models import QuantizeSection
    from specq.pipeline.quantize import QuantizeRequest, quantize

    out = tmp_path / "quantized"
    result = quantize(QuantizeRequest.from_config(QuantizeSection(), model=twin / "dflash", out=out))
    assert result.drafter is not None and result.drafter.algorithm == "rtn"
    ours, twin4 = Checkpoint(out), Checkpoint(twin / "dflash-awq")
    layout = {n: (t.dtype, t.shape) for n, t in ours.tensors.items()}
    assert layout == {n: (t.dtype, t.shape) for n, t in twin4.tensors.items()}
    keys = ("quantization_config", "torch_dtype", "dtype", "dflash_config", "num_hidden_layers")
    assert {k: ours.config[k] for k in keys} == {k: twin4.config[k] for k in keys}


def test_plan_counts_the_4bit_drafter_from_its_headers_as_its_config_estimates(twin: Path, cli) -> None:
    from specq.pipeline.plan.shapes import estimate_weights, shape_from_config

    d4, d16 = Checkpoint(twin / "dflash-awq"), Checkpoint(twin / "dflash")
    est = estimate_weights(shape_from_config(d4.config), d4.quantization, 2)
    assert est.total == d4.weight_bytes and est.quantized == sum(
        t.nbytes for n, t in d4.tensors.items() if n.endswith((".qweight", ".qzeros", ".scales"))
    )
    code, out, err = cli(
        "plan", str(twin / "target"), "--draft-model", str(d4.path), "--gpu-memory", "24GiB", "--json"
    )
    assert code == 0, err
    plan = json.loads(out)
    assert plan["draft"]["weights_bytes"] == d4.weight_bytes and plan["draft"]["weights_source"] == (
        "safetensors headers"
    )
    assert plan["draft"]["quantization"].startswith("awq")
    assert plan["draft"]["weights_bytes"] < d16.weight_bytes / 3


def test_a_4bit_drafter_without_dflash_is_refused_in_one_line(tmp_path: Path, cli) -> None:
    src = write(tmp_path / "src", qwen35_config())
    code, _, err = cli("twin", str(src), "--out", str(tmp_path / "o"), "--drafter", "mtp", "--draft-quant",
                       "awq", "--device", "cpu")  # fmt: skip
    assert code == 2 and "--drafter dflash" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()
