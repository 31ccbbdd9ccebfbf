"""The demo pair (`specq toy build --size demo`, what `make demo` runs on) through the CLI: its target is
grown from a 2-layer first stage to 8 layers next to a 1-layer draft, both load and generate, and the report
says how it was grown. The real preset takes about 2.5 minutes on 2 cores, so the build here is the same code
with a few steps of each stage (the preset's shapes unchanged); the full build's figures are in docs/toy.md.
`specq demo` runs on this pair, `specq demo --quick` (CI's) on the small one."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_toy_build_size_demo_grows_an_8_layer_target(cli, tmp_path: Path, monkeypatch) -> None:
    pytest.importorskip("transformers")
    from specq.pipeline.toy import models

    demo = models.SIZES["demo"]
    assert demo.growth is not None
    few = replace(
        demo, target_steps=6, draft_steps=6, growth=replace(demo.growth, steps=6), tokenizer_chars=300_000,
        train_chars=300_000, eval_windows=4, prompts=2, prompt_tokens=16, new_tokens=8,
    )  # fmt: skip
    monkeypatch.setitem(models.SIZES, "demo", few)
    out = tmp_path / "toy-demo"
    code, stdout, err = cli(
        "toy", "build", str(out), "--size", "demo", "--json", env={"SPECQ_CACHE": str(tmp_path / "cache")}
    )
    assert code == 0, err
    report = json.loads(stdout)["report"]
    assert report["size"] == "demo" and report["cache_key"].startswith("demo-s0-")
    assert report["device"] == "cpu" and "warning" not in err  # a CPU preset: no "meant for a GPU"
    grown = report["target"]["grown_from"]
    assert grown["layers"] == 2 and grown["steps"] == 6 and grown["heldout_perplexity"] > 0
    assert report["target"]["shape"]["num_hidden_layers"] == 8 and report["draft"]["grown_from"] is None
    assert "growing it to 8" in err
    import torch
    from transformers import AutoModelForCausalLM

    target = AutoModelForCausalLM.from_pretrained(out / "target")
    draft = AutoModelForCausalLM.from_pretrained(out / "draft")
    assert target.config.num_hidden_layers == 8 and draft.config.num_hidden_layers == 1
    # every layer trained at full depth: the copies' output projections moved off zero
    assert all(layer.self_attn.o_proj.weight.abs().sum() > 0 for layer in target.model.layers)
    with torch.no_grad():
        ids = torch.tensor([[5, 6, 7, 8]])
        assert target.generate(ids, max_new_tokens=3, do_sample=False).shape == (1, 7)


@pytest.mark.parametrize(("flags", "size"), [((), "demo"), (("--quick",), "small")])
def test_demo_runs_on_the_demo_pair_quick_on_the_small(cli, monkeypatch, tmp_path, flags, size) -> None:
    import specq.pipeline.toy as toy
    from specq.pipeline.errors import InputError

    seen = {}

    def stop(request, progress):
        seen["size"] = request.size
        raise InputError("stopped before the build")

    monkeypatch.setattr(toy, "build_toy_pair", stop)
    code, _, err = cli("demo", *flags, "--out", str(tmp_path / "d"))
    assert code == 2 and "stopped before the build" in err
    assert seen == {"size": size}
