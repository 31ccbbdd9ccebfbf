"""The Qwen3.5-shaped toy target (`specq toy build --arch qwen3.5`): the shape rules of the reference model
(Qwen3.5-27B, `Qwen3_5ForConditionalGeneration`) at toy scale, so every stage can be tried on the hybrid
architecture the reference user serves.

What it keeps from the real config: `architectures` / `model_type`, a `text_config` whose `layer_types`
interleave 3 Gated DeltaNet (`linear_attention`) layers with 1 `full_attention` layer
(`full_attention_interval` 4), full attention with head_dim 256, GQA (2 q heads, 1 kv head), the output gate
(`attn_output_gate`: q_proj is twice as wide), partial rotary (0.25 of the head, interleaved M-RoPE sections
[11, 11, 10], rope_theta 1e7), the linear-attention keys (`linear_num_key_heads`, `linear_num_value_heads`,
`linear_key_head_dim`, `linear_value_head_dim`, `linear_conv_kernel_dim`), one MTP layer
(`mtp_num_hidden_layers` 1, tensors `mtp.*`), untied embeddings, a minimal `vision_config` and the real
checkpoint's tensor names (`model.language_model.*`, `model.visual.*`, `lm_head.weight`, `mtp.*`).

The vision tower is there because both loaders build it unconditionally: transformers'
`Qwen3_5Config` falls back to the full 27-layer default tower when `vision_config` is absent, and LMDeploy
0.18's `Qwen3_5Model.__init__` calls `Qwen3_5VisionModel(config.vision_config)`. It is one block wide
enough to load (about 0.23 M parameters, random, never trained: the toy is text-only).

Torch-free: the config is built as a dict; `build_qwen35_target` (torch) is imported lazily by the builder."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

QWEN35_FORMAT_VERSION = 2  # 2: preprocessor_config.json written beside the target
ARCHITECTURE = "Qwen3_5ForConditionalGeneration"
MODEL_TYPE = "qwen3_5"
TEXT_MODEL_TYPE = "qwen3_5_text"

# Special tokens of the real tokenizer that the config points at (vision placeholders); the toy tokenizer
# reserves them after its own three so that `image_token_id` & co. are real ids of the vocabulary.
VISION_START, VISION_END, IMAGE_PAD, VIDEO_PAD = (
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
)
VISION_TOKENS = (VISION_START, VISION_END, IMAGE_PAD, VIDEO_PAD)

# The Qwen3.5 chat layout (ChatML; message content a string or a list of typed parts, images and videos as
# vision placeholders), without the thinking block: the toy was never trained to think.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- if message['content'] is string -%}{{- message['content'] -}}"
    "{%- else -%}{%- for part in message['content'] -%}"
    "{%- if part['type'] == 'text' -%}{{- part['text'] -}}"
    "{%- elif part['type'] == 'image' or part['type'] == 'image_url' -%}"
    "{{- '<|vision_start|><|image_pad|><|vision_end|>' -}}"
    "{%- elif part['type'] == 'video' -%}{{- '<|vision_start|><|video_pad|><|vision_end|>' -}}"
    "{%- endif -%}{%- endfor -%}{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)


@dataclass(frozen=True)
class HybridSpec:
    """The Qwen3.5 text model at toy scale (the 27B's values in comments)."""

    hidden_size: int = 128  # 5120
    num_hidden_layers: int = 4  # 64
    full_attention_interval: int = 4  # 4: layers 3, 7, ... are full attention
    num_attention_heads: int = 2  # 24
    num_key_value_heads: int = 1  # 4
    head_dim: int = 256  # 256
    intermediate_size: int = 384  # 17408
    linear_num_key_heads: int = 2  # 16
    linear_num_value_heads: int = 4  # 48
    linear_key_head_dim: int = 64  # 128
    linear_value_head_dim: int = 64  # 128
    linear_conv_kernel_dim: int = 4  # 4
    partial_rotary_factor: float = 0.25  # 0.25
    rope_theta: float = 10_000_000.0  # 1e7
    mrope_section: tuple[int, int, int] = (11, 11, 10)  # [11, 11, 10]: sums to head_dim * 0.25 / 2
    mtp_num_hidden_layers: int = 1  # 1
    max_position_embeddings: int = 2048  # 262144

    @property
    def layer_types(self) -> list[str]:
        k = self.full_attention_interval
        return [
            "full_attention" if (i + 1) % k == 0 else "linear_attention"
            for i in range(self.num_hidden_layers)
        ]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# One block, one head of 64, a 64-entry (8×8) position table: the smallest tower both loaders build.
VISION_CONFIG: dict[str, Any] = {
    "depth": 1,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_heads": 1,
    "in_channels": 3,
    "patch_size": 16,
    "spatial_merge_size": 2,
    "temporal_patch_size": 2,
    "num_position_embeddings": 64,
    "hidden_act": "gelu_pytorch_tanh",
}


@dataclass(frozen=True)
class Qwen35Training:
    """Steps of the three trainings (target, its Qwen3 draft for the embedded engine, the MTP head)."""

    target_steps: int = 600
    draft_steps: int = 400
    mtp_steps: int = 300
    mtp_lr: float = 3e-3


HYBRID = HybridSpec()
TRAINING = Qwen35Training()


def text_config(spec: HybridSpec, vocab_size: int, *, eos_token_id: int, pad_token_id: int) -> dict[str, Any]:
    """The `text_config` of the real checkpoint, at toy scale."""
    return {
        "model_type": TEXT_MODEL_TYPE,
        "vocab_size": vocab_size,
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.intermediate_size,
        "num_hidden_layers": spec.num_hidden_layers,
        "num_attention_heads": spec.num_attention_heads,
        "num_key_value_heads": spec.num_key_value_heads,
        "head_dim": spec.head_dim,
        "hidden_act": "silu",
        "attention_bias": False,
        "attn_output_gate": True,  # LMDeploy reads it (q_proj twice as wide); transformers always gates
        "layer_types": spec.layer_types,
        "full_attention_interval": spec.full_attention_interval,
        "linear_num_key_heads": spec.linear_num_key_heads,
        "linear_num_value_heads": spec.linear_num_value_heads,
        "linear_key_head_dim": spec.linear_key_head_dim,
        "linear_value_head_dim": spec.linear_value_head_dim,
        "linear_conv_kernel_dim": spec.linear_conv_kernel_dim,
        "partial_rotary_factor": spec.partial_rotary_factor,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": spec.rope_theta,
            "partial_rotary_factor": spec.partial_rotary_factor,
            "mrope_section": list(spec.mrope_section),
            "mrope_interleaved": True,
        },
        "mtp_num_hidden_layers": spec.mtp_num_hidden_layers,
        "mtp_use_dedicated_embeddings": False,
        "max_position_embeddings": spec.max_position_embeddings,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False,
        "bos_token_id": eos_token_id,
        "eos_token_id": eos_token_id,
        "pad_token_id": pad_token_id,
    }


# The image processor's config, as the real checkpoint ships one (`preprocessor_config.json`), with the
# patch, temporal-patch and merge sizes of VISION_CONFIG. LMDeploy 0.18 serves Qwen3.5 through its
# vision-language engine, which loads the processor at start-up even for text-only requests; without the file
# the server dies ("OSError: Can't load image processor for '…'", seen on the H200, 2026-12-01).
PREPROCESSOR_CONFIG: dict[str, Any] = {
    "image_processor_type": "Qwen2VLImageProcessorFast",
    "processor_class": "Qwen3VLProcessor",
    "patch_size": VISION_CONFIG["patch_size"],
    "temporal_patch_size": VISION_CONFIG["temporal_patch_size"],
    "merge_size": VISION_CONFIG["spatial_merge_size"],
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
    "size": {"longest_edge": 16777216, "shortest_edge": 65536},
    "do_resize": True,
    "do_rescale": True,
    "do_normalize": True,
    "do_convert_rgb": True,
}


def write_preprocessor_config(target_dir: Path) -> None:
    (target_dir / "preprocessor_config.json").write_text(json.dumps(PREPROCESSOR_CONFIG, indent=2) + "\n")


def model_config(
    spec: HybridSpec, vocab_size: int, *, eos_token_id: int, pad_token_id: int, vision_ids: dict[str, int]
) -> Any:
    """A transformers `Qwen3_5Config` (imports transformers)."""
    from transformers import Qwen3_5Config

    text = text_config(spec, vocab_size, eos_token_id=eos_token_id, pad_token_id=pad_token_id)
    vision = {**VISION_CONFIG, "out_hidden_size": spec.hidden_size}
    kwargs: dict[str, Any] = dict(vision_ids)
    return Qwen3_5Config(text_config=text, vision_config=vision, tie_word_embeddings=False, **kwargs)


def vision_token_ids(tokenizer: Any) -> dict[str, int]:
    """The config's vision token ids, from the toy tokenizer's reserved special tokens."""
    ids = {tok: int(tokenizer.convert_tokens_to_ids(tok)) for tok in VISION_TOKENS}
    return {
        "vision_start_token_id": ids[VISION_START],
        "vision_end_token_id": ids[VISION_END],
        "image_token_id": ids[IMAGE_PAD],
        "video_token_id": ids[VIDEO_PAD],
    }
