"""The Qwen3.5 toy's built-in MTP (multi-token prediction) head: one full-attention decoder layer that drafts
the token after next from the target's last hidden state and the next token's embedding — a drafter that
comes with the target (LMDeploy 0.18: `--speculative-algorithm qwen3_5_mtp`, no draft model).

Computation and names follow `lmdeploy/pytorch/models/qwen3_5_mtp.py` (InternLM/lmdeploy 0.18,
`Qwen3_5MultiTokenPredictor.forward` and `Qwen3_5MTPModel.load_weights`): `fc(cat[pre_fc_norm_embedding(
embed(x[t+1])), pre_fc_norm_hidden(h[t])])` → `layers.0` (a Qwen3.5 full-attention layer: gated q_proj,
q/k norms, partial rotary) → `norm` → the target's `lm_head`; every tensor saved as `mtp.<name>` in the
target's checkpoint; the norms are Qwen3.5's zero-centred RMSNorm (LMDeploy adds 1 when loading). `h[t]` is
the target's final, normed hidden state, and each further draft step feeds the head its own normed output
(LMDeploy's `deepseek_mtp`-style proposer loop, which `qwen3_5_mtp` uses).

The parameters are transformers' own `Qwen3_5DecoderLayer` and `Qwen3_5RMSNorm` modules (so names and the
norm convention are the real ones); the attention is computed here, because measuring acceptance for k > 1
needs a draft step that sees the cached positions plus its own earlier chain steps. Importing this module
imports torch: import it lazily."""

from __future__ import annotations

import copy
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..progress import Progress, null_progress
from .acceptance import AcceptanceAtK, replay_chain
from .train import TrainResult, _train, token_kl


def text_model(target: Any) -> Any:
    """The Qwen3.5 text stack of a `Qwen3_5ForConditionalGeneration` or `Qwen3_5ForCausalLM`."""
    return getattr(target.model, "language_model", target.model)


class MTPHead(nn.Module):
    """`state_dict()` names are the checkpoint's, minus the `mtp.` prefix."""

    def __init__(self, config: Any):
        super().__init__()
        from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5DecoderLayer, Qwen3_5RMSNorm

        cfg = copy.deepcopy(config)
        cfg.layer_types = ["full_attention"]
        cfg.num_hidden_layers = 1
        h, eps = cfg.hidden_size, cfg.rms_norm_eps
        self.layers = nn.ModuleDict({"0": Qwen3_5DecoderLayer(cfg, 0)})
        self.fc = nn.Linear(2 * h, h, bias=False)
        self.pre_fc_norm_embedding = Qwen3_5RMSNorm(h, eps=eps)
        self.pre_fc_norm_hidden = Qwen3_5RMSNorm(h, eps=eps)
        self.norm = Qwen3_5RMSNorm(h, eps=eps)
        self.heads, self.kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = cfg.head_dim
        rope = cfg.rope_parameters
        rot = int(self.head_dim * rope.get("partial_rotary_factor", 1.0))
        inv = 1.0 / (rope["rope_theta"] ** (torch.arange(0, rot, 2, dtype=torch.float32) / rot))
        self.register_buffer("inv_freq", inv, persistent=False)

    @property
    def layer(self) -> Any:
        return self.layers["0"]

    def init_weights(self, seed: int, std: float = 0.02) -> None:
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith("norm.weight"):
                    p.zero_()  # zero-centred RMSNorm: weight 0 is the identity scale
                else:
                    p.copy_(torch.randn(p.shape, generator=gen) * std)

    def _rope(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """Partial neox rotary on the first `rot` dims of x [B, heads, S, D] at positions [B, S]. With the
        same position on the three M-RoPE axes (text), interleaved M-RoPE is exactly this."""
        inv_freq: torch.Tensor = self.inv_freq  # type: ignore[assignment]
        rot = inv_freq.numel() * 2
        ang = pos.float()[:, None, :, None] * inv_freq  # [B, 1, S, rot/2]
        cos = torch.cat([ang.cos(), ang.cos()], dim=-1).to(x.dtype)
        sin = torch.cat([ang.sin(), ang.sin()], dim=-1).to(x.dtype)
        xr, xp = x[..., :rot], x[..., rot:]
        half = rot // 2
        rotated = torch.cat([-xr[..., half:], xr[..., :half]], dim=-1)
        return torch.cat([xr * cos + rotated * sin, xp], dim=-1)

    def _fuse(self, embeds: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.cat([self.pre_fc_norm_embedding(embeds), self.pre_fc_norm_hidden(hidden)], -1))

    def _qkv(self, x: torch.Tensor, pos: torch.Tensor) -> tuple[torch.Tensor, ...]:
        attn = self.layer.self_attn
        b, s, _ = x.shape
        d = self.head_dim
        q, gate = attn.q_proj(x).view(b, s, self.heads, 2 * d).chunk(2, dim=-1)
        q = self._rope(attn.q_norm(q).transpose(1, 2), pos)
        k = self._rope(attn.k_norm(attn.k_proj(x).view(b, s, self.kv_heads, d)).transpose(1, 2), pos)
        v = attn.v_proj(x).view(b, s, self.kv_heads, d).transpose(1, 2)
        return q, k, v, gate.reshape(b, s, self.heads * d)

    def _rep(self, t: torch.Tensor) -> torch.Tensor:
        return t.repeat_interleave(self.heads // self.kv_heads, dim=1)

    def _finish(self, x: torch.Tensor, attn_out: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        b, _, s, _ = attn_out.shape
        o = attn_out.transpose(1, 2).reshape(b, s, -1) * torch.sigmoid(gate)
        x = x + self.layer.self_attn.o_proj(o)
        x = x + self.layer.mlp(self.layer.post_attention_layernorm(x))
        return self.norm(x)

    def forward(
        self, embeds: torch.Tensor, hidden: torch.Tensor, pos: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """First draft step over whole sequences, causal: slot s takes (embed(x[s+1]), h[s]) at `pos` [B, S]
        and predicts x[s+2]. Returns the normed output [B, S, H] and the slots' keys and values."""
        x = self._fuse(embeds, hidden)
        q, k, v, gate = self._qkv(self.layer.input_layernorm(x), pos)
        a = F.scaled_dot_product_attention(
            q, self._rep(k), self._rep(v), is_causal=True, scale=self.head_dim**-0.5
        )
        return self._finish(x, a, gate), k, v

    def chain_step(
        self,
        embeds: torch.Tensor,
        hidden: torch.Tensor,
        pos: torch.Tensor,
        ctx: tuple[torch.Tensor, torch.Tensor],
        chain: list[tuple[torch.Tensor, torch.Tensor]],
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """A later draft step for every anchor slot s at once: the query at s sees the first step's slots
        0..s (`ctx`, the cache a server holds), the earlier chain steps of the same anchor (`chain`) and
        itself. `hidden` is the previous step's output at s."""
        x = self._fuse(embeds, hidden)
        q, k, v, gate = self._qkv(self.layer.input_layernorm(x), pos)
        scale = self.head_dim**-0.5
        ck, cv = self._rep(ctx[0]), self._rep(ctx[1])
        s = q.shape[2]
        scores = q @ ck.transpose(-1, -2) * scale  # [B, H, S, S]
        causal = torch.ones(s, s, dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
        own_k = [self._rep(kk) for kk, _ in chain] + [self._rep(k)]
        own_v = [self._rep(vv) for _, vv in chain] + [self._rep(v)]
        own = torch.stack([(q * kk).sum(-1) for kk in own_k], dim=-1) * scale  # [B, H, S, j]
        p = torch.softmax(torch.cat([scores, own], dim=-1).float(), dim=-1).to(q.dtype)
        a = p[..., :s] @ cv + (p[..., s:, None] * torch.stack(own_v, dim=-2)).sum(-2)
        return self._finish(x, a, gate), k, v


def train_mtp(
    mtp: MTPHead,
    target: Any,
    stream: Any,
    *,
    steps: int,
    seq_len: int,
    batch_size: int,
    lr: float,
    seed: int,
    device: str = "cpu",
    progress: Progress = null_progress,
) -> TrainResult:
    """The head learns the frozen target's next-next distribution: KL(target at s+1 || head at s)."""
    target.eval()
    target.requires_grad_(False)
    stack = text_model(target)
    embed, lm_head = target.get_input_embeddings(), target.get_output_embeddings()

    def loss_of(batch: Any) -> Any:
        batch = batch[:, :-1]
        with torch.no_grad():
            hidden = stack(input_ids=batch).last_hidden_state
            teacher = F.log_softmax(lm_head(hidden[:, 1:]).float(), dim=-1)
            embeds = embed(batch[:, 1:])
        pos = torch.arange(1, batch.shape[1], device=batch.device)[None].expand(batch.shape[0], -1)
        out, _, _ = mtp(embeds, hidden[:, :-1], pos)
        return token_kl(teacher, F.log_softmax(lm_head(out).float(), dim=-1))

    gen = torch.Generator().manual_seed(seed + 2)
    return _train(
        mtp, loss_of, stream, steps=steps, seq_len=seq_len, batch_size=batch_size, lr=lr, gen=gen,
        device=device, label="mtp", metric="KL", progress=progress,
    )  # fmt: skip


def chain_hits(
    mtp: MTPHead, target: Any, prompts: list[list[int]], continuation: Any, max_k: int, device: str = "cpu"
) -> list[list[list[bool]]]:
    """[prompt][t][d]: does the head's d+1-th chained draft from the step that produced continuation token
    t − 1 equal the target's continuation token t + d? (Valid while every earlier draft matched: the chain's
    inputs are then the target's own tokens.)"""
    prompt = torch.tensor(prompts, dtype=torch.long)
    full = torch.cat([prompt, continuation], dim=1).to(device)
    b, t_len = full.shape
    p_len = prompt.shape[1]
    embed, lm_head = target.get_input_embeddings(), target.get_output_embeddings()
    with torch.no_grad():
        hidden = text_model(target)(input_ids=full).last_hidden_state
        emb = embed(full)
        slots = t_len - 1
        pos = torch.arange(1, t_len, device=device)[None].expand(b, -1)
        out, k1, v1 = mtp(emb[:, 1:], hidden[:, :-1], pos)
        preds = [lm_head(out).argmax(-1)]  # depth 1: slot s predicts full[s + 2]
        chain: list[tuple[torch.Tensor, torch.Tensor]] = []
        for d in range(2, max_k + 1):
            idx = (torch.arange(slots, device=device) + d).clamp(max=t_len - 1)
            out, k, v = mtp.chain_step(emb[:, idx], out, pos + d - 1, (k1, v1), chain)
            chain.append((k, v))
            preds.append(lm_head(out).argmax(-1))  # depth d: slot s predicts full[s + d + 1]
    preds_cpu = [p.cpu() for p in preds]
    full_cpu = full.cpu()
    rows: list[list[list[bool]]] = []
    for r in range(b):
        row = []
        for t in range(continuation.shape[1]):
            s = p_len + t - 2
            hits = []
            for d in range(1, max_k + 1):
                label = s + d + 1
                hits.append(label < t_len and bool(preds_cpu[d - 1][r, s] == full_cpu[r, label]))
            row.append(hits)
        rows.append(row)
    return rows


def measure_mtp_acceptance(
    mtp: MTPHead,
    target: Any,
    prompts: list[list[int]],
    *,
    new_tokens: int,
    max_k: int = 6,
    device: str = "cpu",
) -> list[AcceptanceAtK]:
    """Acceptance of the MTP head chained k times, replayed like the toy draft's (`acceptance` module)."""
    from .acceptance import greedy_continuations

    mtp.eval()
    continuation = greedy_continuations(target, prompts, new_tokens + max_k, device)
    rows = chain_hits(mtp, target, prompts, continuation, max_k, device)
    return [replay_chain(rows, k, new_tokens) for k in range(1, max_k + 1)]


def mtp_tensors(mtp: MTPHead) -> dict[str, torch.Tensor]:
    """The head's tensors under the checkpoint's names (`mtp.` + module name)."""
    return {f"mtp.{k}": v.detach().cpu().contiguous() for k, v in mtp.state_dict().items()}


def load_mtp(config: Any, tensors: dict[str, torch.Tensor]) -> MTPHead:
    """An MTP head from a checkpoint's `mtp.*` tensors (strict: every name must be there)."""
    mtp = MTPHead(config)
    state = {k.removeprefix("mtp."): v for k, v in tensors.items() if k.startswith("mtp.")}
    mtp.load_state_dict(state, strict=True)
    return mtp.eval()
