"""`--tp N` for `specq serve` and `specq bench`: the LMDeploy argument list, the head-count rules checked
before any launch (exit 2, also in --dry-run), and the preflight's GPU count and worker backend (exit 4),
with NVML simulated (no GPU here). Not yet run on two GPUs."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest

from specq.pipeline import hardware
from specq.pipeline.checkpoint import Checkpoint
from specq.pipeline.config.models import SpecqConfig
from specq.pipeline.engines.parallel import kv_heads_per_gpu, tp_problems
from specq.pipeline.errors import EnvironmentMissing, UsageError
from specq.pipeline.hardware import GpuInfo
from specq.pipeline.serve import ServeRequest, create_engine, preflight
from specq.pipeline.serve.spec import ServerOptions

from .conftest import QWEN3, VOCAB, write_ckpt

PORT = 23333


def h200(i: int) -> GpuInfo:
    return GpuInfo(
        index=i, name="NVIDIA H200", memory_total_bytes=141 * 2**30, compute_capability="9.0",
        uuid=f"GPU-{i}aa{i}-0000",
    )  # fmt: skip


def command(tmp_path: Path, target: Path, engine: dict[str, Any], **kw: Any) -> list[str]:
    cfg = SpecqConfig.model_validate(
        {"model": {"model_path": str(target), "model_name": "m", **kw.pop("model", {})},
         "engine": {"engine": "lmdeploy", "port": PORT, **engine}, **kw}
    )  # fmt: skip
    return create_engine(ServeRequest.from_config(cfg), tmp_path / "run").command()


def test_tp_and_executor_reach_the_pytorch_engine(tmp_path: Path, ckpts: dict[str, Path]) -> None:
    cmd = command(
        tmp_path, ckpts["target"], {"backend": "pytorch", "tp": 2, "distributed_executor_backend": "mp"}
    )
    i = cmd.index("--tp")
    assert cmd[i : i + 4] == ["--tp", "2", "--distributed-executor-backend", "mp"]
    # with a DFlash drafter the drafter is sharded the same way: one --tp for both
    cmd = command(
        tmp_path,
        ckpts["target"],
        {"tp": 2},
        model={"draft_model_path": str(ckpts["dflash"]), "num_draft_tokens": 4},
    )
    assert cmd.count("--tp") == 1 and cmd[cmd.index("--tp") + 1] == "2"
    assert "--speculative-algorithm" in cmd and "--distributed-executor-backend" not in cmd


def test_turbomind_takes_tp_but_not_the_pytorch_executor(tmp_path: Path, ckpts: dict[str, Path]) -> None:
    cmd = command(
        tmp_path, ckpts["awq"], {"backend": "turbomind", "tp": 2, "distributed_executor_backend": "ray"}
    )
    assert cmd[cmd.index("--backend") + 1] == "turbomind"
    assert cmd[cmd.index("--tp") + 1] == "2"
    assert "--distributed-executor-backend" not in cmd  # a PyTorch-engine argument only


def test_tp_1_adds_nothing(tmp_path: Path, ckpts: dict[str, Path]) -> None:
    cmd = command(tmp_path, ckpts["target"], {"backend": "pytorch", "distributed_executor_backend": "mp"})
    assert "--tp" not in cmd and "--distributed-executor-backend" not in cmd


def test_dry_run_with_tp_on_a_machine_without_gpus(cli, ckpts: dict[str, Path]) -> None:
    """`auto` picks LMDeploy for --tp > 1 (the embedded engine cannot shard); the dry run needs no GPU."""
    code, out, err = cli("serve", str(ckpts["target"]), "--tp", "2", "--backend", "pytorch",
                         "--distributed-executor-backend", "mp", "--dry-run")  # fmt: skip
    assert code == 0, err
    line = shlex.split(out.splitlines()[0])
    assert line[1:5] == ["-m", "lmdeploy", "serve", "api_server"]
    i = line.index("--tp")
    assert line[i : i + 4] == ["--tp", "2", "--distributed-executor-backend", "mp"]
    assert "tp = 2" in err and 'distributed_executor_backend = "mp"' in err  # the resolved config


def test_embedded_engine_refuses_tp(cli, ckpts: dict[str, Path]) -> None:
    code, out, err = cli("serve", str(ckpts["target"]), "--engine", "embedded", "--tp", "2", "--dry-run")
    assert code == 2 and out == ""
    assert err.strip().count("\n") == 0
    assert "--tp 2: the embedded engine runs on one device" in err and "--engine lmdeploy" in err


@pytest.mark.parametrize(
    ("tp", "ok"),
    [(2, True), (4, True), (3, False), (8, False)],  # 4 heads, 2 KV heads: tp 4 replicates each KV head twice
)
def test_attention_heads_must_split(cli, ckpts: dict[str, Path], tp: int, ok: bool) -> None:
    code, _, err = cli("serve", str(ckpts["target"]), "--tp", str(tp), "--dry-run")
    if ok:
        assert code == 0, err
        return
    assert code == 2 and err.strip().count("\n") == 0
    assert f"num_attention_heads 4 is not divisible by --tp {tp}" in err


def test_kv_heads_not_a_divisor_of_tp_refused(tmp_path: Path) -> None:
    target = write_ckpt(tmp_path / "t", {**QWEN3, "num_attention_heads": 12, "num_key_value_heads": 3}, VOCAB)
    problems = tp_problems(Checkpoint(target), None, None, 2, "lmdeploy")
    assert len(problems) == 1 and "num_key_value_heads 3 is neither divisible by --tp 2" in problems[0]
    assert tp_problems(Checkpoint(target), None, None, 3, "lmdeploy") == []
    assert tp_problems(Checkpoint(target), None, None, 6, "lmdeploy") == []  # 3 KV heads, each twice


def test_gated_deltanet_heads_must_split(tmp_path: Path) -> None:
    text = {**QWEN3, "num_attention_heads": 8, "linear_num_key_heads": 2, "linear_num_value_heads": 6,
            "layer_types": ["linear_attention"] * 3 + ["full_attention"]}  # fmt: skip
    cfg = {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5", "text_config": text}
    target = Checkpoint(write_ckpt(tmp_path / "q35", cfg, VOCAB))
    assert tp_problems(target, None, None, 2, "lmdeploy") == []
    problems = tp_problems(target, None, None, 4, "lmdeploy")
    assert [p.split(":")[1].split()[0] for p in problems] == [
        "linear_num_key_heads",
        "linear_num_value_heads",
    ]
    assert problems[-1].endswith("pick a --tp that divides every head count")


def test_sharded_drafter_checked_eagle3_not(tmp_path: Path, ckpts: dict[str, Path]) -> None:
    """DFlash runs with the target's tensor parallelism; an EAGLE-3 drafter runs whole on GPU 0."""
    target = Checkpoint(ckpts["target"])
    heads6 = {"num_attention_heads": 6, "num_key_value_heads": 6, "head_dim": 64}
    dflash = write_ckpt(tmp_path / "dflash6", {**Checkpoint(ckpts["dflash"]).config, **heads6})
    eagle3 = write_ckpt(tmp_path / "eagle6", {**Checkpoint(ckpts["eagle3"]).config, **heads6})
    problems = tp_problems(target, Checkpoint(dflash), "dflash", 4, "lmdeploy")
    assert problems and all(p.startswith("drafter dflash6") for p in problems)
    assert tp_problems(target, Checkpoint(eagle3), "eagle3", 4, "lmdeploy") == []


def test_kv_heads_per_gpu() -> None:
    assert [kv_heads_per_gpu(8, tp) for tp in (1, 2, 4, 8, 16)] == [8, 4, 2, 1, 1]
    assert kv_heads_per_gpu(4, 1) == 4


def test_bench_refuses_tp_before_any_server(cli, ckpts: dict[str, Path]) -> None:
    code, out, err = cli("bench", str(ckpts["target"]), "--tp", "3", "--draft-tokens", "0", "--requests", "1")
    assert code == 2 and err.strip().count("\n") == 0
    assert "not divisible by --tp 3" in err


# ---- preflight (exit 4): what the machine has --------------------------------------------------------------


@pytest.fixture
def gpus(monkeypatch: pytest.MonkeyPatch) -> list[GpuInfo]:
    """A machine with LMDeploy 0.18 and these GPUs (the list the test fills), ray installed."""
    found: list[GpuInfo] = []
    monkeypatch.setattr(hardware, "lmdeploy_version", lambda: "0.18.0")
    monkeypatch.setattr(hardware, "list_gpus", lambda: list(found))
    monkeypatch.setattr(hardware, "try_import", lambda module: None)
    monkeypatch.setattr(hardware, "flash_attention_3", lambda: None)
    real = hardware.module_present
    monkeypatch.setattr(hardware, "module_present", lambda m: True if m == "ray" else real(m))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("LMDEPLOY_EXECUTOR_BACKEND", raising=False)
    return found


def require(backend: str, tp: int, executor: str | None = None) -> None:
    """The launch preflight for a request with `--tp tp` (and --distributed-executor-backend)."""
    options = ServerOptions(tp=tp, distributed_executor_backend=executor)
    preflight.require_lmdeploy(backend, False, ServeRequest(model_path=None, options=options))


def test_preflight_counts_gpus(gpus: list[GpuInfo]) -> None:
    gpus.append(h200(0))
    with pytest.raises(
        EnvironmentMissing, match=r"--tp 2 shards the model over 2 GPUs but 1 is visible; use --tp 1"
    ):
        require("pytorch", 2)
    gpus.append(h200(1))
    require("pytorch", 2)
    with pytest.raises(EnvironmentMissing, match=r"over 4 GPUs but 2 are visible; use --tp 2") as e:
        require("turbomind", 4)
    assert e.value.exit_code == 4


def test_preflight_honours_cuda_visible_devices(gpus: list[GpuInfo], monkeypatch: pytest.MonkeyPatch) -> None:
    gpus += [h200(0), h200(1), h200(2)]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")
    with pytest.raises(EnvironmentMissing, match=r"but 1 is visible \(CUDA_VISIBLE_DEVICES=2\)"):
        require("pytorch", 2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,0")
    require("pytorch", 2)


def test_preflight_ray_or_mp(gpus: list[GpuInfo], monkeypatch: pytest.MonkeyPatch) -> None:
    gpus += [h200(0), h200(1)]
    monkeypatch.setattr(hardware, "module_present", lambda m: m != "ray")
    with pytest.raises(
        EnvironmentMissing, match=r"starts its GPU workers with ray.*--distributed-executor-backend mp"
    ):
        require("pytorch", 2)
    require("pytorch", 2, "mp")
    require("turbomind", 2)  # TurboMind has its own threads per GPU
    require("pytorch", 1)  # one GPU: LMDeploy's uni executor
    monkeypatch.setenv("LMDEPLOY_EXECUTOR_BACKEND", "mp")
    require("pytorch", 2)


def test_dry_run_names_what_the_launch_would_stop_at(
    gpus: list[GpuInfo], cli, ckpts: dict[str, Path]
) -> None:
    gpus.append(h200(0))
    code, _, err = cli("serve", str(ckpts["target"]), "--engine", "lmdeploy", "--tp", "2", "--dry-run")
    assert code == 0
    assert "preflight (a launch here would stop): --tp 2 shards the model over 2 GPUs but 1 is visible" in err


def test_launch_with_tp_stops_at_the_preflight(
    gpus: list[GpuInfo], cli, ckpts: dict[str, Path], tmp_path: Path
) -> None:
    """A real `specq serve` launch on a simulated one-GPU machine: refused before anything starts."""
    gpus.append(h200(0))
    code, _, err = cli("serve", str(ckpts["target"]), "--engine", "lmdeploy", "--backend", "pytorch",
                       "--tp", "2", "--run-dir", str(tmp_path / "run"))  # fmt: skip
    assert code == 4 and err.strip().count("\n") == 0
    assert "--tp 2 shards the model over 2 GPUs but 1 is visible" in err
    assert not (tmp_path / "run" / "lmdeploy.log").exists()


def test_indivisible_heads_raise_usage_error(tmp_path: Path, ckpts: dict[str, Path]) -> None:
    with pytest.raises(UsageError, match="not divisible by --tp 8"):
        command(tmp_path, ckpts["target"], {"backend": "pytorch", "tp": 8})


def test_config_file_and_environment_set_tp(cli, ckpts: dict[str, Path], tmp_path: Path) -> None:
    toml = tmp_path / "tp.toml"
    toml.write_text(
        f'[model]\nmodel_path = "{ckpts["target"]}"\n'
        '[engine]\nbackend = "pytorch"\ntp = 2\ndistributed_executor_backend = "mp"\n'
    )
    code, out, err = cli("serve", "--config", str(toml), "--dry-run")
    assert code == 0, err
    line = shlex.split(out.splitlines()[0])
    assert line[line.index("--tp") : line.index("--tp") + 4] == [
        "--tp",
        "2",
        "--distributed-executor-backend",
        "mp",
    ]
    code, out, err = cli("serve", "--config", str(toml), "--dry-run", env={"SPECQ_ENGINE__TP": "4"})
    assert code == 0, err
    assert shlex.split(out.splitlines()[0])[line.index("--tp") + 1] == "4"
    code, out, err = cli("serve", "--config", str(toml), "--tp", "1", "--dry-run")  # the flag wins
    assert code == 0 and "--tp" not in shlex.split(out.splitlines()[0])
    code, _, err = cli("serve", "--config", str(toml), "--distributed-executor-backend", "uni", "--dry-run")
    assert code == 2 and "engine.distributed_executor_backend" in err


def test_bench_refuses_an_embedded_baseline_with_tp(cli, ckpts: dict[str, Path]) -> None:
    code, _, err = cli("bench", str(ckpts["target"]), "--tp", "2", "--draft-tokens", "0",
                       "--baseline-engine", "embedded", "--requests", "1")  # fmt: skip
    assert code == 2 and "the embedded engine runs on one device" in err
