"""The spec-step-profile scenario's pieces that run without a GPU: option sets from the command line, the
step-patch option set as specq's config reads it, and waiting for a trace the profiler is still writing."""

import gzip
import json

import pytest

from benchmarks.scenarios.spec_step_profile import OPTIONS, parse_env_option, summarise_trace, wait_complete
from specq.pipeline.config.loader import env_layer
from specq.pipeline.config.models import SpecqConfig


def test_env_options_parse_and_refuse_in_one_line():
    assert parse_env_option("patched:PYTHONPATH=/a:/b,X=1") == ("patched", {"PYTHONPATH": "/a:/b", "X": "1"})
    with pytest.raises(ValueError, match="NAME:VAR=VALUE"):
        parse_env_option("patched")


def test_the_step_patch_option_set_turns_on_engine_step_patch():
    flags, env = OPTIONS["step-patch"]
    cfg = SpecqConfig.model_validate(env_layer(env))
    assert flags == [] and cfg.engine.step_patch is True
    assert SpecqConfig().engine.step_patch is False


def test_a_trace_still_being_written_is_waited_for(tmp_path):
    whole = json.dumps({"traceEvents": [{"ph": "X", "name": "a"}]}).encode()
    path = tmp_path / "trace_0.json.gz"
    path.write_bytes(gzip.compress(whole)[:-12])  # the profiler's file, half-written
    sleeps = []

    def sleep(s):  # the profiler finishes the file while the check sleeps
        sleeps.append(s)
        if len(sleeps) == 3:
            path.write_bytes(gzip.compress(whole))

    assert wait_complete(path, 10, sleep=sleep) is True and len(sleeps) == 3
    path.write_bytes(gzip.compress(whole)[:-12])
    assert wait_complete(path, 5, sleep=lambda s: None) is False


def _trace(tmp_path, events):
    path = tmp_path / "trace_0.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": events}).encode()))
    return path


def test_a_trace_is_summarised_per_step_and_by_kernel(tmp_path):
    # three sampling markers at 0, 1000, 2000 µs: two whole steps; kernels in them and one after the last
    ev = [
        {"ph": "X", "cat": "user_annotation", "name": "sampling_logits", "ts": t, "dur": 5}
        for t in (0, 1000, 2000)
    ]
    for step in (0, 1000):
        ev += [
            {"ph": "X", "cat": "kernel", "name": "_w4a16_kernel", "ts": step + 10, "dur": 500},
            {"ph": "X", "cat": "kernel", "name": "_w4a16_kernel", "ts": step + 520, "dur": 100},
            {
                "ph": "X",
                "cat": "kernel",
                "name": "void cutlass::Kernel<Gemm, 3>(Params)",
                "ts": step + 700,
                "dur": 200,
            },
        ]
    ev.append({"ph": "X", "cat": "kernel", "name": "late", "ts": 2500, "dur": 50})
    s = summarise_trace(_trace(tmp_path, ev), top=1)
    assert s["steps"] == 2 and s["step_ms"] == 1.0
    assert s["gpu_busy_ms"] == 0.8 and s["kernels_per_step"] == 3.0
    assert s["kernels_ms_per_step"] == [
        {"kernel": "_w4a16_kernel", "ms": 0.6, "launches": 2.0},
        {"kernel": "(1 others)", "ms": 0.2, "launches": 1.0},
    ]
    full = summarise_trace(_trace(tmp_path, ev))["kernels_ms_per_step"]
    assert [g["kernel"] for g in full] == ["_w4a16_kernel", "void cutlass::Kernel"]
