"""Kernel-set derivation from real config.json files: the toy pair (small and medium, with a DFlash
drafter), a Qwen3.5-27B-shaped hybrid model, AWQ vs bf16, fp32, sliding windows; and the files setup.py
compiles for the derived flags."""

from __future__ import annotations

from pathlib import Path

import pytest

from specq.pipeline.errors import InputError
from specq.pipeline.fa3.kernels import bucket, derive_needs, kernel_set, setup_py_sources
from tests.fa3files import AWQ, QWEN35_27B, toy_configs, write_config

pytest.importorskip("transformers")  # the toy configs are written by transformers' Qwen3Config


def test_toy_pair_bf16_with_dflash_drafter(tmp_path: Path) -> None:
    target, draft, dflash = toy_configs(tmp_path)
    needs = derive_needs([target, dflash])
    assert [(n.role, n.head_dims, n.dtypes) for n in needs] == [
        ("target", (64,), ("bf16",)),
        ("draft", (64,), ("bf16",)),
    ]
    assert needs[1].dtype_reason == "drafter runs in the target's dtype"
    ks = kernel_set(needs, "sm90")
    assert ks.hdims == (64,) and ks.dtypes == ("bf16",) and not ks.local and not ks.softcap
    assert "FLASH_ATTENTION_DISABLE_FP16" in ks.env()
    assert (
        "FLASH_ATTENTION_DISABLE_PAGEDKV" not in ks.env() and "FLASH_ATTENTION_DISABLE_VARLEN" not in ks.env()
    )


def test_awq_target_needs_fp16_and_its_drafter_follows(tmp_path: Path) -> None:
    target, _, dflash = toy_configs(tmp_path)
    import json

    cfg = json.loads((target / "config.json").read_text())
    awq = write_config(tmp_path / "awq", cfg | {"quantization_config": AWQ, "torch_dtype": "float16"})
    needs = derive_needs([awq, dflash])  # the drafter checkpoint itself says bfloat16
    assert [n.dtypes for n in needs] == [("fp16",), ("fp16",)]
    assert "AWQ" in needs[0].dtype_reason
    ks = kernel_set(needs, "sm90")
    assert ks.dtypes == ("bf16", "fp16")  # bf16 cannot be disabled in setup.py
    assert "FLASH_ATTENTION_DISABLE_FP16" not in ks.env()


def test_fp32_and_unset_dtypes_run_in_fp16(tmp_path: Path) -> None:
    target, _, _ = toy_configs(tmp_path, dtype="float32")
    need = derive_needs([target])[0]
    assert need.dtypes == ("fp16",) and "float32" in need.dtype_reason
    assert derive_needs([target], dtype="bf16")[0].dtypes == ("bf16",)  # an explicit engine dtype wins


def test_drafter_head_dim_differs_from_target(tmp_path: Path) -> None:
    """A 27B-shaped target (full attention at 256) with a drafter of head dim 128: both buckets, and a
    drafter given alone runs in its own dtype."""
    target = write_config(tmp_path / "q35", QWEN35_27B)
    drafter = write_config(
        tmp_path / "drafter",
        {
            "architectures": ["DFlashDraftModel"],
            "hidden_size": 5120,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "torch_dtype": "float16",
            "layer_types": ["full_attention"],
            "dflash_config": {"block_size": 16},
        },
    )
    needs = derive_needs([drafter, target])  # order given does not matter: targets first
    assert [(n.role, n.head_dims, n.dtypes) for n in needs] == [
        ("target", (256,), ("bf16",)),
        ("draft", (128,), ("bf16",)),
    ]
    assert kernel_set(needs, "sm90").hdims == (128, 256)
    assert derive_needs([drafter])[0].dtypes == ("fp16",)


def test_qwen35_only_full_attention_layers_use_fa3(tmp_path: Path) -> None:
    target = write_config(tmp_path / "q35", QWEN35_27B)
    assert derive_needs([target])[0].head_dims == (256,)
    linear_only = dict(
        QWEN35_27B, text_config=dict(QWEN35_27B["text_config"], layer_types=["linear_attention"] * 4)
    )
    need = derive_needs([write_config(tmp_path / "lin", linear_only)])[0]
    assert need.head_dims == () and "no attention layers" in need.notes[0]
    with pytest.raises(InputError, match="nothing to build"):
        kernel_set([need], "sm90")


def test_head_dim_from_hidden_size_and_sliding_window(tmp_path: Path) -> None:
    cfg = {"architectures": ["Qwen2ForCausalLM"], "hidden_size": 1536, "num_attention_heads": 12,
           "use_sliding_window": True, "sliding_window": 4096, "torch_dtype": "bfloat16"}  # fmt: skip
    need = derive_needs([write_config(tmp_path / "m", cfg)])[0]
    assert need.head_dims == (128,) and need.local
    ks = kernel_set([need], "sm80")
    assert ks.local and "FLASH_ATTENTION_DISABLE_LOCAL" not in ks.env()
    assert "FLASH_ATTENTION_DISABLE_SM80" not in ks.env()


def test_buckets_and_bad_head_dims() -> None:
    assert [bucket(h) for h in (32, 64, 80, 96, 112, 128, 160, 256, 257)] == [
        64,
        64,
        96,
        96,
        128,
        128,
        192,
        256,
        None,
    ]
    with pytest.raises(InputError, match="head dim 512"):
        kernel_set([], "sm90", extra_head_dims=[512])


def test_mla_models_are_refused(tmp_path: Path) -> None:
    cfg = {"architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 7168, "num_attention_heads": 128,
           "kv_lora_rank": 512}  # fmt: skip
    with pytest.raises(InputError, match="MLA"):
        derive_needs([write_config(tmp_path / "ds", cfg)])


def test_sources_of_the_readme_build() -> None:
    """hdim64 × {fp16, bf16} × {paged, not paged} on sm90: the 4 kernels shared/fa3/README.md measured."""
    ks = kernel_set([], "sm90", extra_head_dims=[64], extra_dtypes=["fp16"])
    sources = setup_py_sources(ks.disabled(), "2.13.0")
    assert sources == [
        "flash_api_stable.cpp",
        "instantiations/flash_fwd_hdim64_bf16_sm90.cu",
        "instantiations/flash_fwd_hdim64_bf16_paged_sm90.cu",
        "instantiations/flash_fwd_hdim64_fp16_sm90.cu",
        "instantiations/flash_fwd_hdim64_fp16_paged_sm90.cu",
        "flash_prepare_scheduler.cu",
    ]
    assert setup_py_sources(ks.disabled(), "2.8.0")[0] == "flash_api.cpp"


def test_sm80_adds_the_ampere_kernels_beside_the_hopper_ones() -> None:
    ks = kernel_set([], "sm80", extra_head_dims=[64, 256])
    kernels = [s for s in setup_py_sources(ks.disabled(), "2.13.0") if s.startswith("instantiations/")]
    assert len(kernels) == 8  # 2 hdims × bf16 × {paged, not} × {sm80, sm90}
    assert "instantiations/flash_fwd_hdim256_bf16_paged_sm80.cu" in kernels
    assert "instantiations/flash_fwd_hdim256_bf16_paged_sm90.cu" in kernels


def test_a_full_build_compiles_290_kernel_files() -> None:
    """Nothing disabled: 290 of hopper/instantiations' 451 files (the rest are sm100 or unused variants;
    test_setup_py checks this list against setup.py's own enumeration)."""
    full = [s for s in setup_py_sources([], "2.13.0") if s.startswith("instantiations/")]
    assert len(full) == 290 and len(set(full)) == len(full)


def test_unquantized_qwen35_needs_bf16_whatever_it_is_stored_in(tmp_path: Path) -> None:
    """specq serves an unquantized Qwen3.5 with --dtype bfloat16 (LMDeploy 0.18's linear-attention state is
    bf16): a float32 checkpoint such as the toy needs the bf16 kernels, not the fp16 ones 'auto' would run."""
    fp32 = write_config(tmp_path / "q35", dict(QWEN35_27B, torch_dtype="float32"))
    need = derive_needs([fp32])[0]
    assert need.dtypes == ("bf16",) and "--dtype bfloat16" in need.dtype_reason
