"""Golden argument lists for LMDeploy 0.18's `api_server`, one per backend and speculative method."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from specq.pipeline.config.models import SpecqConfig
from specq.pipeline.errors import EnvironmentMissing, UsageError
from specq.pipeline.serve import ServeRequest, create_engine

from .conftest import QWEN3, VOCAB, write_ckpt

PORT = 23333


def engine_for(tmp_path: Path, target: Path, engine: dict[str, Any] | None = None, **kw: Any):
    model_section = {"model_path": str(target), "model_name": "m", **kw.pop("model", {})}
    cfg = SpecqConfig.model_validate(
        {"model": model_section, "engine": {"engine": "lmdeploy", "port": PORT, **(engine or {})}, **kw}
    )
    return create_engine(ServeRequest.from_config(cfg), tmp_path / "run")


def head(model: Path, backend: str) -> list[str]:
    return [sys.executable, "-m", "lmdeploy", "serve", "api_server", str(model), "--backend", backend,
            "--server-name", "127.0.0.1", "--server-port", str(PORT), "--model-name", "m"]  # fmt: skip


TAIL = ["--cache-max-entry-count", "0.8", "--max-prefill-token-num", "8192", "--max-batch-size", "1"]


def test_plain_defaults_to_turbomind(tmp_path: Path, ckpts: dict[str, Path]) -> None:
    e = engine_for(tmp_path, ckpts["target"])
    assert e.command() == head(ckpts["target"], "turbomind") + TAIL


@pytest.mark.parametrize("fmt", ["awq", "gptq"])
def test_turbomind_model_format_from_quantization_config(
    tmp_path: Path, ckpts: dict[str, Path], fmt: str
) -> None:
    e = engine_for(tmp_path, ckpts[fmt])
    assert e.command() == head(ckpts[fmt], "turbomind") + ["--model-format", fmt] + TAIL


def test_plain_pytorch_with_engine_options(tmp_path: Path, ckpts: dict[str, Path]) -> None:
    e = engine_for(
        tmp_path,
        ckpts["target"],
        {"backend": "pytorch", "session_len": 8192, "cache_max_entry_count": 0.6, "max_batch_size": 4,
         "tp": 2, "enable_prefix_caching": True, "dtype": "float16", "eager_mode": True, "host": "0.0.0.0",
         "max_prefill_token_num": 1024},
    )  # fmt: skip
    expected = head(ckpts["target"], "pytorch")
    expected[expected.index("127.0.0.1")] = "0.0.0.0"
    assert e.command() == expected + [
        "--dtype", "float16", "--session-len", "8192", "--cache-max-entry-count", "0.6",
        "--max-prefill-token-num", "1024", "--max-batch-size", "4", "--tp", "2", "--enable-prefix-caching",
        "--eager-mode",
    ]  # fmt: skip
    assert e.base_url == f"http://127.0.0.1:{PORT}"


def test_dflash_detected_from_draft_config(tmp_path: Path, ckpts: dict[str, Path]) -> None:
    e = engine_for(
        tmp_path,
        ckpts["target"],
        model={"draft_model_path": str(ckpts["dflash"]), "num_draft_tokens": 5},
        speculative={"dflash_block_size": 8},
    )
    assert e.command() == head(ckpts["target"], "pytorch") + TAIL + [
        "--speculative-algorithm", "dflash", "--speculative-draft-model", str(ckpts["dflash"]),
        "--speculative-num-draft-tokens", "5", "--speculative-dflash-block-size", "8",
    ]  # fmt: skip


def test_eagle3(tmp_path: Path, ckpts: dict[str, Path]) -> None:
    e = engine_for(
        tmp_path, ckpts["target"], model={"draft_model_path": str(ckpts["eagle3"]), "num_draft_tokens": 3}
    )
    assert e.command()[-6:] == [
        "--speculative-algorithm", "eagle3", "--speculative-draft-model", str(ckpts["eagle3"]),
        "--speculative-num-draft-tokens", "3",
    ]  # fmt: skip


@pytest.mark.parametrize("method", ["qwen3_5_mtp", "deepseek_mtp"])
def test_mtp_needs_no_draft(tmp_path: Path, ckpts: dict[str, Path], method: str) -> None:
    e = engine_for(tmp_path, ckpts["target"], model={"num_draft_tokens": 2}, speculative={"method": method})
    cmd = e.command()
    assert cmd[-4:] == ["--speculative-algorithm", method, "--speculative-num-draft-tokens", "2"]
    assert "--speculative-draft-model" not in cmd
    assert cmd[cmd.index("--backend") + 1] == "pytorch"


def test_eagle_method_given(tmp_path: Path, ckpts: dict[str, Path]) -> None:
    eagle = ckpts["eagle3"].parent / "eagle"
    eagle.mkdir()
    (eagle / "config.json").write_text('{"architectures": ["EagleLlamaForCausalLM"], "hidden_size": 256}')
    e = engine_for(
        tmp_path, ckpts["target"], model={"draft_model_path": str(eagle), "num_draft_tokens": 4},
        speculative={"method": "eagle"},
    )  # fmt: skip
    assert e.command()[-6:-4] == ["--speculative-algorithm", "eagle"]


def test_speculation_refused_on_turbomind(tmp_path: Path, ckpts: dict[str, Path]) -> None:
    with pytest.raises(UsageError, match="TurboMind does no speculative decoding"):
        engine_for(
            tmp_path, ckpts["target"], {"backend": "turbomind"},
            model={"draft_model_path": str(ckpts["dflash"]), "num_draft_tokens": 4},
        )  # fmt: skip


def test_prefix_caching_refused_with_dflash(tmp_path: Path, ckpts: dict[str, Path]) -> None:
    with pytest.raises(UsageError, match="prefix caching"):
        engine_for(
            tmp_path, ckpts["target"], {"enable_prefix_caching": True},
            model={"draft_model_path": str(ckpts["dflash"]), "num_draft_tokens": 4},
        )  # fmt: skip


def test_api_keys_masked_in_command(tmp_path: Path, ckpts: dict[str, Path], monkeypatch) -> None:
    monkeypatch.setenv("MY_KEYS", "sekrit1,sekrit2")
    e = engine_for(tmp_path, ckpts["target"], {"api_keys_env": "MY_KEYS"})
    assert e.command()[-3:] == ["--api-keys", "***", "***"]
    assert "sekrit1" not in " ".join(e.command())
    assert e.argv(masked=False)[-2:] == ["sekrit1", "sekrit2"]


def test_api_keys_from_file(tmp_path: Path, ckpts: dict[str, Path]) -> None:
    keys = tmp_path / "keys"
    keys.write_text("k1\n\nk2\n")
    e = engine_for(tmp_path, ckpts["target"], {"api_keys_file": str(keys)})
    assert e.argv(masked=False)[-3:] == ["--api-keys", "k1", "k2"]


def test_reference_preset_command(tmp_path: Path, ckpts: dict[str, Path]) -> None:
    """The packaged RTX 3090 preset, with the paths replaced: what `specq plan` sized is what is launched."""
    from specq.pipeline.config import resolve_config

    cfg = resolve_config(
        "rtx3090-qwen3.5-27b-awq-dflash",
        flags={"model": {"model_path": str(ckpts["awq"]), "draft_model_path": str(ckpts["dflash"])},
               "engine": {"port": PORT}},
    )  # fmt: skip
    cmd = create_engine(ServeRequest.from_config(cfg), tmp_path).command()
    flags = " ".join(cmd[cmd.index("--backend") :])
    assert flags.startswith("--backend pytorch")
    for part in ("--dtype bfloat16", "--session-len 8192", "--cache-max-entry-count 0.41",
                 "--max-prefill-token-num 512", "--speculative-algorithm dflash",
                 "--speculative-num-draft-tokens 5"):  # fmt: skip
        assert part in flags


def test_free_port_when_none_given(tmp_path: Path, ckpts: dict[str, Path]) -> None:
    cfg = SpecqConfig.model_validate(
        {"model": {"model_path": str(ckpts["target"])}, "engine": {"engine": "lmdeploy"}}
    )
    e = create_engine(ServeRequest.from_config(cfg), tmp_path)
    port = int(e.command()[e.command().index("--server-port") + 1])
    assert 1024 <= port <= 65535
    assert e.base_url.endswith(f":{port}")


def test_awq_target_with_bf16_drafter_uses_fp16_copy(
    tmp_path: Path, ckpts: dict[str, Path], monkeypatch
) -> None:
    monkeypatch.setenv("SPECQ_CACHE", str(tmp_path / "cache"))
    notes: list[str] = []
    cfg = SpecqConfig.model_validate(
        {
            "model": {
                "model_path": str(ckpts["awq"]),
                "draft_model_path": str(ckpts["dflash"]),
                "num_draft_tokens": 4,
            },
            "engine": {"engine": "lmdeploy", "port": PORT},
        }
    )
    e = create_engine(ServeRequest.from_config(cfg), tmp_path / "run", notes.append)
    draft_arg = Path(e.command()[e.command().index("--speculative-draft-model") + 1])
    assert draft_arg != ckpts["dflash"]
    assert draft_arg.parent == tmp_path / "cache" / "fp16-drafters"
    assert any("fp16 copy" in n for n in notes)


def test_awq_bf16_drafter_cast_at_launch(tmp_path: Path, ckpts: dict[str, Path], monkeypatch) -> None:
    from specq.pipeline.serve.spec import resolve_spec, write_fp16_copy

    monkeypatch.setenv("SPECQ_CACHE", str(tmp_path / "cache"))
    cfg = SpecqConfig.model_validate(
        {
            "model": {
                "model_path": str(ckpts["awq"]),
                "draft_model_path": str(ckpts["dflash"]),
                "num_draft_tokens": 4,
            },
            "engine": {"engine": "lmdeploy", "port": PORT},
        }
    )
    spec = resolve_spec(ServeRequest.from_config(cfg))
    write_fp16_copy(spec)
    assert spec.draft_fp16 is not None and (spec.draft_fp16 / "config.json").is_file()


def test_gptq_target_refused_for_pytorch_engine(tmp_path: Path, ckpts: dict[str, Path]) -> None:
    with pytest.raises(UsageError, match="--to awq"):
        engine_for(
            tmp_path, ckpts["gptq"], model={"draft_model_path": str(ckpts["dflash"]), "num_draft_tokens": 4}
        )


def _qwen35(tmp_path: Path, dtype: str = "float32", quant: dict | None = None) -> Path:
    """A Qwen3.5 (Gated DeltaNet + full attention; headers only) stored in `dtype`, as the toy is float32."""
    text = dict(QWEN3, layer_types=["linear_attention"] * 3 + ["full_attention"], mtp_num_hidden_layers=1)
    cfg = {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
           "torch_dtype": dtype, "text_config": text}  # fmt: skip
    lm = "model.language_model."
    tensors = {f"{lm}layers.{i}.input_layernorm.weight": ("F32", [256]) for i in range(4)}
    if quant:
        cfg["quantization_config"] = quant
        qkv = f"{lm}layers.0.linear_attn.in_proj_qkv."  # one AWQ gemm linear, 256 -> 256 at group 128
        tensors |= {qkv + "qweight": ("I32", [256, 32]), qkv + "scales": ("F16", [2, 256]),
                    qkv + "qzeros": ("I32", [2, 32])}  # fmt: skip
    tensors |= {f"{lm}embed_tokens.weight": ("F32", [1024, 256]), f"{lm}norm.weight": ("F32", [256]),
                "lm_head.weight": ("F32", [1024, 256]), "mtp.fc.weight": ("F32", [256, 512])}  # fmt: skip
    return write_ckpt(tmp_path / f"q35-{dtype}", cfg, VOCAB, tensors=tensors)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_qwen35_runs_in_bf16_on_the_pytorch_engine(tmp_path: Path, dtype: str) -> None:
    """LMDeploy 0.18 keeps Qwen3.5's linear-attention state in bf16; 'auto' would run a float32/float16
    checkpoint in fp16 and die at the first prefill (H200, 2026-12-01): specq passes --dtype bfloat16."""
    target = _qwen35(tmp_path, dtype)
    cmd = engine_for(tmp_path, target, {"backend": "pytorch"}).command()
    assert cmd[cmd.index("--dtype") + 1] == "bfloat16"
    cmd = engine_for(
        tmp_path, target, model={"num_draft_tokens": 3}, speculative={"method": "qwen3_5_mtp"}
    ).command()
    assert cmd[cmd.index("--dtype") + 1] == "bfloat16"
    assert "--dtype" not in engine_for(tmp_path, target).command()  # TurboMind: its own dtype rules


def test_qwen35_in_fp16_refused_on_the_pytorch_engine(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"linear-attention state in bfloat16: --dtype float16 fails"):
        engine_for(tmp_path, _qwen35(tmp_path), {"backend": "pytorch", "dtype": "float16"})


FIXTURE_LMDEPLOY = Path(__file__).resolve().parents[2] / "fixtures" / "lmdeploy-0.18.0"
AWQ_Q = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"}


def _lmdeploy_site(tmp_path: Path, version: str = "0.18.0") -> Path:
    """A copy of LMDeploy 0.18.0's two patched files (and stubs) whose version.py says `version`."""
    import shutil

    site = tmp_path / f"site-{version}"
    shutil.copytree(FIXTURE_LMDEPLOY, site)
    v = site / "lmdeploy" / "version.py"
    v.write_text(v.read_text().replace("'0.18.0'", f"'{version}'"))
    return site


def test_qwen35_awq_is_served_in_bf16_with_the_compatibility_patch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """LMDeploy 0.18.0 installed: the AWQ Qwen3.5 runs in bf16 (no --model-format: the PyTorch engine reads
    the quant config), and the server's environment carries the patch to every process it starts."""
    from specq.pipeline.engines import lmdeploy_compat

    monkeypatch.syspath_prepend(str(_lmdeploy_site(tmp_path)))
    target = _qwen35(tmp_path, "float16", AWQ_Q)
    for kw in ({}, {"model": {"num_draft_tokens": 3}, "speculative": {"method": "qwen3_5_mtp"}}):
        engine = engine_for(tmp_path, target, {"backend": "pytorch"}, **kw)
        cmd = engine.command()
        assert cmd[cmd.index("--dtype") + 1] == "bfloat16" and "--model-format" not in cmd
        env = engine.child_env()
        assert env["PYTHONPATH"].split(os.pathsep)[0] == str(lmdeploy_compat.BOOT_DIR)
        # engine.w4a16_kernel's default (auto): specq's kernel for the 4-bit linears, where its patch applies
        assert env[lmdeploy_compat.ENV] == "qwen35-awq-bf16,w4a16-specq"
        assert env[lmdeploy_compat.hook.LOG_ENV] == str(tmp_path / "run" / "compat.log")
    plain = engine_for(tmp_path, _qwen35(tmp_path), {"backend": "pytorch"}).child_env()
    assert lmdeploy_compat.ENV not in plain  # an unquantized target needs no patch


@pytest.mark.parametrize("version", ["0.18.1", "0.19.0"])
def test_qwen35_awq_refused_before_launch_with_an_lmdeploy_the_patch_does_not_know(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: str
) -> None:
    monkeypatch.syspath_prepend(str(_lmdeploy_site(tmp_path, version)))
    with pytest.raises(EnvironmentMissing) as e:
        engine_for(tmp_path, _qwen35(tmp_path, "float16", AWQ_Q), {"backend": "pytorch"})
    assert f"lmdeploy {version}" in str(e.value) and "lmdeploy==0.18.0" in str(e.value)
    assert "\n" not in str(e.value)


def test_dry_run_shows_the_environment_the_patch_needs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli
) -> None:
    """`serve --dry-run` prints the exact launch, the variables specq sets for the compatibility patch
    included (`env PYTHONPATH=… SPECQ_LMDEPLOY_COMPAT=qwen35-awq-bf16 python -m lmdeploy …`)."""
    from specq.pipeline.engines import lmdeploy_compat

    monkeypatch.syspath_prepend(str(_lmdeploy_site(tmp_path)))
    target = _qwen35(tmp_path, "float16", AWQ_Q)
    code, out, err = cli("serve", str(target), "--engine", "lmdeploy", "--backend", "pytorch", "--dry-run")
    assert code == 0, err
    line = out.splitlines()[0]
    assert line.startswith("env ") and "SPECQ_LMDEPLOY_COMPAT=qwen35-awq-bf16" in line
    assert f"PYTHONPATH={lmdeploy_compat.BOOT_DIR}" in line and " --dtype bfloat16" in line
    code, out, _ = cli("serve", str(_qwen35(tmp_path)), "--engine", "lmdeploy", "--backend", "pytorch",
                       "--dry-run")  # fmt: skip
    assert code == 0 and out.splitlines()[0].startswith(sys.executable)


def test_step_patch_names_spec_step_for_every_process_the_server_starts(
    tmp_path: Path, ckpts: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`engine.step_patch` on the PyTorch engine: the spec-step patch rides in the server's environment, alone
    on a plain target and beside qwen35-awq-bf16 on a 4-bit Qwen3.5; without it, nothing is set."""
    from specq.pipeline.engines import lmdeploy_compat

    monkeypatch.syspath_prepend(str(_lmdeploy_site(tmp_path)))
    on = {"backend": "pytorch", "step_patch": True}
    dflash = {"draft_model_path": str(ckpts["dflash"]), "num_draft_tokens": 7}
    env = engine_for(tmp_path, ckpts["target"], on, model=dflash).child_env()
    assert env[lmdeploy_compat.ENV] == "spec-step"
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(lmdeploy_compat.BOOT_DIR)
    assert env[lmdeploy_compat.hook.LOG_ENV] == str(tmp_path / "run" / "compat.log")
    q35 = engine_for(tmp_path, _qwen35(tmp_path, "float16", AWQ_Q), on).child_env()
    assert q35[lmdeploy_compat.ENV] == "qwen35-awq-bf16,spec-step,w4a16-specq"
    off = engine_for(tmp_path, ckpts["target"], {"backend": "pytorch"}, model=dflash).child_env()
    assert lmdeploy_compat.ENV not in off


def test_step_patch_refused_on_turbomind_in_one_line(tmp_path: Path, ckpts: dict[str, Path]) -> None:
    with pytest.raises(UsageError) as e:
        engine_for(tmp_path, ckpts["target"], {"backend": "turbomind", "step_patch": True})
    assert "engine.step_patch" in str(e.value) and "--backend pytorch" in str(e.value)
    assert "\n" not in str(e.value)


def test_step_patch_refused_when_a_file_it_patches_was_changed(
    tmp_path: Path, ckpts: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    site = _lmdeploy_site(tmp_path)
    fa3 = site / "lmdeploy/pytorch/backends/cuda/attention/fa3.py"
    fa3.write_text(fa3.read_text() + "# local edit\n")
    monkeypatch.syspath_prepend(str(site))
    with pytest.raises(EnvironmentMissing) as e:
        engine_for(tmp_path, ckpts["target"], {"backend": "pytorch", "step_patch": True})
    why = str(e.value)
    assert "engine.step_patch" in why and "spec-step" in why and "attention/fa3.py" in why
    assert "--force-reinstall" in why and "\n" not in why


def test_dry_run_shows_the_step_patch_from_the_environment(
    tmp_path: Path, ckpts: dict[str, Path], monkeypatch: pytest.MonkeyPatch, cli
) -> None:
    monkeypatch.syspath_prepend(str(_lmdeploy_site(tmp_path)))
    args = ("serve", str(ckpts["target"]), "--engine", "lmdeploy", "--backend", "pytorch", "--dry-run")
    code, out, err = cli(*args, env={"SPECQ_ENGINE__STEP_PATCH": "1"})
    assert code == 0, err
    assert out.splitlines()[0].startswith("env ") and "SPECQ_LMDEPLOY_COMPAT=spec-step" in out.splitlines()[0]
    code, out, _ = cli(*args)
    assert code == 0 and "SPECQ_LMDEPLOY_COMPAT" not in out.splitlines()[0]


@pytest.mark.parametrize(
    ("kernel", "patches", "backend_env"),
    [
        ("auto", "qwen35-awq-bf16,w4a16-specq", None),
        ("specq", "qwen35-awq-bf16,w4a16-specq", None),
        ("lmdeploy", "qwen35-awq-bf16", "triton"),
    ],
)
def test_w4a16_kernel_choice_reaches_the_server_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kernel: str, patches: str, backend_env: str | None
) -> None:
    """engine.w4a16_kernel on a 4-bit target: specq's kernel is the w4a16-specq patch; LMDeploy's own choice
    between its kernels is its LMDEPLOY_W4A16_GEMM_BACKEND."""
    from specq.pipeline.engines import lmdeploy_compat

    monkeypatch.syspath_prepend(str(_lmdeploy_site(tmp_path)))
    engine = engine_for(
        tmp_path, _qwen35(tmp_path, "float16", AWQ_Q), {"backend": "pytorch", "w4a16_kernel": kernel}
    )
    env = engine.child_env()
    assert env[lmdeploy_compat.ENV] == patches
    assert env.get("LMDEPLOY_W4A16_GEMM_BACKEND") == backend_env
    assert engine.spec.w4a16_kernel == ("specq" if kernel == "auto" else kernel)


@pytest.mark.parametrize("fused", [False, True])
def test_the_launch_says_whether_the_gate_up_linears_store_the_activation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fused: bool
) -> None:
    from specq.pipeline.serve import lmdeploy as served

    monkeypatch.syspath_prepend(str(_lmdeploy_site(tmp_path)))
    monkeypatch.setattr(served, "require_lmdeploy", lambda *a, **k: None)  # its GPU checks need a GPU
    if fused:
        monkeypatch.setenv("SPECQ_W4A16_FUSE_SILU", "1")
    else:
        monkeypatch.delenv("SPECQ_W4A16_FUSE_SILU", raising=False)
    engine = engine_for(
        tmp_path, _qwen35(tmp_path, "float16", AWQ_Q), {"backend": "pytorch", "w4a16_kernel": "specq"}
    )
    said: list[str] = []
    engine.progress = said.append
    engine.preflight()
    kernel = next(line for line in said if line.startswith("W4A16 kernel: "))
    assert kernel.startswith("W4A16 kernel: specq (deterministic")
    assert ("store silu(gate) * up (SPECQ_W4A16_FUSE_SILU=1)" in kernel) is fused


def test_no_w4a16_kernel_for_an_unquantized_target_or_turbomind(
    tmp_path: Path, ckpts: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(_lmdeploy_site(tmp_path)))
    assert engine_for(tmp_path, ckpts["target"], {"backend": "pytorch"}).spec.w4a16_kernel is None
    tm = engine_for(tmp_path, ckpts["awq"], {"backend": "turbomind", "w4a16_kernel": "specq"})
    assert tm.spec.w4a16_kernel is None and "LMDEPLOY_W4A16_GEMM_BACKEND" not in tm.child_env()


def test_w4a16_kernel_refusals_are_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = _lmdeploy_site(tmp_path)
    monkeypatch.syspath_prepend(str(site))
    target = _qwen35(tmp_path, "float16", AWQ_Q)
    with pytest.raises(EnvironmentMissing) as e:  # the fixture has no TurboMind module
        engine_for(tmp_path, target, {"backend": "pytorch", "w4a16_kernel": "turbomind"})
    assert "TurboMind module" in str(e.value) and "\n" not in str(e.value)
    awq = site / "lmdeploy/pytorch/backends/cuda/awq_modules.py"
    awq.write_text(awq.read_text() + "# local edit\n")
    with pytest.raises(EnvironmentMissing) as e:  # asked for, and its patch cannot apply
        engine_for(tmp_path, target, {"backend": "pytorch", "w4a16_kernel": "specq"})
    assert "engine.w4a16_kernel = specq" in str(e.value) and "awq_modules.py" in str(e.value)
    assert "\n" not in str(e.value)
    # auto falls back to LMDeploy's Triton kernel, and says so
    said: list[str] = []
    from specq.pipeline.serve.spec import ServeRequest as Req
    from specq.pipeline.serve.spec import resolve_spec

    cfg = SpecqConfig.model_validate(
        {
            "model": {"model_path": str(target)},
            "engine": {"engine": "lmdeploy", "backend": "pytorch", "port": PORT},
        }
    )
    spec = resolve_spec(Req.from_config(cfg), said.append)
    assert spec.w4a16_kernel == "lmdeploy"
    assert any(line.startswith("W4A16 kernel: LMDeploy's Triton kernel") for line in said)


def test_logprobs_mode_goes_to_the_pytorch_engine_with_or_without_speculation(
    tmp_path: Path, ckpts: dict[str, Path]
) -> None:
    """LMDeploy 0.18's api_server answers a request for logprobs with HTTP 400 unless the PyTorch engine was
    started with `--logprobs-mode` (raw_logits | raw_logprobs); its speculative agent reads the same mode.
    TurboMind serves logprobs without it, and the flag belongs to the PyTorch engine's group: not passed."""
    on = {"backend": "pytorch", "logprobs_mode": "raw_logprobs"}
    plain = engine_for(tmp_path, ckpts["target"], on).command()
    assert plain == head(ckpts["target"], "pytorch") + TAIL + ["--logprobs-mode", "raw_logprobs"]
    spec = engine_for(
        tmp_path, ckpts["target"], {**on, "logprobs_mode": "raw_logits"},
        model={"draft_model_path": str(ckpts["dflash"]), "num_draft_tokens": 3},
    ).command()  # fmt: skip
    i = spec.index("--logprobs-mode")
    assert spec[i + 1] == "raw_logits" and spec[spec.index("--speculative-algorithm") + 1] == "dflash"
    turbomind = engine_for(tmp_path, ckpts["awq"], {"backend": "turbomind", "logprobs_mode": "raw_logprobs"})
    assert "--logprobs-mode" not in turbomind.command()
    assert "--logprobs-mode" not in engine_for(tmp_path, ckpts["target"], {"backend": "pytorch"}).command()


def test_a_logprobs_mode_lmdeploy_does_not_know_is_refused_naming_the_key(
    cli, ckpts: dict[str, Path]
) -> None:
    code, out, err = cli(
        "serve", str(ckpts["target"]), "--engine", "lmdeploy", "--dry-run",
        env={"SPECQ_ENGINE__LOGPROBS_MODE": "processed_logprobs"},
    )  # fmt: skip
    assert code == 2 and out == "", err
    assert err.startswith("specq: error:") and "engine.logprobs_mode" in err and len(err.splitlines()) == 1


def test_dry_run_shows_the_logprobs_mode(cli, ckpts: dict[str, Path]) -> None:
    args = ("serve", str(ckpts["target"]), "--engine", "lmdeploy", "--backend", "pytorch", "--dry-run")
    code, out, err = cli(*args, env={"SPECQ_ENGINE__LOGPROBS_MODE": "raw_logprobs"})
    assert code == 0, err
    assert "--logprobs-mode raw_logprobs" in out.splitlines()[0]
    assert 'logprobs_mode = "raw_logprobs"' in err  # the resolved config, which the dry run shows on stderr
    code, out, _ = cli(*args)
    assert code == 0 and "--logprobs-mode" not in out.splitlines()[0]


def bench_plan(ckpts: dict[str, Path], engine: dict[str, Any], **bench: Any) -> dict[str, list[str]]:
    """The LMDeploy command of every server a `specq bench` sweep of the target with a DFlash drafter
    would start, by run label."""
    from specq.pipeline.bench import BenchRequest
    from specq.pipeline.bench.runner import sweep_plan

    cfg = SpecqConfig.model_validate(
        {"model": {"model_path": str(ckpts["target"]), "draft_model_path": str(ckpts["dflash"]),
                   "model_name": "m"},
         "engine": {"engine": "lmdeploy", "port": PORT, **engine},
         "bench": {"draft_tokens": [3], **bench}}
    )  # fmt: skip
    request = BenchRequest.from_config(cfg)
    return {label: create_engine(s, Path("run")).command() for label, s in sweep_plan(request)}


def test_bench_starts_the_baselines_it_scores_with_a_logprobs_mode(ckpts: dict[str, Path]) -> None:
    """At temperature 0 with a speculative run to check, the baselines' outputs get an untimed reference pass
    that asks for the top-2 logprobs: the PyTorch engine's baseline is started with raw_logprobs (the logits'
    log-softmax before sampling's top_k = 1), the speculative run as the user configured it."""
    cmds = bench_plan(ckpts, {"backend": "pytorch"})
    assert list(cmds) == ["baseline", "k=3"]
    base, k3 = cmds["baseline"], cmds["k=3"]
    assert base[base.index("--logprobs-mode") + 1] == "raw_logprobs"
    assert "--speculative-algorithm" not in base
    assert "--logprobs-mode" not in k3 and "--speculative-algorithm" in k3
    # a mode the user set is kept; at temperature > 0 there is no reference pass, so no mode
    raw = bench_plan(ckpts, {"backend": "pytorch", "logprobs_mode": "raw_logits"})["baseline"]
    assert raw[raw.index("--logprobs-mode") + 1] == "raw_logits"
    sampled = bench_plan(ckpts, {"backend": "pytorch"}, temperature=0.7)
    assert all("--logprobs-mode" not in cmd for cmd in sampled.values())


def test_bench_gives_every_pytorch_baseline_the_mode_and_turbomind_none(ckpts: dict[str, Path]) -> None:
    cmds = bench_plan(ckpts, {}, baseline_engine="turbomind,pytorch")
    assert list(cmds) == ["baseline-turbomind", "baseline-pytorch", "k=3"]
    assert "--logprobs-mode" not in cmds["baseline-turbomind"]  # TurboMind serves logprobs without it
    pt = cmds["baseline-pytorch"]
    assert (
        pt[pt.index("--backend") + 1] == "pytorch" and pt[pt.index("--logprobs-mode") + 1] == "raw_logprobs"
    )


def test_the_pytorch_engine_says_which_attention_kernels_it_will_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """LMDeploy's PyTorch engine runs attention on FlashAttention-3 whenever it imports, plain decoding too
    (a plain rate depends on it), else on its own Triton kernels: the launch says which."""
    from specq.pipeline.serve import create_engine
    from specq.pipeline.serve import lmdeploy as served

    monkeypatch.syspath_prepend(str(_lmdeploy_site(tmp_path)))
    monkeypatch.setattr(served, "require_lmdeploy", lambda *a, **k: None)  # its GPU checks need a GPU
    target = _qwen35(tmp_path)

    def said_at_launch(backend: str) -> list[str]:
        cfg = SpecqConfig.model_validate(
            {"model": {"model_path": str(target)}, "engine": {"engine": "lmdeploy", "backend": backend}}
        )
        said: list[str] = []
        create_engine(ServeRequest.from_config(cfg), tmp_path / "run", said.append).preflight()
        return [line for line in said if line.startswith("attention: ")]

    assert said_at_launch("pytorch") == [
        "attention: LMDeploy's Triton kernels (FlashAttention-3 does not import; `specq fa3 build` builds it)"
    ]
    fa3 = tmp_path / "fa3"
    fa3.mkdir()
    (fa3 / "flash_attn_interface.py").write_text("")
    monkeypatch.syspath_prepend(str(fa3))
    assert said_at_launch("pytorch") == [
        "attention: FlashAttention-3 for prefill and verify steps, Triton paged attention for one-token steps"
    ]
    assert said_at_launch("turbomind") == []  # TurboMind has its own attention
