"""What a model's `config.json` says about memory: which layers keep a KV cache (full or sliding attention)
and which keep a fixed recurrent state (Gated-DeltaNet linear attention in hybrid models such as Qwen3.5 and
Qwen3-Next), the bytes of both, and an analytic estimate of the weight bytes for directories that hold only a
config (the paper check of a 27B model needs no 50 GB download).

Sources for the layouts: transformers' `qwen3`, `qwen3_next` and `qwen3_5` modelling code (projection shapes),
LMDeploy's `pytorch/configurations/qwen3_5.py` (the per-sequence state shapes it allocates: conv state
`(layers, 2*key_dim + value_dim, conv_kernel)` and recurrent state
`(layers, v_heads, k_head_dim, v_head_dim)`, both bf16), and the DFlash checkpoint contract
(`pipeline/draft/contract.py`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from .. import checkpoint
from ..checkpoint import QuantInfo
from ..errors import InputError

FULL, SLIDING, LINEAR = "full", "sliding", "linear"
_GATED_TYPES = {"qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text"}
_LAYER_KINDS = {
    "full_attention": FULL,
    "attention": FULL,
    "sliding_attention": SLIDING,
    "linear_attention": LINEAR,
    "linear": LINEAR,
}


@dataclass
class ModelShape:
    """The memory-relevant numbers of one language model (a target or a drafter)."""

    hidden: int
    vocab: int
    intermediate: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    layer_kinds: list[str]
    tie_embeddings: bool = False
    attn_output_gate: bool = False  # Qwen3.5/Qwen3-Next: q_proj also produces the output gate
    attention_bias: bool = False
    sliding_window: int | None = None
    conv_kernel: int = 0
    linear_k_head_dim: int = 0
    linear_v_head_dim: int = 0
    linear_k_heads: int = 0
    linear_v_heads: int = 0
    mtp_layers: int = 0
    is_dflash: bool = False
    dflash_context_layers: int = 0
    dflash_block_size: int | None = None
    target_hidden: int | None = None
    moe: bool = False
    vision: dict[str, Any] = field(default_factory=dict)

    @property
    def num_layers(self) -> int:
        return len(self.layer_kinds)

    @property
    def full_layers(self) -> int:
        return self.layer_kinds.count(FULL)

    @property
    def sliding_layers(self) -> int:
        return self.layer_kinds.count(SLIDING)

    @property
    def linear_layers(self) -> int:
        return self.layer_kinds.count(LINEAR)

    @property
    def conv_dim(self) -> int:
        return 2 * self.linear_k_heads * self.linear_k_head_dim + self.linear_v_heads * self.linear_v_head_dim

    def kv_bytes_per_token(
        self, elem_bytes: float, *, layers: int | None = None, scale_bytes: int = 0
    ) -> int:
        """K and V for one token over `layers` attention layers (default: full + sliding).
        `scale_bytes` adds LMDeploy's per-token, per-head scale+zero of a quantized KV cache (K, V each)."""
        n = self.full_layers + self.sliding_layers if layers is None else layers
        per_head = self.head_dim * elem_bytes + scale_bytes
        return int(round(2 * n * self.num_kv_heads * per_head))

    def state_bytes_per_sequence(
        self, conv_bytes: int = 2, recurrent_bytes: int = 2, *, spec_tokens: int = 0, align: int = 1
    ) -> int:
        """The fixed recurrent state one sequence keeps across all linear-attention layers. LMDeploy 0.18
        (`pytorch/configurations/qwen3_5.py`) sizes it for `spec_tokens` draft tokens: the conv window grows
        to `conv_kernel + K` and the recurrent state is kept for each of the `1 + K` verified positions; its
        state pool rounds each tensor up to 256 bytes (`cache_engine/schema.py` `CacheDesc.alignment`)."""
        n = self.linear_layers
        conv = n * self.conv_dim * (self.conv_kernel + spec_tokens) * conv_bytes
        rec = n * (1 + spec_tokens) * self.linear_v_heads * self.linear_k_head_dim * self.linear_v_head_dim
        rec *= recurrent_bytes
        if not n:
            return 0
        return -(-conv // align) * align + -(-rec // align) * align


def shape_from_config(config: dict[str, Any]) -> ModelShape:
    """Read a (possibly multimodal) Hugging Face config into a ModelShape; InputError when fields lack."""
    tc = dict(config.get("text_config") or config)
    try:
        hidden = int(tc["hidden_size"])
        n_layers = int(tc["num_hidden_layers"])
        heads = int(tc["num_attention_heads"])
    except (KeyError, TypeError, ValueError) as e:
        raise InputError(f"config.json lacks {e} needed to plan memory") from None
    kv_heads = checkpoint.kv_heads(tc)
    head_dim = checkpoint.head_dim(tc)
    kinds = _layer_kinds(tc, n_layers)
    dflash = checkpoint.dflash_fields(config)
    archs = config.get("architectures") or []
    is_dflash = bool(dflash) or "DFlashDraftModel" in archs
    vision = config.get("vision_config") if config.get("text_config") else None
    return ModelShape(
        hidden=hidden,
        vocab=int(tc.get("vocab_size") or config.get("vocab_size") or 0),
        intermediate=int(tc.get("intermediate_size") or 0),
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        layer_kinds=kinds,
        tie_embeddings=bool(config.get("tie_word_embeddings", tc.get("tie_word_embeddings", False))),
        # Qwen3-Next/Qwen3.5 q_proj also emits the output gate; their configs may leave the flag implicit.
        attn_output_gate=bool(tc.get("attn_output_gate", str(tc.get("model_type", "")) in _GATED_TYPES)),
        attention_bias=bool(tc.get("attention_bias", False)),
        sliding_window=tc.get("sliding_window"),
        conv_kernel=int(tc.get("linear_conv_kernel_dim") or 0),
        linear_k_head_dim=int(tc.get("linear_key_head_dim") or 0),
        linear_v_head_dim=int(tc.get("linear_value_head_dim") or 0),
        linear_k_heads=int(tc.get("linear_num_key_heads") or 0),
        linear_v_heads=int(tc.get("linear_num_value_heads") or 0),
        mtp_layers=int(tc.get("mtp_num_hidden_layers") or tc.get("num_nextn_predict_layers") or 0),
        is_dflash=is_dflash,
        dflash_context_layers=len(dflash.get("target_layer_ids") or []),
        dflash_block_size=checkpoint.dflash_block_size(config) or config.get("block_size"),
        target_hidden=config.get("target_hidden_size"),
        moe=bool(tc.get("num_experts") or tc.get("n_routed_experts") or tc.get("num_local_experts")),
        vision=dict(vision or {}),
    )


def _layer_kinds(tc: dict[str, Any], n_layers: int) -> list[str]:
    types = tc.get("layer_types")
    if types:
        if len(types) != n_layers:
            raise InputError(f"config.json: layer_types has {len(types)} entries for {n_layers} layers")
        return [_LAYER_KINDS.get(str(t), FULL) for t in types]
    interval = tc.get("full_attention_interval")
    if interval:  # Qwen3-Next style: every interval-th layer is full attention, the rest Gated-DeltaNet
        return [FULL if (i + 1) % int(interval) == 0 else LINEAR for i in range(n_layers)]
    return [FULL] * n_layers


# ---- analytic weight estimate (config-only directories) -------------------------------------------------


@dataclass
class WeightEstimate:
    quantized: int = 0  # packed integer weights + scales/zeros (+ g_idx) of quantized linear layers
    dense: int = 0  # unquantized decoder weights (norms, conv kernels, biases, unquantized linears)
    embeddings: int = 0
    lm_head: int = 0
    vision: int = 0
    mtp: int = 0

    @property
    def total(self) -> int:
        return self.quantized + self.dense + self.embeddings + self.lm_head + self.vision + self.mtp

    def as_dict(self) -> dict[str, int]:
        return {
            "quantized_linear": self.quantized,
            "dense": self.dense,
            "embeddings": self.embeddings,
            "lm_head": self.lm_head,
            "vision": self.vision,
            "mtp": self.mtp,
        }


def quantized_linear_bytes(in_f: int, out_f: int, q: QuantInfo) -> int:
    """Bytes of one linear layer as GPTQ/AWQ/compressed-tensors store it: int32-packed codes, fp16 scales per
    group and output, packed zeros per group (asymmetric / AWQ), and GPTQ's int32 g_idx per input."""
    bits = q.bits or 4
    group = q.group_size if q.group_size and q.group_size > 0 else in_f
    groups = -(-in_f // group)
    codes = in_f * out_f * bits // 8
    scales = groups * out_f * 2
    has_zeros = q.method in ("awq", "gptq") or q.sym is False
    zeros = groups * out_f * bits // 8 if has_zeros else 0
    g_idx = in_f * 4 if q.method == "gptq" else 0
    return codes + scales + zeros + g_idx


def _not_quantized_patterns(q: QuantInfo) -> list[str]:
    raw = q.raw
    pats = list(raw.get("modules_to_not_convert") or []) + list(raw.get("ignore") or [])
    return [str(p) for p in pats]


# LMDeploy fuses these projections and matches `modules_to_not_convert` against the fused module's name
# (engines/qwen35.py MTP_PROJECTIONS): an entry naming `…self_attn.qkv_proj` keeps q/k/v unquantized.
_FUSED = {
    ".q_proj": ".qkv_proj",
    ".k_proj": ".qkv_proj",
    ".v_proj": ".qkv_proj",
    ".gate_proj": ".gate_up_proj",
    ".up_proj": ".gate_up_proj",
}


def _skipped(name: str, patterns: list[str]) -> bool:
    fused = next((name[: -len(a)] + b for a, b in _FUSED.items() if name.endswith(a)), None)
    if fused is not None and any(p and not p.startswith("re:") and p in fused for p in patterns):
        return True
    for p in patterns:
        if p.startswith("re:"):
            if re.search(p[3:], name):
                return True
        elif p and p in name:
            return True
    return False


def _layer_parameters(
    shape: ModelShape, i: int, kind: str, prefix: str
) -> tuple[list[tuple[str, int, int, bool]], int]:
    """Decoder layer `i`'s linear projections (name, in features, out features, bias) and the count of its
    other parameters (norms, and a linear-attention layer's conv kernel and gates), which stay unquantized."""
    h = shape.hidden
    other = 2 * h  # input + post-attention norms
    items: list[tuple[str, int, int, bool]] = []
    if kind == LINEAR:
        kd = shape.linear_k_heads * shape.linear_k_head_dim
        vd = shape.linear_v_heads * shape.linear_v_head_dim
        a = f"{prefix}.{i}.linear_attn"
        items += [
            (f"{a}.in_proj_qkv", h, 2 * kd + vd, False),
            (f"{a}.in_proj_z", h, vd, False),
            (f"{a}.in_proj_b", h, shape.linear_v_heads, False),
            (f"{a}.in_proj_a", h, shape.linear_v_heads, False),
            (f"{a}.out_proj", vd, h, False),
        ]
        other += shape.conv_dim * shape.conv_kernel + 2 * shape.linear_v_heads
        other += shape.linear_v_head_dim  # gated RMSNorm
    else:
        qd = shape.num_heads * shape.head_dim
        kvd = shape.num_kv_heads * shape.head_dim
        a = f"{prefix}.{i}.self_attn"
        items += [
            (f"{a}.q_proj", h, qd * (2 if shape.attn_output_gate else 1), shape.attention_bias),
            (f"{a}.k_proj", h, kvd, shape.attention_bias),
            (f"{a}.v_proj", h, kvd, shape.attention_bias),
            (f"{a}.o_proj", qd, h, False),
        ]
        other += 2 * shape.head_dim  # q_norm, k_norm
    m = f"{prefix}.{i}.mlp"
    items += [
        (f"{m}.gate_proj", h, shape.intermediate, False),
        (f"{m}.up_proj", h, shape.intermediate, False),
        (f"{m}.down_proj", shape.intermediate, h, False),
    ]
    return items, other


def estimate_weights(
    shape: ModelShape, quant: QuantInfo | None, elem_bytes: int, *, include_mtp: bool = False
) -> WeightEstimate:
    """Weight bytes from the config alone, assuming the usual layout: every decoder-layer linear projection
    is quantized (unless `modules_to_not_convert`/`ignore` names it); embeddings, lm_head, norms, conv kernels
    and the vision tower stay in `elem_bytes`. MoE is not modelled (pass a checkpoint with weights)."""
    if shape.moe:
        raise InputError(
            "config-only memory estimate supports dense models; pass a directory with .safetensors files "
            "for mixture-of-experts models"
        )
    est = WeightEstimate()
    patterns = _not_quantized_patterns(quant) if quant else []
    h = shape.hidden

    def linear(name: str, in_f: int, out_f: int, bias: bool = False) -> tuple[int, int]:
        b = out_f * elem_bytes if bias else 0
        if quant is not None and not _skipped(name, patterns):
            return quantized_linear_bytes(in_f, out_f, quant), b
        return 0, in_f * out_f * elem_bytes + b

    def layer_bytes(i: int, kind: str, prefix: str) -> tuple[int, int]:
        linears, other = _layer_parameters(shape, i, kind, prefix)
        q_total, d_total = 0, other * elem_bytes
        for name, in_f, out_f, bias in linears:
            qb, db = linear(name, in_f, out_f, bias)
            q_total += qb
            d_total += db
        return q_total, d_total

    prefix = "layers" if shape.is_dflash else "model.layers"
    for i, kind in enumerate(shape.layer_kinds):
        qb, db = layer_bytes(i, kind, prefix)
        est.quantized += qb
        est.dense += db
    est.dense += h * elem_bytes  # final norm
    if shape.is_dflash:
        # DFlash: fc over the concatenated target features + hidden_norm; embeddings/lm_head are the target's.
        # A 4-bit drafter (`specq quantize DRAFTER`) has its fc quantized too (draft/contract.py QUANTIZABLE).
        ctx = shape.dflash_context_layers * (shape.target_hidden or h)
        qb, db = linear("fc", ctx, h)
        est.quantized += qb
        est.dense += db + h * elem_bytes
        return est
    est.embeddings = shape.vocab * h * elem_bytes
    est.lm_head = 0 if shape.tie_embeddings else shape.vocab * h * elem_bytes
    est.vision = _vision_bytes(shape.vision, elem_bytes)
    if include_mtp and shape.mtp_layers:
        qb, db = 0, 0
        for j in range(shape.mtp_layers):
            lq, ld = layer_bytes(j, FULL, "mtp.layers")
            qb, db = qb + lq, db + ld
        est.mtp = qb + db + (2 * h * h + 3 * h) * elem_bytes  # fc over [embedding, hidden] + norms
    return est


def _vision_bytes(v: dict[str, Any], elem_bytes: int) -> int:
    """Qwen-VL style vision tower: patch embedding, `depth` ViT blocks, the patch merger. An estimate."""
    if not v or not v.get("depth") or not v.get("hidden_size"):
        return 0
    d = int(v["hidden_size"])
    depth = int(v["depth"])
    inter = int(v.get("intermediate_size") or 4 * d)
    patch = int(v.get("patch_size") or 14)
    temporal = int(v.get("temporal_patch_size") or 1)
    chans = int(v.get("in_channels") or 3)
    merge = int(v.get("spatial_merge_size") or 2)
    out = int(v.get("out_hidden_size") or d)
    pos = int(v.get("num_position_embeddings") or 0)
    block = 4 * d * d + 4 * d + 2 * d * inter + inter + d + 4 * d  # qkv+proj (+bias), fc1/fc2, 2 norms
    merged = d * merge * merge
    merger = merged * merged + merged + merged * out + out + 2 * d  # its LayerNorm is over the tower width
    params = chans * temporal * patch * patch * d + d + pos * d + depth * block + merger
    return params * elem_bytes
