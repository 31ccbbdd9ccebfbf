"""Preflight messages, with the hardware probes simulating machines that cannot exist here (a GPU box with
or without lmdeploy, TurboMind, FlashAttention-3)."""

from __future__ import annotations

import json

import pytest

from specq.pipeline import hardware
from specq.pipeline.errors import EnvironmentMissing
from specq.pipeline.hardware import GpuInfo
from specq.pipeline.serve import ServeRequest, preflight

from .conftest import QWEN3, write_ckpt

H200 = GpuInfo(index=0, name="NVIDIA H200", memory_total_bytes=141 * 2**30, compute_capability="9.0")
P100 = GpuInfo(index=0, name="Tesla P100", memory_total_bytes=16 * 2**30, compute_capability="6.0")


@pytest.fixture
def machine(monkeypatch: pytest.MonkeyPatch):
    """Defaults to a complete GPU machine; each test removes one piece."""
    state = {"lmdeploy": "0.18.0", "gpus": [H200], "turbomind": None, "fa3": None, "missing": set()}
    # the linear-attention packages' installed versions, and lmdeploy's metadata pins on them (none: a source
    # tree without metadata, as on the project's GPU machine)
    state |= {"versions": {"tilelang": "0.1.11", "flash-linear-attention": "0.6.0"}, "requires": {}}
    monkeypatch.setattr(hardware, "lmdeploy_version", lambda: state["lmdeploy"])
    real_version = hardware.package_version
    monkeypatch.setattr(
        hardware,
        "package_version",
        lambda name: (
            state["versions"].get(name) if name in preflight.LMDEPLOY_018_REQUIRES else real_version(name)
        ),
    )
    monkeypatch.setattr(hardware, "requirement_of", lambda dist, name: state["requires"].get(name))
    monkeypatch.setattr(hardware, "list_gpus", lambda: state["gpus"])

    def try_import(module: str) -> str | None:
        if module in state["missing"]:
            return f"ModuleNotFoundError: No module named '{module}'"
        return state["turbomind"] if "turbomind" in module else None

    monkeypatch.setattr(hardware, "try_import", try_import)
    monkeypatch.setattr(hardware, "flash_attention_3", lambda: state["fa3"])
    return state


def test_complete_machine_passes(machine) -> None:
    assert preflight.lmdeploy_problems("turbomind", speculative=False) == []
    assert preflight.lmdeploy_problems("pytorch", speculative=True) == []
    preflight.require_lmdeploy("pytorch", True)


def test_lmdeploy_missing(machine) -> None:
    machine["lmdeploy"] = None
    with pytest.raises(EnvironmentMissing, match=r"lmdeploy is not installed.*specq\[lmdeploy\]") as e:
        preflight.require_lmdeploy("turbomind", False)
    assert e.value.exit_code == 4
    assert "\n" not in str(e.value)


def test_lmdeploy_wrong_version(machine) -> None:
    machine["lmdeploy"] = "0.17.2"
    with pytest.raises(EnvironmentMissing, match=r"lmdeploy 0.17.2 is installed but specq needs 0.18.x"):
        preflight.require_lmdeploy("turbomind", False)


def test_no_gpu(machine) -> None:
    machine["gpus"] = []
    with pytest.raises(EnvironmentMissing, match="no NVIDIA GPU found.*--engine embedded"):
        preflight.require_lmdeploy("pytorch", False)


def test_old_compute_capability(machine) -> None:
    machine["gpus"] = [P100]
    with pytest.raises(
        EnvironmentMissing, match=r"compute capability 6.0; LMDeploy's pytorch backend needs 7.5"
    ):
        preflight.require_lmdeploy("pytorch", False)


def test_turbomind_module_missing(machine) -> None:
    machine["turbomind"] = "ImportError: libcudart.so.12: cannot open shared object file"
    with pytest.raises(
        EnvironmentMissing, match="TurboMind's native module does not import.*--backend pytorch"
    ):
        preflight.require_lmdeploy("turbomind", False)
    preflight.require_lmdeploy("pytorch", False)  # the PyTorch engine does not need it


def test_fa3_missing_for_speculation(machine) -> None:
    machine["fa3"] = "ModuleNotFoundError: No module named 'flash_attn_interface'"
    with pytest.raises(EnvironmentMissing, match=r"needs FlashAttention-3.*`specq fa3 build --source "):
        preflight.require_lmdeploy("pytorch", True)
    preflight.require_lmdeploy("pytorch", False)  # plain decoding does not need it


def _serve_cfg(target, draft=None, dtype="auto"):
    from specq.pipeline.config.models import SpecqConfig

    model = {"model_path": str(target)} | (
        {"draft_model_path": str(draft), "num_draft_tokens": 4} if draft else {}
    )
    return SpecqConfig.model_validate({"model": model, "engine": {"dtype": dtype}})


def test_fa3_missing_names_the_models_in_hand(machine, ckpts) -> None:
    machine["fa3"] = "ModuleNotFoundError: No module named 'flash_attn_interface'"
    cfg = _serve_cfg(ckpts["target"], ckpts["target"])
    with pytest.raises(EnvironmentMissing) as e:
        preflight.require_lmdeploy("pytorch", True, request=ServeRequest.from_config(cfg))
    assert f"specq fa3 build --source FLASH_ATTENTION_DIR {ckpts['target']} {ckpts['target']}`" in str(
        e.value
    )


def test_installed_fa3_without_the_head_dim_refuses_before_launch(
    machine, ckpts, tmp_path, monkeypatch
) -> None:
    """A real flash_attn_config.py (hdim64 only, as the README's build) on sys.path; a Qwen3.5-27B-shaped
    target needs 256: exit 4 before the engine starts, with the build command for these models."""
    from tests.fa3files import QWEN35_27B, README_BUILD, write_config, write_fa3_config

    write_fa3_config(tmp_path / "site", README_BUILD)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    q35 = write_config(tmp_path / "q35", QWEN35_27B)
    with pytest.raises(EnvironmentMissing, match=r"lacks head dim 256 \(q35\)") as e:
        preflight.require_lmdeploy("pytorch", True, request=ServeRequest.from_config(_serve_cfg(q35)))
    assert e.value.exit_code == 4 and "\n" not in str(e.value)
    assert str(e.value).endswith(f"`specq fa3 build --source FLASH_ATTENTION_DIR {q35}`")
    with pytest.raises(EnvironmentMissing, match="lacks head dim 256"):  # plain decoding uses FA3 as well
        preflight.require_lmdeploy("pytorch", False, request=ServeRequest.from_config(_serve_cfg(q35)))
    preflight.require_lmdeploy(
        "turbomind", False, request=ServeRequest.from_config(_serve_cfg(q35))
    )  # TurboMind does not use FA3
    preflight.require_lmdeploy(
        "pytorch", True, request=ServeRequest.from_config(_serve_cfg(ckpts["target"]))
    )  # head dim 64: covered


def test_installed_fa3_without_fp16_refuses_an_fp16_engine(machine, ckpts, tmp_path, monkeypatch) -> None:
    from tests.fa3files import README_BUILD, write_fa3_config

    write_fa3_config(tmp_path / "site", README_BUILD | {"FP16"})
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    with pytest.raises(EnvironmentMissing, match=r"lacks fp16 .*--dtype fp16`$"):
        preflight.require_lmdeploy(
            "pytorch", True, request=ServeRequest.from_config(_serve_cfg(ckpts["target"], dtype="float16"))
        )
    assert preflight.lmdeploy_problems("pytorch", True, [str(ckpts["target"])]) == []  # bf16 checkpoint


def test_vram_plan_that_does_not_fit(machine, ckpts) -> None:
    """The planner's verdict for a model bigger than the (simulated) GPU stops the launch with exit 4."""
    from specq.pipeline.config.models import SpecqConfig

    machine["gpus"] = [
        GpuInfo(index=0, name="tiny GPU", memory_total_bytes=64 * 2**20, compute_capability="9.0")
    ]
    big = write_ckpt(
        ckpts["target"].parent / "big",
        json.loads((ckpts["target"] / "config.json").read_text()),
        tensors={"model.embed_tokens.weight": ("BF16", [65536, 1024])},
    )
    cfg = SpecqConfig.model_validate({"model": {"model_path": str(big)}, "plan": {"gpu_memory": "64MiB"}})
    problem = preflight.vram_problem(ServeRequest.from_config(cfg))
    assert problem is not None and problem.startswith("VRAM plan:")
    with pytest.raises(EnvironmentMissing, match="VRAM plan"):
        preflight.require_lmdeploy("pytorch", False, request=ServeRequest.from_config(cfg))


def _qwen35_target(tmp_path):
    """A Qwen3.5-shaped config: Gated DeltaNet (`linear_attention`) layers interleaved with full attention."""
    text = dict(QWEN3, layer_types=["linear_attention"] * 3 + ["full_attention"], head_dim=256)
    return write_ckpt(
        tmp_path / "q35",
        {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5", "text_config": text},
    )


def test_linear_attention_target_needs_fla_and_tilelang_on_the_pytorch_engine(machine, tmp_path) -> None:
    request = ServeRequest.from_config(_serve_cfg(_qwen35_target(tmp_path)))
    machine["missing"] = {"fla", "tilelang"}
    with pytest.raises(EnvironmentMissing) as e:
        preflight.require_lmdeploy("pytorch", False, request=request)
    assert "linear_attention layers" in str(e.value) and "\n" not in str(e.value)
    assert str(e.value).endswith(
        "flash-linear-attention and tilelang do not import: pip install flash-linear-attention tilelang"
    )
    machine["missing"] = {"tilelang"}  # fla alone is not enough: the gated delta rule needs both
    with pytest.raises(EnvironmentMissing, match=r"and tilelang does not import: pip install tilelang$"):
        preflight.require_lmdeploy("pytorch", False, request=request)
    preflight.require_lmdeploy("turbomind", False, request=request)  # TurboMind has its own kernels
    machine["missing"] = set()
    preflight.require_lmdeploy("pytorch", False, request=request)


def test_linear_attention_target_needs_the_tilelang_lmdeploy_pins(machine, tmp_path) -> None:
    """The H200 run of 2026-12-01: tilelang 0.1.15 imported, and the engine died at start-up (LMDeploy 0.18's
    kernels call tilelang.language.DataType, which 0.1.15 no longer exports). lmdeploy 0.18.0 pins 0.1.11."""
    request = ServeRequest.from_config(_serve_cfg(_qwen35_target(tmp_path)))
    machine["versions"]["tilelang"] = "0.1.15"
    with pytest.raises(EnvironmentMissing) as e:
        preflight.require_lmdeploy("pytorch", False, request=request)
    assert e.value.exit_code == 4 and "\n" not in str(e.value)
    assert str(e.value).endswith(
        "tilelang 0.1.15 is installed where LMDeploy 0.18.0 requires tilelang==0.1.11: "
        "pip install 'tilelang==0.1.11'"
    )
    preflight.require_lmdeploy("turbomind", False, request=request)  # TurboMind does not use tilelang
    machine["versions"]["flash-linear-attention"] = "0.4.1"  # both named, one pip command
    with pytest.raises(
        EnvironmentMissing, match=r"pip install 'tilelang==0\.1\.11' 'flash-linear-attention>=0\.4\.2'$"
    ):
        preflight.require_lmdeploy("pytorch", False, request=request)
    machine["versions"] |= {"tilelang": "0.1.11", "flash-linear-attention": "0.6.0"}
    preflight.require_lmdeploy("pytorch", False, request=request)


def test_an_installed_lmdeploys_own_pin_wins(machine, tmp_path) -> None:
    request = ServeRequest.from_config(_serve_cfg(_qwen35_target(tmp_path)))
    machine["requires"] = {"tilelang": "==0.1.12"}
    with pytest.raises(
        EnvironmentMissing, match=r"requires tilelang==0\.1\.12: pip install 'tilelang==0\.1\.12'$"
    ):
        preflight.require_lmdeploy("pytorch", False, request=request)
    machine["requires"] = {}
    machine["lmdeploy"] = "0.18.1"  # no metadata and not 0.18.0: specq does not guess its pins
    machine["versions"]["tilelang"] = "0.1.15"
    preflight.require_lmdeploy("pytorch", False, request=request)


def test_plain_target_does_not_need_the_linear_attention_packages(machine, ckpts) -> None:
    machine["missing"] = {"fla", "tilelang"}
    preflight.require_lmdeploy(
        "pytorch", False, request=ServeRequest.from_config(_serve_cfg(ckpts["target"]))
    )


def test_doctor_names_the_missing_linear_attention_packages(machine) -> None:
    from specq.pipeline.doctor import _lmdeploy_checks

    machine["missing"] = {"tilelang"}
    check = next(c for c in _lmdeploy_checks() if c.name == "linear-attention")
    assert check.status == "warn" and check.detail == "tilelang not importable"
    assert check.fix is not None and check.fix.endswith("pip install tilelang")
    machine["missing"] = set()
    check = next(c for c in _lmdeploy_checks() if c.name == "linear-attention")
    assert check.status == "ok" and check.fix is None
    machine["versions"]["tilelang"] = "0.1.15"
    check = next(c for c in _lmdeploy_checks() if c.name == "linear-attention")
    assert check.status == "warn"
    assert check.detail == "tilelang 0.1.15 is installed where LMDeploy 0.18.0 requires tilelang==0.1.11"
    assert check.fix is not None and check.fix.endswith("pip install 'tilelang==0.1.11'")
