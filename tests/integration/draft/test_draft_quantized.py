"""A DFlash drafter made for the quantized target that will be served: `specq draft train TARGET --teacher
AWQ` learns from the AWQ checkpoint (loaded through `engines.embedded.load_quantized`, gptqmodel) instead of
the bf16 target, still writes LMDeploy 0.18's DFlash layout, and reports its offline τ against that AWQ
target; `specq draft eval` scores the drafter against whatever target it is given, naming its
quantization. On the tiny Qwen3.5 and its gptqmodel AWQ (session fixtures)."""

from __future__ import annotations

import json

import pytest

from specq.pipeline.checkpoint import Checkpoint
from specq.pipeline.config.models import DraftSection
from specq.pipeline.draft import (
    DraftEvalRequest,
    DraftTrainRequest,
    contract,
    evaluate_drafter,
    train_drafter,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TINY = dict(steps=4, samples=4, prompt_tokens=16, gen_tokens=16, eval_prompts=2, eval_tokens=12, threads=1,
            batch_size=4, anchors=4, chat_fraction=0.0, seed=0)  # fmt: skip


def test_train_with_an_awq_teacher_and_eval_against_each_target(cli, tiny_qwen35, qwen35_quantized, tmp_path):
    awq = qwen35_quantized["awq"]
    out = tmp_path / "dflash-awq"
    request = DraftTrainRequest.from_config(DraftSection(**TINY), target=tiny_qwen35, out=out, teacher=awq)
    report = train_drafter(request)
    assert report.target == str(tiny_qwen35) and report.teacher == str(awq)
    assert report.teacher_quantization == "awq 4-bit, group 128"
    assert report.eval.target == str(awq) and report.eval.target_quantization == "awq 4-bit, group 128"
    saved = json.loads((out / "draft_report.json").read_text())
    assert saved["teacher"] == str(awq) and saved["eval"]["target_quantization"] == "awq 4-bit, group 128"
    # LMDeploy's layout, for the bf16 target it was shaped after and for the AWQ one it will be served with
    draft = Checkpoint(out)
    assert draft.config["architectures"] == [contract.ARCHITECTURE]
    assert contract.check_drafter(draft, Checkpoint(tiny_qwen35), draft_tokens=7) == []
    assert contract.check_drafter(draft, Checkpoint(awq), draft_tokens=7) == []

    # `draft eval AWQ DRAFT --json` reproduces the training report's figure (it was scored against AWQ), and
    # its stdout is the JSON alone (gptqmodel prints its banner while loading: it goes to stderr)
    conf = tmp_path / "d.toml"
    conf.write_text("[draft]\nprompt_tokens = 16\neval_prompts = 2\neval_tokens = 12\nthreads = 1\n")
    code, stdout, err = cli("draft", "eval", str(awq), str(out), "-c", str(conf), "--json")
    assert code == 0, err
    vs_awq = json.loads(stdout)
    assert vs_awq["target"] == str(awq) and vs_awq["target_quantization"] == "awq 4-bit, group 128"
    assert vs_awq["acceptance_by_position"] == report.eval.acceptance_by_position
    assert vs_awq["anchors"] == report.eval.anchors
    # ... and against the bf16 target it names that one
    section = DraftSection(
        **{k: TINY[k] for k in ("prompt_tokens", "eval_prompts", "eval_tokens", "threads")}
    )
    vs_bf16 = evaluate_drafter(DraftEvalRequest.from_config(section, target=tiny_qwen35, draft=out))
    assert vs_bf16.target == str(tiny_qwen35) and vs_bf16.target_quantization == "bfloat16"
    # the same seed taught by the bf16 target learns from other data: the loss differs from the first step
    plain = train_drafter(
        DraftTrainRequest.from_config(DraftSection(**TINY), target=tiny_qwen35, out=out.with_name("bf16"))
    )
    assert plain.teacher == str(tiny_qwen35) and plain.teacher_quantization == "bfloat16"
    assert plain.loss_curve[0][0] == report.loss_curve[0][0] == 1
    assert plain.loss_curve[0][1] != report.loss_curve[0][1]


def test_a_teacher_of_another_shape_is_refused_before_any_work(cli, tiny_qwen35, toy_pair, tmp_path):
    out = tmp_path / "never"
    code, _, err = cli(
        "draft", "train", str(tiny_qwen35), "--teacher", str(toy_pair.target), "--out", str(out)
    )
    assert code == 2, err
    line = err.strip().splitlines()[-1]
    assert "--teacher" in line and "differs from the target's" in line and "specq quantize" in line
    assert not out.exists()
