"""A real GPTQ checkpoint for the convert integration tests: a tiny random Qwen3ForCausalLM (input sizes
multiples of 128, outputs multiples of 32) quantized by gptqmodel 7.6.0 on CPU, built once per session.

This calls gptqmodel directly because the quantize stage's `specq.pipeline.quantize.quantize` had not landed
when these tests were written; switch to it (and to the `toy_pair` target) once both are on main."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

CALIB = [
    "def add(a, b):\n    return a + b\n",
    "import os\nfor name in os.listdir('.'):\n    print(name)\n",
    "class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = y\n",
    "with open('data.txt') as f:\n    lines = [line.strip() for line in f]\n",
] * 4


def _tiny_qwen3(out: Path) -> None:
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=384, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(CALIB, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    cfg = Qwen3Config(
        vocab_size=384, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, head_dim=64, max_position_embeddings=256, tie_word_embeddings=False,
    )  # fmt: skip
    Qwen3ForCausalLM(cfg).save_pretrained(out)
    fast.save_pretrained(out)


@pytest.fixture(scope="session")
def gptq_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("gptqmodel")
    os.environ.setdefault("GPTQMODEL_CPU_WORKERS", "2")
    from gptqmodel import GPTQModel, QuantizeConfig

    root = tmp_path_factory.mktemp("convert-real")
    _tiny_qwen3(root / "fp")
    cwd = os.getcwd()
    os.chdir(root)  # gptqmodel writes a logs/ directory into the working directory
    try:
        qcfg = QuantizeConfig(bits=4, group_size=128, sym=True, desc_act=False)
        model = GPTQModel.load(str(root / "fp"), qcfg, device="cpu")
        model.quantize(CALIB, batch_size=4)
        model.save(str(root / "gptq"))
    finally:
        os.chdir(cwd)
    return root / "gptq"
