"""specq's mirror of TurboMind's rules against the installed LMDeploy (skipped where lmdeploy is absent, as on
CPU CI; runs on a GPU user's machine and in `make gpu-check`)."""

from __future__ import annotations

import pytest

from specq.pipeline.engines import turbomind


def test_supported_archs_match_lmdeploy() -> None:
    sm = pytest.importorskip("lmdeploy.turbomind.supported_models")
    assert dict(sm.SUPPORTED_ARCHS) == turbomind.SUPPORTED_ARCHS


def test_group_sizes_match_lmdeploy() -> None:
    pytest.importorskip("lmdeploy")
    try:
        from lmdeploy.turbomind import converter
    except (ImportError, AttributeError) as e:  # converter needs TurboMind's native module (`_tm` is None)
        pytest.skip(f"TurboMind's converter does not import here: {e!r}")
    ours = {k: set(v) for k, v in turbomind.SUPPORTED_GROUP_SIZES.items()}
    theirs = {k: set(v) for k, v in converter._SUPPORTED_GROUP_SIZES.items()}
    assert ours == theirs


def test_mirror_has_the_toy_architecture() -> None:
    """The toy target is a Qwen3ForCausalLM; it must stay on TurboMind's list."""
    assert turbomind.SUPPORTED_ARCHS["Qwen3ForCausalLM"] == "qwen3"
