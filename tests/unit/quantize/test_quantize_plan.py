"""Method defaults per use, TurboMind rules, the backend registry and the CLI's one-line refusals; none of
these load a model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specq.pipeline.config.models import QuantizeSection
from specq.pipeline.engines.turbomind import turbomind_problems
from specq.pipeline.errors import UsageError
from specq.pipeline.quantize import plan, resolve_method
from specq.pipeline.quantize.backends import BACKENDS, resolve_backend


def test_method_follows_the_intended_use() -> None:
    assert resolve_method(QuantizeSection()) == ("awq", False)
    assert resolve_method(QuantizeSection.model_validate({"for": "plain"})) == ("gptq", True)
    assert resolve_method(QuantizeSection(method="gptq")) == ("gptq", True)


@pytest.mark.parametrize(
    ("method", "bits", "group", "sym", "desc_act", "reason"),
    [
        ("gptq", 8, 128, True, False, "8-bit gptq"),
        ("gptq", 4, 256, True, False, "group_size 256"),
        ("awq", 4, 64, False, False, "group_size 64"),
        ("gptq", 4, 128, False, False, "asymmetric"),
        ("gptq", 4, 128, True, True, "desc_act"),
        ("awq", 4, 128, True, False, "zero points"),
    ],
)
def test_turbomind_refusals(
    method: str, bits: int, group: int, sym: bool, desc_act: bool, reason: str
) -> None:
    assert any(reason in p for p in turbomind_problems(method, bits, group, sym, desc_act))


@pytest.mark.parametrize("group", [128])  # LMDeploy 0.18 converter.py: AWQ/GPTQ verified at 128 only
def test_turbomind_accepts_its_group_sizes(group: int) -> None:
    assert turbomind_problems("gptq", 4, group, True, False) == []
    assert turbomind_problems("awq", 4, group, False, False) == []


def test_plan_refuses_up_front_or_warns_with_no_check() -> None:
    cfg = QuantizeSection(method="gptq", desc_act=True, calib="x.jsonl")
    with pytest.raises(UsageError, match="TurboMind would refuse.*--no-turbomind-check"):
        plan(cfg)
    method, sym, backend, warnings = plan(cfg.model_copy(update={"turbomind_check": False}))
    assert any("TurboMind will refuse" in w for w in warnings)


def test_gptq_for_speculative_warns_about_the_pytorch_engine() -> None:
    _, _, _, warnings = plan(QuantizeSection(method="gptq", calib="x.jsonl"))
    assert any("PyTorch engine" in w for w in warnings)


def test_registry() -> None:
    assert [b.name for b in BACKENDS.values() if "gptq" in b.methods] == ["gptqmodel", "llmcompressor"]
    assert [b.name for b in BACKENDS.values() if "awq" in b.methods] == ["gptqmodel", "autoawq", "lmdeploy"]
    assert resolve_backend("gptq", None).name == "gptqmodel"
    with pytest.raises(UsageError, match="does not do AWQ"):
        resolve_backend("awq", "llmcompressor")
    with pytest.raises(UsageError, match="archived.*gptqmodel"):
        resolve_backend("gptq", "auto-gptq")


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    d = tmp_path / "m"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"architectures": ["Qwen3ForCausalLM"]}))
    return d


def _one_line(stderr: str) -> str:
    lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, stderr
    return lines[0]


def test_cli_auto_gptq_is_one_line(cli, model_dir: Path, tmp_path: Path) -> None:
    code, _, err = cli(
        "quantize",
        str(model_dir),
        "--quant-backend",
        "auto-gptq",
        "--calib",
        "x.jsonl",
        "--out",
        str(tmp_path / "o"),
    )
    assert code == 2
    assert "archived" in _one_line(err) and "gptqmodel" in err


def test_cli_turbomind_refusal(cli, model_dir: Path, tmp_path: Path) -> None:
    args = ["--method", "gptq", "--group-size", "256", "--calib", "x.jsonl", "--out", str(tmp_path / "o")]
    code, _, err = cli("quantize", str(model_dir), *args)
    assert code == 2 and "group_size 256" in _one_line(err)
    assert not (tmp_path / "o").exists()


def test_cli_lmdeploy_refuses_local_data(cli, model_dir: Path, tmp_path: Path) -> None:
    pytest.importorskip("lmdeploy")
    data = tmp_path / "d.jsonl"
    data.write_text('{"text": "x"}\n')
    code, _, err = cli(
        "quantize",
        str(model_dir),
        "--quant-backend",
        "lmdeploy",
        "--calib",
        str(data),
        "--out",
        str(tmp_path / "o"),
    )
    assert code == 2 and "named hub datasets" in _one_line(err)


def test_lmdeploy_local_data_refused_in_plan(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from specq.pipeline.quantize import backends

    monkeypatch.setattr(backends.Backend, "installed", property(lambda self: True))
    data = tmp_path / "d.jsonl"
    data.write_text('{"text": "x"}\n')
    with pytest.raises(UsageError, match="named hub datasets"):
        plan(QuantizeSection(method="awq", backend="lmdeploy", calib=str(data)))
    plan(QuantizeSection(method="awq", backend="lmdeploy", calib="wikitext2"))  # a named set is fine


def test_lmdeploy_command() -> None:
    from specq.pipeline.quantize._lmdeploy import command
    from specq.pipeline.quantize.backends import Job

    job = Job(model=Path("m"), out=Path("o"), method="awq", bits=4, group_size=128, sym=False, desc_act=False,
              device="cpu", seqlen=512, seed=0, calib_source="wikitext2", work=Path("w"))  # fmt: skip
    cmd = command(job, 64)
    assert cmd[1:5] == ["-m", "lmdeploy", "lite", "auto_awq"]
    assert cmd[cmd.index("--calib-dataset") + 1] == "wikitext2" and "--device" in cmd


def test_cli_missing_calib_and_out(cli, model_dir: Path, tmp_path: Path) -> None:
    code, _, err = cli("quantize", str(model_dir), "--out", str(tmp_path / "o"))
    assert code == 2 and "--calib" in _one_line(err)
    code, _, err = cli("quantize", str(model_dir), "--calib", "x.jsonl")
    assert code == 2 and "--out" in _one_line(err)


def test_cli_help_has_example(cli) -> None:
    code, out, _ = cli("quantize", "--help")
    assert code == 0 and "Example:" in out and "--for" in out


def test_saved_config_round_trips(tmp_path: Path) -> None:
    from specq.pipeline.config import SpecqConfig, config_to_toml, resolve_config

    q = QuantizeSection.model_validate({"method": "gptq", "for": "plain", "calib": "d.jsonl", "sym": True})
    path = tmp_path / "specq-quantize.toml"
    path.write_text(config_to_toml(SpecqConfig(quantize=q), ("quantize",)))
    assert 'for = "plain"' in path.read_text()
    assert resolve_config(path).quantize == q


def _hf_model(d: Path, kv_out: int) -> Path:
    """An unquantized two-layer checkpoint's headers: q_proj 128 wide, k_proj `kv_out` wide."""
    import numpy as np

    from specq.pipeline.convert.st_io import write_tensors

    d.mkdir()
    items = []
    for i in range(2):
        for name, out in (("q_proj", 128), ("k_proj", kv_out)):
            w = np.zeros((out, 128), np.float16)
            items.append((f"model.layers.{i}.self_attn.{name}.weight", "F16", w))
    write_tensors(d / "model.safetensors", items, {"format": "pt"})
    (d / "config.json").write_text(json.dumps({"architectures": ["Qwen3ForCausalLM"]}))
    return d


def test_speculative_quantize_warns_about_narrow_kv_heads(tmp_path: Path) -> None:
    from specq.pipeline.checkpoint import Checkpoint
    from specq.pipeline.quantize import speculative_shape_warnings

    narrow = Checkpoint(_hf_model(tmp_path / "narrow", 64))
    wide = Checkpoint(_hf_model(tmp_path / "wide", 128))
    spec = QuantizeSection(calib="x.jsonl")
    (w,) = speculative_shape_warnings(narrow, "awq", spec)
    assert "k_proj output 64 is not a multiple of 128 (2 layers)" in w and "TurboMind" in w
    assert speculative_shape_warnings(wide, "awq", spec) == []
    assert speculative_shape_warnings(narrow, "awq", spec.model_copy(update={"group_size": 32})) == []
    plain = QuantizeSection.model_validate({"for": "plain", "calib": "x.jsonl"})
    assert speculative_shape_warnings(narrow, "gptq", plain) == []


def test_backends_without_qwen35_support_are_named() -> None:
    from specq.pipeline.quantize.backends import architecture_refusal

    for name, source in (
        ("autoawq", "AWQ_CAUSAL_LM_MODEL_MAP"),
        ("llmcompressor", "non-empty canonical module prefix"),
        ("lmdeploy", "FC_FCS_MAP"),
    ):
        for model_type in ("qwen3_5", "qwen3_5_text"):
            reason = architecture_refusal(BACKENDS[name], model_type)
            assert reason is not None and source in reason and "gptqmodel" in reason
        assert architecture_refusal(BACKENDS[name], "qwen3") is None
    assert architecture_refusal(BACKENDS["gptqmodel"], "qwen3_5") is None


@pytest.mark.parametrize(
    ("backend", "method", "module"), [("autoawq", "awq", "awq"), ("llmcompressor", "gptq", "llmcompressor")]
)
def test_cli_refuses_qwen35_up_front(cli, tmp_path: Path, backend: str, method: str, module: str) -> None:
    """Refused before calibration or any model load: a config-only Qwen3.5 directory is enough."""
    from specq.pipeline.hardware import module_present

    if not module_present(module):
        pytest.skip(f"{backend} is not installed (it would be refused as missing first)")
    d = tmp_path / "qwen35"
    d.mkdir()
    (d / "config.json").write_text(
        json.dumps({"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5"})
    )
    args = [
        "--quant-backend",
        backend,
        "--method",
        method,
        "--calib",
        "missing.jsonl",
        "--out",
        str(tmp_path / "o"),
    ]
    code, _, err = cli("quantize", str(d), *args)
    assert code == 2 and f"backend '{backend}' cannot quantize qwen35" in _one_line(err)
    assert not (tmp_path / "o").exists()


def test_an_unrunnable_quality_check_is_refused_before_quantizing(cli, tmp_path: Path, monkeypatch) -> None:
    """On the H200 (no gptqmodel there) autoawq quantized the medium toy, then the quality check died on the
    missing loader and nothing was written. gptqmodel is installed here, so its absence is simulated at the
    one place specq asks for it."""
    import importlib.util

    from tests.tinymodel import build_tiny_model

    model = build_tiny_model(tmp_path / "m")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "gptqmodel" else real(n, *a))
    out = tmp_path / "q"
    args = ("quantize", str(model), "--method", "awq", "--quant-backend", "autoawq", "--calib", "x.jsonl")
    code, _, err = cli(*args, "--out", str(out))
    assert code == 4
    line = [ln for ln in err.splitlines() if ln.startswith("specq: error:")]
    assert len(line) == 1 and "gptqmodel" in line[0] and "--no-eval" in line[0]
    assert not out.exists() and not list(tmp_path.glob(".q*"))
