"""`specq fa3`: build the FlashAttention-3 that LMDeploy's speculative decoding needs for the models to be
served: only their head dims and dtypes, the calls LMDeploy makes (paged KV, varlen) and the user's GPU
architecture, minutes instead of the hour of a full build. Derivation (`kernels`), plan and refusals
(`plan`), the supervised build, self-check and install (`build`, `selfcheck`), and what an installed FA3
covers (`installed`, for `specq doctor` and `specq serve`'s preflight). No torch at import."""

from __future__ import annotations

from .build import Fa3BuildResult, build_fa3
from .installed import Fa3Coverage, build_command, installed_coverage
from .kernels import KernelSet, ModelNeed, derive_needs, kernel_set, setup_py_sources
from .plan import Fa3Plan, Fa3Request, find_checkout, make_plan

__all__ = [
    "Fa3BuildResult",
    "Fa3Coverage",
    "Fa3Plan",
    "Fa3Request",
    "KernelSet",
    "ModelNeed",
    "build_command",
    "build_fa3",
    "derive_needs",
    "find_checkout",
    "installed_coverage",
    "kernel_set",
    "make_plan",
    "setup_py_sources",
]
