"""Reading a Hugging Face checkpoint directory without torch: `config.json`, the safetensors headers (names,
dtypes, shapes; no weights are loaded), the `quantization_config`, and what kind of drafter a checkpoint is.
convert, plan, serve and bench all read checkpoints through this one module."""

from __future__ import annotations

import json
import math
import re
import struct
from collections.abc import Mapping
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from .errors import InputError, decode_error

DTYPE_BYTES = {
    "F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "U32": 4, "I16": 2, "U16": 2,
    "I8": 1, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "U64": 8, "C64": 8, "F8_E8M0": 1,
}  # fmt: skip
# dtypes the safetensors format knows whose elements are not whole bytes (their sizes are not checked)
SUBBYTE_DTYPES = frozenset({"F4", "F6_E2M3", "F6_E3M2"})

DraftKind = Literal["dflash", "eagle3", "eagle", "mtp", "model", "unknown"]

# config.json `architectures` entries that identify a drafter for LMDeploy 0.18.
DRAFT_ARCHITECTURES: dict[str, DraftKind] = {
    "DFlashDraftModel": "dflash",
    "Eagle3LlamaForCausalLM": "eagle3",
    "LlamaForCausalLMEagle3": "eagle3",
    "Eagle3DraftModel": "eagle3",
    "EagleLlamaForCausalLM": "eagle",
    "LlamaForCausalLMEagle": "eagle",
}


class TensorInfo(BaseModel):
    dtype: str
    shape: list[int]
    file: str

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * DTYPE_BYTES.get(self.dtype, 0)


class QuantInfo(BaseModel):
    """The parts of `quantization_config` that engines care about, normalised across producers."""

    method: str  # gptq | awq | compressed-tensors | other names as written
    bits: int | None = None
    group_size: int | None = None
    sym: bool | None = None
    desc_act: bool | None = None
    zero_point: bool | None = None
    version: str | None = None  # AWQ: gemm | gemv | ...
    checkpoint_format: str | None = None  # GPTQ: gptq | gptq_v2; compressed-tensors: format
    raw: dict[str, Any] = {}


def read_safetensors_header(path: Path) -> dict[str, TensorInfo]:
    """Tensor names, dtypes and shapes from one .safetensors file, reading only its JSON header. The header is
    checked against the file's size, so a truncated or damaged file is an InputError, not a wrong plan."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            if n > 100 * 2**20 or 8 + n > size:
                raise InputError(
                    f"{path}: safetensors header of {n} bytes does not fit a {size}-byte file; the file is "
                    "damaged or truncated"
                )
            header = json.loads(f.read(n))
    except (OSError, struct.error, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: not a readable safetensors file ({type(e).__name__})") from None
    if not isinstance(header, dict):
        raise InputError(f"{path}: not a readable safetensors file (header is not a JSON object)")
    out: dict[str, TensorInfo] = {}
    spans: list[tuple[int, int, str]] = []
    data_end = 0
    for name, v in header.items():
        if name == "__metadata__":
            continue
        try:
            info = TensorInfo(dtype=v["dtype"], shape=list(v["shape"]), file=path.name)
            start, end = (int(x) for x in v["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise InputError(f"{path}: tensor '{name}' has a malformed safetensors header entry") from None
        if info.dtype not in DTYPE_BYTES and info.dtype not in SUBBYTE_DTYPES:
            raise InputError(
                f"{path}: tensor '{name}' has dtype {info.dtype!r}, which safetensors does not define; "
                "damaged file"
            )
        if end < start or (info.dtype in DTYPE_BYTES and end - start != info.nbytes):
            raise InputError(
                f"{path}: tensor '{name}' header disagrees with its dtype and shape; damaged file"
            )
        data_end = max(data_end, end)
        spans.append((start, end, name))
        out[name] = info
    if 8 + n + data_end > size:
        raise InputError(
            f"{path}: file is {size} bytes but its header describes {8 + n + data_end}; the file is truncated"
        )
    _check_contiguous(path, spans, size - 8 - n)
    return out


def _check_contiguous(path: Path, spans: list[tuple[int, int, str]], data_bytes: int) -> None:
    """The tensors must tile the data section exactly, in offset order, as safetensors' loader demands
    ("invalid offset", "file not fully covered"): a gap is a tensor whose header entry is missing, an overlap
    two entries claiming the same bytes, bytes left over a file that is not the one its header describes."""
    at = 0
    for start, end, name in sorted(spans):
        if start != at:
            what = (
                "a gap before it: a tensor's header entry is missing" if start > at else "it overlaps another"
            )
            raise InputError(
                f"{path}: tensor '{name}' starts at data byte {start}, not {at} ({what}); the file is damaged"
            )
        at = end
    if at != data_bytes:
        raise InputError(
            f"{path}: its header describes {at} bytes of tensor data but the file holds {data_bytes}; the "
            "file is damaged"
        )


TWIN_KEY = "specq_twin"  # config.json key `specq twin` writes: a random-weight copy of a model's shapes


def twin_marker(path: str | Path | None) -> dict[str, Any] | None:
    """The `specq_twin` marker of the checkpoint at `path` (None: not a twin, or nothing readable there)."""
    if not path:
        return None
    try:
        config = json.loads((Path(path) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    marker = config.get(TWIN_KEY) if isinstance(config, dict) else None
    return dict(marker) if isinstance(marker, dict) else None


def twin_note(role: str, path: str, marker: dict[str, Any]) -> str:
    """The one line every report that reads a twin carries."""
    src = marker.get("source_name") or "a config.json"
    return (
        f"TWIN: the {role} {path} is a scale twin of {src} (random weights at its exact shapes, built "
        f"{marker.get('created', '?')}): memory and speed are real, acceptance and outputs mean nothing"
    )


# ---- facts read off a config.json, defined once --------------------------------------------------------
# `text` is the language model's part of a config (`Checkpoint.text_config`); `config` a whole config.json.

DEFAULT_ROPE_THETA = 10000.0


def head_dim(text: Mapping[str, Any]) -> int:
    """The width of one attention head: `head_dim`, else hidden_size / num_attention_heads (the Hugging Face
    default). KeyError, TypeError or ZeroDivisionError when the config has neither."""
    return int(text.get("head_dim") or int(text["hidden_size"]) // int(text["num_attention_heads"]))


def kv_heads(text: Mapping[str, Any]) -> int:
    """Key/value heads: `num_key_value_heads`, else one per attention head (no GQA)."""
    return int(text.get("num_key_value_heads") or text["num_attention_heads"])


def rope_theta(text: Mapping[str, Any]) -> float:
    """The RoPE base: `rope_theta`, else transformers 5's `rope_parameters.rope_theta`, else 10000."""
    theta = text.get("rope_theta") or (text.get("rope_parameters") or {}).get("rope_theta")
    return float(theta or DEFAULT_ROPE_THETA)


def dflash_fields(config: Mapping[str, Any]) -> dict[str, Any]:
    """A DFlash drafter's `dflash_config` (block_size, mask_token_id, target_layer_ids); {} when none."""
    text = config.get("text_config") or {}
    return dict(
        config.get("dflash_config") or (text.get("dflash_config") if isinstance(text, dict) else None) or {}
    )


def dflash_block_size(config: Mapping[str, Any]) -> int | None:
    """A DFlash drafter's block size (it drafts up to block_size - 1 tokens a step); None when unset."""
    bs = dflash_fields(config).get("block_size")
    return int(bs) if isinstance(bs, int) and not isinstance(bs, bool) else None


def read_config(cfg: Path) -> dict[str, Any]:
    """A model's `config.json` (at any path), parsed and its keys' types checked: InputError (exit 2) names
    the file and what is wrong with it."""
    try:
        raw = cfg.read_bytes()
        config = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise decode_error(e, cfg) from None
    except json.JSONDecodeError as e:
        raise InputError(f"{cfg}: not valid JSON ({e})") from None
    except RecursionError:
        raise InputError(f"{cfg}: nested too deeply to be a model config") from None
    problem = config_type_problem(config)
    if problem:
        raise InputError(f"{cfg}: {problem}; fix config.json or copy it again from the original model")
    return config  # type: ignore[no-any-return]


class Checkpoint:
    """A model directory: config, tensors (from headers), quantization, and drafter kind."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if not self.path.is_dir():
            raise InputError(f"{self.path}: not a directory; pass a Hugging Face model directory")
        cfg = self.path / "config.json"
        if not cfg.is_file():
            raise InputError(f"{self.path}: no config.json; pass a Hugging Face model directory")
        self.config: dict[str, Any] = read_config(cfg)

    @property
    def name(self) -> str:
        return self.path.resolve().name

    @property
    def twin(self) -> dict[str, Any] | None:
        """The `specq_twin` marker when this is a scale twin (random weights at a model's shapes)."""
        marker = self.config.get(TWIN_KEY)
        return dict(marker) if isinstance(marker, dict) else None

    @property
    def architectures(self) -> list[str]:
        return list(self.config.get("architectures") or [])

    @property
    def text_config(self) -> dict[str, Any]:
        """The language-model part of the config (multimodal models nest it under `text_config`)."""
        return dict(self.config.get("text_config") or self.config)

    @property
    def head_dim(self) -> int:
        return head_dim(self.text_config)

    @property
    def rope_theta(self) -> float:
        return rope_theta(self.text_config)

    @property
    def dflash_block_size(self) -> int | None:
        return dflash_block_size(self.config)

    @property
    def model_type(self) -> str:
        """The language model's `model_type` (the text config's, else the top level's); "" when unset."""
        return str(self.text_config.get("model_type") or self.config.get("model_type") or "")

    @cached_property
    def tensors(self) -> dict[str, TensorInfo]:
        """Every tensor's header. With `model.safetensors.index.json` the shards it names are read (a missing
        shard is an error); otherwise every `*.safetensors` file in the directory."""
        files = self._weight_files()
        if not files:
            raise InputError(f"{self.path}: no .safetensors files (specq reads safetensors checkpoints only)")
        out: dict[str, TensorInfo] = {}
        for f in files:
            out.update(read_safetensors_header(f))
        return out

    @property
    def weight_files(self) -> list[Path]:
        """The safetensors files holding the weights (the index's shards when there is an index)."""
        return self._weight_files()

    @property
    def has_weights(self) -> bool:
        """Whether the directory holds safetensors weights (a config-only directory does not)."""
        return bool(self._weight_files())

    def _weight_files(self) -> list[Path]:
        index = self.path / "model.safetensors.index.json"
        if index.is_file():
            try:
                weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
                shards = sorted(set(weight_map.values()))
            except (json.JSONDecodeError, KeyError, TypeError, AttributeError):
                raise InputError(f"{index}: not a valid safetensors index (no weight_map)") from None
            missing = [s for s in shards if not (self.path / s).is_file()]
            if missing:
                raise InputError(f"{index}: names shard {missing[0]} which is missing from {self.path}")
            return [self.path / s for s in shards]
        return sorted(self.path.glob("*.safetensors"))

    @property
    def file_bytes(self) -> int:
        """Bytes the weight files take on disk (0 for a config-only directory)."""
        return sum(f.stat().st_size for f in self._weight_files())

    @property
    def weight_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors.values())

    @property
    def quantization(self) -> QuantInfo | None:
        q = self.config.get("quantization_config") or self.text_config.get("quantization_config")
        if not q:
            return None
        method = str(q.get("quant_method", "unknown")).lower()
        if method == "compressed-tensors":
            return _compressed_tensors_info(q)
        return QuantInfo(
            method=method,
            bits=q.get("bits", q.get("w_bit")),
            group_size=q.get("group_size", q.get("q_group_size")),
            sym=q.get("sym"),
            desc_act=q.get("desc_act"),
            zero_point=q.get("zero_point"),
            version=(str(q["version"]).lower() if q.get("version") is not None else None),
            checkpoint_format=q.get("checkpoint_format") or q.get("format"),
            raw=dict(q),
        )

    @property
    def draft_kind(self) -> DraftKind:
        for arch in self.architectures:
            if arch in DRAFT_ARCHITECTURES:
                return DRAFT_ARCHITECTURES[arch]
        if "dflash_config" in self.config:
            return "dflash"
        if any(a.endswith("ForCausalLM") for a in self.architectures):
            return "model"
        return "unknown"

    @property
    def torch_dtype(self) -> str | None:
        """The config's dtype; without one, the floating dtype most of the safetensors tensors have."""
        cfg, text = self.config, self.text_config
        said = cfg.get("torch_dtype") or cfg.get("dtype") or text.get("torch_dtype") or text.get("dtype")
        if said or not self.has_weights:
            return said
        names = {"F16": "float16", "BF16": "bfloat16", "F32": "float32"}
        counts: dict[str, int] = {}
        for t in self.tensors.values():
            if t.dtype in names:
                counts[names[t.dtype]] = counts.get(names[t.dtype], 0) + 1
        return max(counts, key=lambda k: counts[k]) if counts else None


def _compressed_tensors_info(q: dict[str, Any]) -> QuantInfo:
    groups = q.get("config_groups") or {}
    weights: dict[str, Any] = {}
    for g in groups.values():
        weights = g.get("weights") or {}
        if weights:
            break
    return QuantInfo(
        method="compressed-tensors",
        bits=weights.get("num_bits"),
        group_size=weights.get("group_size"),
        sym=weights.get("symmetric"),
        desc_act=bool(weights.get("actorder")) if weights.get("actorder") is not None else None,
        checkpoint_format=q.get("format"),
        raw=dict(q),
    )


# The config.json keys specq reads, by the JSON type each must have; null counts as absent. The same keys
# are checked in `text_config` (multimodal checkpoints) and `quantization_config`/`dflash_config`.
_POSITIVE_INT = (
    "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "vocab_size",
    "intermediate_size", "head_dim", "max_position_embeddings", "target_hidden_size", "num_target_layers",
    "block_size", "bits", "w_bit",
)  # fmt: skip
_INT = ("mtp_num_hidden_layers", "mask_token_id", "group_size", "q_group_size")
_BOOL = ("tie_word_embeddings", "sym", "desc_act", "zero_point")
_STR = ("model_type", "torch_dtype", "dtype", "quant_method", "version", "checkpoint_format", "format")
_OBJECT = ("text_config", "quantization_config", "dflash_config", "vision_config", "config_groups")
_STR_LIST = ("architectures", "layer_types")
_INT_LIST = ("target_layer_ids",)


def config_type_problem(config: Any, where: str = "") -> str | None:
    """The first key of a parsed config.json whose value has the wrong JSON type (a string where an integer
    belongs, a list where an object belongs), as "'key' must be ..., not ..."; None when all fit."""
    if not isinstance(config, dict):
        return f"{where or 'the file'} must be a JSON object, not {_json_type(config)}"

    def bad(key: str, want: str) -> str:
        shown = json.dumps(config[key])
        shown = shown if len(shown) <= 40 else shown[:37] + "..."
        return f"'{where}{key}' must be {want}, not {_json_type(config[key])} {shown}"

    for key, value in config.items():
        if value is None:
            continue
        is_int = isinstance(value, int) and not isinstance(value, bool)
        if key in _POSITIVE_INT and not (is_int and value > 0):
            return bad(key, "a positive integer")
        if key in _INT and not is_int:
            return bad(key, "an integer")
        if key in _BOOL and not isinstance(value, bool):
            return bad(key, "true or false")
        if key in _STR and not isinstance(value, str):
            return bad(key, "a string")
        if key in _STR_LIST and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            return bad(key, "a list of strings")
        if key in _INT_LIST and not (
            isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
        ):
            return bad(key, "a list of integers")
        if key in _OBJECT:
            if not isinstance(value, dict):
                return bad(key, "an object")
            if key != "vision_config":
                nested = config_type_problem(value, f"{where}{key}.")
                if nested:
                    return nested
    return None


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    return {dict: "an object", list: "a list", str: "a string", int: "an integer", float: "a number"}.get(
        type(value), type(value).__name__
    )


# Config keys every decoder needs to be built (in `text_config` for multimodal checkpoints); drafters need
# fewer because they borrow the target's embedding and head.
MODEL_KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")
DRAFT_KEYS = ("hidden_size",)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")


def checkpoint_problems(
    ckpt: Checkpoint, *, tokenizer: bool = True, weights: bool = True, drafter: bool = False
) -> list[str]:
    """What makes `ckpt` unusable, reading headers and small JSON files only (milliseconds): safetensors
    headers against file sizes, the config keys its architecture needs, the tensors those keys imply (an
    embedding, every layer, the final norm, a head unless tied) and, with `tokenizer`, a tokenizer that
    parses. Empty means the checkpoint is complete; convert, plan, serve, draft and quantize all ask.
    Without `weights`, a config-only directory passes (planning, a dry run); weights present are checked.
    A `drafter` (DFlash, EAGLE, or a small model used as one) borrows the target's embedding, head and
    tokenizer and comes in several layouts: its headers and hidden size are checked."""
    text = ckpt.text_config
    problems: list[str] = []
    keys = DRAFT_KEYS if drafter else MODEL_KEYS
    missing = [k for k in keys if not isinstance(text.get(k), int) or isinstance(text.get(k), bool)]
    if missing:
        problems.append(f"config.json lacks {', '.join(missing)} (needed to build the model)")
    try:
        if not weights and not ckpt.has_weights:
            return problems + (tokenizer_problems(ckpt.path) if tokenizer else [])
        tensors = ckpt.tensors  # every header against its file's size
    except InputError as e:
        return problems + [str(e)]
    problems += shape_problems(text, tensors)
    if drafter:
        return problems
    names = list(tensors)
    layers = text.get("num_hidden_layers")
    if isinstance(layers, int) and layers > 0:
        present = {int(m.group(1)) for m in (_LAYER.search(n) for n in names) if m}
        absent = [i for i in range(layers) if i not in present]
        if absent:
            problems.append(
                f"config.json says {layers} layers but the weights have none for layer"
                f"{'s' if len(absent) > 1 else ''} {_ranges(absent)}"
            )
    if not any("embed_tokens." in n or n.startswith(("wte.", "transformer.wte.")) for n in names):
        problems.append("the weights have no token embedding (embed_tokens)")
    tied = bool(ckpt.config.get("tie_word_embeddings", text.get("tie_word_embeddings", False)))
    if not tied and not any(n.startswith("lm_head.") or ".lm_head." in n for n in names):
        problems.append("the weights have no lm_head and config.json does not tie it to the embedding")
    if tokenizer:
        problems += tokenizer_problems(ckpt.path)
    return problems


# MLP projections of an unquantized dense layer: (name suffix, which config size each dimension is).
_MLP_SHAPES = (
    ("mlp.gate_proj.weight", ("intermediate_size", "hidden_size")),
    ("mlp.up_proj.weight", ("intermediate_size", "hidden_size")),
    ("mlp.down_proj.weight", ("hidden_size", "intermediate_size")),
)


_OTHER_TOWERS = ("visual", "vision", "audio", "mm_projector")


def shape_problems(text: dict[str, Any], tensors: dict[str, TensorInfo]) -> list[str]:
    """Dense MLP weights whose shapes disagree with config.json's hidden_size and intermediate_size (a
    config copied from another model size): the first such tensor, or nothing."""
    sizes = {k: text.get(k) for k in ("hidden_size", "intermediate_size")}
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in sizes.values()):
        return []  # per-layer sizes or missing keys: reported elsewhere or not checkable
    for name, t in tensors.items():
        if any(tower in name for tower in _OTHER_TOWERS):
            continue  # a vision or audio encoder has MLPs of its own sizes
        for suffix, dims in _MLP_SHAPES:
            want = [sizes[d] for d in dims]
            if name.endswith(suffix) and len(t.shape) == 2 and t.shape != want:
                said = ", ".join(f"{d} {sizes[d]}" for d in dims)
                return [
                    f"tensor '{name}' has shape {t.shape} but config.json says {said}; the config does "
                    "not belong to these weights"
                ]
    return []


def _tokenizer_json(path: Path) -> tuple[Any, str | None]:
    """A tokenizer file's JSON, or the one line saying why it cannot be used."""
    try:
        return json.loads(path.read_bytes().decode("utf-8")), None
    except OSError as e:
        return None, f"{path}: cannot be read ({e.strerror})"
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        damaged = "the tokenizer is damaged (copy it again from the original model)"
        return None, f"{path}: not valid JSON; {damaged}"


def tokenizer_problems(path: Path) -> list[str]:
    """A tokenizer that would load: tokenizer.json is one the `tokenizers` library builds (or, without that
    library, JSON with a model), or a vocabulary is there; tokenizer_config.json, when present, is a JSON
    object."""
    tc = path / "tokenizer_config.json"
    if tc.is_file():
        cfg, problem = _tokenizer_json(tc)
        if problem:
            return [problem]
        if not isinstance(cfg, dict):
            return [
                f"{tc}: not a JSON object; the tokenizer is damaged (copy it again from the original model)"
            ]
    tj = path / "tokenizer.json"
    if tj.is_file():
        data, problem = _tokenizer_json(tj)
        if problem:
            return [problem]
        if not isinstance(data, dict) or not isinstance(data.get("model"), dict):
            return [f"{tj}: has no tokenizer model; copy it again from the original model"]
        return _tokenizer_builds(tj)
    if any((path / f).is_file() for f in TOKENIZER_FILES[1:]):
        return []
    return [f"no tokenizer ({', '.join(TOKENIZER_FILES)}); copy the tokenizer files from the original model"]


def _tokenizer_builds(tj: Path) -> list[str]:
    """Whether the `tokenizers` library (transformers and LMDeploy load tokenizer.json with it) builds it."""
    try:
        from tokenizers import Tokenizer
    except ImportError:
        return []
    try:
        Tokenizer.from_file(str(tj))
    except Exception as e:  # the Rust library raises a bare Exception for any malformed file
        reason = " ".join(str(e).split())[:120]
        return [
            f"{tj}: the tokenizers library cannot load it ({reason}); copy it again from the original model"
        ]
    return []


def validate_checkpoint(
    ckpt: Checkpoint, *, tokenizer: bool = True, weights: bool = True, role: str = "model"
) -> Checkpoint:
    """Raise one InputError (exit 2) naming the first problem `checkpoint_problems` finds (and how many
    more there are); return `ckpt` when it is complete. `role` "drafter" checks what a drafter needs."""
    drafter = role == "drafter"
    problems = checkpoint_problems(
        ckpt, tokenizer=tokenizer and not drafter, weights=weights, drafter=drafter
    )
    if problems:
        n = len(problems) - 1
        more = f" (and {n} more problem{'s' if n > 1 else ''})" if n else ""
        first = problems[0] if problems[0].startswith(str(ckpt.path)) else f"{ckpt.path}: {problems[0]}"
        raise InputError(f"{role} {first}{more}; the checkpoint is incomplete or damaged")
    return ckpt


_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")


def _ranges(values: list[int]) -> str:  # also in config.models (int_ranges); checkpoint stays config-free
    runs: list[list[int]] = []
    for v in values:
        if runs and v == runs[-1][1] + 1:
            runs[-1][1] = v
        else:
            runs.append([v, v])
    return ",".join(str(a) if a == b else f"{a}..{b}" for a, b in runs)
