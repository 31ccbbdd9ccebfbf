"""specq's LMDeploy command lines, parsed by LMDeploy 0.18's own `lmdeploy serve api_server` argument parser.
Skipped where lmdeploy's CLI does not import (CPU CI does not install LMDeploy, which needs torch <= 2.12.1);
on 2026-11-30 it ran against the LMDeploy 0.18.0 source (see docs/serve.md)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="module")
def lmdeploy_parser() -> Any:
    pytest.importorskip("lmdeploy.cli.serve")
    from lmdeploy.cli.cli import CLI
    from lmdeploy.cli.serve import SubCliServe

    CLI.add_parsers()
    SubCliServe.add_parsers()
    return CLI.parser


CASES = {
    "turbomind-gptq": (
        ["gptq", "--engine", "lmdeploy"],
        {"backend": "turbomind", "model_format": "gptq", "speculative_algorithm": None},
    ),
    "pytorch-awq-dflash": (
        ["awq", "--draft-model", "dflash16", "-k", "4", "--engine", "lmdeploy", "--session-len", "4096"],
        {"backend": "pytorch", "model_format": None, "speculative_algorithm": "dflash",
         "speculative_num_draft_tokens": 4, "session_len": 4096},
    ),
    "pytorch-eagle3-keys": (
        ["target", "--draft-model", "eagle3", "-k", "3", "--engine", "lmdeploy", "--api-keys-env", "K",
         "--host", "0.0.0.0", "--port", "23333", "--cache-max-entry-count", "0.5"],
        {"backend": "pytorch", "speculative_algorithm": "eagle3", "speculative_num_draft_tokens": 3,
         "server_name": "0.0.0.0", "server_port": 23333, "cache_max_entry_count": 0.5},
    ),
    "pytorch-tp2-dflash": (
        ["target", "--draft-model", "dflash", "-k", "4", "--engine", "lmdeploy", "--tp", "2",
         "--distributed-executor-backend", "mp"],
        {"backend": "pytorch", "tp": 2, "distributed_executor_backend": "mp",
         "speculative_algorithm": "dflash"},
    ),
    "turbomind-tp2": (
        ["awq", "--engine", "lmdeploy", "--tp", "2"],
        {"backend": "turbomind", "tp": 2, "model_format": "awq", "distributed_executor_backend": None},
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
def test_lmdeploy_parses_what_specq_builds(
    case: str, lmdeploy_parser: Any, cli, ckpts: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("K", "sekrit")
    fp16 = ckpts["dflash"].parent / "dflash16"  # an fp16 drafter next to the AWQ target
    fp16.mkdir()
    cfg = json.loads((ckpts["dflash"] / "config.json").read_text()) | {"torch_dtype": "float16"}
    (fp16 / "config.json").write_text(json.dumps(cfg))
    args, want = CASES[case]
    paths = {name: str(p) for name, p in ckpts.items()} | {"dflash16": str(fp16)}
    argv = [paths.get(a, a) for a in args]
    code, out, err = cli("serve", *argv, "--dry-run")
    assert code == 0, err
    line = shlex.split(out.splitlines()[0])
    assert line[1:5] == ["-m", "lmdeploy", "serve", "api_server"]
    ns = lmdeploy_parser.parse_args(line[3:])
    assert ns.model_path == paths[args[0]]
    for key, value in want.items():
        assert getattr(ns, key) == value, (key, getattr(ns, key))
    if "K" in args:
        assert ns.api_keys == ["***"]  # the dry run masks secrets; the launch passes the real one


def test_lmdeploy_parses_the_logprobs_mode_bench_starts_a_baseline_with(
    lmdeploy_parser: Any, ckpts: dict[str, Path]
) -> None:
    """The baseline a temperature-0 sweep scores, on the PyTorch engine: LMDeploy reads `--logprobs-mode
    raw_logprobs` (its choices are raw_logits and raw_logprobs), and the speculative run's command parses
    without it."""
    from specq.pipeline.bench import BenchRequest
    from specq.pipeline.bench.runner import sweep_plan
    from specq.pipeline.config.models import SpecqConfig
    from specq.pipeline.serve import create_engine

    cfg = SpecqConfig.model_validate(
        {"model": {"model_path": str(ckpts["target"]), "draft_model_path": str(ckpts["dflash"])},
         "engine": {"engine": "lmdeploy", "backend": "pytorch"}, "bench": {"draft_tokens": [4]}}
    )  # fmt: skip
    plan = dict(sweep_plan(BenchRequest.from_config(cfg)))
    base = lmdeploy_parser.parse_args(create_engine(plan["baseline"], Path("run")).command()[3:])
    spec = lmdeploy_parser.parse_args(create_engine(plan["k=4"], Path("run")).command()[3:])
    assert (base.backend, base.logprobs_mode, base.speculative_algorithm) == ("pytorch", "raw_logprobs", None)
    assert (spec.logprobs_mode, spec.speculative_algorithm) == (None, "dflash")
