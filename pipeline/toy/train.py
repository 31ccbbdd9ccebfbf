"""Training loops of the toy pair: next-token training of the target on the code corpus, then
distillation of the draft from the target's output distribution (KL(target || draft) on the target's
logits over the same batches), and held-out perplexity. Everything is driven by one seeded generator and
a fixed number of steps, so a rerun on the same machine reproduces the losses."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..progress import Progress, null_progress


@dataclass
class TrainResult:
    steps: int
    seconds: float
    final_loss: float  # mean of the last 10 steps' losses
    losses: list[float]


def token_stream(tokenizer: Any, texts: list[str], eos_id: int) -> Any:
    """All texts tokenized and joined with the end-of-text token, as one 1-D LongTensor."""
    import torch

    encoded = tokenizer.backend_tokenizer.encode_batch(texts, add_special_tokens=False)
    ids: list[int] = []
    for enc in encoded:
        ids.extend(enc.ids)
        ids.append(eos_id)
    return torch.tensor(ids, dtype=torch.long)


def _batch(stream: Any, seq_len: int, batch_size: int, gen: Any) -> Any:
    import torch

    starts = torch.randint(0, stream.numel() - seq_len - 1, (batch_size,), generator=gen)
    return torch.stack([stream[s : s + seq_len + 1] for s in starts.tolist()])


def _lr(step: int, steps: int, peak: float) -> float:
    warmup = max(1, steps // 20)
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def _optimizer(model: Any, lr: float) -> Any:
    import torch

    return torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1)


def _train(
    model: Any,
    loss_of: Callable[[Any], Any],
    stream: Any,
    *,
    steps: int,
    seq_len: int,
    batch_size: int,
    lr: float,
    gen: Any,
    device: str,
    label: str,
    metric: str,
    progress: Progress,
) -> TrainResult:
    """The loop both models share: warm-up/cosine AdamW over seeded random batches, clipped at norm 1."""
    import torch

    opt = _optimizer(model, lr)
    model.train()
    losses: list[float] = []
    start = time.monotonic()
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = _lr(step, steps, lr)
        loss = loss_of(_batch(stream, seq_len, batch_size, gen).to(device))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        if (step + 1) % max(1, steps // 5) == 0:
            progress(f"{label} step {step + 1}/{steps}: {metric} {losses[-1]:.3f}")
    model.eval()
    return TrainResult(steps, time.monotonic() - start, sum(losses[-10:]) / len(losses[-10:]), losses)


def train_target(
    model: Any,
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
    """Next-token cross-entropy."""
    import torch
    import torch.nn.functional as F

    def loss_of(batch: Any) -> Any:
        logits = model(input_ids=batch[:, :-1]).logits
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), batch[:, 1:].reshape(-1))

    gen = torch.Generator().manual_seed(seed)
    return _train(
        model, loss_of, stream, steps=steps, seq_len=seq_len, batch_size=batch_size, lr=lr, gen=gen,
        device=device, label="target", metric="loss", progress=progress,
    )  # fmt: skip


def token_kl(teacher: Any, student: Any) -> Any:
    """Mean KL(teacher || student) per token, both log-probabilities [..., vocab]: the distillation loss of
    the toy's draft and of the Qwen3.5 toy's MTP head."""
    import torch.nn.functional as F

    return F.kl_div(
        student.reshape(-1, student.size(-1)),
        teacher.reshape(-1, teacher.size(-1)),
        log_target=True,
        reduction="batchmean",
    )


def distill_draft(
    draft: Any,
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
    """Train the draft to match the target's next-token distribution: mean KL(target || draft) per token."""
    import torch
    import torch.nn.functional as F

    target.eval()

    def loss_of(batch: Any) -> Any:
        batch = batch[:, :-1]
        with torch.no_grad():
            teacher = F.log_softmax(target(input_ids=batch).logits.float(), dim=-1)
        return token_kl(teacher, F.log_softmax(draft(input_ids=batch).logits.float(), dim=-1))

    gen = torch.Generator().manual_seed(seed + 1)
    return _train(
        draft, loss_of, stream, steps=steps, seq_len=seq_len, batch_size=batch_size, lr=lr, gen=gen,
        device=device, label="draft", metric="KL", progress=progress,
    )  # fmt: skip


def train_target_and_draft(
    target: Any,
    draft: Any,
    stream: Any,
    *,
    steps: int,
    seq_len: int,
    batch_size: int,
    lr: float,
    draft_lr: float,
    seed: int,
    device: str = "cpu",
    progress: Progress = null_progress,
) -> tuple[TrainResult, TrainResult]:
    """Train the target on next-token cross-entropy and, on the same batches, distil the draft from the
    logits of that same forward (KL(target || draft), `distill_draft`'s loss): the draft follows the target
    as it trains, at the cost of its own forward and backward only (the demo pair's full-depth stage, where a
    separate teacher forward would cost an 8-layer pass per step). Each has its own AdamW and schedule."""
    import torch
    import torch.nn.functional as F

    gen = torch.Generator().manual_seed(seed)
    opts = [(target, _optimizer(target, lr), lr), (draft, _optimizer(draft, draft_lr), draft_lr)]
    target.train()
    draft.train()
    losses: tuple[list[float], list[float]] = ([], [])
    start = time.monotonic()
    for step in range(steps):
        for _, opt, peak in opts:
            for group in opt.param_groups:
                group["lr"] = _lr(step, steps, peak)
        batch = _batch(stream, seq_len, batch_size, gen).to(device)
        logits = target(input_ids=batch[:, :-1]).logits
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), batch[:, 1:].reshape(-1))
        teacher = F.log_softmax(logits.detach().float(), dim=-1)
        kl = token_kl(teacher, F.log_softmax(draft(input_ids=batch[:, :-1]).logits.float(), dim=-1))
        for (model, opt, _), value in zip(opts, (loss, kl), strict=True):
            opt.zero_grad(set_to_none=True)
            value.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
        losses[0].append(loss.item())
        losses[1].append(kl.item())
        if (step + 1) % max(1, steps // 5) == 0:
            t, d = losses[0][-1], losses[1][-1]
            progress(f"target step {step + 1}/{steps}: loss {t:.3f}, draft KL {d:.3f}")
    target.eval()
    draft.eval()
    seconds = time.monotonic() - start
    return tuple(  # type: ignore[return-value]
        TrainResult(steps, seconds, sum(x[-10:]) / len(x[-10:]), x) for x in losses
    )


def eval_windows(stream: Any, seq_len: int, count: int) -> Any:
    """`count` evenly spaced, non-overlapping windows of seq_len+1 tokens (fixed, no randomness)."""
    import torch

    usable = stream.numel() - seq_len - 1
    count = max(1, min(count, usable // (seq_len + 1)))
    stride = usable // count
    return torch.stack([stream[i * stride : i * stride + seq_len + 1] for i in range(count)])


def perplexity(model: Any, windows: Any, *, device: str = "cpu", batch_size: int = 16) -> float:
    """exp(mean next-token cross-entropy) over the given windows."""
    import torch
    import torch.nn.functional as F

    total, count = 0.0, 0
    model.eval()
    with torch.no_grad():
        for i in range(0, windows.size(0), batch_size):
            batch = windows[i : i + batch_size].to(device)
            logits = model(input_ids=batch[:, :-1]).logits.float()
            loss = F.cross_entropy(
                logits.reshape(-1, logits.size(-1)), batch[:, 1:].reshape(-1), reduction="sum"
            )
            total += loss.item()
            count += batch[:, 1:].numel()
    return math.exp(total / count)
