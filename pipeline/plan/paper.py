"""Plans made on paper, before any download: a model known from a `config.json` file alone (the file itself,
as `specq twin` takes it, not only a directory holding it), and "what if 4-bit": a bf16 config planned as the
AWQ checkpoint specq would make of it. The AWQ layout is `specq twin --quant awq`'s (`twin.spec`): every
decoder-layer projection quantized at 4 bits, group 128, except what LMDeploy 0.18 builds unquantized for
Qwen3.5 — the Gated DeltaNet gates, the vision tower and the MTP layer — which are the modules `specq quantize
--for speculative` keeps in bf16 and declares in `modules_to_not_convert`. Both read the rule from one place
(`twin.spec.quantization_config`), so a plan on paper and the plan of the twin built from the same config
count the same bytes."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Literal

from ..checkpoint import Checkpoint, read_config
from ..errors import InputError, UsageError

PaperQuant = Literal["awq"]
PAPER_QUANTS: tuple[PaperQuant, ...] = ("awq",)


class ConfigOnly(Checkpoint):
    """A checkpoint known from its config alone: it has no weights, so the planner estimates them from the
    config (`shapes.estimate_weights`). `path` is where the config came from (a file, or a directory)."""

    def __init__(self, path: str | Path, config: dict[str, Any]) -> None:
        self.path = Path(path)
        self.config = config

    @property
    def name(self) -> str:
        p = self.path.resolve()
        return p.parent.name if p.name == "config.json" else p.name

    def _weight_files(self) -> list[Path]:
        return []


def open_target(model: str | Path) -> Checkpoint:
    """The target to plan: a checkpoint directory, or a bare `config.json` file (any name)."""
    path = Path(model)
    if path.is_file():
        return ConfigOnly(path, read_config(path))
    if not path.exists():
        raise InputError(
            f"{path}: not a directory or a file; pass a Hugging Face model directory or its config.json"
        )
    return Checkpoint(path)


def as_quantized(ckpt: Checkpoint, quant: PaperQuant) -> ConfigOnly:
    """`ckpt` (an unquantized model) as the 4-bit checkpoint `specq quantize --for speculative` would write
    and `specq twin --quant awq` builds: the same config with twin's `quantization_config`. Its weights are
    estimated from that config, whatever weights `ckpt` holds."""
    from ..twin.spec import ARCHITECTURES, Source, quantization_config

    if quant not in PAPER_QUANTS:
        raise UsageError(f"--quant {quant}: choose one of {', '.join(PAPER_QUANTS)}")
    if ckpt.quantization is not None:
        raise UsageError(
            f"{ckpt.path} is already quantized ({ckpt.quantization.method}); drop --quant to plan it as it is"
        )
    arch = ckpt.architectures[0] if ckpt.architectures else "none"
    if arch not in ARCHITECTURES:
        raise InputError(
            f"--quant {quant}: specq knows the 4-bit layout of {', '.join(ARCHITECTURES)}, not {arch}; "
            "quantize the model (specq quantize) and plan that directory"
        )
    config = copy.deepcopy(ckpt.config)
    if isinstance(config.get("text_config"), dict):
        config["text_config"].pop("quantization_config", None)
    config["quantization_config"] = quantization_config(Source(config, str(ckpt.path), ""))
    return ConfigOnly(ckpt.path, config)


def paper_note(quant: PaperQuant) -> str:
    """The line a plan made with `--quant` carries: what was assumed, and where the rule comes from."""
    return (
        f"--quant {quant}: planned as the 4-bit AWQ checkpoint (group 128) `specq quantize --for "
        "speculative` writes and `specq twin --quant awq` builds from this config, with the modules LMDeploy "
        "builds unquantized (Qwen3.5: Gated DeltaNet gates, vision tower, MTP layer) kept in bf16; weights "
        "estimated from the config"
    )
