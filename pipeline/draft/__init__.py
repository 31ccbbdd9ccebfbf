"""Stage `draft`: train and evaluate a DFlash drafter for a Qwen3-family target, written in LMDeploy 0.18's
DFlash checkpoint layout. `train_drafter(DraftTrainRequest)` and `evaluate_drafter(DraftEvalRequest)` are the
entry points; torch and transformers are imported only when they run (`contract` and `reports` are
torch-free)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, get_args

from pydantic import ConfigDict, Field

from ..config import SpecqConfig
from ..config.models import DraftSection, flag
from ..errors import UsageError
from ..progress import Progress, null_progress
from ..workload import Mode
from .reports import DraftEvalReport, DraftTrainReport


class DraftTrainRequest(DraftSection):
    """Everything `train_drafter` needs, frozen: the `[draft]` settings, the target, the directory to
    create and, optionally, the teacher: the checkpoint that will be served (a GPTQ/AWQ quantization of the
    target), whose hidden states and greedy continuations the drafter then learns from instead of the
    target's. Build it once with `from_config`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    target: str
    out: str
    teacher: str | None = Field(
        None,
        description="Learn from this checkpoint instead of TARGET: the one that will be served, e.g. TARGET "
        "quantized to AWQ/GPTQ by specq quantize (its hidden states and greedy continuations).",
        json_schema_extra=flag(path=True),
    )

    @classmethod
    def from_config(
        cls,
        cfg: SpecqConfig | DraftSection,
        *,
        target: str | Path,
        out: str | Path | None,
        teacher: str | Path | None = None,
    ) -> DraftTrainRequest:
        section = cfg.draft if isinstance(cfg, SpecqConfig) else cfg
        if not out:
            raise UsageError("no output directory: pass --out DIR")
        inputs = {"target": str(target), "out": str(out), "teacher": str(teacher) if teacher else None}
        return cls.model_validate({**section.model_dump(), **inputs})


class DraftEvalRequest(DraftSection):
    """Everything `evaluate_drafter` needs, frozen: the `[draft]` settings, the target and drafter, and
    what to decode (`prompts`, else `data`'s held-out part, else the toy corpus; or, with `suite` or `mode`,
    what a server decodes for a bench workload: `requests` prompts of the suite or of the `prompts` file, as
    chats or as completions, `max_tokens` each). Build it once with `from_config`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    target: str
    draft: str = Field(description="A DFlash drafter directory (LMDeploy layout).")
    prompts: str | None = Field(
        None,
        description="Held-out texts (.jsonl/.json/.txt or a directory); default: toy.",
        json_schema_extra=flag(path=True),
    )
    suite: str | None = Field(
        None, description="Decode a bench suite's chat prompts as a server would (e.g. code) instead."
    )
    mode: Mode | None = Field(
        None,
        description="chat | completion: decode --suite or --prompts (a bench prompts file) as bench --mode "
        "does.",
    )
    max_tokens: int = Field(
        128, ge=4, description="Tokens per --suite prompt, as in bench.", json_schema_extra=flag(checked=True)
    )
    requests: int = Field(
        8, ge=1, description="--suite prompts, as bench's --requests.", json_schema_extra=flag(checked=True)
    )

    @classmethod
    def from_config(
        cls,
        cfg: SpecqConfig | DraftSection,
        *,
        target: str | Path,
        draft: str | Path,
        **inputs: Any,
    ) -> DraftEvalRequest:
        """The request for `cfg`'s `[draft]` settings and the inputs no config holds: `prompts`, `suite`,
        `mode`, `max_tokens`, `requests` (each left out or None: the field's default)."""
        section = cfg.draft if isinstance(cfg, SpecqConfig) else cfg
        mode = inputs.get("mode")
        if mode is not None and mode not in get_args(Mode):
            raise UsageError(f"--mode {mode}: choose {' or '.join(get_args(Mode))}")
        given = {k: str(v) if isinstance(v, Path) else v for k, v in inputs.items() if v is not None}
        return cls.model_validate(
            {**section.model_dump(), **given, "target": str(target), "draft": str(draft)}
        )


def train_drafter(cfg: DraftTrainRequest, progress: Progress = null_progress) -> DraftTrainReport:
    """Train a drafter for `cfg.target` (taught by `cfg.teacher` when given) and write it, with
    `draft_report.json`, to `cfg.out` (atomically)."""
    from .train import train_drafter as _train

    teacher = Path(cfg.teacher) if cfg.teacher else None
    return _train(Path(cfg.target), Path(cfg.out), cfg, progress, teacher=teacher)


def evaluate_drafter(cfg: DraftEvalRequest, progress: Progress = null_progress) -> DraftEvalReport:
    """Offline acceptance of any DFlash drafter on held-out text (`prompts`, else `cfg.data`'s held-out
    part, else the toy corpus) and the speedup it predicts per draft-token count. With `suite` or `mode`, on
    what `specq bench [--suite SUITE | --prompts FILE] --mode MODE --requests N --max-tokens M` makes a server
    decode instead (chat: through the chat template; completion: the prompt text as it is)."""
    from .data import load_texts, read_prompts
    from .eval import evaluate_checkpoint

    target, draft = Path(cfg.target), Path(cfg.draft)
    if cfg.suite is not None or cfg.mode is not None:
        from ..workload import build_workload

        mode = cfg.mode or "chat"
        work = build_workload(
            suite=cfg.suite, prompts_file=cfg.prompts if cfg.mode else None, dataset=None, field="text",
            requests=cfg.requests,
        )  # fmt: skip
        served = (
            [p.as_text() if mode == "completion" else p.as_messages() for p in work.prompts],
            cfg.max_tokens,
            f"{work.source} ({mode}), {cfg.max_tokens} tokens",
        )
        return evaluate_checkpoint(target, draft, [], cfg, progress, served)
    texts = (
        read_prompts(Path(cfg.prompts)) if cfg.prompts is not None else load_texts(cfg.data, target).heldout
    )
    return evaluate_checkpoint(target, draft, texts, cfg, progress)


__all__ = [
    "DraftEvalReport",
    "DraftEvalRequest",
    "DraftTrainReport",
    "DraftTrainRequest",
    "evaluate_drafter",
    "train_drafter",
]
