"""How much quantization cost: perplexity of the original and the quantized model on held-out packed text,
and the cosine between their next-token logits on a few prompts. The quantized checkpoint is loaded the way
a user would load it, by the loader the embedded engine uses (`engines.embedded.load_quantized`)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from ..engines.embedded import load_quantized

PROMPT_TOKENS = 32
PROMPTS = 4


class QualityReport(BaseModel):
    perplexity_original: float | None = None
    perplexity_quantized: float | None = None
    perplexity_ratio: float | None = None
    top1_agreement: float | None = None  # greedy next token equal to the original's, teacher-forced
    heldout_tokens: int = 0
    logits_cosine_mean: float | None = None
    logits_cosine_min: float | None = None
    prompts: int = 0


def load_original(model: Path, device: str) -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    m = AutoModelForCausalLM.from_pretrained(str(model), dtype=torch.float32, device_map=device)
    return m.eval()


def _device_of(model: Any) -> Any:
    return next(model.parameters()).device


def score(model: Any, chunks: list[list[int]]) -> tuple[float, list[Any]]:
    """Perplexity over the chunks, and each chunk's greedy next-token ids (for top-1 agreement)."""
    import torch

    nll, count = 0.0, 0
    top1: list[Any] = []
    dev = _device_of(model)
    with torch.inference_mode():
        for ids in chunks:
            if len(ids) < 2:
                continue
            x = torch.tensor([ids], device=dev)
            logits = model(input_ids=x).logits.float()[0, :-1]
            nll += torch.nn.functional.cross_entropy(logits, x[0, 1:], reduction="sum").item()
            count += len(ids) - 1
            top1.append(logits.argmax(-1).cpu())
    return math.exp(nll / max(count, 1)), top1


def top1_agreement(reference: list[Any], other: list[Any]) -> float | None:
    """Share of positions where two models' greedy next tokens agree (teacher-forced on the same text)."""
    same = sum(int((a == b).sum()) for a, b in zip(reference, other, strict=True))
    total = sum(a.numel() for a in reference)
    return same / total if total else None


def last_logits(model: Any, prompts: list[list[int]]) -> list[Any]:
    import torch

    dev = _device_of(model)
    with torch.inference_mode():
        return [model(input_ids=torch.tensor([p], device=dev)).logits.float()[0, -1].cpu() for p in prompts]


def evaluate(
    original: Path, quantized: Path, heldout: list[list[int]], prompts: list[list[int]], device: str
) -> QualityReport:
    import gc

    import torch

    prompts = [p[:PROMPT_TOKENS] for p in prompts if p][:PROMPTS]
    m = load_original(original, device)
    ppl_o, top_o = score(m, heldout) if heldout else (None, [])
    ref = last_logits(m, prompts)
    del m
    gc.collect()
    q = load_quantized(quantized, device)
    ppl_q, top_q = score(q, heldout) if heldout else (None, [])
    got = last_logits(q, prompts)
    del q
    gc.collect()
    cos = [torch.nn.functional.cosine_similarity(a, b, dim=0).item() for a, b in zip(ref, got, strict=True)]
    return QualityReport(
        perplexity_original=ppl_o,
        perplexity_quantized=ppl_q,
        perplexity_ratio=(ppl_q / ppl_o) if ppl_o and ppl_q else None,
        top1_agreement=top1_agreement(top_o, top_q) if heldout else None,
        heldout_tokens=sum(len(c) for c in heldout),
        logits_cosine_mean=(sum(cos) / len(cos)) if cos else None,
        logits_cosine_min=min(cos) if cos else None,
        prompts=len(cos),
    )
