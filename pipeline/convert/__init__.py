"""Stage: convert. Readiness of a checkpoint (and drafter) for LMDeploy 0.18's TurboMind and PyTorch
engines and specq's embedded engine (the rules are `engines/`'s), and the fixes: GPTQ → AWQ repacking and
drafter dtype casting. No torch needed."""

from __future__ import annotations

from .cast import CastResult, cast_drafter
from .readiness import MANIFEST, NotReady, check_readiness, read_manifest
from .repack import RepackResult, repack_gptq_to_awq
from .run import ConvertRequest, ConvertResult, run_convert
from .verdict import ConvertReport

__all__ = [
    "MANIFEST", "CastResult", "ConvertReport", "ConvertRequest", "ConvertResult", "NotReady", "RepackResult",
    "cast_drafter", "check_readiness", "read_manifest", "repack_gptq_to_awq", "run_convert",
]  # fmt: skip
