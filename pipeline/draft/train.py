"""Train a DFlash drafter against one target (the recipe of the z-lab reference, SpecForge and speculators):
self-distilled sequences → frozen target features and greedy labels → many random query blocks per
sequence per step, loss on slots 1..B−1 weighted exp(−(k − 1)/γ) → export in LMDeploy's layout (atomic) with
`draft_report.json` (offline acceptance by position and τ on held-out text). Deterministic for a seed."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from ..checkpoint import Checkpoint, validate_checkpoint
from ..config.models import DraftSection
from ..errors import InputError, missing_package
from ..fsutil import atomic_dir, check_writable
from ..hardware import cpu_threads, package_version, pick_device
from ..progress import Progress, null_progress
from . import contract, export
from .reports import REPORT_NAME, DraftTrainReport

if TYPE_CHECKING:
    from .data import Target, Texts


# Target families the trainer reads (transformers' hidden states, embeddings and lm_head: any decoder whose
# hidden size the drafter's heads tile). LMDeploy 0.18 serves the result only beside a Qwen3-family target
# (engines/speculation.py refuses the rest there); a Llama target's drafter is scored by `specq draft eval`.
TRAIN_FAMILIES = ("qwen3", "llama")
SERVED_FAMILIES = ("qwen3",)


def check_target(target: Checkpoint, cfg: DraftSection) -> list[int]:
    """Refuse what cannot work before any heavy work; return the target layers the drafter will read."""
    tc = target.text_config
    family = target.model_type
    if not family.startswith(TRAIN_FAMILIES):
        arch = (target.architectures or [family or "unknown"])[0]
        raise InputError(
            f"{target.path}: a {arch} target (model_type {family or 'unset'}); DFlash drafters are trained"
            " for Qwen3-family targets (LMDeploy's qwen3_dflash) and Llama targets (offline evaluation only),"
            " pass one of those"
        )
    for f in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size"):
        if not isinstance(tc.get(f), int):
            raise InputError(
                f"{target.path}: config.json lacks '{f}'; a Qwen3-family or Llama target is needed"
            )
    layers = int(tc["num_hidden_layers"])
    ids = list(cfg.target_layer_ids) if cfg.target_layer_ids else None
    if ids is None:
        ids = contract.default_target_layer_ids(layers, cfg.layers)
    contract.validate_target_layer_ids(ids, layers)
    return ids


def _sequences(target: Any, texts: list[str], cfg: DraftSection, block_size: int, progress: Progress) -> Any:
    """Training sequences [N, T]: prompts continued by the target itself, or plain corpus windows."""
    if cfg.self_distill:
        prompts = target.windows(texts, cfg.prompt_tokens, cfg.samples, stride=cfg.prompt_tokens)
        if not prompts:
            raise InputError(f"no training text has {cfg.prompt_tokens} tokens")
        prompts, framed = target.chat_wrap(prompts, cfg.chat_fraction)
        progress(
            f"self-distillation: {len(prompts)} prompts ({framed} as chat turns) × {cfg.gen_tokens} greedy"
            " target tokens"
        )
        return target.greedy_continue(prompts, cfg.gen_tokens), cfg.prompt_tokens
    import torch

    wins = target.windows(texts, cfg.prompt_tokens + cfg.gen_tokens, cfg.samples, stride=cfg.gen_tokens)
    if not wins:
        raise InputError(f"no training text has {cfg.prompt_tokens + cfg.gen_tokens} tokens")
    return torch.tensor(wins), 1


def train_drafter(
    target_path: Path,
    out: Path,
    cfg: DraftSection,
    progress: Progress = null_progress,
    teacher: Path | None = None,
) -> DraftTrainReport:
    """`specq draft train`: the whole pipeline, ending in an atomic checkpoint directory at `out`. With a
    `teacher` (the checkpoint that will be served, e.g. an AWQ or GPTQ quantization of the target), the
    sequences, features, labels, embeddings, head and the held-out evaluation are the teacher's; the
    drafter's config still comes from the target, whose shape the teacher must share."""
    with cpu_threads(cfg.threads):
        return _train(target_path, out, cfg, progress, teacher)


def _train(
    target_path: Path, out: Path, cfg: DraftSection, progress: Progress, teacher: Path | None = None
) -> DraftTrainReport:
    prep = _prepare(target_path, out, cfg, progress, teacher)
    fit = _fit(prep, cfg, progress)
    return _evaluate_and_export(prep, fit, cfg, out, progress)


@dataclass
class _Prepared:
    """Everything the loop and the export share: the target with its features on the training sequences,
    and the untrained drafter with its exported config."""

    target_ckpt: Checkpoint
    teacher_ckpt: Checkpoint  # the target itself unless --teacher
    target: Target  # the teacher's model: everything the drafter learns from
    texts: Texts
    layer_ids: list[int]
    device: str
    dtype: str
    tokens: Any  # [N, T] token ids
    start: int  # first anchor position (past the prompt when self-distilled)
    feats: Any  # target hidden states at `layer_ids`
    greedy: Any  # the target's greedy next token at each position
    mask_id: int
    config: dict[str, Any]
    drafter: Any
    started: float  # perf_counter() at the call
    prepare_seconds: float = 0.0


class _Fit(NamedTuple):
    final_loss: float
    curve: list[tuple[int, float]]
    trained_tokens: int
    seconds: float


def check_teacher(target: Checkpoint, teacher: Checkpoint) -> None:
    """A teacher must be the target in another form (a quantization of it): the same language model shape
    and vocabulary, or the drafter's config (written from the target) would not fit what it learned."""
    a, b = target.text_config, teacher.text_config
    for f in ("hidden_size", "num_hidden_layers", "vocab_size"):
        if a.get(f) != b.get(f):
            raise InputError(
                f"--teacher {teacher.path}: {f} {b.get(f)} differs from the target's {a.get(f)}; the teacher "
                "must be the target itself quantized (specq quantize TARGET)"
            )


def _prepare(
    target_path: Path, out: Path, cfg: DraftSection, progress: Progress, teacher: Path | None = None
) -> _Prepared:
    """Check the target (and teacher) and the output, build the sequences and their features from the
    teacher (the target itself by default), init the drafter."""
    t_start = time.perf_counter()
    target_ckpt = Checkpoint(target_path)
    layer_ids = check_target(target_ckpt, cfg)
    if not target_ckpt.model_type.startswith(SERVED_FAMILIES):
        progress(
            f"a {target_ckpt.model_type} target: LMDeploy 0.18 serves DFlash drafters only beside"
            " Qwen3-family targets and the embedded engine speculates only with plain draft models, so this"
            " drafter is for offline evaluation (specq draft eval)"
        )
    if out.exists():
        raise InputError(f"{out} already exists; choose another --out or remove it")
    validate_checkpoint(target_ckpt, role="target")
    teacher_ckpt = target_ckpt
    if teacher is not None:
        teacher_ckpt = validate_checkpoint(Checkpoint(teacher), role="teacher")
        check_teacher(target_ckpt, teacher_ckpt)
    check_writable(out)
    device = pick_device(cfg.device)
    dtype = export.resolve_dtype(cfg.dtype, teacher_ckpt)  # for the checkpoint that will be served
    try:
        import torch
    except ImportError:
        raise missing_package("torch", "ml") from None
    from .data import Target, load_texts, pick_mask_token_id
    from .model import DFlashDrafter, DrafterShape, init_weights

    torch.manual_seed(cfg.seed)
    bs = cfg.block_size
    texts = load_texts(cfg.data, target_path)
    target = Target(teacher_ckpt.path, device, progress)
    tokens, start = _sequences(target, texts.train, cfg, bs, progress)
    n, t = tokens.shape
    if t - bs + 1 < start:
        raise InputError(f"sequences of {t} tokens are too short for block size {bs}")
    progress(f"target features at layers {layer_ids} for {n} sequences of {t} tokens")
    feats, greedy = target.features(tokens, layer_ids)
    vocab = target.vocab_size
    mask_id = (
        cfg.mask_token_id
        if cfg.mask_token_id is not None
        else pick_mask_token_id(tokens, vocab, target.tokenizer)
    )
    if not 0 <= mask_id < vocab:
        raise InputError(f"draft.mask_token_id: {mask_id} is not below the target's vocab_size {vocab}")
    config = contract.dflash_config(
        target_ckpt.text_config,
        layers=cfg.layers,
        block_size=bs,
        mask_token_id=mask_id,
        target_layer_ids=layer_ids,
    )
    shape = DrafterShape(
        hidden_size=config["hidden_size"],
        num_hidden_layers=cfg.layers,
        num_attention_heads=config["num_attention_heads"],
        num_key_value_heads=config["num_key_value_heads"],
        head_dim=config["head_dim"],
        intermediate_size=config["intermediate_size"],
        rms_norm_eps=config["rms_norm_eps"],
        rope_theta=config["rope_theta"],
        num_context_features=len(layer_ids),
        target_hidden_size=config["target_hidden_size"],
    )
    drafter = DFlashDrafter(shape)
    init_weights(drafter, cfg.seed)
    drafter.to(device)
    return _Prepared(
        target_ckpt, teacher_ckpt, target, texts, layer_ids, device, dtype, tokens, start, feats, greedy,
        mask_id, config, drafter, started=t_start, prepare_seconds=time.perf_counter() - t_start,
    )  # fmt: skip


def _fit(prep: _Prepared, cfg: DraftSection, progress: Progress) -> _Fit:
    """The training loop: each step a batch of sequences, `anchors` random query blocks in each, loss on
    slots 1..B−1 weighted exp(−(k − 1)/γ)."""
    import torch

    from .model import accepted_prefix, draft_logits, slot_labels

    drafter, target, tokens, device = prep.drafter, prep.target, prep.tokens, prep.device
    bs, start = cfg.block_size, prep.start
    n, t = tokens.shape
    opt, sched = _optimizer(drafter, cfg)
    weights = torch.exp(-torch.arange(bs - 1, dtype=torch.float32) / cfg.gamma).to(device)
    gen = torch.Generator().manual_seed(cfg.seed)
    valid = t - bs + 2 - start  # anchors p in [start, t − B + 1]
    per_seq = min(cfg.anchors, valid)
    batch = min(cfg.batch_size, n)
    order = torch.randperm(n, generator=gen)
    cursor = 0
    curve: list[tuple[int, float]] = []
    loss_val, ema, acc_ema = 0.0, None, None
    every = max(1, cfg.steps // 10)
    t_train = time.perf_counter()
    drafter.train()
    for step in range(1, cfg.steps + 1):
        if cursor + batch > n:
            order, cursor = torch.randperm(n, generator=gen), 0
        rows = order[cursor : cursor + batch]
        cursor += batch
        anchors = torch.stack([torch.randperm(valid, generator=gen)[:per_seq] for _ in rows]) + start
        anchors = anchors.sort(dim=1).values
        logits = draft_logits(
            drafter,
            target.embed,
            target.lm_head,
            prep.feats[rows].to(device),
            tokens[rows].to(device),
            anchors.to(device),
            bs,
            prep.mask_id,
        )
        labels = slot_labels(prep.greedy[rows], anchors, bs).to(device)
        ce = torch.nn.functional.cross_entropy(
            logits.flatten(0, 2).float(), labels.flatten(), reduction="none"
        )
        loss = (ce.view_as(labels) * weights).sum(-1).mean() / weights.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(drafter.parameters(), 1.0)
        opt.step()
        sched.step()
        loss_val = float(loss.detach())
        tau = 1.0 + float(accepted_prefix(logits.detach().argmax(-1), labels).float().sum(-1).mean())
        ema = loss_val if ema is None else 0.9 * ema + 0.1 * loss_val
        acc_ema = tau if acc_ema is None else 0.9 * acc_ema + 0.1 * tau
        if step % every == 0 or step == cfg.steps:
            curve.append((step, round(ema, 4)))
            progress(
                f"step {step}/{cfg.steps}  loss {ema:.3f}  τ≈{acc_ema:.2f} (training blocks)  "
                f"{time.perf_counter() - t_train:.0f}s"
            )
    return _Fit(loss_val, curve, cfg.steps * batch * per_seq * bs, time.perf_counter() - t_train)


def _optimizer(drafter: Any, cfg: DraftSection) -> tuple[Any, Any]:
    """AdamW with a linear warm-up over the first 5% of steps, then a cosine decay to 10% of `lr`."""
    import torch

    opt = torch.optim.AdamW(drafter.parameters(), lr=cfg.lr, weight_decay=0.0, betas=(0.9, 0.95))
    warm = max(1, cfg.steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt,
        lambda s: (
            min(1.0, (s + 1) / warm)
            * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(s, cfg.steps) / cfg.steps)))
        ),
    )
    return opt, sched


def _evaluate_and_export(
    prep: _Prepared, fit: _Fit, cfg: DraftSection, out: Path, progress: Progress
) -> DraftTrainReport:
    """Offline acceptance on held-out text, then the checkpoint, its report and config, written atomically."""
    import torch

    from .eval import acceptance, continuations, prepare_eval, repetition_note, summarize

    bs = cfg.block_size
    progress(f"offline acceptance on {cfg.eval_prompts} held-out prompts")
    t_eval = time.perf_counter()
    data = prepare_eval(prep.target, prep.texts.heldout, cfg, prep.layer_ids, bs)
    acc, n_anchors, lengths = acceptance(prep.drafter, prep.target, data, bs, prep.mask_id)
    texts = continuations(prep.target, data)
    state = {k: v for k, v in prep.drafter.state_dict().items()}
    target_path, teacher_path = prep.target_ckpt.path, prep.teacher_ckpt.path
    n, t = prep.tokens.shape
    with atomic_dir(out) as tmp:
        export.write_checkpoint(tmp, prep.config, state, prep.dtype)
        checked = contract.validate_drafter(Checkpoint(tmp), prep.target_ckpt)
        ev = summarize(
            acc,
            target=str(teacher_path),  # what the held-out acceptance was scored against
            target_quantization=prep.target.quantization,
            draft=str(out),
            block_size=bs,
            prompts=int(data[0].shape[0]),
            anchors=n_anchors,
            seconds=time.perf_counter() - t_eval,
            lmdeploy_checked=checked,
            lengths=lengths,
            repetitive=repetition_note(texts),
            texts=texts,
        )
        report = DraftTrainReport(
            target=str(target_path),
            teacher=str(teacher_path),
            teacher_quantization=prep.target.quantization,
            out=str(out),
            versions={p: package_version(p) for p in ("specq", "torch", "transformers", "lmdeploy")},
            device=prep.device,
            threads=torch.get_num_threads(),
            dtype=prep.dtype,
            config=cfg.model_dump(mode="json"),
            target_layer_ids=prep.layer_ids,
            mask_token_id=prep.mask_id,
            block_size=bs,
            data=prep.texts.source,
            sequences=n,
            sequence_tokens=t,
            steps=cfg.steps,
            trained_tokens=fit.trained_tokens,
            prepare_seconds=round(prep.prepare_seconds, 2),
            train_seconds=round(fit.seconds, 2),
            total_seconds=round(time.perf_counter() - prep.started, 2),
            final_loss=round(fit.final_loss, 4),
            loss_curve=fit.curve,
            eval=ev,
        )
        report.save(tmp / REPORT_NAME)
        _save_config(tmp, cfg)
    return report


def _save_config(tmp: Path, cfg: DraftSection) -> None:
    from ..config.loader import config_to_toml
    from ..config.models import SpecqConfig

    text = config_to_toml(SpecqConfig(draft=cfg), ("draft",))
    (tmp / "specq-draft.toml").write_text(text, encoding="utf-8")
