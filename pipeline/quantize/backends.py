"""The quantization backends specq can drive, chosen by name from one registry: for `gptq` gptqmodel (the
default) and llmcompressor; for `awq` gptqmodel (the default), autoawq and LMDeploy's own `lite auto_awq`
(hub-named calibration sets only). Each backend module is imported only when it runs."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ..errors import EnvironmentMissing, UsageError
from ..hardware import module_present

if TYPE_CHECKING:
    from ..calibration import Calibration

LayerHook = Callable[[int, int], None]  # (layer index from 1, layer count)


@dataclass(frozen=True)
class Job:
    """Everything a backend needs, already validated and resolved."""

    model: Path
    out: Path  # an empty directory the backend writes the checkpoint into
    method: str
    bits: int
    group_size: int
    sym: bool
    desc_act: bool
    device: str  # cpu | cuda
    seqlen: int
    seed: int
    calib_source: str
    work: Path  # scratch directory for the backend's side files; removed afterwards


class BackendRunner(Protocol):
    def __call__(self, job: Job, calib: Calibration, on_layer: LayerHook) -> None: ...


@dataclass(frozen=True)
class Backend:
    name: str
    methods: tuple[str, ...]
    module: str  # the Python module that must be importable
    package: str  # the pip name
    runner: str  # "module:function" inside specq.pipeline.quantize
    local_calibration: bool = True
    note: str = ""
    extra: str = "quant"  # the specq extra that installs it

    @property
    def install_hint(self) -> str:
        return f"pip install 'specq[{self.extra}]'"

    @property
    def installed(self) -> bool:
        return module_present(self.module)

    def load(self) -> BackendRunner:
        mod_name, _, func = self.runner.partition(":")
        mod = importlib.import_module(f".{mod_name}", __package__)
        runner: BackendRunner = getattr(mod, func)
        return runner


BACKENDS: dict[str, Backend] = {
    b.name: b
    for b in (
        Backend("gptqmodel", ("gptq", "awq"), "gptqmodel", "gptqmodel", "_gptqmodel:run"),
        Backend(
            "llmcompressor",
            ("gptq",),
            "llmcompressor",
            "llmcompressor",
            "_llmcompressor:run",
            note="writes compressed-tensors (pack-quantized), which TurboMind reads",
        ),
        Backend("autoawq", ("awq",), "awq", "autoawq", "_autoawq:run", note="archived upstream"),
        Backend(
            "lmdeploy",
            ("awq",),
            "lmdeploy",
            "lmdeploy",
            "_lmdeploy:run",
            local_calibration=False,
            note="lmdeploy lite auto_awq: calibration from named hub sets only",
            extra="lmdeploy",
        ),
    )
}

# Names users reach for that specq deliberately does not drive, with the reason.
REFUSED = {
    "auto-gptq": "auto-gptq is archived and breaks with transformers >= 4.56 (which LMDeploy 0.18 needs); "
    "use --quant-backend gptqmodel, its maintained successor, which writes the same GPTQ format",
}
REFUSED["auto_gptq"] = REFUSED["autogptq"] = REFUSED["auto-gptq"]


# Model types a backend cannot quantize, with the reason, refused before any work. gptqmodel 7.6
# has `qwen3_5`/`qwen3_5_text` definitions (gptqmodel/models/definitions/qwen3_5*.py) and is the one that can.
_QWEN35 = ("qwen3_5", "qwen3_5_text")
ARCHITECTURE_REFUSALS: dict[str, dict[str, str]] = {
    "autoawq": dict.fromkeys(
        _QWEN35,
        "autoawq 0.2.9 has no Qwen3.5 model class (awq/models/auto.py AWQ_CAUSAL_LM_MODEL_MAP has no "
        "'qwen3_5'); use --quant-backend gptqmodel",
    ),
    "llmcompressor": dict.fromkeys(
        _QWEN35,
        "llmcompressor loads Qwen3.5 as Qwen3_5ForCausalLM (no vision tower, no MTP head, weights renamed "
        "from model.language_model.* to model.layers.*) and writes compressed-tensors, which LMDeploy 0.18's "
        "PyTorch engine cannot build for Qwen3.5's linear attention (pytorch/config.py: 'compressed-tensors "
        "dispatch requires a non-empty canonical module prefix'); use --quant-backend gptqmodel",
    ),
    "lmdeploy": dict.fromkeys(
        _QWEN35,
        "lmdeploy lite auto_awq 0.18 has no AWQ layer map for Qwen3_5DecoderLayer (lite/quantization/awq.py "
        "FC_FCS_MAP/NORM_FCS_MAP; lite/apis/auto_awq.py raises KeyError); use --quant-backend gptqmodel",
    ),
}


def architecture_refusal(backend: Backend, model_type: str | None) -> str | None:
    """Why `backend` cannot quantize a model of `model_type` (None: no known reason)."""
    return ARCHITECTURE_REFUSALS.get(backend.name, {}).get(str(model_type or ""))


def backends_for(method: str) -> list[Backend]:
    return [b for b in BACKENDS.values() if method in b.methods]


def resolve_backend(method: str, name: str | None) -> Backend:
    """The named backend (checked against the method), or the first installed one for the method."""
    if name is not None:
        key = name.lower()
        if key in REFUSED:
            raise UsageError(REFUSED[key])
        if key not in BACKENDS:
            raise UsageError(f"unknown backend '{name}'; choose one of: {', '.join(BACKENDS)}")
        backend = BACKENDS[key]
        if method not in backend.methods:
            valid = ", ".join(b.name for b in backends_for(method))
            raise UsageError(
                f"backend '{backend.name}' does not do {method.upper()}; for {method} use: {valid}"
            )
        if not backend.installed:
            raise EnvironmentMissing(
                f"backend '{backend.name}' is not installed; install it with: {backend.install_hint}"
            )
        return backend
    for backend in backends_for(method):
        if backend.installed and backend.local_calibration:
            return backend
    raise EnvironmentMissing(
        f"no {method.upper()} backend is installed; install one with: pip install 'specq[quant]'"
    )
