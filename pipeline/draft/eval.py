"""Offline acceptance of a DFlash drafter against its target: continue held-out prompts greedily with the
target, draft one block at every generated position, and count how many leading drafts match the target's
own greedy tokens (what verification would accept). Gives acceptance by position, τ (mean accepted length
including the target's bonus token) and, through the shared `specq.pipeline.speedup` model, the speedup
each draft-token count k predicts. Works for any checkpoint in LMDeploy's DFlash contract."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ..checkpoint import Checkpoint, validate_checkpoint
from ..errors import InputError, SpecqError
from ..progress import Progress, null_progress
from ..repetition import is_loop, looping, partly_looping
from ..speedup import StepCost, best_k, expected_tokens_per_step, load_curve, predict_speedup
from . import contract
from .reports import DraftEvalReport, SpeedupPrediction


def prepare_eval(target: Any, texts: list[str], cfg: Any, layer_ids: list[int], block_size: int) -> Any:
    """Greedy continuations of held-out prompts with their features: (tokens, features, greedy, start)."""
    prompts = target.windows(texts, cfg.prompt_tokens, cfg.eval_prompts, stride=cfg.prompt_tokens * 4)
    if not prompts:
        raise InputError(f"no held-out text has {cfg.prompt_tokens} tokens; pass longer --prompts")
    tokens = target.greedy_continue(prompts, cfg.eval_tokens + block_size)
    feats, greedy = target.features(tokens, layer_ids)
    return tokens, feats, greedy, cfg.prompt_tokens


def prepare_served_eval(
    target: Any,
    requests: list[str | list[dict[str, str]]],
    new_tokens: int,
    layer_ids: list[int],
    block_size: int,
) -> list[Any]:
    """What a server decodes: each conversation through the target's chat template (generation prompt
    added, as LMDeploy's api_server does), or each completion prompt's text as it is (LMDeploy's
    /v1/completions applies no template), continued greedily for `new_tokens`; one data tuple per prompt
    (their lengths differ)."""
    items = []
    for request in requests:
        ids = target.encode([request])[0] if isinstance(request, str) else target.chat_ids(request)
        tokens = target.greedy_continue([ids], new_tokens + block_size)
        feats, greedy = target.features(tokens, layer_ids)
        items.append((tokens, feats, greedy, len(ids)))
    return items


def acceptance(
    drafter: Any,
    target: Any,
    data: Any,
    block_size: int,
    mask_token_id: int,
) -> tuple[list[float], int, list[list[int]]]:
    """Acceptance by draft position over every block anchored in the generated part, the block count, and
    for every sequence the accepted length of the block anchored at each generated position (what
    `walk_tau` walks). `data` is one (tokens, features, greedy, start) tuple or a list of them."""
    import torch

    from .model import accepted_prefix, draft_logits, slot_labels

    items = data if isinstance(data, list) else [data]
    was_training = drafter.training
    drafter.eval()
    total = torch.zeros(block_size - 1)
    count = 0
    lengths: list[list[int]] = []
    dev = next(drafter.parameters()).device
    with torch.no_grad():
        for tokens, feats, greedy, start in items:
            n, t = tokens.shape
            # anchor p: the target's own token at p (p ≥ start, as after a real prefill); labels up to
            # p + B − 1 ≤ t
            anchors = torch.arange(start, t - block_size + 2)[None].expand(n, -1).contiguous()
            for i in range(n):
                logits = draft_logits(
                    drafter,
                    target.embed,
                    target.lm_head,
                    feats[i : i + 1].to(dev),
                    tokens[i : i + 1].to(dev),
                    anchors[i : i + 1].to(dev),
                    block_size,
                    mask_token_id,
                )
                ok = accepted_prefix(
                    logits.argmax(-1).cpu(), slot_labels(greedy[i : i + 1], anchors[i : i + 1], block_size)
                )
                total += ok.float().sum(dim=(0, 1))
                lengths.append(ok[0].sum(-1).tolist())
            count += anchors.numel()
    drafter.train(was_training)
    return [round(float(x) / count, 4) for x in total], count, lengths


def walk_tau(lengths: list[list[int]], k: int) -> float:
    """Tokens per verification step when a lossless engine walks each greedy sequence with k draft tokens:
    from the first generated position, accept min(accepted, k) drafts plus the target's bonus token and jump
    that far. Unlike the mean over every anchor, this visits only the positions a server drafts from."""
    tokens = steps = 0
    for seq in lengths:
        p = 0
        while p < len(seq):
            a = min(seq[p], k)
            tokens += a + 1
            steps += 1
            p += a + 1
    return tokens / steps if steps else 1.0


def _weight_bytes(target: str) -> int | None:
    """Bytes of the target's weights (where the step-cost curve is read); None when unreadable."""
    try:
        ck = Checkpoint(target)
        return ck.weight_bytes if ck.has_weights else None
    except SpecqError:
        return None


def without_loops(lengths: list[list[int]], texts: list[str]) -> tuple[list[list[int]], int]:
    """The accepted lengths of the sequences whose continuation (`texts`, same order) is not a loop, and how
    many were: a drafter predicts a loop almost perfectly, so τ over the rest is what text gets. A
    continuation too short to judge counts as text."""
    kept = [seq for seq, text in zip(lengths, texts, strict=True) if not is_loop(text)]
    return kept, len(lengths) - len(kept)


def summarize(
    acc: list[float],
    *,
    target: str,
    draft: str,
    block_size: int,
    prompts: int,
    anchors: int,
    seconds: float,
    cost: StepCost | None = None,
    target_quantization: str | None = None,
    lmdeploy_checked: bool = False,
    lengths: list[list[int]] | None = None,
    workload: str = "held-out text",
    repetitive: str | None = None,
    texts: list[str] | None = None,
) -> DraftEvalReport:
    basis = "given"
    if cost is None:
        size = _weight_bytes(target)
        curve = load_curve()
        cost, basis = curve.at(size), curve.describe(size)
    ks = list(range(1, block_size))
    preds = [
        SpeedupPrediction(
            k=k,
            tokens_per_step=round(expected_tokens_per_step(acc, k), 4),
            speedup=round(predict_speedup(acc, k, cost), 4),
        )
        for k in ks
    ]
    k, speed = best_k(acc, ks, cost)
    text_lengths, loops = without_loops(lengths, texts) if lengths is not None and texts else (None, 0)
    return DraftEvalReport(
        target=target,
        target_quantization=target_quantization,
        draft=draft,
        block_size=block_size,
        prompts=prompts,
        anchors=anchors,
        acceptance_by_position=acc,
        tau=round(expected_tokens_per_step(acc, block_size - 1), 4),
        step_cost=cost,
        step_cost_basis=basis,
        predictions=preds,
        best_k=k,
        best_speedup=round(speed, 4),
        seconds=round(seconds, 2),
        lmdeploy_checked=lmdeploy_checked,
        workload=workload,
        walk_tau=[round(walk_tau(lengths, k), 4) for k in ks] if lengths is not None else [],
        repetitive=repetitive,
        looping_outputs=loops,
        walk_tau_text=[round(walk_tau(text_lengths, k), 4) for k in ks] if text_lengths else [],
    )


def load_drafter(draft: Checkpoint, device: str) -> tuple[Any, dict[str, Any]]:
    """A DFlashDrafter with a checkpoint's weights (names normalised as LMDeploy's loader does)."""
    import torch
    from safetensors.torch import load_file

    from .model import DFlashDrafter, DrafterShape

    c = draft.config
    shape = DrafterShape(
        hidden_size=c["hidden_size"],
        num_hidden_layers=c["num_hidden_layers"],
        num_attention_heads=c["num_attention_heads"],
        num_key_value_heads=c["num_key_value_heads"],
        head_dim=draft.head_dim,
        intermediate_size=c["intermediate_size"],
        rms_norm_eps=c["rms_norm_eps"],
        rope_theta=c["rope_theta"],
        num_context_features=len(c["dflash_config"]["target_layer_ids"]),
        target_hidden_size=c.get("target_hidden_size") or c["hidden_size"],
    )
    state: dict[str, Any] = {}
    for f in sorted(draft.path.glob("*.safetensors")):
        for name, tensor in load_file(str(f)).items():
            # lmdeploy/pytorch/models/qwen3_dflash.py `_normalize_dflash_weight_name`
            name = name.removeprefix("model.")
            if name.startswith("midlayer."):
                name = name.replace("midlayer.", "layers.0.", 1)
            if "rotary_emb" in name or name in ("embed_tokens.weight", "lm_head.weight"):
                continue
            state[name] = tensor if name.endswith(contract.AWQ_SUFFIXES) else tensor.float()
    _dequantize_awq(state)
    drafter = DFlashDrafter(shape)
    drafter.load_state_dict(state)
    return drafter.to(torch.device(device)), c


def _dequantize_awq(state: dict[str, Any]) -> None:
    """A 4-bit drafter's AWQ linears as the float32 `weight` [out, in] the W4A16 kernel computes with (its
    codes, zero points and fp16 scales dequantized), in place."""
    import torch

    from ..convert.repack import dequantize_awq

    for prefix in sorted(n.removesuffix(".qweight") for n in list(state) if n.endswith(".qweight")):
        qw, qz, sc = (state.pop(f"{prefix}.{s}") for s in ("qweight", "qzeros", "scales"))
        w = dequantize_awq(qw.numpy(), qz.numpy(), sc.numpy())  # [in, out]
        state[f"{prefix}.weight"] = torch.from_numpy(w.T.copy())


def evaluate_checkpoint(
    target_path: Path,
    draft_path: Path,
    texts: list[str],
    cfg: Any,
    progress: Progress = null_progress,
    served: tuple[list[str | list[dict[str, str]]], int, str] | None = None,
) -> DraftEvalReport:
    """`specq draft eval`: validate the drafter against the contract and the target, then measure it on
    held-out `texts`, or on `served` = (conversations or completion prompts, new tokens, label) as a server
    would decode them."""
    from ..hardware import cpu_threads

    with cpu_threads(cfg.threads):
        return _evaluate(target_path, draft_path, texts, cfg, progress, served)


def _evaluate(
    target_path: Path,
    draft_path: Path,
    texts: list[str],
    cfg: Any,
    progress: Progress,
    served: tuple[list[str | list[dict[str, str]]], int, str] | None,
) -> DraftEvalReport:
    from ..hardware import pick_device
    from .data import Target

    t0 = time.perf_counter()
    draft, target_ckpt = Checkpoint(draft_path), Checkpoint(target_path)
    try:
        checked = contract.validate_drafter(draft, target_ckpt)
    except InputError as e:
        if "dflash_config" not in draft.config:  # a plain draft model (the toy's own), not a DFlash drafter
            raise InputError(
                f"{e}; draft eval measures DFlash drafters: `specq draft train {target_path} --out DIR` "
                "makes one for this target"
            ) from None
        raise
    validate_checkpoint(draft, role="drafter")
    validate_checkpoint(target_ckpt, role="target")
    device = pick_device(cfg.device)
    target = Target(target_path, device, progress)
    drafter, c = load_drafter(draft, device)
    bs = int(draft.dflash_block_size or 0)  # validate_drafter checked it
    ids = list(c["dflash_config"]["target_layer_ids"])
    if served is not None:
        requests, new_tokens, workload = served
        progress(f"greedy continuations of {len(requests)} prompts ({workload})")
        data: Any = prepare_served_eval(target, requests, new_tokens, ids, bs)
        prompts = len(data)
    else:
        progress(f"greedy continuations of {cfg.eval_prompts} held-out prompts")
        data = prepare_eval(target, texts, cfg, ids, bs)
        prompts, workload = int(data[0].shape[0]), "held-out text"
    acc, anchors, lengths = acceptance(drafter, target, data, bs, int(c["dflash_config"]["mask_token_id"]))
    texts = continuations(target, data)
    note = repetition_note(texts)
    if note is not None:
        progress(f"warning: the target's greedy continuations: {note}")
    elif (some := partly_looping(texts)) is not None:
        progress(f"note: the target's greedy continuations: {some}; those lift τ above the rest's")
    from .data import quantization_label

    report = summarize(
        acc,
        target=str(target_path),
        target_quantization=target.quantization,
        draft=str(draft_path),
        block_size=bs,
        prompts=prompts,
        anchors=anchors,
        seconds=time.perf_counter() - t0,
        lmdeploy_checked=checked,
        lengths=lengths,
        workload=workload,
        repetitive=note,
        texts=texts,
    )
    report.draft_quantization = quantization_label(draft_path)
    return report


def repetition_note(texts: list[str]) -> str | None:
    """Set when the target's greedy continuations (`continuations`) loop (`specq.pipeline.repetition`),
    where any drafter scores almost perfectly."""
    note = looping(texts)
    return note and f"{note}; acceptance and τ on a loop overstate what real text gets"


def continuations(target: Any, data: Any) -> list[str]:
    """The generated part of every sequence in `data` (one (tokens, features, greedy, start) tuple or a
    list of them), as text."""
    items = data if isinstance(data, list) else [data]
    return [
        target.tokenizer.decode(row[start:].tolist(), skip_special_tokens=True)
        for tokens, _, _, start in items
        for row in tokens
    ]
