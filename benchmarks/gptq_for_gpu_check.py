"""Prepare the GPTQ checkpoint that `tests/gpu/test_convert_gpu.py` loads on a GPU machine without gptqmodel:
a random 2-layer Qwen3 whose projections are multiples of 128 (LMDeploy's PyTorch-engine AWQ linear asserts
that; the small toy's 64-wide KV head fails it), quantized to 4-bit GPTQ here on CPU with gptqmodel.

    PYTHONPATH=. python benchmarks/gptq_for_gpu_check.py .device/quant
    # then, on the GPU machine: SPECQ_GPU_QUANT_ROOT=.device/quant pytest -m gpu tests/gpu/test_convert_gpu.py
"""

from __future__ import annotations

import sys
from pathlib import Path


def main(root: Path) -> None:
    import torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    from tests.integration.convert.conftest import quantize_gptq
    from tests.tinymodel import build_tokenizer

    out = root / "model"
    out.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer(out)
    torch.manual_seed(0)
    cfg = Qwen3Config(
        vocab_size=len(tok), hidden_size=512, intermediate_size=1536, num_hidden_layers=2,
        num_attention_heads=8, num_key_value_heads=4, head_dim=64, max_position_embeddings=512,
        tie_word_embeddings=False, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
        bos_token_id=tok.eos_token_id,
    )  # fmt: skip
    Qwen3ForCausalLM(cfg).to(torch.bfloat16).save_pretrained(out)
    GenerationConfig(eos_token_id=tok.eos_token_id, do_sample=False).save_pretrained(out)
    quantize_gptq(out, root, "cpu")
    print(f"wrote {root / 'model'} and {root / 'gptq'}")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else ".device/quant"))
