"""Quantizing a DFlash drafter (pipeline/quantize/drafter.py, _gptq.py): the 4-bit codes in LMDeploy's AWQ
gemm layout read back by an independent dequantizer, GPTQ against round-to-nearest on correlated inputs, the
4-bit contract (names, shapes, dtypes, `modules_to_not_convert` as LMDeploy matches it), and the one-line
refusals. A tiny random drafter stands in for a trained one; the toy's own, quantized and scored by `specq
draft eval`, is tests/integration/quantize/test_quantize_drafter.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from specq.pipeline.checkpoint import Checkpoint
from specq.pipeline.draft import contract
from tests.convert_dequant import dequant_awq

torch = pytest.importorskip("torch")

AWQ = {"quant_method": "awq", "bits": 4, "group_size": 64, "zero_point": True, "version": "gemm",
       "modules_to_not_convert": None}  # fmt: skip


def _config(**over: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 64,
        "intermediate_size": 256, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "max_position_embeddings": 512,
        "vocab_size": 300, "layer_types": ["full_attention"] * 2, "use_sliding_window": False,
        "num_target_layers": 4, "target_hidden_size": 128,
        "dflash_config": {"block_size": 4, "mask_token_id": 299, "target_layer_ids": [1, 2]},
    }  # fmt: skip
    cfg.update(over)
    return cfg


def _drafter(tmp: Path, cfg: dict[str, Any] | None = None) -> Path:
    """A random tiny DFlash drafter in the contract's layout (float32, as the toy's)."""
    from safetensors.torch import save_file

    cfg = cfg or _config()
    gen = torch.Generator().manual_seed(0)
    tensors = {
        n: (torch.ones(s) if n.endswith("norm.weight") else torch.randn(s, generator=gen) * 0.05)
        for n, s in contract.expected_tensors(cfg).items()
    }
    tmp.mkdir(parents=True)
    save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    (tmp / "config.json").write_text(json.dumps({**cfg, "torch_dtype": "float32", "dtype": "float32"}))
    return tmp


def test_rtn_codes_read_back_through_an_independent_awq_dequantizer() -> None:
    from specq.pipeline.convert.repack import dequantize_awq, pack_awq_linear
    from specq.pipeline.quantize._gptq import rtn

    w = torch.randn(48, 256, generator=torch.Generator().manual_seed(1)) * 0.03  # [out, in]
    q = rtn(w, 4, 64, sym=False)
    qw, qz, sc = pack_awq_linear(q.codes.T.numpy(), q.zeros.T.numpy(), q.scales.T.numpy())
    assert (qw.dtype, qw.shape, qz.shape, sc.dtype, sc.shape) == (
        np.int32,
        (256, 6),
        (4, 6),
        np.float16,
        (4, 48),
    )
    ref = dequant_awq(qw, qz, sc, 64).astype(np.float32)  # tests/convert_dequant.py: TurboMind's unpacking
    assert np.allclose(ref, q.dequantized.T.numpy(), atol=1e-3)
    assert np.allclose(dequantize_awq(qw, qz, sc), q.dequantized.T.numpy(), atol=1e-6)
    err = (q.dequantized - w).abs().reshape(48, 4, 64).amax(-1)  # within half a step of its group
    assert bool((err <= q.scales / 2 + 1e-6).all())
    assert int(q.codes.max()) <= 15 and int(q.zeros.max()) <= 15


def test_gptq_beats_round_to_nearest_on_the_inputs_it_is_calibrated_on() -> None:
    from specq.pipeline.quantize._gptq import gptq, output_error, rtn

    gen = torch.Generator().manual_seed(2)
    w = torch.randn(64, 128, generator=gen) * 0.05
    # inputs of few directions plus noise (as activations are), and dense correlated ones of uneven scale
    low = torch.randn(2048, 8, generator=gen) @ torch.randn(8, 128, generator=gen)
    low = low + 0.1 * torch.randn(2048, 128, generator=gen)
    mixed = torch.randn(2048, 128, generator=gen) @ torch.randn(128, 128, generator=gen)
    mixed = mixed * torch.linspace(0.1, 3.0, 128)
    for x, bound in ((low, 0.2), (mixed, 0.9)):
        h = x.T @ x
        g, r = gptq(w, h, 4, 64, sym=False), rtn(w, 4, 64, sym=False)
        e_g, e_r = output_error(w, g.dequantized, h), output_error(w, r.dequantized, h)
        assert e_g < bound * e_r, (e_g, e_r)
    # GPTQ's codes are what its dequantized weights say (scales fp16, zero points integral)
    deq = (g.codes.float() - g.zeros.float().repeat_interleave(64, 1)) * g.scales.repeat_interleave(64, 1)
    assert torch.allclose(deq, g.dequantized, atol=1e-6)
    assert torch.equal(g.scales, g.scales.half().float())


def test_the_4bit_contract_names_and_shapes() -> None:
    cfg = _config(quantization_config=AWQ)
    want = contract.expected_tensors(cfg)
    assert want["layers.0.self_attn.q_proj.qweight"] == [128, 16]
    assert want["layers.0.self_attn.k_proj.qzeros"] == [2, 8] and want["fc.scales"] == [4, 128]
    assert want["layers.1.mlp.down_proj.qweight"] == [256, 16] and "fc.weight" not in want
    assert want["norm.weight"] == [128]
    assert contract.config_problems(cfg) == []
    assert "group size 48 does not divide" in contract.config_problems(
        _config(quantization_config={**AWQ, "group_size": 48})
    )[0].replace("group_size", "group size")
    assert (
        "4-bit AWQ gemm only"
        in contract.config_problems(_config(quantization_config={**AWQ, "version": "gemv"}))[0]
    )


@pytest.mark.parametrize(
    ("not_convert", "kept"),
    [
        (["fc"], {"fc"}),
        # LMDeploy matches the fused module: naming it keeps both of its checkpoint linears
        (["layers.1.mlp.gate_up_proj"], {"layers.1.mlp.gate_proj", "layers.1.mlp.up_proj"}),
        # a target's MTP entries name the drafter's layer 0 too (the reason for the dflash-awq patch)
        (["mtp.layers.0.self_attn.qkv_proj"], {f"layers.0.self_attn.{p}_proj" for p in "qkv"}),
        (["layers.0"], set()),  # an entry shorter than the module name matches nothing
    ],
)
def test_modules_to_not_convert_as_lmdeploy_matches_them(not_convert: list[str], kept: set[str]) -> None:
    cfg = _config(quantization_config={**AWQ, "modules_to_not_convert": not_convert})
    every = {f"layers.{n}.{m}" for n in range(2) for m in contract.QUANTIZABLE} | {"fc"}
    assert set(contract.quantized_prefixes(cfg)) == every - kept
    assert all(f"{p}.weight" in contract.expected_tensors(cfg) for p in kept)


def test_rtn_without_a_target_writes_a_drafter_the_contract_accepts(cli, tmp_path: Path) -> None:
    src = _drafter(tmp_path / "bf16")
    out = tmp_path / "w4"
    code, stdout, err = cli("quantize", str(src), "--group-size", "64", "--out", str(out), "--json")
    assert code == 0, err
    data = json.loads(stdout)
    d = data["drafter"]
    assert (d["algorithm"], d["output_error_basis"], data["format"]) == ("rtn", "weights", "awq")
    assert d["why_rtn"] and "round-to-nearest" in data["warnings"][0] and "no --target-model" in err
    assert len(d["quantized"]) == 15 and set(d["kept"]) == {
        n for n in contract.expected_tensors(_config()) if n.endswith("norm.weight")
    }
    ck = Checkpoint(out)
    assert ck.quantization is not None and (ck.quantization.method, ck.quantization.group_size) == ("awq", 64)
    assert contract.check_drafter(ck) == []
    assert ck.config["torch_dtype"] == "float16" and ck.tensors["norm.weight"].dtype == "F32"  # kept as is
    assert {ck.tensors[n].dtype for n in ck.tensors if n.endswith(".scales")} == {"F16"}
    # the norms are the original's, byte for byte; the linears dequantize to within their groups' steps
    from safetensors.torch import load_file

    a, b = load_file(str(src / "model.safetensors")), load_file(str(out / "model.safetensors"))
    assert torch.equal(a["layers.1.input_layernorm.weight"], b["layers.1.input_layernorm.weight"])
    from specq.pipeline.draft.eval import load_drafter

    drafter, _ = load_drafter(ck, "cpu")
    w = drafter.layers[0].mlp.up_proj.weight.detach()
    assert w.shape == (256, 128) and float((w - a["layers.0.mlp.up_proj.weight"]).abs().max()) < 0.02
    assert (out / "quant_report.json").is_file() and (out / "specq-quantize.toml").is_file()


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--method", "gptq"], "written as 4-bit AWQ gemm"),
        (["--for", "plain"], "--for speculative"),
        (["--quant-backend", "gptqmodel"], "specq quantizes drafters itself"),
        (["--bits", "8", "--no-turbomind-check"], "4-bit AWQ only"),
        (["--group-size", "96"], "--group-size 96"),
    ],
)
def test_what_cannot_be_a_4bit_drafter_is_refused_in_one_line(
    cli, tmp_path: Path, flags: list[str], needle: str
) -> None:
    src = _drafter(tmp_path / "bf16")
    code, out, err = cli("quantize", str(src), *flags, "--out", str(tmp_path / "w4"))
    assert code == 2 and out == "" and needle in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "w4").exists()


def test_a_target_model_needs_calibration_text_and_a_drafter(cli, tmp_path: Path) -> None:
    src = _drafter(tmp_path / "bf16")
    code, _, err = cli("quantize", str(src), "--target-model", str(src), "--out", str(tmp_path / "w4"))
    assert code == 2 and len(err.strip().splitlines()) == 1
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "config.json").write_text(json.dumps({"architectures": ["Qwen3ForCausalLM"], "hidden_size": 64}))
    code, _, err = cli("quantize", str(plain), "--target-model", str(src), "--calib", "x.jsonl",
                       "--out", str(tmp_path / "o"))  # fmt: skip
    assert code == 2 and "--target-model is for quantizing a drafter" in err


def test_an_eagle3_drafter_is_refused(cli, tmp_path: Path) -> None:
    d = tmp_path / "eagle3"
    d.mkdir()
    (d / "config.json").write_text(
        json.dumps({"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 64})
    )
    code, _, err = cli("quantize", str(d), "--out", str(tmp_path / "w4"))
    assert code == 2 and "specq quantizes DFlash drafters" in err and len(err.strip().splitlines()) == 1
