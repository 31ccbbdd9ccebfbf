"""Planning before a download, through the CLI: a bare config.json file is planned like a config-only
directory, `--quant awq` plans a bf16 config as the AWQ checkpoint specq would make of it (the plan of the
AWQ scale twin built from the same config, to the byte), and a plan that does not fit says so first."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from specq.pipeline.twin.spec import read_source, target_tensors

FIXTURE_27B = Path(__file__).parent.parent.parent / "fixtures" / "twin" / "qwen3_5-27b-config.json"
GPU = ("--gpu-memory", "24GiB")


def plan_json(cli, *args: str) -> dict:
    code, out, err = cli("plan", *args, "--json")
    assert code == 0, err
    return json.loads(out)


def small_qwen35(vocab: int = 1024) -> dict:
    """A Qwen3.5 config small enough for a twin built in seconds (AWQ-aligned: widths multiples of 128)."""
    text = dict(
        model_type="qwen3_5_text", vocab_size=vocab, hidden_size=128, intermediate_size=256,
        num_hidden_layers=4, layer_types=["linear_attention"] * 3 + ["full_attention"], num_attention_heads=2,
        num_key_value_heads=1, head_dim=256, linear_conv_kernel_dim=4, linear_key_head_dim=32,
        linear_value_head_dim=32, linear_num_key_heads=2, linear_num_value_heads=4, mtp_num_hidden_layers=1,
        max_position_embeddings=4096, tie_word_embeddings=False, eos_token_id=vocab - 24,
        pad_token_id=vocab - 24, dtype="bfloat16",
        rope_parameters={"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25},
    )  # fmt: skip
    vision = dict(
        depth=2, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=16, temporal_patch_size=2,
        spatial_merge_size=2, out_hidden_size=128, num_position_embeddings=16,
    )  # fmt: skip
    return {
        "architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5", "text_config": text,
        "vision_config": vision, "tie_word_embeddings": False, "eos_token_id": vocab - 22,
        "vision_start_token_id": vocab - 16, "vision_end_token_id": vocab - 15, "image_token_id": vocab - 13,
        "video_token_id": vocab - 12,
    }  # fmt: skip


def small_qwen3() -> dict:
    return {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": 640, "hidden_size": 128,
        "intermediate_size": 384, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 32, "max_position_embeddings": 4096, "tie_word_embeddings": False, "eos_token_id": 600,
        "bos_token_id": 601, "rms_norm_eps": 1e-6, "rope_theta": 1e6, "torch_dtype": "bfloat16",
    }  # fmt: skip


def test_a_bare_config_file_plans_like_a_directory_holding_it(cli, tmp_path: Path) -> None:
    shutil.copy(FIXTURE_27B, (tmp_path / "config.json"))
    from_file = plan_json(cli, str(FIXTURE_27B), *GPU, "-k", "3")
    from_dir = plan_json(cli, str(tmp_path), *GPU, "-k", "3")
    assert from_file["target"]["path"] == str(FIXTURE_27B)
    assert from_file["target"]["weights_source"] == "config estimate"
    for doc in (from_file, from_dir):
        doc["target"].pop("path")
    assert from_file == from_dir
    assert from_file["fits"] is False  # bf16 27B: 51.7 GiB of weights


@pytest.mark.parametrize("config", [small_qwen35, small_qwen3], ids=["qwen3.5", "qwen3"])
def test_quant_awq_on_paper_is_the_plan_of_the_awq_twin(cli, tmp_path: Path, config) -> None:
    """`specq twin CONFIG --quant awq` writes the weights; `specq plan CONFIG --quant awq` only reads CONFIG.
    Both plans count the same bytes, so every figure agrees (within 1 % would do; here they are equal)."""
    src = tmp_path / "model.json"
    src.write_text(json.dumps(config()))
    code, _, err = cli("twin", str(src), "--quant", "awq", "--device", "cpu", "--out", str(tmp_path / "twin"))
    assert code == 0, err
    args = (*GPU, "--session-len", "2048", "-k", "3")
    twin = plan_json(cli, str(tmp_path / "twin" / "target"), *args)
    paper = plan_json(cli, str(src), "--quant", "awq", *args)
    assert twin["target"]["weights_source"] == "safetensors headers"
    assert paper["target"]["weights_source"] == "config estimate"
    assert paper["target"]["quantization"] == twin["target"]["quantization"] == "awq 4-bit g128"
    for key in ("weights_bytes", "peak_bytes", "kv_bytes_per_token", "state_bytes_per_sequence",
                "max_session_len", "cache_max_entry_count", "fits"):  # fmt: skip
        assert paper[key] == twin[key], key
    assert any(n.startswith("--quant awq:") for n in paper["notes"])


def test_27b_awq_mtp_on_paper_fits_24gib_as_its_twin_does(cli) -> None:
    """The reference question before a 55 GB download: does Qwen3.5-27B in AWQ with its MTP head (k = 3) fit
    a 24 GiB card? The weights are the AWQ twin's to the byte (`twin.spec`, which `specq twin` writes)."""
    doc = plan_json(cli, str(FIXTURE_27B), "--quant", "awq", *GPU, "--draft-tokens", "3")
    twin_bytes = sum(t.nbytes for t in target_tensors(read_source(FIXTURE_27B), "awq"))
    assert doc["target"]["weights_bytes"] == doc["weights_bytes"] == twin_bytes == 19_547_547_104
    assert doc["target"]["weights_breakdown"]["mtp"] > 0  # k = 3 with no drafter: the MTP head drafts
    assert doc["fits"] is True and doc["cache_max_entry_count"] == 0.41 and doc["max_session_len"] == 14720
    code, out, _ = cli("plan", str(FIXTURE_27B), "--quant", "awq", *GPU, "--draft-tokens", "3")
    assert code == 0 and out.splitlines()[0].startswith("fits: ")


def test_a_plan_that_does_not_fit_says_so_on_its_first_line(cli) -> None:
    args = (str(FIXTURE_27B), "--quant", "awq", *GPU, "-k", "3", "--session-len", "65536")
    code, out, err = cli("plan", *args)
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0] == "will not fit: session_len 65536 at batch 1"
    advice = [i for i, line in enumerate(lines) if line.startswith("would fit: ")]
    assert advice and lines[advice[0]].startswith("would fit: --session-len ")
    assert not any(line.startswith("recommended: ") for line in lines)  # nothing here fits to recommend
    code, out, _ = cli("plan", str(FIXTURE_27B), *GPU)
    assert out.splitlines()[0].startswith("will not fit: weights alone need")


def test_quant_refusals_are_one_line(cli, tmp_path: Path) -> None:
    src = tmp_path / "model.json"
    src.write_text(json.dumps(small_qwen3()))
    assert cli("twin", str(src), "--quant", "awq", "--device", "cpu", "--out", str(tmp_path / "t"))[0] == 0
    code, out, err = cli("plan", str(tmp_path / "t" / "target"), "--quant", "awq", *GPU)
    assert code == 2 and out == "" and "already quantized (awq)" in err and err.count("\n") == 1
    mistral = {**small_qwen3(), "architectures": ["MistralForCausalLM"], "model_type": "mistral"}
    (tmp_path / "m.json").write_text(json.dumps(mistral))
    code, _, err = cli("plan", str(tmp_path / "m.json"), "--quant", "awq", *GPU)
    assert code == 2 and "MistralForCausalLM" in err and err.count("\n") == 1
    assert cli("plan", str(tmp_path / "m.json"), *GPU)[0] == 0  # as it is, it plans
    code, _, err = cli("plan", str(src), "--quant", "gptq", *GPU)
    assert code == 2 and "--quant" in err
    (tmp_path / "broken.json").write_text("{")
    code, _, err = cli("plan", str(tmp_path / "broken.json"), *GPU)
    assert code == 2 and "not valid JSON" in err and err.count("\n") == 1
