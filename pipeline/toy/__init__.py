"""Stage: toy. The project's own tiny Qwen3 target and distilled draft, trained on the standard library's
sources, so every later stage (quantize, convert, serve, bench) runs on real models without a hub.
`build_toy_pair(ToyRequest)` builds or reuses a cached pair; torch and transformers are imported only inside
it."""

from __future__ import annotations

from .build import (
    TOY_FORMAT_VERSION,
    ToyPair,
    ToyReport,
    ToyRequest,
    build_toy_pair,
    cache_key,
    cache_root,
    export_toy_pair,
    load_pair,
    remeasure_acceptance,
)
from .models import SIZES

__all__ = [
    "SIZES",
    "TOY_FORMAT_VERSION",
    "ToyPair",
    "ToyReport",
    "ToyRequest",
    "build_toy_pair",
    "cache_key",
    "cache_root",
    "export_toy_pair",
    "load_pair",
    "remeasure_acceptance",
]
