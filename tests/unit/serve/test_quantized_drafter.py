"""A 4-bit (AWQ gemm) DFlash drafter on LMDeploy 0.18's PyTorch engine: served with specq's `dflash-awq` patch
in the server's environment (beside qwen35-awq-bf16 for a 4-bit Qwen3.5 target), without an fp16 copy, and
refused in one line where it cannot work: beside an unquantized bf16 target (LMDeploy runs AWQ in fp16), as
another format, as an EAGLE-3 drafter, or with an LMDeploy the patch does not know. `specq convert` gives
the same verdicts. Headers only: nothing is loaded."""

from __future__ import annotations

from pathlib import Path

import pytest

from specq.pipeline.errors import EnvironmentMissing, UsageError

from .conftest import write_ckpt
from .test_lmdeploy_args import AWQ_Q, _lmdeploy_site, _qwen35, engine_for

DFLASH4 = {
    "architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": 256, "num_hidden_layers": 1,
    "vocab_size": 1024, "num_target_layers": 4, "torch_dtype": "float16",
    "dflash_config": {"block_size": 8, "mask_token_id": 5, "target_layer_ids": [2]},
    "quantization_config": {**AWQ_Q, "modules_to_not_convert": None},
}  # fmt: skip
AWQ_LINEARS = {
    "fc.qweight": ("I32", [256, 32]), "fc.qzeros": ("I32", [2, 32]), "fc.scales": ("F16", [2, 256]),
    "layers.0.mlp.up_proj.qweight": ("I32", [256, 64]), "layers.0.mlp.up_proj.qzeros": ("I32", [2, 64]),
    "layers.0.mlp.up_proj.scales": ("F16", [2, 512]), "norm.weight": ("F16", [256]),
}  # fmt: skip


def drafter4(tmp_path: Path, **config: object) -> Path:
    return write_ckpt(tmp_path / "dflash-awq", {**DFLASH4, **config}, tensors=AWQ_LINEARS)


def spec_model(draft: Path, k: int = 5) -> dict:
    return {"model": {"draft_model_path": str(draft), "num_draft_tokens": k}}


def test_beside_an_awq_target_it_is_served_itself_with_the_dflash_awq_patch(
    tmp_path: Path, ckpts: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from specq.pipeline.engines import lmdeploy_compat

    monkeypatch.syspath_prepend(str(_lmdeploy_site(tmp_path)))
    monkeypatch.setenv("SPECQ_CACHE", str(tmp_path / "cache"))
    d = drafter4(tmp_path)
    engine = engine_for(tmp_path, ckpts["awq"], {"backend": "pytorch"}, **spec_model(d))
    cmd = engine.command()
    assert Path(cmd[cmd.index("--speculative-draft-model") + 1]) == d  # no fp16 copy of a 4-bit drafter
    assert cmd[cmd.index("--speculative-algorithm") + 1] == "dflash"
    env = engine.child_env()
    assert (
        env[lmdeploy_compat.ENV] == "w4a16-specq,dflash-awq"
    )  # specq's W4A16 kernel runs both models' linears
    assert env[lmdeploy_compat.hook.LOG_ENV] == str(tmp_path / "run" / "compat.log")
    q35 = engine_for(tmp_path, _qwen35(tmp_path, "float16", AWQ_Q), {"backend": "pytorch"}, **spec_model(d))
    assert q35.child_env()[lmdeploy_compat.ENV] == "qwen35-awq-bf16,w4a16-specq,dflash-awq"
    plain = engine_for(tmp_path, ckpts["awq"], {"backend": "pytorch"}, model={"num_draft_tokens": 0})
    assert plain.child_env()[lmdeploy_compat.ENV] == "w4a16-specq"  # no drafter loaded: no dflash-awq


def test_beside_an_unquantized_bf16_target_it_is_refused(tmp_path: Path, ckpts: dict[str, Path]) -> None:
    with pytest.raises(UsageError) as e:
        engine_for(tmp_path, ckpts["target"], {"backend": "pytorch"}, **spec_model(drafter4(tmp_path)))
    why = str(e.value)
    assert "AWQ drafter in float16, the target in bfloat16" in why and "\n" not in why


@pytest.mark.parametrize(
    ("config", "needle"),
    [
        (
            {"quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 128}},
            "4-bit AWQ gemm only",
        ),
        ({"quantization_config": {**AWQ_Q, "version": "gemv"}}, "4-bit AWQ gemm only"),
        ({"architectures": ["Eagle3LlamaForCausalLM"], "dflash_config": None}, "4-bit DFlash drafters only"),
    ],
)
def test_other_quantized_drafters_are_refused_in_one_line(
    tmp_path: Path, ckpts: dict[str, Path], config: dict, needle: str
) -> None:
    d = drafter4(tmp_path, **config)
    with pytest.raises(UsageError) as e:
        engine_for(tmp_path, ckpts["awq"], {"backend": "pytorch"}, **spec_model(d, 3))
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_refused_before_launch_when_the_proposer_file_was_changed(
    tmp_path: Path, ckpts: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    site = _lmdeploy_site(tmp_path)
    f = site / "lmdeploy/pytorch/spec_decode/proposers/dflash.py"
    f.write_text(f.read_text() + "# local edit\n")
    monkeypatch.syspath_prepend(str(site))
    with pytest.raises(EnvironmentMissing) as e:
        engine_for(tmp_path, ckpts["awq"], {"backend": "pytorch"}, **spec_model(drafter4(tmp_path)))
    why = str(e.value)
    assert "dflash-awq" in why and "proposers/dflash.py" in why and "--force-reinstall" in why
    assert "\n" not in why


def test_convert_verdicts_for_a_4bit_drafter(tmp_path: Path, ckpts: dict[str, Path], monkeypatch) -> None:
    from specq.pipeline.convert.readiness import check_readiness

    d = drafter4(tmp_path)
    by = {v.engine: v for v in check_readiness(ckpts["awq"], d, 5, write_manifest=False).verdicts}
    assert by["pytorch"].status == "accepted"
    assert any("dflash-awq" in r for r in by["pytorch"].reasons)
    site = _lmdeploy_site(tmp_path)
    f = site / "lmdeploy/pytorch/spec_decode/proposers/dflash.py"
    f.write_text(f.read_text() + "# local edit\n")
    monkeypatch.syspath_prepend(str(site))
    by = {v.engine: v for v in check_readiness(ckpts["awq"], d, 5, write_manifest=False).verdicts}
    assert by["pytorch"].status == "refused" and any("dflash-awq" in r for r in by["pytorch"].reasons)
