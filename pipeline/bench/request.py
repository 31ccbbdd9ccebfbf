"""The benchmark's typed input: `BenchRequest.from_config(cfg)` copies once what `specq bench` reads from
the resolved config, the `[bench]` settings and the `ServeRequest` of the servers a sweep starts (each a copy
of it with its own draft-token count), plus the resolved config itself, saved in the report."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ..config.models import BenchSection, SpecqConfig
from ..serve.spec import ServeRequest


@dataclasses.dataclass(frozen=True)
class BenchRequest:
    """What to benchmark: the `[bench]` settings (a private copy: read, never changed), what to serve, and
    the resolved config as the report records it (the tutorial's key names, as `specq config show`)."""

    settings: BenchSection
    serve: ServeRequest
    config: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    # The bearer key for a `--url` server that wants one: never part of the config, so never in a report.
    api_key: str | None = dataclasses.field(default=None, repr=False)

    @classmethod
    def from_config(cls, cfg: SpecqConfig, api_key: str | None = None) -> BenchRequest:
        return cls(
            settings=cfg.bench.model_copy(deep=True),
            serve=ServeRequest.from_config(cfg),
            config=cfg.model_dump(mode="json", by_alias=True),
            api_key=api_key or None,
        )
