"""Sizes of the toy pair. Every shape suits the 4-bit kernels (GPTQ/AWQ group size 128, TurboMind, and
LMDeploy's PyTorch-engine AWQ): each linear layer's input size is a multiple of 128 and its output a multiple
of 32; the q/k/v and gate/up outputs are multiples of 128 (LMDeploy 0.18 loads those fused AWQ linears in
128-wide chunks, so one 64-wide KV head is refused); head_dim is 64, and the vocabulary is a multiple of 128.
Embeddings are untied (safer for quantizers); rope_theta 10000, 2048 positions."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ..engines.pytorch import FUSED_COLUMN_PROJECTIONS, awq_alignment

MAX_POSITIONS = 2048
AWQ_ALIGN = awq_alignment(bits=4, group_size=128)  # the toy is quantized 4-bit, group 128
ROPE_THETA = 10000.0


@dataclass(frozen=True)
class ModelSpec:
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    intermediate_size: int
    head_dim: int = 64

    def check(self, vocab_size: int) -> list[str]:
        """Shape problems for 4-bit kernels (empty when all is well)."""
        problems = []
        q_out = self.num_attention_heads * self.head_dim
        kv_out = self.num_key_value_heads * self.head_dim
        linears = {
            "q_proj": (self.hidden_size, q_out),
            "k_proj": (self.hidden_size, kv_out),
            "v_proj": (self.hidden_size, kv_out),
            "o_proj": (q_out, self.hidden_size),
            "gate_proj": (self.hidden_size, self.intermediate_size),
            "up_proj": (self.hidden_size, self.intermediate_size),
            "down_proj": (self.intermediate_size, self.hidden_size),
            "lm_head": (self.hidden_size, vocab_size),
        }
        for name, (fan_in, fan_out) in linears.items():
            if fan_in % 128:
                problems.append(f"{name} input {fan_in} is not a multiple of 128")
            if fan_out % 32:
                problems.append(f"{name} output {fan_out} is not a multiple of 32")
            elif name in FUSED_COLUMN_PROJECTIONS and fan_out % AWQ_ALIGN:
                problems.append(
                    f"{name} output {fan_out} is not a multiple of {AWQ_ALIGN} (LMDeploy fused AWQ)"
                )
        if self.head_dim not in (64, 128):
            problems.append(f"head_dim {self.head_dim} is not 64 or 128")
        if vocab_size % 128:
            problems.append(f"vocab_size {vocab_size} is not a multiple of 128")
        return problems


@dataclass(frozen=True)
class Growth:
    """A target trained shallow first and then grown to its full depth: `layers` deep for `steps` steps at
    peak learning rate `lr`, then `grow_depth` (function-preserving) and the preset's own target steps, during
    which the draft is distilled on the target's own training forwards (`train.train_target_and_draft`)
    before its `draft_steps` of distillation from the finished target."""

    layers: int
    steps: int
    lr: float


@dataclass(frozen=True)
class SizePreset:
    """Everything that decides a build besides the seed and the corpus."""

    vocab_size: int
    target: ModelSpec
    draft: ModelSpec
    tokenizer_chars: int  # characters of the training split the tokenizer learns from
    train_chars: int  # characters of the training split tokenized for the models
    seq_len: int
    batch_size: int
    target_steps: int
    draft_steps: int
    target_lr: float
    draft_lr: float
    eval_windows: int  # held-out windows of seq_len tokens for perplexity
    prompts: int  # held-out prompts for the acceptance measurement
    prompt_tokens: int
    new_tokens: int  # greedy target tokens per prompt over which acceptance is measured
    growth: Growth | None = None  # the target's shallow first stage (None: trained at full depth)
    gpu: bool = False  # meant for a GPU: built there when there is one (warns on CPU)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


SIZES: dict[str, SizePreset] = {
    "small": SizePreset(
        vocab_size=2048,
        target=ModelSpec(
            hidden_size=128,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=2,
            intermediate_size=384,
        ),
        draft=ModelSpec(
            hidden_size=128,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=2,
            intermediate_size=128,
        ),
        tokenizer_chars=1_500_000,
        train_chars=3_000_000,
        seq_len=128,
        batch_size=4,
        target_steps=1000,
        draft_steps=600,
        target_lr=3e-3,
        draft_lr=3e-3,
        eval_windows=32,
        prompts=16,
        prompt_tokens=48,
        new_tokens=48,
    ),
    # The demo pair: a target 8 layers deep next to a 1-layer draft, so a speculative step costs far less
    # than k + 1 plain steps (docs/toy.md, "The demo pair"). Trained deep from scratch for 600-800 steps on
    # these cores it reached held-out perplexity 114-117 and looped; grown from the small preset's 2-layer
    # target (1000 steps, perplexity 57.3) and trained 300 steps at 8 layers it reaches 54.0.
    "demo": SizePreset(
        vocab_size=2048,
        target=ModelSpec(
            hidden_size=128,
            num_hidden_layers=8,
            num_attention_heads=2,
            num_key_value_heads=2,
            intermediate_size=384,
        ),
        draft=ModelSpec(
            hidden_size=128,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=2,
            intermediate_size=128,
        ),
        tokenizer_chars=1_500_000,
        train_chars=3_000_000,
        seq_len=128,
        batch_size=4,
        target_steps=300,
        draft_steps=400,  # after 300 on the target's own forwards
        target_lr=1e-3,
        draft_lr=3e-3,
        eval_windows=32,
        prompts=16,
        prompt_tokens=48,
        new_tokens=48,
        growth=Growth(layers=2, steps=1000, lr=3e-3),  # the small preset's target recipe
    ),
    "medium": SizePreset(
        vocab_size=8192,
        target=ModelSpec(
            hidden_size=512,
            num_hidden_layers=8,
            num_attention_heads=8,
            num_key_value_heads=4,
            intermediate_size=1536,
        ),
        draft=ModelSpec(
            hidden_size=256,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            intermediate_size=768,
        ),
        tokenizer_chars=6_000_000,
        train_chars=10_000_000,
        seq_len=256,
        batch_size=32,
        target_steps=2000,
        draft_steps=1500,
        target_lr=1.5e-3,
        draft_lr=2e-3,
        eval_windows=64,
        prompts=32,
        prompt_tokens=64,
        new_tokens=64,
        gpu=True,
    ),
}


def qwen3_config(spec: ModelSpec, vocab_size: int, *, eos_token_id: int, pad_token_id: int) -> Any:
    from transformers import Qwen3Config

    return Qwen3Config(
        vocab_size=vocab_size,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        head_dim=spec.head_dim,
        max_position_embeddings=MAX_POSITIONS,
        rope_parameters={"rope_type": "default", "rope_theta": ROPE_THETA},
        tie_word_embeddings=False,
        bos_token_id=eos_token_id,
        eos_token_id=eos_token_id,
        pad_token_id=pad_token_id,
    )


def grow_depth(shallow: Any, deep: Any) -> Any:
    """Fill `deep` (a Qwen3ForCausalLM with a multiple of `shallow`'s layers) from `shallow` so that it
    computes the same function: every layer of `shallow` is followed by copies of itself whose residual
    branches' output projections (`o_proj`, `down_proj`) are zero, so a copy adds nothing to the residual
    stream until training moves it (progressive stacking with zero-initialised branches). Embeddings, final
    norm and head are copied. Returns `deep`."""
    import torch

    n, m = len(shallow.model.layers), len(deep.model.layers)
    if m % n:
        raise ValueError(f"cannot grow {n} layers into {m}: not a multiple")
    per = m // n
    source = shallow.state_dict()
    grown = {}
    for name in deep.state_dict():
        if ".layers." not in name:
            grown[name] = source[name].clone()
            continue
        head, rest = name.split(".layers.", 1)
        index, tail = rest.split(".", 1)
        tensor = source[f"{head}.layers.{int(index) // per}.{tail}"].clone()
        if int(index) % per and tail in ("self_attn.o_proj.weight", "mlp.down_proj.weight"):
            tensor = torch.zeros_like(tensor)
        grown[name] = tensor
    deep.load_state_dict(grown)
    return deep


def param_count(model: Any) -> int:
    return sum(p.numel() for p in model.parameters())
