"""The toy tokenizer: a byte-level BPE trained with `tokenizers` on the toy corpus and wrapped as a
`PreTrainedTokenizerFast` (so `AutoTokenizer.from_pretrained` loads it), with Qwen-style special tokens and
a ChatML chat template so an OpenAI-compatible server's /v1/chat/completions can format conversations."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

END_OF_TEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = [END_OF_TEXT, IM_START, IM_END]

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def train_tokenizer(
    texts: Iterable[str],
    vocab_size: int,
    *,
    max_length: int = 2048,
    extra_special: tuple[str, ...] = (),
    chat_template: str = CHAT_TEMPLATE,
) -> Any:
    """Train a byte-level BPE with exactly the special tokens above (plus `extra_special`, after them);
    returns a PreTrainedTokenizerFast."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=[*SPECIAL_TOKENS, *extra_special],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=END_OF_TEXT,
        pad_token=END_OF_TEXT,
        model_max_length=max_length,
        additional_special_tokens=[IM_START, IM_END, *extra_special],
    )
    fast.chat_template = chat_template
    return fast
