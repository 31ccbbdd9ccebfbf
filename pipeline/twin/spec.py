"""What a scale twin holds, from a `config.json` alone (torch-free): every tensor of the model with its exact
name, shape and dtype, how to fill it (random normal, a norm's identity, Gated DeltaNet's decay, packed int4
codes) and, for AWQ, which linears are quantized — plus the configs and tensors of drafters of matching
shape.

Architectures (the names a real checkpoint's `architectures` lists):
- `Qwen3ForCausalLM`, `LlamaForCausalLM` (dense): transformers' `qwen3` / `llama` modelling code (names,
  q/k norms of Qwen3, `attention_bias` / `mlp_bias`, tied embeddings).
- `Qwen3_5ForConditionalGeneration`: `model.language_model.*` (Gated DeltaNet `linear_attn` and gated full
  attention layers, transformers' `qwen3_5`), `model.visual.*` (the Qwen3-VL style tower) and the MTP layer
  as the real checkpoint ships it (`mtp.*`, names of LMDeploy 0.18's `qwen3_5_mtp.py`, pipeline/toy/mtp.py).

AWQ (`--quant awq`): LMDeploy's AWQ gemm layout (pipeline/engines/layout.py: `qweight` I32 [K, N/8],
`qzeros` I32 [K/g, N/8], `scales` F16 [K/g, N]) for every decoder-layer projection, except what LMDeploy
0.18 builds unquantized for Qwen3.5 (pipeline/engines/qwen35.py): the Gated DeltaNet's `in_proj_a` /
`in_proj_b`, the vision tower and `mtp.fc`; the MTP layer stays bf16 and `modules_to_not_convert` names its
fused modules (as `specq quantize` marks it). Embeddings, lm_head and norms stay bf16."""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from .. import checkpoint
from ..errors import InputError, UsageError

Init = Literal["normal", "ones", "zeros", "a_log", "int4", "scales", "t2d", "d2t"]
Quant = Literal["bf16", "awq"]
DrafterKind = Literal["mtp", "dflash", "eagle3"]

ARCHITECTURES = {
    "Qwen3ForCausalLM": "qwen3",
    "LlamaForCausalLM": "llama",
    "Qwen3_5ForConditionalGeneration": "qwen3_5",
}
DTYPE_BYTES = {"BF16": 2, "F16": 2, "F32": 4, "I32": 4, "I64": 8, "BOOL": 1}
AWQ_GROUP = 128
AWQ_PACK = 8
STD = 0.02
# LMDeploy 0.18 builds these unquantized in a Qwen3.5 AWQ checkpoint (engines/qwen35.py)
QWEN35_NOT_CONVERT = ["in_proj_a", "in_proj_b", "model.visual"]


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...]
    dtype: str  # a safetensors dtype name: BF16 F16 F32 I32 I64 BOOL
    init: Init = "normal"

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * DTYPE_BYTES[self.dtype]


@dataclass
class Source:
    """The config a twin is built from, where it was read, and its hash."""

    config: dict[str, Any]
    path: str
    sha256: str

    @property
    def name(self) -> str:
        p = Path(self.path)
        return p.parent.name if p.name == "config.json" else p.name

    @property
    def family(self) -> str:
        return ARCHITECTURES[self.config["architectures"][0]]

    @property
    def text(self) -> dict[str, Any]:
        return dict(self.config.get("text_config") or self.config)


def read_source(path: str | Path) -> Source:
    """A `config.json` (the file, or a checkpoint directory holding one), checked for a supported
    architecture: anything else is refused in one line (exit 2)."""
    p = Path(path)
    f = p / "config.json" if p.is_dir() else p
    if not f.is_file():
        raise InputError(f"{path}: no config.json there; pass a config.json or a checkpoint directory")
    raw = f.read_bytes()
    try:
        config = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise InputError(f"{f}: not valid JSON ({type(e).__name__})") from None
    if not isinstance(config, dict):
        raise InputError(f"{f}: not a config object")
    archs = config.get("architectures") or []
    if not archs or archs[0] not in ARCHITECTURES:
        got = archs[0] if archs else "none"
        raise UsageError(
            f"{f}: architecture {got} is not one specq twin builds (supported: {', '.join(ARCHITECTURES)})"
        )
    if config.get("specq_twin"):
        raise UsageError(f"{f} is itself a scale twin; build from the real model's config.json")
    text = dict(config.get("text_config") or config)
    for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size", "intermediate_size"):
        if not isinstance(text.get(key), int) or text[key] <= 0:
            raise InputError(f"{f}: {key} missing or not a positive integer")
    if text.get("num_experts") or text.get("n_routed_experts") or text.get("num_local_experts"):
        raise UsageError(f"{f}: mixture-of-experts models are not supported by specq twin (dense only)")
    return Source(config, str(f), hashlib.sha256(raw).hexdigest())


# ---- shapes ----------------------------------------------------------------------------------------------


def _heads(tc: dict[str, Any]) -> tuple[int, int, int]:
    return int(tc["num_attention_heads"]), checkpoint.kv_heads(tc), checkpoint.head_dim(tc)


class _Builder:
    """Collects tensors; a linear goes out as bf16 `weight` or AWQ `qweight`/`qzeros`/`scales`."""

    def __init__(self, quant: Quant, dtype: str = "BF16"):
        self.quant = quant
        self.dtype = dtype
        self.out: list[TensorSpec] = []

    def add(self, name: str, shape: tuple[int, ...], init: Init = "normal", dtype: str | None = None) -> None:
        self.out.append(TensorSpec(name, tuple(int(d) for d in shape), dtype or self.dtype, init))

    def linear(
        self, prefix: str, in_f: int, out_f: int, *, bias: bool = False, quantize: bool = True
    ) -> None:
        if self.quant == "awq" and quantize:
            if in_f % AWQ_GROUP or out_f % AWQ_PACK:
                raise UsageError(
                    f"{prefix}: {in_f} -> {out_f} features do not fit AWQ group {AWQ_GROUP} / packing "
                    f"{AWQ_PACK}; build this twin with --quant bf16"
                )
            groups = in_f // AWQ_GROUP
            self.add(f"{prefix}.qweight", (in_f, out_f // AWQ_PACK), "int4", "I32")
            self.add(f"{prefix}.qzeros", (groups, out_f // AWQ_PACK), "int4", "I32")
            self.add(f"{prefix}.scales", (groups, out_f), "scales", "F16")
        else:
            self.add(f"{prefix}.weight", (out_f, in_f))
        if bias:
            self.add(f"{prefix}.bias", (out_f,), "zeros")


def _dense_layer(b: _Builder, p: str, tc: dict[str, Any], family: str, *, quantize: bool = True) -> None:
    """A Qwen3 / Llama decoder layer (also a Qwen3.5 full-attention layer: family qwen3_5, gated q_proj)."""
    h, inter = int(tc["hidden_size"]), int(tc["intermediate_size"])
    heads, kv, hd = _heads(tc)
    bias = bool(tc.get("attention_bias", False))
    gate = 2 if family == "qwen3_5" else 1
    norm: Init = "zeros" if family == "qwen3_5" else "ones"  # Qwen3.5's RMSNorm is zero-centred (1 + w)
    b.add(f"{p}.input_layernorm.weight", (h,), norm)
    b.add(f"{p}.post_attention_layernorm.weight", (h,), norm)
    a = f"{p}.self_attn"
    b.linear(f"{a}.q_proj", h, heads * hd * gate, bias=bias, quantize=quantize)
    b.linear(f"{a}.k_proj", h, kv * hd, bias=bias, quantize=quantize)
    b.linear(f"{a}.v_proj", h, kv * hd, bias=bias, quantize=quantize)
    b.linear(f"{a}.o_proj", heads * hd, h, bias=bias, quantize=quantize)
    if family in ("qwen3", "qwen3_5"):
        b.add(f"{a}.q_norm.weight", (hd,), norm)
        b.add(f"{a}.k_norm.weight", (hd,), norm)
    mlp_bias = bool(tc.get("mlp_bias", False)) and family == "llama"
    b.linear(f"{p}.mlp.gate_proj", h, inter, bias=mlp_bias, quantize=quantize)
    b.linear(f"{p}.mlp.up_proj", h, inter, bias=mlp_bias, quantize=quantize)
    b.linear(f"{p}.mlp.down_proj", inter, h, bias=mlp_bias, quantize=quantize)


def _linear_attn_layer(b: _Builder, p: str, tc: dict[str, Any]) -> None:
    """A Qwen3.5 Gated DeltaNet layer (transformers' `Qwen3_5GatedDeltaNet`)."""
    h, inter = int(tc["hidden_size"]), int(tc["intermediate_size"])
    kh, vh = int(tc["linear_num_key_heads"]), int(tc["linear_num_value_heads"])
    kd, vd = int(tc["linear_key_head_dim"]), int(tc["linear_value_head_dim"])
    kernel = int(tc.get("linear_conv_kernel_dim") or 4)
    key_dim, value_dim = kh * kd, vh * vd
    conv_dim = 2 * key_dim + value_dim
    b.add(f"{p}.input_layernorm.weight", (h,), "zeros")
    b.add(f"{p}.post_attention_layernorm.weight", (h,), "zeros")
    a = f"{p}.linear_attn"
    b.add(f"{a}.dt_bias", (vh,), "ones")
    b.add(f"{a}.A_log", (vh,), "a_log")
    b.add(f"{a}.conv1d.weight", (conv_dim, 1, kernel))
    b.add(f"{a}.norm.weight", (vd,), "ones")  # the gated RMSNorm is not zero-centred
    b.linear(f"{a}.out_proj", value_dim, h)
    b.linear(f"{a}.in_proj_qkv", h, conv_dim)
    b.linear(f"{a}.in_proj_z", h, value_dim)
    b.linear(f"{a}.in_proj_b", h, vh, quantize=False)  # fused into in_proj_ba, never quantized
    b.linear(f"{a}.in_proj_a", h, vh, quantize=False)
    b.linear(f"{p}.mlp.gate_proj", h, inter)
    b.linear(f"{p}.mlp.up_proj", h, inter)
    b.linear(f"{p}.mlp.down_proj", inter, h)


def layer_types(tc: dict[str, Any]) -> list[str]:
    n = int(tc["num_hidden_layers"])
    types = tc.get("layer_types")
    if types:
        if len(types) != n:
            raise InputError(f"config.json: layer_types has {len(types)} entries for {n} layers")
        return [str(t) for t in types]
    interval = int(tc.get("full_attention_interval") or 0)
    if interval:
        return ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(n)]
    return ["full_attention"] * n


def _vision(b: _Builder, v: dict[str, Any], out_hidden: int) -> None:
    """The Qwen3.5 vision tower (transformers' `Qwen3_5VisionModel`), unquantized, LayerNorms with bias."""
    d = int(v["hidden_size"])
    inter = int(v["intermediate_size"])
    chans = int(v.get("in_channels") or 3)
    patch, temporal = int(v.get("patch_size") or 16), int(v.get("temporal_patch_size") or 2)
    merged = d * int(v.get("spatial_merge_size") or 2) ** 2
    out = int(v.get("out_hidden_size") or out_hidden)
    p = "model.visual"
    b.add(f"{p}.patch_embed.proj.weight", (d, chans, temporal, patch, patch))
    b.add(f"{p}.patch_embed.proj.bias", (d,), "zeros")
    b.add(f"{p}.pos_embed.weight", (int(v.get("num_position_embeddings") or 2304), d))
    for i in range(int(v["depth"])):
        q = f"{p}.blocks.{i}"
        for n in ("norm1", "norm2"):
            b.add(f"{q}.{n}.weight", (d,), "ones")
            b.add(f"{q}.{n}.bias", (d,), "zeros")
        b.linear(f"{q}.attn.qkv", d, 3 * d, bias=True, quantize=False)
        b.linear(f"{q}.attn.proj", d, d, bias=True, quantize=False)
        b.linear(f"{q}.mlp.linear_fc1", d, inter, bias=True, quantize=False)
        b.linear(f"{q}.mlp.linear_fc2", inter, d, bias=True, quantize=False)
    b.add(f"{p}.merger.norm.weight", (d,), "ones")
    b.add(f"{p}.merger.norm.bias", (d,), "zeros")
    b.linear(f"{p}.merger.linear_fc1", merged, merged, bias=True, quantize=False)
    b.linear(f"{p}.merger.linear_fc2", merged, out, bias=True, quantize=False)


def mtp_not_convert(tc: dict[str, Any]) -> list[str]:
    """`modules_to_not_convert` entries that keep LMDeploy's MTP layers unquantized (engines/qwen35.py)."""
    names = []
    for j in range(int(tc.get("mtp_num_hidden_layers") or 0)):
        fused = ("self_attn.qkv_proj", "self_attn.o_proj", "mlp.gate_up_proj", "mlp.down_proj")
        names += [f"mtp.layers.{j}.{m}" for m in fused]
    return names + (["mtp.fc"] if names else [])


def _mtp(b: _Builder, tc: dict[str, Any]) -> None:
    """The Qwen3.5 MTP layers as the real checkpoint ships them (`mtp.*`), kept unquantized."""
    h = int(tc["hidden_size"])
    b.add("mtp.fc.weight", (h, 2 * h))
    for n in ("pre_fc_norm_embedding", "pre_fc_norm_hidden", "norm"):
        b.add(f"mtp.{n}.weight", (h,), "zeros")
    for j in range(int(tc.get("mtp_num_hidden_layers") or 0)):
        _dense_layer(b, f"mtp.layers.{j}", tc, "qwen3_5", quantize=False)


def target_tensors(source: Source, quant: Quant) -> list[TensorSpec]:
    """Every tensor of the target, in the checkpoint's order (embeddings, layers, norm, head, extras)."""
    tc, family = source.text, source.family
    h, vocab = int(tc["hidden_size"]), int(tc["vocab_size"])
    b = _Builder(quant)
    tied = bool(source.config.get("tie_word_embeddings", tc.get("tie_word_embeddings", False)))
    if family == "qwen3_5":
        p = "model.language_model"
        b.add(f"{p}.embed_tokens.weight", (vocab, h))
        for i, kind in enumerate(layer_types(tc)):
            if kind == "linear_attention":
                _linear_attn_layer(b, f"{p}.layers.{i}", tc)
            elif kind == "full_attention":
                _dense_layer(b, f"{p}.layers.{i}", tc, family)
            else:
                raise UsageError(f"{source.path}: layer type {kind} is not one specq twin builds")
        b.add(f"{p}.norm.weight", (h,), "zeros")
        if source.config.get("vision_config"):
            _vision(b, source.config["vision_config"], h)
        if not tied:
            b.add("lm_head.weight", (vocab, h))
        if int(tc.get("mtp_num_hidden_layers") or 0):
            _mtp(b, tc)
        return b.out
    b.add("model.embed_tokens.weight", (vocab, h))
    for i, kind in enumerate(layer_types(tc)):
        if kind != "full_attention":
            raise UsageError(f"{source.path}: layer type {kind} is not one specq twin builds for {family}")
        _dense_layer(b, f"model.layers.{i}", tc, family)
    b.add("model.norm.weight", (h,), "ones")
    if not tied:
        b.add("lm_head.weight", (vocab, h))
    return b.out


def target_bytes(source: Source, quant: Quant) -> int:
    """What `target_tensors` adds up to, from the config alone: the tensors outside the layers once, and one
    layer of each kind times how many the model has. A config of a million layers is sized (and refused for
    its size) in milliseconds, before a list of tens of millions of tensors is built."""
    config = json.loads(json.dumps(source.config))
    text = config["text_config"] if isinstance(config.get("text_config"), dict) else config
    kinds = Counter(layer_types(source.text))
    text["num_hidden_layers"], text["layer_types"] = 0, []
    total = total_bytes(target_tensors(Source(config, source.path, source.sha256), quant))
    p = "model.language_model.layers.0" if source.family == "qwen3_5" else "model.layers.0"
    for kind, count in kinds.items():
        b = _Builder(quant)
        if kind == "linear_attention" and source.family == "qwen3_5":
            _linear_attn_layer(b, p, source.text)
        else:
            _dense_layer(b, p, source.text, source.family)
        total += count * total_bytes(b.out)
    return total


def quantization_config(source: Source) -> dict[str, Any]:
    """The AWQ `quantization_config` a twin declares (AutoAWQ's keys, as `specq convert` writes them)."""
    not_convert: list[str] = []
    if source.family == "qwen3_5":
        not_convert = [*QWEN35_NOT_CONVERT, *mtp_not_convert(source.text)]
    return {
        "quant_method": "awq",
        "bits": 4,
        "group_size": AWQ_GROUP,
        "zero_point": True,
        "version": "gemm",
        "modules_to_not_convert": not_convert or None,
    }


# ---- drafters ----------------------------------------------------------------------------------------------


def dflash_tensors(cfg: dict[str, Any], dtype: str = "BF16") -> list[TensorSpec]:
    """The DFlash drafter's tensors (`layers.N.*`, `fc`, `hidden_norm`, `norm`: pipeline/draft/model.py)."""
    b = _Builder("bf16", dtype)
    h = int(cfg["hidden_size"])
    for i in range(int(cfg["num_hidden_layers"])):
        _dense_layer(b, f"layers.{i}", cfg, "qwen3")
    ctx = len(cfg["dflash_config"]["target_layer_ids"]) * int(cfg["target_hidden_size"])
    b.add("fc.weight", (h, ctx))
    b.add("hidden_norm.weight", (h,), "ones")
    b.add("norm.weight", (h,), "ones")
    return b.out


def dflash_awq_tensors(cfg: dict[str, Any], dtype: str = "BF16") -> list[TensorSpec]:
    """A 4-bit DFlash drafter's tensors, as `specq quantize DRAFTER --for speculative` writes them: every
    decoder-layer projection and `fc` in the AWQ gemm layout (group 128), the norms in `dtype`
    (pipeline/draft/contract.py `QUANTIZABLE`)."""
    b = _Builder("awq", dtype)
    h = int(cfg["hidden_size"])
    for i in range(int(cfg["num_hidden_layers"])):
        _dense_layer(b, f"layers.{i}", cfg, "qwen3")
    b.linear("fc", len(cfg["dflash_config"]["target_layer_ids"]) * int(cfg["target_hidden_size"]), h)
    b.add("hidden_norm.weight", (h,), "ones")
    b.add("norm.weight", (h,), "ones")
    return b.out


def drafter_quantization_config() -> dict[str, Any]:
    """A 4-bit drafter's `quantization_config` (what `specq quantize DRAFTER --for speculative` writes)."""
    return {"quant_method": "awq", "bits": 4, "group_size": AWQ_GROUP, "zero_point": True, "version": "gemm",
            "modules_to_not_convert": None}  # fmt: skip


def eagle3_config(source: Source, draft_vocab: int) -> dict[str, Any]:
    """An EAGLE-3 drafter (`LlamaForCausalLMEagle3`, the EAGLE-3 reference / SpecForge layout): one decoder
    layer whose attention reads [embedding, fused hidden] (2 × hidden in), `fc` over three target layers'
    hidden states, its own head over a `draft_vocab_size` vocabulary and the d2t / t2d maps."""
    tc = source.text
    heads, kv, hd = _heads(tc)
    vocab = int(tc["vocab_size"])
    return {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": int(tc["hidden_size"]),
        "intermediate_size": int(tc["intermediate_size"]),
        "num_hidden_layers": 1,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "head_dim": hd,
        "rms_norm_eps": float(tc.get("rms_norm_eps") or 1e-6),
        "rope_theta": checkpoint.rope_theta(tc),
        "max_position_embeddings": int(tc.get("max_position_embeddings") or 4096),
        "vocab_size": vocab,
        "draft_vocab_size": min(draft_vocab, vocab),
        "target_hidden_size": int(tc["hidden_size"]),
        "tie_word_embeddings": False,
        "hidden_act": "silu",
    }


def eagle3_tensors(cfg: dict[str, Any], dtype: str = "BF16") -> list[TensorSpec]:
    b = _Builder("bf16", dtype)
    h, inter = int(cfg["hidden_size"]), int(cfg["intermediate_size"])
    heads, kv, hd = _heads(cfg)
    m = "midlayer"
    b.add(f"{m}.input_layernorm.weight", (h,), "ones")
    b.add(f"{m}.hidden_norm.weight", (h,), "ones")
    b.add(f"{m}.post_attention_layernorm.weight", (h,), "ones")
    b.linear(f"{m}.self_attn.q_proj", 2 * h, heads * hd)
    b.linear(f"{m}.self_attn.k_proj", 2 * h, kv * hd)
    b.linear(f"{m}.self_attn.v_proj", 2 * h, kv * hd)
    b.linear(f"{m}.self_attn.o_proj", heads * hd, h)
    b.linear(f"{m}.mlp.gate_proj", h, inter)
    b.linear(f"{m}.mlp.up_proj", h, inter)
    b.linear(f"{m}.mlp.down_proj", inter, h)
    b.add("fc.weight", (h, 3 * int(cfg["target_hidden_size"])))
    b.add("norm.weight", (h,), "ones")
    b.add("lm_head.weight", (int(cfg["draft_vocab_size"]), h))
    b.add("d2t", (int(cfg["draft_vocab_size"]),), "d2t", "I64")
    b.add("t2d", (int(cfg["vocab_size"]),), "t2d", "BOOL")
    return b.out


def drafter_dtype(quant: Quant, gated_delta: bool = False) -> str:
    """A drafter's dtype: fp16 beside an AWQ target (LMDeploy runs AWQ in fp16 and a bf16 drafter then fails,
    the rule `specq draft train` exports by: draft/export.py `resolve_dtype`), except beside a Gated DeltaNet
    target (Qwen3.5), which specq serves in bf16 (engines/lmdeploy_compat); else bf16."""
    return "F16" if quant == "awq" and not gated_delta else "BF16"


def total_bytes(tensors: list[TensorSpec]) -> int:
    return sum(t.nbytes for t in tensors)
