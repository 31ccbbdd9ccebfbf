"""LMDeploy 0.18's DFlash drafter checkpoint contract, written down once: which config.json fields a drafter
carries, which tensors (names and shapes) it holds, which target layers it may read, and a validator that
checks a checkpoint field by field — and, where lmdeploy is importable, with LMDeploy's own
`parse_dflash_config`. Torch-free: it reads checkpoints through `specq.pipeline.checkpoint.Checkpoint`.

Sources (InternLM/lmdeploy): `lmdeploy/pytorch/spec_decode/dflash_utils.py` (`parse_dflash_config`,
`build_target_layer_ids`, `_validate_dflash_v1_supported`), `lmdeploy/pytorch/models/qwen3_dflash.py`
(`DFlashDraftModel`: module names, `fc` in-features = target_hidden_size × len(target_layer_ids),
`load_weights` raises KeyError on any name it does not own).

A 4-bit drafter (`specq quantize DRAFTER --for speculative`) carries an AWQ `quantization_config` (4-bit,
gemm) and, for each quantized linear (`QUANTIZABLE`: the layers' projections and `fc`), `qweight` I32
[in, out/8], `qzeros` I32 [in/g, out/8] and fp16 `scales` [in/g, out] in place of its `weight` (LMDeploy's
`AwqLinear`); a linear is kept as `weight` when `modules_to_not_convert` names it the way LMDeploy matches
it (the module's fused name, `qkv_proj` / `gate_up_proj`, is a substring of an entry)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

from .. import checkpoint
from ..checkpoint import Checkpoint
from ..errors import ConfigError, InputError

ARCHITECTURE = "DFlashDraftModel"

# Top-level config.json fields a drafter carries, in the order `dflash_config()` writes them;
# `target_hidden_size` is optional for LMDeploy (it falls back to hidden_size) but always written by specq.
CONFIG_FIELDS = (
    "architectures",
    "model_type",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "intermediate_size",
    "rms_norm_eps",
    "rope_theta",
    "max_position_embeddings",
    "vocab_size",
    "layer_types",
    "use_sliding_window",
    "num_target_layers",
    "target_hidden_size",
    "dflash_config",
)
REQUIRED_FIELDS = tuple(f for f in CONFIG_FIELDS if f != "target_hidden_size")
# The required fields that are counts or sizes: positive integers.
_NOT_COUNTS = (
    "architectures",
    "model_type",
    "rms_norm_eps",
    "rope_theta",
    "layer_types",
    "use_sliding_window",
)
POSITIVE_INT_FIELDS = tuple(f for f in REQUIRED_FIELDS if f not in (*_NOT_COUNTS, "dflash_config"))
# Written after those by the export: the checkpoint's dtype in both spellings (transformers 5 reads `dtype`,
# older readers `torch_dtype`), so engines and `specq convert` know it without opening the weights.
DTYPE_FIELDS = ("torch_dtype", "dtype")
QUANT_FIELD = "quantization_config"  # a 4-bit drafter's, written last
DFLASH_FIELDS = ("block_size", "mask_token_id", "target_layer_ids")

LAYER_TENSORS = (
    "self_attn.q_proj.weight",
    "self_attn.k_proj.weight",
    "self_attn.v_proj.weight",
    "self_attn.o_proj.weight",
    "self_attn.q_norm.weight",
    "self_attn.k_norm.weight",
    "mlp.gate_proj.weight",
    "mlp.up_proj.weight",
    "mlp.down_proj.weight",
    "input_layernorm.weight",
    "post_attention_layernorm.weight",
)


def dflash_config(
    target: dict[str, Any],
    *,
    layers: int,
    block_size: int,
    mask_token_id: int,
    target_layer_ids: Sequence[int] | None = None,
) -> dict[str, Any]:
    """A DFlash drafter's config.json for a target (`target`: its language-model config): the target's width
    (the drafter shares its embeddings and lm_head) and attention shape, `layers` decoder layers, and the
    DFlash fields; the target layers it reads default to LMDeploy's spacing (`default_target_layer_ids`).
    `specq draft train` exports with it and `specq twin` builds its random drafters from it."""
    heads = int(target["num_attention_heads"])
    n_target = int(target["num_hidden_layers"])
    ids = default_target_layer_ids(n_target, layers) if target_layer_ids is None else target_layer_ids
    cfg: dict[str, Any] = {
        "architectures": [ARCHITECTURE],
        "model_type": "qwen3",
        "hidden_size": int(target["hidden_size"]),
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": checkpoint.kv_heads(target),
        "head_dim": checkpoint.head_dim(target),
        "intermediate_size": int(target["intermediate_size"]),
        "rms_norm_eps": float(target.get("rms_norm_eps") or 1e-6),
        "rope_theta": checkpoint.rope_theta(target),
        "max_position_embeddings": int(target.get("max_position_embeddings") or 4096),
        "vocab_size": int(target["vocab_size"]),
        "layer_types": ["full_attention"] * layers,
        "use_sliding_window": False,
        "num_target_layers": n_target,
        "target_hidden_size": int(target["hidden_size"]),
        "dflash_config": {
            "block_size": block_size,
            "mask_token_id": mask_token_id,
            "target_layer_ids": list(ids),
        },
    }
    assert tuple(cfg) == CONFIG_FIELDS
    return cfg


def default_target_layer_ids(num_target_layers: int, num_draft_layers: int) -> list[int]:
    """The target layers a drafter reads by default: one draft layer → [L // 2], but never the last layer
    (so [0] for a 2-layer target); more → evenly spaced from 1 to L − 3 (LMDeploy's
    `build_target_layer_ids` fallback, which SGLang and vLLM share)."""
    if num_draft_layers == 1:
        ids = [max(0, min(num_target_layers // 2, num_target_layers - 2))]
    else:
        start, end = 1, num_target_layers - 3
        if end < start:
            raise ConfigError(
                f"draft.layers: {num_draft_layers} draft layers need a target of at least 4 layers "
                f"(this one has {num_target_layers}); use --layers 1"
            )
        span = end - start
        ids = [int(round(start + i * span / (num_draft_layers - 1))) for i in range(num_draft_layers)]
        ids = sorted(set(ids))
    validate_target_layer_ids(ids, num_target_layers)
    return ids


def target_layer_problems(ids: Sequence[Any], num_target_layers: int) -> list[str]:
    """What is wrong with a `target_layer_ids` list for a target of `num_target_layers` layers."""
    if not isinstance(ids, (list, tuple)) or not ids:
        return ["dflash_config.target_layer_ids: must be a non-empty list of integers"]
    if any(isinstance(i, bool) or not isinstance(i, int) for i in ids):
        return [f"dflash_config.target_layer_ids: must contain only integers, got {list(ids)}"]
    problems: list[str] = []
    if any(b <= a for a, b in zip(ids, ids[1:], strict=False)):
        problems.append(f"dflash_config.target_layer_ids: must be strictly increasing, got {list(ids)}")
    bad = [i for i in ids if not 0 <= i < num_target_layers]
    if bad:
        problems.append(
            f"dflash_config.target_layer_ids: {bad} out of range for a {num_target_layers}-layer target"
        )
    elif num_target_layers - 1 in ids:
        # transformers returns the last layer's output after the final norm, LMDeploy captures it before:
        # a drafter trained on one would see different features in the engine.
        problems.append(
            f"dflash_config.target_layer_ids: layer {num_target_layers - 1} is the target's last layer, "
            f"whose features differ between transformers (post-norm) and LMDeploy (pre-norm); "
            f"use layers below {num_target_layers - 1}"
        )
    return problems


def validate_target_layer_ids(ids: Sequence[Any], num_target_layers: int) -> None:
    problems = target_layer_problems(ids, num_target_layers)
    if problems:
        raise ConfigError(problems[0].replace("dflash_config.", "draft."))


# The linears of a drafter that `specq quantize` writes in 4 bit (per layer; and `fc`), and the fused module
# LMDeploy builds each into (what `modules_to_not_convert` is matched against).
QUANTIZABLE = (
    "self_attn.q_proj",
    "self_attn.k_proj",
    "self_attn.v_proj",
    "self_attn.o_proj",
    "mlp.gate_proj",
    "mlp.up_proj",
    "mlp.down_proj",
)
_FUSED = {"q_proj": "qkv_proj", "k_proj": "qkv_proj", "v_proj": "qkv_proj", "gate_proj": "gate_up_proj",
          "up_proj": "gate_up_proj"}  # fmt: skip
AWQ_SUFFIXES = (".qweight", ".qzeros", ".scales")


def awq_config(config: dict[str, Any]) -> dict[str, Any] | None:
    """A drafter config's `quantization_config` (None: a bf16/fp16 drafter)."""
    q = config.get(QUANT_FIELD)
    return dict(q) if isinstance(q, dict) and q else None


def is_kept(prefix: str, not_convert: Sequence[str]) -> bool:
    """Whether LMDeploy 0.18 builds linear `prefix` (a checkpoint name such as `layers.0.self_attn.q_proj`)
    unquantized: `QuantizationConfig.get_quant_method` ignores a module whose name is a substring of a
    `modules_to_not_convert` entry, and q/k/v and gate/up are one module there (`qkv_proj`,
    `gate_up_proj`)."""
    head, _, name = prefix.rpartition(".")
    module = f"{head}.{_FUSED[name]}" if name in _FUSED and head else prefix
    return any(module in str(entry) for entry in not_convert)


def quantized_prefixes(config: dict[str, Any]) -> list[str]:
    """The linears a 4-bit drafter with this config stores as AWQ (empty for a bf16/fp16 drafter)."""
    q = awq_config(config)
    if q is None:
        return []
    not_convert = list(q.get("modules_to_not_convert") or [])
    names = [f"layers.{n}.{m}" for n in range(int(config["num_hidden_layers"])) for m in QUANTIZABLE]
    return [p for p in [*names, "fc"] if not is_kept(p, not_convert)]


def expected_tensors(config: dict[str, Any]) -> dict[str, list[int]]:
    """Every tensor a drafter with this config.json holds, with its shape. Nothing else may be present. A
    4-bit drafter's quantized linears hold AWQ gemm tensors in place of `weight`."""
    out = _bf16_tensors(config)
    q = awq_config(config)
    if q is None:
        return out
    g = int(q.get("group_size") or 128)
    for prefix in quantized_prefixes(config):
        n_out, n_in = out.pop(f"{prefix}.weight")
        groups = n_in // g if g > 0 else 1  # (a non-positive group size is config_problems')
        out[f"{prefix}.qweight"] = [n_in, n_out // 8]
        out[f"{prefix}.qzeros"] = [groups, n_out // 8]
        out[f"{prefix}.scales"] = [groups, n_out]
    return out


def _bf16_tensors(config: dict[str, Any]) -> dict[str, list[int]]:
    h = int(config["hidden_size"])
    heads = int(config["num_attention_heads"])
    kv = int(config["num_key_value_heads"])
    hd = checkpoint.head_dim(config)
    inter = int(config["intermediate_size"])
    th = int(config.get("target_hidden_size") or h)
    n_ctx = len(config["dflash_config"]["target_layer_ids"])
    per_layer = {
        "self_attn.q_proj.weight": [heads * hd, h],
        "self_attn.k_proj.weight": [kv * hd, h],
        "self_attn.v_proj.weight": [kv * hd, h],
        "self_attn.o_proj.weight": [h, heads * hd],
        "self_attn.q_norm.weight": [hd],
        "self_attn.k_norm.weight": [hd],
        "mlp.gate_proj.weight": [inter, h],
        "mlp.up_proj.weight": [inter, h],
        "mlp.down_proj.weight": [h, inter],
        "input_layernorm.weight": [h],
        "post_attention_layernorm.weight": [h],
    }
    out: dict[str, list[int]] = {}
    for n in range(int(config["num_hidden_layers"])):
        for name, shape in per_layer.items():
            out[f"layers.{n}.{name}"] = shape
    out["fc.weight"] = [h, th * n_ctx]
    out["hidden_norm.weight"] = [h]
    out["norm.weight"] = [h]
    return out


def config_problems(config: dict[str, Any], target: Checkpoint | None = None) -> list[str]:
    """Field-by-field check of a drafter config.json (and against its target when given)."""
    problems: list[str] = []
    missing = [f for f in REQUIRED_FIELDS if f not in config]
    if missing:
        return [f"config.json: missing field(s) {', '.join(missing)}"]
    if config["architectures"] != [ARCHITECTURE]:
        problems.append(f"architectures: must be ['{ARCHITECTURE}'], got {config['architectures']}")
    if config["model_type"] != "qwen3":
        problems.append(f"model_type: must be 'qwen3', got {config['model_type']!r}")
    for f in POSITIVE_INT_FIELDS:
        v = config[f]
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            problems.append(f"{f}: must be a positive integer, got {v!r}")
    for f in ("rms_norm_eps", "rope_theta"):
        v = config[f]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            problems.append(f"{f}: must be a positive number, got {v!r}")
    if problems:
        return problems
    if config["num_attention_heads"] % config["num_key_value_heads"]:
        problems.append("num_attention_heads: must be a multiple of num_key_value_heads")
    lt = config["layer_types"]
    if not isinstance(lt, list) or lt != ["full_attention"] * config["num_hidden_layers"]:
        problems.append(f"layer_types: must be ['full_attention'] × num_hidden_layers, got {lt!r}")
    if config["use_sliding_window"] is not False:
        problems.append(f"use_sliding_window: must be false, got {config['use_sliding_window']!r}")
    dc = config["dflash_config"]
    if not isinstance(dc, dict):
        return [*problems, "dflash_config: must be a table {block_size, mask_token_id, target_layer_ids}"]
    dmissing = [f for f in DFLASH_FIELDS if f not in dc]
    if dmissing:
        return [*problems, f"dflash_config: missing field(s) {', '.join(dmissing)}"]
    bs = dc["block_size"]
    if isinstance(bs, bool) or not isinstance(bs, int) or bs < 2:
        problems.append(f"dflash_config.block_size: must be an integer ≥ 2, got {bs!r}")
    mask = dc["mask_token_id"]
    if isinstance(mask, bool) or not isinstance(mask, int) or not 0 <= mask < config["vocab_size"]:
        problems.append(f"dflash_config.mask_token_id: must be a token id below vocab_size, got {mask!r}")
    problems += target_layer_problems(dc["target_layer_ids"], config["num_target_layers"])
    th = config.get("target_hidden_size", config["hidden_size"])
    if target is not None:
        tc = target.text_config
        checks = {
            "num_target_layers": ("num_hidden_layers", config["num_target_layers"]),
            "target_hidden_size": ("hidden_size", th),
            "hidden_size": ("hidden_size", config["hidden_size"]),
            "vocab_size": ("vocab_size", config["vocab_size"]),
        }
        for field, (tfield, value) in checks.items():
            if tc.get(tfield) is not None and tc.get(tfield) != value:
                problems.append(f"{field}: {value} does not match the target's {tfield} {tc.get(tfield)}")
    return problems or quantization_problems(config)


def quantization_problems(config: dict[str, Any]) -> list[str]:
    """A 4-bit drafter's `quantization_config`: 4-bit AWQ gemm with a group size that tiles every quantized
    linear's input (what LMDeploy's AwqLinear asserts)."""
    q = awq_config(config)
    if q is None:
        return []
    method, bits, version = q.get("quant_method"), q.get("bits"), str(q.get("version") or "").lower()
    if method != "awq" or bits != 4 or version != "gemm":
        return [
            f"quantization_config: a drafter is loaded as 4-bit AWQ gemm only, got {method} {bits}-bit "
            f"{version or '(no version)'}"
        ]
    g = q.get("group_size")
    if isinstance(g, bool) or not isinstance(g, int) or g <= 0:
        return [f"quantization_config.group_size: must be a positive integer, got {g!r}"]
    shapes = _bf16_tensors(config)
    bad = sorted({n for p in quantized_prefixes(config) if (n := shapes[f"{p}.weight"][1]) % g})
    if bad:
        return [f"quantization_config.group_size {g} does not divide the input size {bad[0]} of a linear"]
    return []


def tensor_problems(draft: Checkpoint) -> list[str]:
    """Tensor names and shapes against `expected_tensors`: nothing missing, nothing extra, shapes exact."""
    want = expected_tensors(draft.config)
    have = draft.tensors
    problems: list[str] = []
    extra = sorted(set(have) - set(want))
    missing = sorted(set(want) - set(have))
    if extra:
        problems.append(f"unexpected tensor(s) LMDeploy cannot load: {', '.join(extra[:5])}")
    if missing:
        problems.append(f"missing tensor(s): {', '.join(missing[:5])}")
    for name in sorted(set(want) & set(have)):
        if have[name].shape != want[name]:
            problems.append(f"{name}: shape {have[name].shape}, expected {want[name]}")
    dtypes = {t.dtype for name, t in have.items() if not name.endswith(AWQ_SUFFIXES)}
    if len(dtypes) > 1:
        problems.append(f"tensors mix dtypes {sorted(dtypes)}; LMDeploy loads one dtype")
    want_dtype = {".qweight": "I32", ".qzeros": "I32", ".scales": "F16"}  # AwqLinear's parameters
    for name in sorted(set(want) & set(have)):
        suffix = name[name.rfind(".") :]
        if suffix in want_dtype and have[name].dtype != want_dtype[suffix]:
            problems.append(f"{name}: dtype {have[name].dtype}, expected {want_dtype[suffix]} (AWQ gemm)")
            break
    return problems


def lmdeploy_parse(config: dict[str, Any], draft_tokens: int, target_layers: int) -> Any:
    """Run LMDeploy's own `parse_dflash_config` on a drafter config; None when lmdeploy is absent.

    Raises InputError with LMDeploy's message when it refuses the config."""
    try:  # lmdeploy/pytorch/spec_decode/dflash_utils.py (0.18)
        from lmdeploy.pytorch.spec_decode.dflash_utils import parse_dflash_config
    except ImportError:
        return None
    try:
        return parse_dflash_config(
            SimpleNamespace(**config),
            num_speculative_tokens=draft_tokens,
            target_num_layers=target_layers,
        )
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise InputError(f"LMDeploy's parse_dflash_config refuses this drafter: {e}") from None


def check_drafter(
    draft: Checkpoint, target: Checkpoint | None = None, draft_tokens: int | None = None
) -> list[str]:
    """Every way `draft` breaks LMDeploy 0.18's DFlash contract (empty list: it conforms)."""
    problems = config_problems(draft.config, target)
    if problems:
        return problems
    problems += tensor_problems(draft)
    bs = int(draft.dflash_block_size or 0)  # config_problems checked it
    if draft_tokens is not None and draft_tokens + 1 > bs:
        problems.append(
            f"num_draft_tokens: {draft_tokens} + 1 exceeds the drafter's block_size {bs} "
            f"(LMDeploy's limit); use at most {bs - 1}"
        )
    return problems


def validate_drafter(
    draft: Checkpoint, target: Checkpoint | None = None, draft_tokens: int | None = None
) -> bool:
    """Raise InputError on the first contract violation. Returns whether LMDeploy's own parser also ran."""
    problems = check_drafter(draft, target, draft_tokens)
    if problems:
        raise InputError(f"{draft.path}: not a valid LMDeploy DFlash drafter: {problems[0]}")
    k = draft_tokens if draft_tokens is not None else int(draft.dflash_block_size or 0) - 1
    return lmdeploy_parse(draft.config, k, int(draft.config["num_target_layers"])) is not None
