"""The Qwen3.5-shaped toy, built once per session (or reused from the cache): the reference checkpoint's
config keys and tensor names as LMDeploy 0.18 loads them, a target transformers loads and generates with,
an MTP head whose saved tensors reproduce the report's acceptance, and the cache."""

from __future__ import annotations

import json
import re

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# What LMDeploy 0.18 reads, copied from its source (InternLM/lmdeploy v0.18.0):
# - pytorch/configurations/qwen3_5.py (Qwen3_5ModelConfigBuilder.build): text_config.layer_types,
#   linear_key_head_dim, linear_value_head_dim, linear_num_value_heads, linear_num_key_heads,
#   linear_conv_kernel_dim, attn_output_gate, mtp_num_hidden_layers (for qwen3_5_mtp).
# - pytorch/models/qwen3_5.py: Qwen3_5Model builds `visual` from config.vision_config unconditionally;
#   Qwen3_5Attention reads head_dim, num_key_value_heads; Qwen3_5GatedDeltaNet rms_norm_eps.
LMDEPLOY_TEXT_KEYS = (
    "layer_types", "linear_key_head_dim", "linear_value_head_dim", "linear_num_value_heads",
    "linear_num_key_heads", "linear_conv_kernel_dim", "attn_output_gate", "mtp_num_hidden_layers",
    "head_dim", "num_key_value_heads", "num_attention_heads", "hidden_size", "intermediate_size",
    "num_hidden_layers", "vocab_size", "rms_norm_eps", "rope_parameters",
)  # fmt: skip
# Per-layer parameter names of Qwen3_5DecoderLayer (pytorch/models/qwen3_5.py) as the checkpoint spells
# them; load_weights folds q/k/v → qkv_proj, gate/up → gate_up_proj, in_proj_b/in_proj_a → in_proj_ba, and
# skips `mtp.` names (the MTP model, pytorch/models/qwen3_5_mtp.py, reads those).
LINEAR_LAYER = (
    "linear_attn.in_proj_qkv.weight", "linear_attn.in_proj_z.weight", "linear_attn.in_proj_b.weight",
    "linear_attn.in_proj_a.weight", "linear_attn.conv1d.weight", "linear_attn.A_log", "linear_attn.dt_bias",
    "linear_attn.norm.weight", "linear_attn.out_proj.weight",
)  # fmt: skip
FULL_LAYER = (
    "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
    "self_attn.o_proj.weight", "self_attn.q_norm.weight", "self_attn.k_norm.weight",
)  # fmt: skip
EVERY_LAYER = (
    "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight", "input_layernorm.weight",
    "post_attention_layernorm.weight",
)  # fmt: skip


def test_config_is_the_reference_shape(toy35) -> None:
    config = json.loads((toy35.target / "config.json").read_text())
    assert config["architectures"] == ["Qwen3_5ForConditionalGeneration"]
    assert config["model_type"] == "qwen3_5"
    tc = config["text_config"]
    missing = [k for k in LMDEPLOY_TEXT_KEYS if k not in tc]
    assert not missing
    assert tc["layer_types"].count("linear_attention") == 3 * tc["layer_types"].count("full_attention")
    assert tc["head_dim"] == 256 and tc["attn_output_gate"] is True and tc["mtp_num_hidden_layers"] == 1
    assert tc["rope_parameters"]["partial_rotary_factor"] == 0.25
    assert isinstance(config["vision_config"], dict) and config["vision_config"]["depth"] == 1
    # LMDeploy's vision-language engine loads the image processor at start-up (the H200 run died without it)
    pre = json.loads((toy35.target / "preprocessor_config.json").read_text())
    vc = config["vision_config"]
    assert (pre["patch_size"], pre["temporal_patch_size"], pre["merge_size"]) == (
        vc["patch_size"], vc["temporal_patch_size"], vc["spatial_merge_size"]
    )  # fmt: skip
    vocab = tc["vocab_size"]
    for key in ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id"):
        assert 0 <= config[key] < vocab


def test_tensor_names_are_what_lmdeploy_loads(toy35) -> None:
    from specq.pipeline.checkpoint import Checkpoint

    tc = json.loads((toy35.target / "config.json").read_text())["text_config"]
    tensors = Checkpoint(toy35.target).tensors
    want = {"model.language_model.embed_tokens.weight", "model.language_model.norm.weight", "lm_head.weight"}
    for i, kind in enumerate(tc["layer_types"]):
        own = LINEAR_LAYER if kind == "linear_attention" else FULL_LAYER
        want |= {f"model.language_model.layers.{i}.{n}" for n in (*own, *EVERY_LAYER)}
    mtp = {n for n in tensors if n.startswith("mtp.")}
    visual = {n for n in tensors if n.startswith("model.visual.")}
    assert set(tensors) - mtp - visual == want
    assert {re.sub(r"^mtp\.layers\.0\.", "", n) for n in mtp} >= {"mtp.fc.weight", *FULL_LAYER, *EVERY_LAYER}
    assert visual and all(n.startswith("model.visual.") for n in visual)
    # shapes LMDeploy derives from the config
    h, hd = tc["hidden_size"], tc["head_dim"]
    key_dim = tc["linear_num_key_heads"] * tc["linear_key_head_dim"]
    value_dim = tc["linear_num_value_heads"] * tc["linear_value_head_dim"]
    lin, full = tc["layer_types"].index("linear_attention"), tc["layer_types"].index("full_attention")
    p = "model.language_model.layers"
    assert tensors[f"{p}.{lin}.linear_attn.conv1d.weight"].shape == [
        2 * key_dim + value_dim,
        1,
        tc["linear_conv_kernel_dim"],
    ]
    assert tensors[f"{p}.{lin}.linear_attn.in_proj_b.weight"].shape == [tc["linear_num_value_heads"], h]
    assert tensors[f"{p}.{full}.self_attn.q_proj.weight"].shape == [tc["num_attention_heads"] * hd * 2, h]
    assert tensors[f"{p}.{full}.self_attn.k_proj.weight"].shape == [tc["num_key_value_heads"] * hd, h]
    assert tensors["mtp.fc.weight"].shape == [h, 2 * h]
    assert sum(t.nbytes for t in tensors.values()) < 16 * 2**20  # small enough to carry to a GPU machine


def test_loads_in_transformers_and_generates(toy35) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen3_5ForConditionalGeneration

    tok = AutoTokenizer.from_pretrained(toy35.target)
    text = tok.apply_chat_template(
        [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    model = AutoModelForCausalLM.from_pretrained(toy35.target).eval()
    assert type(model).__name__ == "Qwen3_5ForCausalLM"
    ids = tok("def __init__(self", return_tensors="pt").input_ids
    with torch.no_grad():
        out = model.generate(ids, do_sample=False, max_new_tokens=12, min_new_tokens=12)
    assert out.shape[1] == ids.shape[1] + 12
    full = Qwen3_5ForConditionalGeneration.from_pretrained(toy35.target).eval()  # with the vision tower
    with torch.no_grad():
        assert torch.equal(full(input_ids=ids).logits, model(input_ids=ids).logits)


def test_mtp_head_reproduces_its_report(toy35) -> None:
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from specq.pipeline.hardware import cpu_threads
    from specq.pipeline.toy.acceptance import heldout_prompts
    from specq.pipeline.toy.corpus import load_corpus
    from specq.pipeline.toy.mtp import load_mtp, measure_mtp_acceptance

    report = toy35.load_report()
    assert report.arch == "qwen3.5" and report.mtp is not None
    target = AutoModelForCausalLM.from_pretrained(toy35.target).eval()
    head = load_mtp(target.config, load_file(str(toy35.target / "model.safetensors")))
    acc = report.mtp.acceptance
    tok = AutoTokenizer.from_pretrained(toy35.target)
    prompts = heldout_prompts(tok, load_corpus().heldout, acc.prompts, acc.prompt_tokens)
    with cpu_threads(report.torch_threads):
        again = measure_mtp_acceptance(head, target, prompts, new_tokens=acc.new_tokens)
    for a, b in zip(again, acc.by_k, strict=True):
        assert a.k == b.k and a.mean_accepted == pytest.approx(b.mean_accepted, abs=0.02)
    assert acc.by_k[0].acceptance_rate > 0.3  # the head learned something (random: ~0)


def test_second_call_is_cached(toy35) -> None:
    from specq.pipeline.toy import ToyRequest, build_toy_pair

    mtime = (toy35.target / "model.safetensors").stat().st_mtime_ns
    again = build_toy_pair(ToyRequest(arch="qwen3.5", seed=0))
    assert again == toy35 and (again.target / "model.safetensors").stat().st_mtime_ns == mtime
