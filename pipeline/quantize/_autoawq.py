"""AWQ through autoawq (archived upstream, kept because its output is the reference AWQ gemm layout). It
skips calibration texts longer than its sequence length without a word, so it is given specq's packed
samples, each exactly `seqlen` tokens or shorter."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import missing_package
from ._capture import hook_layers
from .backends import Job, LayerHook

if TYPE_CHECKING:
    from ..calibration import Calibration


def run(job: Job, calib: Calibration, on_layer: LayerHook) -> None:
    try:
        from awq import AutoAWQForCausalLM
    except ImportError:
        raise missing_package("autoawq", "quant") from None
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(job.model))
    model = AutoAWQForCausalLM.from_pretrained(
        str(job.model), device_map="cuda" if job.device == "cuda" else None, trust_remote_code=False
    )
    quant_config = {
        "zero_point": not job.sym,
        "q_group_size": job.group_size,
        "w_bit": job.bits,
        "version": "GEMM",
    }
    handles = hook_layers(model.model, on_layer)
    try:
        model.quantize(
            tokenizer,
            quant_config=quant_config,
            calib_data=calib.samples,
            max_calib_samples=len(calib.samples),
            max_calib_seq_len=job.seqlen,
        )
    finally:
        for h in handles:
            h.remove()
    model.save_quantized(str(job.out))
    tokenizer.save_pretrained(str(job.out))
