"""The DFlash drafter in plain torch, with LMDeploy 0.18's module names so that `state_dict()` is the
checkpoint: `layers.N.{self_attn,mlp,...}`, `fc`, `hidden_norm`, `norm` — and nothing else (the target's
embeddings and lm_head stay outside, frozen, shared as in LMDeploy's proposer).

Computation, matching `lmdeploy/pytorch/models/qwen3_dflash.py` (InternLM/lmdeploy) and the z-lab DFlash
reference: context features (target residual stream after each `target_layer_ids` layer, concatenated) →
`fc` → `hidden_norm`; each draft layer projects them through its own `k_proj`/`v_proj` (no input
layernorm), then `k_norm` and RoPE at their real positions (`precompute_context_kv`). The query block
`[anchor, MASK × (B − 1)]` runs a Qwen3 pre-norm decoder layer whose attention sees the context keys the
mask allows plus its own block, non-causally. Importing this module imports torch: import it lazily."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class DrafterShape:
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    rms_norm_eps: float
    rope_theta: float
    num_context_features: int
    target_hidden_size: int


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(dtype)


def rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Neox-style rotary embedding (Qwen3's `rotate_half`) of x [N, heads, S, D] at positions [N, S]."""
    d = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d))
    ang = positions.float()[:, None, :, None] * inv  # [N, 1, S, D/2]
    cos = torch.cat([ang.cos(), ang.cos()], dim=-1).to(x.dtype)
    sin = torch.cat([ang.sin(), ang.sin()], dim=-1).to(x.dtype)
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


class Attention(nn.Module):
    def __init__(self, s: DrafterShape):
        super().__init__()
        self.s = s
        h, hd = s.hidden_size, s.head_dim
        self.q_proj = nn.Linear(h, s.num_attention_heads * hd, bias=False)
        self.k_proj = nn.Linear(h, s.num_key_value_heads * hd, bias=False)
        self.v_proj = nn.Linear(h, s.num_key_value_heads * hd, bias=False)
        self.o_proj = nn.Linear(s.num_attention_heads * hd, h, bias=False)
        self.q_norm = RMSNorm(hd, s.rms_norm_eps)
        self.k_norm = RMSNorm(hd, s.rms_norm_eps)

    def _heads(self, x: torch.Tensor, n: int) -> torch.Tensor:
        b, t, _ = x.shape
        return x.view(b, t, n, self.s.head_dim).transpose(1, 2)

    def context_kv(self, ctx: torch.Tensor, ctx_pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """K/V of the projected context features: k_proj/v_proj, k_norm, RoPE (no input layernorm)."""
        kv = self.s.num_key_value_heads
        k = self.k_norm(self._heads(self.k_proj(ctx), kv))
        v = self._heads(self.v_proj(ctx), kv)
        return rope(k, ctx_pos, self.s.rope_theta), v

    def forward(
        self,
        x: torch.Tensor,
        pos: torch.Tensor,
        ctx_k: torch.Tensor,
        ctx_v: torch.Tensor,
        mask: torch.Tensor,
    ) -> torch.Tensor:
        s = self.s
        q = rope(self.q_norm(self._heads(self.q_proj(x), s.num_attention_heads)), pos, s.rope_theta)
        k = rope(self.k_norm(self._heads(self.k_proj(x), s.num_key_value_heads)), pos, s.rope_theta)
        v = self._heads(self.v_proj(x), s.num_key_value_heads)
        k = torch.cat([ctx_k, k], dim=2)
        v = torch.cat([ctx_v, v], dim=2)
        rep = s.num_attention_heads // s.num_key_value_heads
        if rep > 1:
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None])
        b, _, t, _ = out.shape
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))


class MLP(nn.Module):
    def __init__(self, s: DrafterShape):
        super().__init__()
        self.gate_proj = nn.Linear(s.hidden_size, s.intermediate_size, bias=False)
        self.up_proj = nn.Linear(s.hidden_size, s.intermediate_size, bias=False)
        self.down_proj = nn.Linear(s.intermediate_size, s.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, s: DrafterShape):
        super().__init__()
        self.self_attn = Attention(s)
        self.mlp = MLP(s)
        self.input_layernorm = RMSNorm(s.hidden_size, s.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(s.hidden_size, s.rms_norm_eps)

    def forward(self, x: torch.Tensor, pos: torch.Tensor, ctx_kv: Any, mask: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), pos, ctx_kv[0], ctx_kv[1], mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class DFlashDrafter(nn.Module):
    """Parameters named exactly as LMDeploy's `DFlashDraftModel` loads them."""

    def __init__(self, s: DrafterShape):
        super().__init__()
        self.shape = s
        self.layers = nn.ModuleList([DecoderLayer(s) for _ in range(s.num_hidden_layers)])
        self.fc = nn.Linear(s.target_hidden_size * s.num_context_features, s.hidden_size, bias=False)
        self.hidden_norm = RMSNorm(s.hidden_size, s.rms_norm_eps)
        self.norm = RMSNorm(s.hidden_size, s.rms_norm_eps)

    def forward(
        self,
        features: torch.Tensor,
        ctx_pos: torch.Tensor,
        query_embeds: torch.Tensor,
        query_pos: torch.Tensor,
        mask: torch.Tensor,
    ) -> torch.Tensor:
        """features [N, T, k·H] at ctx_pos [N, T]; query_embeds [N, Q, H] at query_pos [N, Q];
        mask [N, Q, T + Q] (True = may attend). Returns the normed hidden states [N, Q, H]."""
        ctx = self.hidden_norm(self.fc(features))
        x = query_embeds
        for layer in self.layers:
            assert isinstance(layer, DecoderLayer)
            x = layer(x, query_pos, layer.self_attn.context_kv(ctx, ctx_pos), mask)
        return self.norm(x)


def block_mask(ctx_len: int, anchors: torch.Tensor, block_size: int) -> torch.Tensor:
    """Attention mask for blocks anchored at `anchors` [N, A]: a block sees context strictly before its
    anchor, and its own block in both directions; never another block. Returns [N, A·B, T + A·B]."""
    n, a = anchors.shape
    dev = anchors.device
    q_anchor = anchors.repeat_interleave(block_size, dim=1)  # [N, Q]
    ctx_ok = torch.arange(ctx_len, device=dev)[None, None, :] < q_anchor[:, :, None]
    blk = torch.arange(a, device=dev).repeat_interleave(block_size)
    own = (blk[:, None] == blk[None, :])[None].expand(n, -1, -1)
    return torch.cat([ctx_ok, own], dim=2)


def query_block(
    tokens: torch.Tensor, anchors: torch.Tensor, block_size: int, mask_token_id: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids [N, A·B] (`[anchor token, MASK × (B − 1)]` per block) and their positions."""
    n, a = anchors.shape
    offs = torch.arange(block_size, device=anchors.device)
    pos = (anchors[:, :, None] + offs).reshape(n, a * block_size)
    ids = torch.full_like(pos, mask_token_id)
    ids.view(n, a, block_size)[:, :, 0] = tokens.gather(1, anchors)
    return ids, pos


def init_weights(model: DFlashDrafter, seed: int, std: float = 0.02) -> None:
    gen = torch.Generator().manual_seed(seed)
    for name, p in model.named_parameters():
        with torch.no_grad():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            else:
                p.copy_(torch.randn(p.shape, generator=gen) * std)


def draft_logits(
    drafter: DFlashDrafter,
    embed: nn.Module,
    lm_head: nn.Module,
    features: torch.Tensor,
    tokens: torch.Tensor,
    anchors: torch.Tensor,
    block_size: int,
    mask_token_id: int,
) -> torch.Tensor:
    """Logits [N, A, B − 1, V] of the draft slots 1..B−1 of blocks anchored at `anchors` [N, A] in sequences
    `tokens` [N, T] with context `features` [N, T, k·H]. Slot k predicts the token at anchor + k."""
    n, t = tokens.shape
    a = anchors.shape[1]
    ids, pos = query_block(tokens, anchors, block_size, mask_token_id)
    ctx_pos = torch.arange(t, device=tokens.device)[None].expand(n, -1)
    mask = block_mask(t, anchors, block_size)
    with torch.no_grad():
        q = embed(ids)
    hidden = drafter(features, ctx_pos, q.to(features.dtype), pos, mask)
    hidden = hidden.view(n, a, block_size, -1)[:, :, 1:]
    return lm_head(hidden.to(lm_head.weight.dtype))


def slot_labels(greedy: torch.Tensor, anchors: torch.Tensor, block_size: int) -> torch.Tensor:
    """The target's greedy token for each draft slot [N, A, B − 1]: slot k of the block at p must equal
    the target's greedy prediction after position p + k − 1."""
    idx = anchors[:, :, None] + torch.arange(block_size - 1, device=anchors.device)
    return greedy.gather(1, idx.flatten(1)).view_as(idx)


def accepted_prefix(pred: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """1 where a slot and every slot before it match the target ([..., B − 1]): what verification accepts."""
    return (pred == labels).long().cumprod(dim=-1)
