"""The layered config: presets, files (TOML and tutorial INI), environment, flags, and error messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from specq.pipeline.config import config_to_toml, preset_names, resolve_config
from specq.pipeline.errors import ConfigError

TUTORIAL_INI = """
[model]
# target
model_path = ./workspace_27b
draft_model_path = ./workspace_7b
num_draft_tokens = 5

[engine]
max_batch_size = 4
cache_max_entry_count = 0.8 # 80 % of free memory for the KV cache
enable_prefix_caching = true

[generation]
temperature = 0.8
top_p = 0.95
repetition_penalty = 1.05
"""


def test_presets_are_packaged_and_valid() -> None:
    names = preset_names()
    assert {"default", "cpu-demo", "rtx3090-qwen3.5-27b-awq-dflash"} <= set(names)
    for name in names:
        resolve_config(name)


def test_reference_preset_values() -> None:
    cfg = resolve_config("rtx3090-qwen3.5-27b-awq-dflash")
    assert cfg.model.draft_tokens == 5
    assert cfg.speculative.method == "dflash"
    assert cfg.engine.session_len == 8192
    assert cfg.plan.gpu_memory == "24GiB"


def test_tutorial_ini_is_expressible(tmp_path: Path) -> None:
    f = tmp_path / "speculative_config.ini"
    f.write_text(TUTORIAL_INI)
    cfg = resolve_config(f)
    assert cfg.model.model_path == "./workspace_27b"
    assert cfg.model.draft_model_path == "./workspace_7b"
    assert cfg.model.draft_tokens == 5
    assert cfg.engine.max_batch_size == 4
    assert cfg.engine.cache_max_entry_count == 0.8
    assert cfg.engine.enable_prefix_caching is True
    assert cfg.generation.temperature == 0.8
    assert cfg.generation.repetition_penalty == 1.05


def test_dynamic_draft_length_is_rejected_with_reason(tmp_path: Path) -> None:
    f = tmp_path / "c.ini"
    f.write_text(
        TUTORIAL_INI.replace("num_draft_tokens = 5", "num_draft_tokens = 5\nuse_dynamic_draft_length = true")
    )
    with pytest.raises(ConfigError, match="no dynamic draft length"):
        resolve_config(f)


def test_unknown_key_names_file_and_closest(tmp_path: Path) -> None:
    f = tmp_path / "c.toml"
    f.write_text("[engine]\ncache_max_entry = 0.5\n")
    with pytest.raises(ConfigError) as e:
        resolve_config(f)
    msg = str(e.value)
    assert str(f) in msg and "'engine.cache_max_entry'" in msg and "cache_max_entry_count" in msg


def test_unknown_section(tmp_path: Path) -> None:
    f = tmp_path / "c.toml"
    f.write_text("[engin]\nport = 1\n")
    with pytest.raises(ConfigError, match="did you mean 'engine'"):
        resolve_config(f)


def test_precedence_preset_file_env_flags(tmp_path: Path) -> None:
    f = tmp_path / "c.toml"
    f.write_text("[engine]\ncache_max_entry_count = 0.5\nmax_batch_size = 2\n[bench]\nrequests = 3\n")
    env = {"SPECQ_ENGINE__CACHE_MAX_ENTRY_COUNT": "0.6", "SPECQ_BENCH__DRAFT_TOKENS": "[3, 5]"}
    cfg = resolve_config(f, environ=env, flags={"engine": {"max_batch_size": 7}})
    assert cfg.engine.cache_max_entry_count == 0.6  # env over file
    assert cfg.engine.max_batch_size == 7  # flag over file
    assert cfg.bench.requests == 3  # file over preset
    assert cfg.bench.draft_tokens == [3, 5]
    assert cfg.engine.host == "127.0.0.1"  # preset default


def test_validation_error_names_the_field(tmp_path: Path) -> None:
    f = tmp_path / "c.toml"
    f.write_text("[engine]\ncache_max_entry_count = 1.5\n")
    with pytest.raises(ConfigError, match=r"^engine\.cache_max_entry_count: "):
        resolve_config(f)


def test_missing_file_and_bad_toml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        resolve_config(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[engine\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        resolve_config(bad)


def test_unknown_env_key_is_an_error() -> None:
    with pytest.raises(ConfigError, match="environment"):
        resolve_config(environ={"SPECQ_ENGINE__PROT": "1"})


def test_toml_round_trip(tmp_path: Path) -> None:
    cfg = resolve_config("rtx3090-qwen3.5-27b-awq-dflash")
    f = tmp_path / "resolved.toml"
    f.write_text(config_to_toml(cfg))
    assert resolve_config(f) == cfg
