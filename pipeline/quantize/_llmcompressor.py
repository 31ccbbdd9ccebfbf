"""GPTQ W4A16 through llmcompressor: writes compressed-tensors (pack-quantized), which TurboMind reads. Its
AWQ path needs patching on CPU, so it is not offered. Act-order is switched off (TurboMind refuses it)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import missing_package
from ._capture import hook_layers
from .backends import Job, LayerHook

if TYPE_CHECKING:
    from ..calibration import Calibration


def recipe(job: Job) -> Any:
    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme
    from llmcompressor.modifiers.quantization import GPTQModifier

    weights = QuantizationArgs(
        num_bits=job.bits, type="int", symmetric=job.sym, strategy="group", group_size=job.group_size
    )
    scheme = QuantizationScheme(targets=["Linear"], weights=weights)
    return GPTQModifier(config_groups={"group_0": scheme}, ignore=["lm_head"], actorder=None)


def run(job: Job, calib: Calibration, on_layer: LayerHook) -> None:
    try:
        from llmcompressor import oneshot
    except ImportError:
        raise missing_package("llmcompressor", "quant") from None
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(job.model), dtype="auto")
    if job.device == "cuda":
        model.to("cuda")  # type: ignore[arg-type]
    tokenizer = AutoTokenizer.from_pretrained(str(job.model))
    ds = Dataset.from_dict(
        {"input_ids": calib.samples, "attention_mask": [[1] * len(s) for s in calib.samples]}
    )
    handles = hook_layers(model, on_layer)
    try:
        oneshot(
            model=model,
            tokenizer=tokenizer,
            dataset=ds,
            recipe=recipe(job),
            max_seq_length=job.seqlen,
            num_calibration_samples=len(calib.samples),
            shuffle_calibration_samples=False,
        )
    finally:
        for h in handles:
            h.remove()
    model.save_pretrained(str(job.out), save_compressed=True)
    tokenizer.save_pretrained(str(job.out))
