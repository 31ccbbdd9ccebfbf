"""A DFlash drafter for the Qwen3.5-shaped (hybrid) toy target: training reads the target layers LMDeploy
0.18 feeds a DFlash drafter of a Qwen3.5 target, the checkpoint keeps LMDeploy's contract, and
`specq draft eval` runs on it.

LMDeploy's side (InternLM/lmdeploy v0.18.0): `pytorch/models/qwen3_5.py` `Qwen3_5TextModel.forward` appends
`hidden_states + residual` after every decoder layer whose index is in `target_aux_hidden_state_layers`
(linear-attention and full-attention layers alike: the index runs over all layers), which
`spec_decode/base.py` fills from the drafter's `dflash_config.target_layer_ids`; `pytorch/config.py`
checks those ids against `llm_config.num_hidden_layers` (every layer), not `ModelConfig.num_layers` (which the
Qwen3.5 config builder sets to the full-attention layers only)."""

from __future__ import annotations

import json

import pytest

from specq.pipeline.checkpoint import Checkpoint
from specq.pipeline.config.models import DraftSection
from specq.pipeline.draft import DraftTrainRequest, contract, train_drafter

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SMALL = dict(steps=60, samples=32, gen_tokens=48, eval_prompts=4, eval_tokens=32, threads=1, seed=0)


def test_features_are_each_layers_residual_stream(toy35) -> None:
    """What training reads at layer j is the residual stream after decoder layer j, which is what LMDeploy
    captures (its fused-residual `hidden_states + residual`) — for linear- and full-attention layers."""
    import torch

    from specq.pipeline.draft.data import Target

    target = Target(toy35.target, "cpu")
    layers = target.model.model.layers
    kinds = target.model.config.layer_types
    seen: dict[int, torch.Tensor] = {}
    hooks = [
        layer.register_forward_hook(lambda _m, _i, out, j=j: seen.__setitem__(j, out))
        for j, layer in enumerate(layers)
    ]
    ids = torch.tensor([target.encode(["def main(argv):\n    return 0\n"])[0]])
    try:
        feats, greedy = target.features(ids, [0, 1, 2])
    finally:
        for h in hooks:
            h.remove()
    assert {kinds[j] for j in (0, 1, 2)} == {"linear_attention"} and kinds[3] == "full_attention"
    h = target.model.config.hidden_size
    for n, j in enumerate((0, 1, 2)):
        assert torch.equal(feats[0, :, n * h : (n + 1) * h], seen[j][0].float())
    assert greedy.shape == ids.shape


@pytest.fixture(scope="module")
def drafter(toy35, tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("draft35") / "dflash"
    report = train_drafter(DraftTrainRequest.from_config(DraftSection(**SMALL), target=toy35.target, out=out))
    return toy35, out, report


def test_drafter_for_the_hybrid_target(drafter) -> None:
    pair, out, report = drafter
    config = json.loads((out / "config.json").read_text())
    # all 4 layers count (3 linear + 1 full); one draft layer reads the middle one, a linear-attention layer
    assert config["num_target_layers"] == 4 and report.target_layer_ids == [2]
    assert config["head_dim"] == 256 and config["target_hidden_size"] == 128
    assert contract.check_drafter(Checkpoint(out), Checkpoint(pair.target), draft_tokens=7) == []
    assert report.final_loss < report.loss_curve[0][1]
    assert report.eval.tau > 1.0  # it predicts some tokens after 60 steps (random: τ = 1.0)


def test_draft_eval_runs_on_it(drafter, cli, tmp_path) -> None:
    pair, out, report = drafter
    conf = tmp_path / "d.toml"
    conf.write_text("[draft]\neval_prompts = 4\neval_tokens = 32\nthreads = 1\n", encoding="utf-8")
    code, stdout, _ = cli("draft", "eval", str(pair.target), str(out), "-c", str(conf), "--json")
    assert code == 0
    data = json.loads(stdout)
    assert data["acceptance_by_position"] == report.eval.acceptance_by_position
