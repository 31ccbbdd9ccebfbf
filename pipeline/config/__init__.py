"""Typed, layered configuration (see `loader` for the precedence rules)."""

from .loader import config_to_toml, preset_names, resolve_config
from .models import STAGES, SpecqConfig

__all__ = ["STAGES", "SpecqConfig", "config_to_toml", "preset_names", "resolve_config"]
