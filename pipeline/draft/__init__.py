"""Stage `draft`: train and evaluate a DFlash drafter for a Qwen3-family target, written in LMDeploy 0.18's
DFlash checkpoint layout. `train_drafter` and `evaluate_drafter` are the entry points; torch and
transformers are imported only when they run (`contract` and `reports` are torch-free)."""

from __future__ import annotations

from pathlib import Path

from ..config.models import DraftSection
from ..progress import Progress, null_progress
from .reports import DraftEvalReport, DraftTrainReport


def train_drafter(
    target: Path, out: Path, cfg: DraftSection, progress: Progress = null_progress
) -> DraftTrainReport:
    """Train a drafter for `target` and write it, with `draft_report.json`, to `out` (atomically)."""
    from .train import train_drafter as _train

    return _train(target, out, cfg, progress)


def evaluate_drafter(
    target: Path,
    draft: Path,
    cfg: DraftSection,
    prompts: Path | None = None,
    progress: Progress = null_progress,
    suite: str | None = None,
    max_tokens: int = 128,
    requests: int = 8,
) -> DraftEvalReport:
    """Offline acceptance of any DFlash drafter on held-out text (`prompts`, else `cfg.data`'s held-out
    part, else the toy corpus) and the speedup it predicts per draft-token count. With `suite`, on what
    `specq bench --suite SUITE --requests N --max-tokens M` makes a chat server decode instead."""
    from .data import load_texts, read_prompts
    from .eval import evaluate_checkpoint

    if suite is not None:
        from ..workload import build_workload

        work = build_workload(suite=suite, prompts_file=None, dataset=None, field="text", requests=requests)
        chat = ([p.as_messages() for p in work.prompts], max_tokens, f"{work.source}, {max_tokens} tokens")
        return evaluate_checkpoint(target, draft, [], cfg, progress, chat)
    texts = read_prompts(prompts) if prompts is not None else load_texts(cfg.data, target).heldout
    return evaluate_checkpoint(target, draft, texts, cfg, progress)


__all__ = ["DraftEvalReport", "DraftTrainReport", "evaluate_drafter", "train_drafter"]
