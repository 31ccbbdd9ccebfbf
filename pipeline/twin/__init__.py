"""`specq twin`: a scale twin of a model from its `config.json` alone — a random-weight checkpoint with the
model's exact tensor names, shapes and dtypes (bf16, or AWQ 4-bit in LMDeploy's gemm layout), drafters of
matching shape (the Qwen3.5 MTP layer, DFlash, EAGLE-3) and a synthetic tokenizer of the real vocabulary
size, so memory (`specq plan` against NVML) and the speed of a step (`specq bench`) can be measured on the
GPU before downloading the model. Every config.json it writes carries `specq_twin` (the source config's
hash, the date), and `plan` and `bench` reports that read a twin say so: a twin's memory and speed are real,
its acceptance and outputs mean nothing.

Entry point: `build_twin(TwinRequest) -> TwinResult`. The shapes are in `spec.py` (torch-free), the tensor
generation in `build.py`, the tokenizer in `tokenizer.py`."""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .. import __version__
from ..checkpoint import TWIN_KEY
from ..config.models import flag
from ..errors import UsageError
from ..fsutil import atomic_dir, check_writable, remove_stale_temporaries, say_removed
from ..progress import Progress, null_progress
from . import spec
from .spec import DrafterKind, Quant, Source, TensorSpec, read_source

SCHEMA_VERSION = 1
DFLASH_BLOCK = 16
EAGLE3_DRAFT_VOCAB = 32000


class TwinRequest(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    config: str = Field(description="A config.json, or a checkpoint directory holding one.")
    out: str
    quant: Quant = Field(
        "bf16",
        description="bf16, or awq: 4-bit AWQ in LMDeploy's gemm layout (group 128).",
        json_schema_extra=flag(choices=True),
    )
    drafters: tuple[DrafterKind, ...] = Field(
        (),
        description="Also build a drafter of matching shape (repeatable): mtp (Qwen3.5's own MTP layer, in "
        "the target), dflash (DIR/dflash), eagle3 (DIR/eagle3).",
        json_schema_extra=flag("--drafter", choices=True),
    )
    draft_quants: tuple[Quant, ...] = Field(
        ("bf16",),
        description="The DFlash drafter's weights (repeatable): bf16 (DIR/dflash; fp16 beside an AWQ target "
        "other than Qwen3.5), awq: 4-bit AWQ gemm as `specq quantize DRAFTER` writes it (DIR/dflash-awq).",
        json_schema_extra=flag("--draft-quant", choices=True),
    )
    draft_layers: int = Field(
        5, ge=1, le=64, description="Layers of the DFlash drafter.", json_schema_extra=flag(checked=True)
    )
    block_size: int = Field(
        DFLASH_BLOCK,
        ge=2,
        le=64,
        description="DFlash block size (draft tokens ≤ block − 1).",
        json_schema_extra=flag(checked=True),
    )
    device: str = Field(
        "auto", description="auto (cuda when there is a GPU), cuda or cpu: where to generate."
    )
    seed: int = Field(0, description="Seed of the random weights.")
    shard_bytes: int = Field(2 * 2**30, gt=0)
    force: bool = Field(False, description="Replace an existing --out.")


class TwinPart(BaseModel):
    path: str
    kind: str  # target | mtp | dflash | eagle3
    quant: Quant = "bf16"  # a drafter's weights: bf16 (or fp16), or 4-bit AWQ gemm
    tensors: int
    params: int
    weight_bytes: int
    files: list[str] = Field(default_factory=list)


class TwinResult(BaseModel):
    schema_version: int = SCHEMA_VERSION
    kind: Literal["specq-twin"] = "specq-twin"
    out: str
    architecture: str
    quant: Quant
    marker: dict[str, Any]
    target: TwinPart
    drafters: list[TwinPart] = Field(default_factory=list)
    tokenizer_vocab: int
    device: str
    seconds: float

    def save(self, path: Path) -> None:
        path.write_text(self.model_dump_json(indent=1) + "\n", encoding="utf-8")


def twin_marker(source: Source, request: TwinRequest, created: str) -> dict[str, Any]:
    return {
        "note": "scale twin: random weights at the exact shapes of the source config; not a model",
        "source_name": source.name,
        "source_path": source.path,
        "source_sha256": source.sha256,
        "created": created,
        "specq_version": __version__,
        "quant": request.quant,
        "seed": request.seed,
    }


def marker_text(marker: dict[str, Any]) -> str:
    """The marker as the safetensors metadata string every weight file of a twin carries."""
    return f"random weights, not a model; source sha256 {marker['source_sha256']}, built {marker['created']}"


def _params(tensors: list[TensorSpec]) -> int:
    """Parameters as the model counts them: an AWQ linear's packed codes count 8 weights per int32."""
    n = 0
    for t in tensors:
        if t.name.endswith(".qweight"):
            n += t.numel * spec.AWQ_PACK
        elif not t.name.endswith((".qzeros", ".scales")):
            n += t.numel
    return n


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def _target_config(source: Source, request: TwinRequest, marker: dict[str, Any]) -> dict[str, Any]:
    cfg = json.loads(json.dumps(source.config))
    cfg.pop("quantization_config", None)
    if isinstance(cfg.get("text_config"), dict):
        cfg["text_config"].pop("quantization_config", None)
    cfg["torch_dtype"] = cfg["dtype"] = "bfloat16"
    if request.quant == "awq":
        cfg["quantization_config"] = spec.quantization_config(source)
    cfg[TWIN_KEY] = marker
    return cfg


def _preprocessor(source: Source) -> dict[str, Any]:
    """Qwen3.5's image-processor config with the tower's patch sizes: LMDeploy 0.18 loads it at start-up
    even for text-only requests (pipeline/toy/qwen35.py)."""
    from ..toy.qwen35 import PREPROCESSOR_CONFIG

    v = source.config.get("vision_config") or {}
    return {
        **PREPROCESSOR_CONFIG,
        "patch_size": int(v.get("patch_size") or 16),
        "temporal_patch_size": int(v.get("temporal_patch_size") or 2),
        "merge_size": int(v.get("spatial_merge_size") or 2),
    }


def check_request(source: Source, request: TwinRequest) -> None:
    if "mtp" in request.drafters and not int(source.text.get("mtp_num_hidden_layers") or 0):
        raise UsageError(
            f"{source.path}: the model has no MTP layer (mtp_num_hidden_layers); "
            "use --drafter dflash or eagle3"
        )
    if (
        "dflash" in request.drafters
        and request.draft_layers > 1
        and int(source.text["num_hidden_layers"]) < 4
    ):
        raise UsageError("a DFlash drafter of more than one layer needs a target of at least 4 layers")
    if "awq" in request.draft_quants and "dflash" not in request.drafters:
        raise UsageError(
            "--draft-quant awq builds a 4-bit DFlash drafter: add --drafter dflash (LMDeploy 0.18 serves "
            "4-bit drafters of DFlash only)"
        )


def build_twin(request: TwinRequest, progress: Progress = null_progress) -> TwinResult:
    """Build the twin into `request.out` (through a temporary sibling, renamed into place when complete):
    `target/` (with the MTP layer where the model has one), `dflash/` (and `dflash-awq/`, the 4-bit DFlash
    drafter), `eagle3/` and `twin_report.json`."""
    from ..hardware import pick_device
    from .build import write_shards
    from .tokenizer import write_tokenizer

    t0 = time.monotonic()
    source = read_source(request.config)
    check_request(source, request)
    out = Path(request.out)
    if out.exists() and not request.force:
        raise UsageError(f"{out} already exists; choose another --out or pass --force")
    device = pick_device(request.device)
    say_removed(out, remove_stale_temporaries(out), progress)  # a killed build's GiBs, before the space check
    check_writable(out, need_bytes=spec.target_bytes(source, request.quant))  # before any tensor is listed
    target_specs = spec.target_tensors(source, request.quant)
    created = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    marker = twin_marker(source, request, created)
    tc = source.text
    vocab = int(tc["vocab_size"])
    with atomic_dir(out, overwrite=request.force) as tmp:
        tdir = tmp / "target"
        tdir.mkdir()
        progress(
            f"{source.family} twin of {source.name}: {len(target_specs)} tensors, "
            f"{spec.total_bytes(target_specs) / 2**30:.2f} GiB ({request.quant}) on {device}"
        )
        files = write_shards(
            target_specs, tdir, device=device, seed=request.seed, progress=progress,
            shard_bytes=request.shard_bytes, marker=marker_text(marker),
        )  # fmt: skip
        _write_json(tdir / "config.json", _target_config(source, request, marker))
        ids = ("eos_token_id", "pad_token_id", "bos_token_id")
        gen = {k: tc[k] for k in ids if tc.get(k) is not None}
        _write_json(tdir / "generation_config.json", {**gen, "do_sample": False})
        if source.family == "qwen3_5":
            _write_json(tdir / "preprocessor_config.json", _preprocessor(source))
        progress(f"synthetic tokenizer of {vocab} tokens")
        tok_vocab = write_tokenizer(source.config, vocab, tdir)
        target = TwinPart(
            path=str(out / "target"), kind="target", tensors=len(target_specs), params=_params(target_specs),
            weight_bytes=spec.total_bytes(target_specs), files=files,
        )  # fmt: skip
        drafters: list[TwinPart] = []
        for kind in dict.fromkeys(request.drafters):
            if kind == "mtp":
                mtp = [t for t in target_specs if t.name.startswith("mtp.")]
                part = TwinPart(
                    path=str(out / "target"), kind="mtp", tensors=len(mtp), params=_params(mtp),
                    weight_bytes=spec.total_bytes(mtp),
                )  # fmt: skip
                drafters.append(part)
                continue
            quants = request.draft_quants if kind == "dflash" else ("bf16",)
            for quant in dict.fromkeys(quants):
                drafters.append(_drafter(kind, source, request, marker, tmp, out, device, progress, quant))
        result = TwinResult(
            out=str(out), architecture=source.config["architectures"][0], quant=request.quant, marker=marker,
            target=target, drafters=drafters, tokenizer_vocab=tok_vocab, device=device,
            seconds=round(time.monotonic() - t0, 2),
        )  # fmt: skip
        result.save(tmp / "twin_report.json")
    return result


def _drafter(
    kind: DrafterKind, source: Source, request: TwinRequest, marker: dict[str, Any], tmp: Path, out: Path,
    device: str, progress: Progress, quant: Quant = "bf16",
) -> TwinPart:  # fmt: skip
    from .build import write_shards

    name = f"{kind}-awq" if quant == "awq" else kind
    d = tmp / name
    d.mkdir()
    text = source.config.get("text_config") or source.config
    dtype = spec.drafter_dtype(request.quant, "linear_attention" in (text.get("layer_types") or []))
    dtype_name = {"F16": "float16", "BF16": "bfloat16"}[dtype]
    if kind == "dflash":
        from ..draft.contract import DTYPE_FIELDS, dflash_config
        from .tokenizer import special_tokens

        # the mask token: the last id the tokenizer does not reserve for a special token
        specials = special_tokens(source.config, int(source.text["vocab_size"]))
        mask = max(i for i in range(int(source.text["vocab_size"]) - 1, -1, -1) if i not in specials)
        cfg = dflash_config(
            source.text, layers=request.draft_layers, block_size=request.block_size, mask_token_id=mask
        )
        cfg.update(dict.fromkeys(DTYPE_FIELDS, dtype_name))
        tensors = spec.dflash_tensors(cfg, dtype)
        if quant == "awq":  # as `specq quantize DRAFTER --for speculative` writes it (quantize/drafter.py)
            cfg.update(dict.fromkeys(DTYPE_FIELDS, "float16"))
            cfg["quantization_config"] = spec.drafter_quantization_config()
            tensors = spec.dflash_awq_tensors(cfg, dtype)
        t2d = None
    else:
        cfg = spec.eagle3_config(source, EAGLE3_DRAFT_VOCAB)
        cfg["torch_dtype"] = dtype_name
        tensors = spec.eagle3_tensors(cfg, dtype)
        t2d = int(cfg["draft_vocab_size"])
    cfg[TWIN_KEY] = marker
    progress(f"{name} drafter: {len(tensors)} tensors, {spec.total_bytes(tensors) / 2**30:.2f} GiB")
    files = write_shards(
        tensors, d, device=device, seed=request.seed + 1, progress=progress, shard_bytes=request.shard_bytes,
        t2d_true=t2d, marker=marker_text(marker),
    )  # fmt: skip
    _write_json(d / "config.json", cfg)
    return TwinPart(path=str(out / name), kind=kind, quant=quant, tensors=len(tensors),
                    params=_params(tensors), weight_bytes=spec.total_bytes(tensors), files=files)  # fmt: skip


__all__ = ["TwinPart", "TwinRequest", "TwinResult", "build_twin", "read_source"]
