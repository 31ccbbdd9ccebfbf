"""A tiny random Qwen3 target and draft sharing a tokenizer, for serve tests until the toy pair (branch
`toy`) is available: a few hundred kilobytes, built in about a second."""

from __future__ import annotations

import inspect
from pathlib import Path


def build_tiny_pair(root: Path) -> tuple[Path, Path]:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

    target, draft = root / "target", root / "draft"
    if (draft / "config.json").exists():
        return target, draft
    text = inspect.getsource(inspect)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(text.splitlines(), trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    fast.chat_template = (
        "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}"
    )
    for path, layers in ((target, 2), (draft, 1)):
        torch.manual_seed(0)  # same init: the 1-layer draft shares layer 0 with the target
        cfg = Qwen3Config(
            vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
            num_attention_heads=2, num_key_value_heads=1, head_dim=32, max_position_embeddings=512,
            eos_token_id=0, pad_token_id=0, bos_token_id=0, tie_word_embeddings=True,
        )  # fmt: skip
        model = Qwen3ForCausalLM(cfg)
        model.save_pretrained(path)
        fast.save_pretrained(path)
    return target, draft
