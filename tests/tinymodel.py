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


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def calibration_rows(chars: int = 1500) -> list[dict]:
    return [{"text": t[i : i + chars]} for t in corpus() for i in range(0, len(t), chars)]


if __name__ == "__main__":  # pragma: no cover - manual use: python -m tests.tinymodel DIR
    build_tiny_model(Path(sys.argv[1]))
