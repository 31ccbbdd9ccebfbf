"""The spec-step-profile scenario's pieces that run without a GPU: option sets from the command line, the
step-patch option set as specq's config reads it, and waiting for a trace the profiler is still writing."""

import gzip
import json

import pytest

from benchmarks.scenarios.spec_step_profile import OPTIONS, parse_env_option, wait_complete
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
