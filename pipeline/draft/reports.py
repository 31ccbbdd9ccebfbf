"""What `specq draft train` and `specq draft eval` return and save: versioned pydantic reports (the train
report is `draft_report.json` beside the checkpoint). Torch-free, so reports can be read anywhere."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from ..errors import InputError
from ..speedup import StepCost

SCHEMA_VERSION = 1
REPORT_NAME = "draft_report.json"


class SpeedupPrediction(BaseModel):
    k: int
    tokens_per_step: float
    speedup: float


class DraftEvalReport(BaseModel):
    schema_version: int = SCHEMA_VERSION
    target: str = Field(description="the checkpoint the drafter was scored against (its greedy tokens)")
    target_quantization: str | None = Field(
        None, description="how that target stores its weights: 'awq 4-bit, group 128', or its dtype"
    )
    draft: str
    draft_quantization: str | None = Field(
        None, description="how the drafter stores its weights: 'awq 4-bit, group 128', or its dtype"
    )
    block_size: int
    prompts: int
    anchors: int = Field(description="draft blocks scored (one per generated position)")
    acceptance_by_position: list[float] = Field(description="fraction of blocks whose first i drafts match")
    tau: float = Field(description="mean accepted length per step, including the target's bonus token")
    step_cost: StepCost
    step_cost_basis: str = Field("given", description="where step_cost comes from (the measured curve)")
    predictions: list[SpeedupPrediction]
    best_k: int
    best_speedup: float
    seconds: float
    lmdeploy_checked: bool = Field(False, description="LMDeploy's own parse_dflash_config accepted it")
    workload: str = Field("held-out text", description="what was decoded: held-out text or a chat suite")
    walk_tau: list[float] = Field(
        default_factory=list,
        description="tokens per step for k = 1..B−1 when a lossless engine walks the greedy sequences "
        "(only the positions a server drafts from): the figure to compare with a served τ",
    )
    repetitive: str | None = Field(
        None,
        description="set when the target's greedy continuations loop: a drafter predicts a loop almost "
        "perfectly, so acceptance and τ here overstate what real text gets",
    )
    looping_outputs: int = Field(0, description="greedy continuations that loop (pipeline/repetition.py)")
    walk_tau_text: list[float] = Field(
        default_factory=list,
        description="walk_tau over the continuations that do not loop: what text gets (equal to walk_tau "
        "when none loops; empty when all do)",
    )


class DraftTrainReport(BaseModel):
    schema_version: int = SCHEMA_VERSION
    target: str
    teacher: str | None = Field(
        None, description="what the drafter learned from: the target, or the --teacher checkpoint"
    )
    teacher_quantization: str | None = None
    out: str
    versions: dict[str, str | None]
    device: str
    threads: int
    dtype: str
    config: dict[str, Any]
    target_layer_ids: list[int]
    mask_token_id: int
    block_size: int
    data: str
    sequences: int
    sequence_tokens: int
    steps: int
    trained_tokens: int = Field(description="query-block tokens the drafter was trained on")
    prepare_seconds: float = Field(description="self-distillation and feature extraction")
    train_seconds: float
    total_seconds: float
    final_loss: float
    loss_curve: list[tuple[int, float]]
    eval: DraftEvalReport

    def save(self, path: Path) -> Path:
        from ..fsutil import atomic_write_text

        return atomic_write_text(path, self.model_dump_json(indent=2) + "\n")

    @classmethod
    def load(cls, path: Path) -> DraftTrainReport:
        try:
            return cls.model_validate(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError) as e:
            raise InputError(f"{path}: not a readable draft report ({type(e).__name__})") from None
