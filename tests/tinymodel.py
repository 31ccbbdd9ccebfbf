"""A tiny random Qwen3 causal LM with a byte-level BPE tokenizer and a chat template, built in seconds, for
the quantize and calibration tests until the toy pair is available to them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
)


def corpus() -> list[str]:
    """Real text that is on every machine: the standard library's json and email packages."""
    root = Path(json.__file__).parent.parent
    files = sorted((root / "json").glob("*.py")) + sorted((root / "email").glob("*.py"))
    return [f.read_text(encoding="utf-8") for f in files]


def build_tokenizer(out: Path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(corpus()[:6], trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    return fast


def build_tiny_model(out: Path, seed: int = 0) -> Path:
    import torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    out.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer(out)
    torch.manual_seed(seed)
    cfg = Qwen3Config(
        vocab_size=len(tok), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=512,
        tie_word_embeddings=False, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
        bos_token_id=tok.eos_token_id,
    )  # fmt: skip
    model = Qwen3ForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(out)
    GenerationConfig(eos_token_id=tok.eos_token_id, do_sample=False).save_pretrained(out)
    return out


# Qwen3.5's real MTP tensor names (LMDeploy 0.18 pytorch/models/qwen3_5_mtp.py maps `mtp.` to its predictor:
# fc over [embedding, hidden], two pre-fc norms, a final norm and `mtp.layers.N` full-attention layers).
MTP_LAYER_TENSORS = (
    "input_layernorm", "post_attention_layernorm", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
    "self_attn.o_proj", "self_attn.q_norm", "self_attn.k_norm", "mlp.gate_proj", "mlp.up_proj",
    "mlp.down_proj",
)  # fmt: skip


def build_tiny_qwen35(out: Path, seed: int = 0) -> Path:
    """A tiny random `Qwen3_5ForConditionalGeneration` laid out as the real Qwen3.5 checkpoints are: text
    layers 3 Gated DeltaNet : 1 full attention (head dim 256, the output-gated q_proj), a one-block vision
    tower, `model.language_model.*` / `model.visual.*` names, one MTP layer's `mtp.*` tensors (transformers
    does not load them, so they are added to the file as the real checkpoint ships them) and the tiny
    tokenizer. No image processor: transformers' Qwen3-VL processor needs torchvision (not installed)."""
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import GenerationConfig, Qwen3_5Config, Qwen3_5ForConditionalGeneration

    out.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer(out)
    torch.manual_seed(seed)
    ids = {
        "eos_token_id": tok.eos_token_id,
        "pad_token_id": tok.pad_token_id,
        "bos_token_id": tok.eos_token_id,
    }
    text = dict(
        vocab_size=len(tok), hidden_size=128, intermediate_size=256, num_hidden_layers=4,
        layer_types=["linear_attention"] * 3 + ["full_attention"], num_attention_heads=2,
        num_key_value_heads=1, head_dim=256, linear_conv_kernel_dim=4, linear_key_head_dim=32,
        linear_value_head_dim=32, linear_num_key_heads=2, linear_num_value_heads=4, mtp_num_hidden_layers=1,
        max_position_embeddings=512, tie_word_embeddings=False, **ids,
    )  # fmt: skip
    vision = dict(
        depth=1, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=16, temporal_patch_size=2,
        spatial_merge_size=2, out_hidden_size=128, num_position_embeddings=16,
    )  # fmt: skip
    # image/video token ids inside the tiny vocabulary (the real ones are 248053..248057)
    specials = {
        "image_token_id": 3,
        "video_token_id": 4,
        "vision_start_token_id": 5,
        "vision_end_token_id": 6,
    }
    cfg = Qwen3_5Config(text_config=text, vision_config=vision, tie_word_embeddings=False, **specials)
    model = Qwen3_5ForConditionalGeneration(cfg).to(torch.bfloat16)
    model.save_pretrained(out)
    GenerationConfig(eos_token_id=tok.eos_token_id, do_sample=False).save_pretrained(out)
    weights = out / "model.safetensors"
    tensors = load_file(str(weights))
    src = "model.language_model.layers.3."  # a full-attention layer: the MTP layer has its shapes
    for name in MTP_LAYER_TENSORS:
        tensors[f"mtp.layers.0.{name}.weight"] = tensors[f"{src}{name}.weight"].clone()
    h = text["hidden_size"]
    tensors["mtp.fc.weight"] = (torch.randn(h, 2 * h) * 0.02).to(torch.bfloat16)
    for norm in ("pre_fc_norm_embedding", "pre_fc_norm_hidden", "norm"):
        tensors[f"mtp.{norm}.weight"] = torch.zeros(h, dtype=torch.bfloat16)
    save_file(tensors, str(weights), metadata={"format": "pt"})
    return out


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def calibration_rows(chars: int = 1500) -> list[dict]:
    return [{"text": t[i : i + chars]} for t in corpus() for i in range(0, len(t), chars)]


if __name__ == "__main__":  # pragma: no cover - manual use: python -m tests.tinymodel DIR
    build_tiny_model(Path(sys.argv[1]))
