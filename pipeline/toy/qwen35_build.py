"""The Qwen3.5 toy's extra build steps (torch): train its MTP head against the trained target, measure the
head's chained acceptance on the held-out prompts, and write the head into the target's checkpoint as
`mtp.*` tensors (transformers ignores them when loading; LMDeploy's `qwen3_5_mtp` reads them)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..progress import Progress
from .acceptance import AcceptanceAtK
from .models import SizePreset, param_count
from .qwen35 import TRAINING


@dataclass
class MTPBuilt:
    """The trained head and what the report says of it (build.py turns it into an `MTPReport`)."""

    head: Any
    params: int
    train: Any  # train.TrainResult
    tensors: list[str]
    by_k: list[AcceptanceAtK]
    prompts: int


def train_and_measure_mtp(
    target: Any, data: Any, preset: SizePreset, seed: int, prompts: list[list[int]], device: str,
    max_k: int, progress: Progress,
) -> MTPBuilt:  # fmt: skip
    import torch

    from .mtp import MTPHead, measure_mtp_acceptance, mtp_tensors, train_mtp

    torch.manual_seed(seed + 2)
    head = MTPHead(target.config.text_config)
    head.init_weights(seed + 2)
    head.to(device)
    progress(f"training the MTP head ({param_count(head) / 1e6:.2f}M parameters, {TRAINING.mtp_steps} steps)")
    res = train_mtp(
        head, target, data.train_stream, steps=TRAINING.mtp_steps, seq_len=preset.seq_len,
        batch_size=preset.batch_size, lr=TRAINING.mtp_lr, seed=seed, device=device, progress=progress,
    )  # fmt: skip
    progress(f"measuring the MTP head's chained acceptance (k = 1..{max_k})")
    by_k = measure_mtp_acceptance(
        head, target, prompts, new_tokens=preset.new_tokens, max_k=max_k, device=device
    )
    return MTPBuilt(head, param_count(head), res, sorted(mtp_tensors(head)), by_k, len(prompts))


def save_mtp(target_dir: Path, head: Any) -> None:
    """Add the head's `mtp.*` tensors to the target's single-file checkpoint."""
    from safetensors.torch import load_file, save_file

    from .mtp import mtp_tensors

    path = target_dir / "model.safetensors"
    tensors = load_file(str(path))
    tensors.update(mtp_tensors(head))
    save_file(tensors, str(path), metadata={"format": "pt"})
