"""Build (or reuse) the toy target/draft pair: tokenizer, target training, draft distillation, held-out
perplexity, acceptance measurement, and the cache that makes every later call free.

The cache key hashes the size, the seed, the corpus digest and TOY_FORMAT_VERSION (bump it whenever a
change here changes what a build produces); it does not hash source files. The Qwen3.5-shaped toy
(`arch="qwen3.5"`, see `qwen35`) has its own key prefix and format version (`QWEN35_FORMAT_VERSION`), so
the Qwen3 pair's cache is untouched by it. Builders of the same key take
a file lock, build in a temporary directory and rename it into place, so concurrent callers neither
corrupt the cache nor train twice."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..config.models import flag
from ..errors import InputError, UsageError, missing_package
from ..fsutil import atomic_dir
from ..hardware import cpu_threads, flush_denormals, pick_device
from ..progress import Progress, null_progress
from .acceptance import AcceptanceAtK, heldout_prompts, measure_acceptance
from .corpus import Corpus, load_corpus
from .models import SIZES, Growth, SizePreset, param_count, qwen3_config
from .qwen35 import HYBRID, QWEN35_FORMAT_VERSION, TRAINING, VISION_TOKENS, write_preprocessor_config

ARCHS = ("qwen3", "qwen3.5")

TOY_FORMAT_VERSION = 3
REPORT_NAME = "toy_report.json"
MAX_K = 6


@dataclass(frozen=True)
class ToyPair:
    """A built pair: `root` holds `target/`, `draft/` (Hugging Face dirs) and `toy_report.json`."""

    root: Path
    target: Path
    draft: Path
    report: Path

    @classmethod
    def at(cls, root: Path) -> ToyPair:
        return cls(root, root / "target", root / "draft", root / REPORT_NAME)

    def load_report(self) -> ToyReport:
        return ToyReport.model_validate_json(self.report.read_text(encoding="utf-8"))


class GrowthReport(BaseModel):
    """A grown target's shallow first stage (`models.Growth`): its depth, steps, time and perplexity."""

    layers: int
    steps: int
    train_seconds: float
    final_loss: float
    heldout_perplexity: float


class ToyModelReport(BaseModel):
    params: int
    shape: dict[str, Any]
    train_steps: int  # at full depth (a grown target's first stage: `grown_from`)
    train_seconds: float
    final_loss: float  # target: cross-entropy (nats/token); draft: KL(target || draft) per token
    loss_kind: str
    heldout_perplexity: float
    grown_from: GrowthReport | None = None


class AcceptanceReport(BaseModel):
    definition: str
    prompts: int
    prompt_tokens: int
    new_tokens: int
    by_k: list[AcceptanceAtK]


class MTPReport(BaseModel):
    """The Qwen3.5 toy's built-in MTP head: trained by distillation, acceptance when chained k times."""

    params: int
    train_steps: int
    train_seconds: float
    final_loss: float  # KL(target || head) per token, on the token after next
    tensors: list[str]  # its names in the target's checkpoint
    acceptance: AcceptanceReport


class ToyReport(BaseModel):
    schema_version: int = 1
    format_version: int = TOY_FORMAT_VERSION
    arch: str = "qwen3"
    size: str
    seed: int
    cache_key: str
    corpus: dict[str, Any]
    tokenizer: dict[str, Any]
    preset: dict[str, Any]
    target: ToyModelReport
    draft: ToyModelReport
    acceptance: AcceptanceReport
    sample: dict[str, str]
    build_seconds: float
    device: str
    torch_threads: int
    versions: dict[str, str]
    mtp: MTPReport | None = None  # qwen3.5 only

    def acceptance_at(self, k: int) -> AcceptanceAtK:
        return next(a for a in self.acceptance.by_k if a.k == k)


def cache_root(cache_dir: str | Path | None = None) -> Path:
    """`cache_dir` or ${SPECQ_CACHE:-~/.cache/specq}; pairs live in its `toy/` folder."""
    if cache_dir:
        return Path(cache_dir).expanduser() / "toy"
    from ..fsutil import cache_root as specq_cache

    return specq_cache().expanduser() / "toy"


def cache_key(size: str, seed: int, corpus_digest: str, arch: str = "qwen3") -> str:
    if arch == "qwen3":  # the Qwen3 pair's keys predate `arch` and stay as they were
        blob = json.dumps([size, seed, corpus_digest, TOY_FORMAT_VERSION]).encode()
        return f"{size}-s{seed}-{hashlib.sha256(blob).hexdigest()[:16]}"
    blob = json.dumps([arch, size, seed, corpus_digest, QWEN35_FORMAT_VERSION]).encode()
    return f"{arch}-{size}-s{seed}-{hashlib.sha256(blob).hexdigest()[:16]}"


def _preset(size: str, arch: str = "qwen3") -> SizePreset:
    if arch not in ARCHS:
        raise UsageError(f"unknown toy architecture '{arch}'; choose one of: {', '.join(ARCHS)}")
    if size not in SIZES:
        raise UsageError(f"unknown toy size '{size}'; choose one of: {', '.join(SIZES)}")
    if arch == "qwen3.5":
        if size != "small":
            raise UsageError("the qwen3.5 toy comes in size 'small' only; drop --size or pass --size small")
        # The hybrid target costs about 3x a Qwen3 step on CPU (pure-torch Gated DeltaNet): fewer steps.
        return replace(SIZES[size], target_steps=TRAINING.target_steps, draft_steps=TRAINING.draft_steps)
    return SIZES[size]


@contextlib.contextmanager
def _build_lock(path: Path, progress: Progress) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # no flock (Windows): atomic_dir alone still keeps the cache consistent
        yield
        return
    with path.open("w") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            progress("another process is building this toy pair; waiting for it")
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


class ToyRequest(BaseModel):
    """Which toy pair to build, frozen: its size and seed (together with the corpus, the cache key),
    whether to rebuild a cached one, and the cache directory (default: `cache_root()`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    size: str = Field(
        "small",
        description="small: CPU, 2 minutes (the tests' pair); demo: CPU, 2.5 minutes, an 8-layer target "
        "whose step costs several of its 1-layer draft's (make demo's pair); medium: tens of millions of "
        "params, GPU.",
        json_schema_extra=flag(choices=list(SIZES)),
    )
    seed: int = Field(0, description="Seed of the build (same seed, same machine: same models).")
    force: bool = Field(False, description="Rebuild even if the cache holds this pair.")
    cache_dir: str | None = None
    arch: str = Field(
        "qwen3",
        description="qwen3: a Qwen3 target and draft; qwen3.5: a Qwen3.5-shaped hybrid target (Gated DeltaNet"
        " + full attention, head dim 256, built-in MTP head) with a Qwen3 draft (size small only).",
        json_schema_extra=flag(choices=ARCHS),
    )


def build_toy_pair(request: ToyRequest, progress: Progress = null_progress) -> ToyPair:
    """Return the cached pair for (size, seed, corpus), building it first if needed (or if `force`)."""
    size, seed, force, arch = request.size, request.seed, request.force, request.arch
    preset = _preset(size, arch)
    corpus = load_corpus()
    root = cache_root(request.cache_dir)
    dest = root / cache_key(size, seed, corpus.digest, arch)
    pair = ToyPair.at(dest)
    if pair.report.is_file() and not force:
        return pair
    with _build_lock(root / f".{dest.name}.lock", progress):
        if pair.report.is_file() and not force:  # built by another process while we waited
            return pair
        with atomic_dir(dest, overwrite=True) as tmp:
            _build(tmp, size, preset, seed, corpus, dest.name, progress, arch)
    return pair


def export_toy_pair(pair: ToyPair, out: str | Path) -> ToyPair:
    """Copy a built pair to `out`. An existing `out` is replaced only if it holds an earlier toy pair."""
    out = Path(out)
    if out.exists() and any(out.iterdir()) and not (out / REPORT_NAME).is_file():
        raise InputError(f"{out} exists and is not a toy pair; choose another OUT or remove it")
    with atomic_dir(out, overwrite=True) as tmp:
        for name in ("target", "draft"):
            shutil.copytree(getattr(pair, name), tmp / name)
        shutil.copy2(pair.report, tmp / REPORT_NAME)
    return ToyPair.at(out)


def _take(texts: list[str], chars: int) -> list[str]:
    """An evenly spread, deterministic subset of about `chars` characters."""
    total = sum(len(t) for t in texts)
    stride = max(1, -(-total // max(1, chars)))
    return texts[::stride]


def _torch() -> Any:
    try:
        import torch
        import transformers  # noqa: F401
    except ImportError as e:
        raise missing_package(e.name or "torch", "ml") from e
    return torch


def _build(
    out: Path,
    size: str,
    preset: SizePreset,
    seed: int,
    corpus: Corpus,
    key: str,
    progress: Progress,
    arch: str = "qwen3",
) -> None:
    _torch()
    from importlib.metadata import version

    device = pick_device("auto") if preset.gpu else "cpu"
    if preset.gpu and device == "cpu":
        progress(f"warning: building the '{size}' pair on CPU will take a long time (meant for a GPU)")
    # One thread: deterministic, and on a shared machine 2+ threads that get preempted are far slower.
    threads = 1 if device == "cpu" else min(4, os.cpu_count() or 1)
    started = time.monotonic()
    with cpu_threads(threads), flush_denormals():  # same weights, bitwise; a third faster (hardware.py)
        data = _prepare_data(size, preset, corpus, progress, arch)
        pair = _train_pair(data, preset, seed, device, progress, arch)
        measured = _measure(pair, data, preset, corpus, device, progress)
        mtp = None
        if arch == "qwen3.5":
            from .qwen35_build import train_and_measure_mtp

            mtp = train_and_measure_mtp(
                pair.target, data, preset, seed, measured.prompts, device, MAX_K, progress
            )
    _save_pair(out, pair, data)
    if mtp is not None:
        from .qwen35_build import save_mtp

        save_mtp(out / "target", mtp.head)
        write_preprocessor_config(out / "target")

    from . import acceptance as acceptance_module

    tokenizer, prompts = data.tokenizer, measured.prompts
    target_shape = HYBRID if arch == "qwen3.5" else preset.target
    report = ToyReport(
        arch=arch,
        format_version=QWEN35_FORMAT_VERSION if arch == "qwen3.5" else TOY_FORMAT_VERSION,
        size=size,
        seed=seed,
        cache_key=key,
        corpus=corpus.summary()
        | {"train_chars_used": sum(len(t) for t in _take(corpus.train, preset.train_chars))}
        | {
            "train_tokens": int(data.train_stream.numel()),
            "heldout_tokens": int(data.heldout_stream.numel()),
        },
        tokenizer={"kind": "byte-level BPE", "vocab_size": len(tokenizer), "model_vocab_size": data.vocab},
        preset=preset.as_dict() | ({"target": HYBRID.as_dict()} if arch == "qwen3.5" else {}),
        target=_model_report(
            pair.target, target_shape, pair.target_run, "cross_entropy", measured.target_ppl
        ).model_copy(update={"grown_from": pair.growth}),
        draft=_model_report(pair.draft, preset.draft, pair.draft_run, "kl_target_draft", measured.draft_ppl),
        acceptance=AcceptanceReport(
            definition=(acceptance_module.__doc__ or "").split("\n\n")[1].replace("\n", " "),
            prompts=len(prompts),
            prompt_tokens=preset.prompt_tokens,
            new_tokens=preset.new_tokens,
            by_k=measured.by_k,
        ),
        sample={"prompt": tokenizer.decode(prompts[0]), "completion": tokenizer.decode(measured.sample_ids)},
        build_seconds=round(time.monotonic() - started, 1),
        device=device,
        torch_threads=threads,
        versions={p: version(p) for p in ("torch", "transformers", "tokenizers")},
        mtp=_mtp_report(mtp, preset, acceptance_module.__doc__) if mtp is not None else None,
    )
    (out / REPORT_NAME).write_text(report.model_dump_json(indent=2) + "\n", encoding="utf-8")
    k4 = report.acceptance_at(4)
    progress(
        f"built in {report.build_seconds:.0f}s: perplexity target {measured.target_ppl:.2f}, "
        f"draft {measured.draft_ppl:.2f}; "
        f"acceptance at k=4 {k4.acceptance_rate:.0%} ({k4.tokens_per_step:.2f} tokens/step)"
        + (f"; MTP head at k=4 {_k4(report.mtp).acceptance_rate:.0%}" if report.mtp else "")
    )


def _mtp_report(mtp: Any, preset: SizePreset, doc: str | None) -> MTPReport:
    definition = (doc or "").split("\n\n")[1].replace("\n", " ")
    return MTPReport(
        params=mtp.params,
        train_steps=mtp.train.steps,
        train_seconds=round(mtp.train.seconds, 1),
        final_loss=round(mtp.train.final_loss, 4),
        tensors=mtp.tensors,
        acceptance=AcceptanceReport(
            definition=definition + " The MTP head drafts position i+1 from its own output at position i"
            " (chained), starting from the target's last hidden state.",
            prompts=mtp.prompts,
            prompt_tokens=preset.prompt_tokens,
            new_tokens=preset.new_tokens,
            by_k=mtp.by_k,
        ),
    )


def _k4(mtp: MTPReport) -> AcceptanceAtK:
    return next(a for a in mtp.acceptance.by_k if a.k == 4)


@dataclass
class _Data:
    """The tokenizer trained for the pair and the token streams it gives."""

    tokenizer: Any
    eos: int
    im_end: int
    vocab: int  # the models' vocabulary: the tokenizer's, rounded up to a multiple of 128
    train_stream: Any
    heldout_stream: Any
    windows: Any  # held-out perplexity windows


@dataclass
class _Pair:
    target: Any
    draft: Any
    target_run: Any  # train_target's result
    draft_run: Any  # distill_draft's result
    growth: GrowthReport | None = None  # a grown target's first stage


@dataclass
class _Measured:
    target_ppl: float
    draft_ppl: float
    prompts: list[list[int]]
    by_k: list[AcceptanceAtK]
    sample_ids: list[int]  # the target's greedy continuation of the first prompt


def _prepare_data(
    size: str, preset: SizePreset, corpus: Corpus, progress: Progress, arch: str = "qwen3"
) -> _Data:
    from .tokenizer import IM_END, train_tokenizer
    from .train import eval_windows, token_stream

    progress(f"training the tokenizer ({preset.vocab_size} tokens) on the standard library's sources")
    if arch == "qwen3.5":
        from .qwen35 import CHAT_TEMPLATE

        tokenizer = train_tokenizer(
            _take(corpus.train, preset.tokenizer_chars), preset.vocab_size,
            extra_special=VISION_TOKENS, chat_template=CHAT_TEMPLATE,
        )  # fmt: skip
    else:
        tokenizer = train_tokenizer(_take(corpus.train, preset.tokenizer_chars), preset.vocab_size)
    eos = tokenizer.eos_token_id
    im_end = tokenizer.convert_tokens_to_ids(IM_END)
    vocab = -(-len(tokenizer) // 128) * 128
    # The qwen3.5 target's shapes are not the Qwen3 preset's (head_dim 256, linear attention): only its
    # Qwen3 draft is checked here.
    for spec in (preset.draft,) if arch == "qwen3.5" else (preset.target, preset.draft):
        problems = spec.check(vocab)
        if problems:
            raise UsageError(f"toy preset '{size}' does not suit 4-bit kernels: {problems[0]}")
    train_stream = token_stream(tokenizer, _take(corpus.train, preset.train_chars), eos)
    heldout_stream = token_stream(tokenizer, corpus.heldout, eos)
    windows = eval_windows(heldout_stream, preset.seq_len, preset.eval_windows)
    return _Data(tokenizer, eos, im_end, vocab, train_stream, heldout_stream, windows)


def _train_pair(
    data: _Data, preset: SizePreset, seed: int, device: str, progress: Progress, arch: str = "qwen3"
) -> _Pair:
    """Train the target on the corpus, then distil the draft from it."""
    torch = _torch()
    from transformers import Qwen3ForCausalLM

    from .train import distill_draft, train_target

    eos, vocab = data.eos, data.vocab
    torch.manual_seed(seed)
    target: Any
    if arch == "qwen3.5":
        from transformers import Qwen3_5ForConditionalGeneration

        from .qwen35 import model_config, vision_token_ids

        config = model_config(
            HYBRID, vocab, eos_token_id=eos, pad_token_id=eos, vision_ids=vision_token_ids(data.tokenizer)
        )
        target = Qwen3_5ForConditionalGeneration(config)
    else:
        target = Qwen3ForCausalLM(qwen3_config(preset.target, vocab, eos_token_id=eos, pad_token_id=eos))
    if preset.growth is not None and arch == "qwen3":
        return _grown_pair(target, data, preset, preset.growth, seed, device, progress)
    target.to(device)
    progress(
        f"training the target ({param_count(target) / 1e6:.2f}M parameters, {preset.target_steps} steps)"
    )
    t_res = train_target(
        target, data.train_stream, steps=preset.target_steps, seq_len=preset.seq_len,
        batch_size=preset.batch_size, lr=preset.target_lr, seed=seed, device=device, progress=progress,
    )  # fmt: skip
    torch.manual_seed(seed + 1)
    draft: Any = Qwen3ForCausalLM(qwen3_config(preset.draft, vocab, eos_token_id=eos, pad_token_id=eos))
    draft.to(device)
    progress(f"distilling the draft ({param_count(draft) / 1e6:.2f}M parameters, {preset.draft_steps} steps)")
    d_res = distill_draft(
        draft, target, data.train_stream, steps=preset.draft_steps, seq_len=preset.seq_len,
        batch_size=preset.batch_size, lr=preset.draft_lr, seed=seed, device=device, progress=progress,
    )  # fmt: skip
    return _Pair(target, draft, t_res, d_res)


def _grown_pair(
    deep: Any, data: _Data, preset: SizePreset, growth: Growth, seed: int, device: str, progress: Progress
) -> _Pair:
    """A grown target (`models.Growth`) and its draft: a `growth.layers`-deep copy of the target trained first
    (seeded like a plain target), grown into `deep` (`models.grow_depth`: the same function, every layer
    followed by copies with zeroed output projections) and trained at full depth with the batches of another
    seed while the draft is distilled on its forwards; then the draft's own `draft_steps` of distillation
    from the finished target."""
    from transformers import Qwen3ForCausalLM

    from .models import grow_depth
    from .train import distill_draft, perplexity, train_target, train_target_and_draft

    torch = _torch()
    torch.manual_seed(seed)
    spec = replace(preset.target, num_hidden_layers=growth.layers)
    config = qwen3_config(spec, data.vocab, eos_token_id=data.eos, pad_token_id=data.eos)
    shallow: Any = Qwen3ForCausalLM(config)
    shallow.to(device)
    progress(
        f"training the target's first {growth.layers} layers ({param_count(shallow) / 1e6:.2f}M parameters, "
        f"{growth.steps} steps), then growing it to {preset.target.num_hidden_layers}"
    )
    first = train_target(
        shallow, data.train_stream, steps=growth.steps, seq_len=preset.seq_len, batch_size=preset.batch_size,
        lr=growth.lr, seed=seed, device=device, progress=progress,
    )  # fmt: skip
    report = GrowthReport(
        layers=growth.layers, steps=growth.steps, train_seconds=round(first.seconds, 1),
        final_loss=round(first.final_loss, 4),
        heldout_perplexity=round(perplexity(shallow, data.windows, device=device), 3),
    )  # fmt: skip
    target = grow_depth(shallow.to("cpu"), deep).to(device)
    torch.manual_seed(seed + 1)
    draft: Any = Qwen3ForCausalLM(
        qwen3_config(preset.draft, data.vocab, eos_token_id=data.eos, pad_token_id=data.eos)
    )
    draft.to(device)
    progress(
        f"training the target ({param_count(target) / 1e6:.2f}M parameters, {preset.target_steps} steps) and "
        f"distilling the draft ({param_count(draft) / 1e6:.2f}M) on its forwards"
    )
    t_res, joint = train_target_and_draft(
        target, draft, data.train_stream, steps=preset.target_steps, seq_len=preset.seq_len,
        batch_size=preset.batch_size, lr=preset.target_lr, draft_lr=preset.draft_lr, seed=seed + 2,
        device=device, progress=progress,
    )  # fmt: skip
    progress(f"distilling the draft from the finished target ({preset.draft_steps} steps)")
    d_res = distill_draft(
        draft, target, data.train_stream, steps=preset.draft_steps, seq_len=preset.seq_len,
        batch_size=preset.batch_size, lr=preset.draft_lr, seed=seed, device=device, progress=progress,
    )  # fmt: skip
    d_res.steps += joint.steps
    d_res.seconds += joint.seconds
    return _Pair(target, draft, t_res, d_res, report)


def _measure(
    pair: _Pair, data: _Data, preset: SizePreset, corpus: Corpus, device: str, progress: Progress
) -> _Measured:
    """Held-out perplexity of both models and greedy acceptance at k = 1..MAX_K."""
    from .acceptance import greedy_continuations
    from .train import perplexity

    progress("measuring held-out perplexity and greedy acceptance (k = 1..6)")
    t_ppl = perplexity(pair.target, data.windows, device=device)
    d_ppl = perplexity(pair.draft, data.windows, device=device)
    prompts = heldout_prompts(data.tokenizer, corpus.heldout, preset.prompts, preset.prompt_tokens)
    by_k = measure_acceptance(
        pair.target, pair.draft, prompts, new_tokens=preset.new_tokens, max_k=MAX_K, device=device
    )
    sample_ids = greedy_continuations(pair.target, prompts[:1], preset.new_tokens, device)[0].tolist()
    return _Measured(t_ppl, d_ppl, prompts, by_k, sample_ids)


def _save_pair(out: Path, pair: _Pair, data: _Data) -> None:
    """Both models on CPU with the tokenizer and a generation config that stops at <|im_end|> too."""
    from transformers import GenerationConfig

    eos = data.eos
    gen_config = GenerationConfig(bos_token_id=eos, eos_token_id=[eos, data.im_end], pad_token_id=eos)
    for name, model in (("target", pair.target), ("draft", pair.draft)):
        model.to("cpu")
        model.generation_config = gen_config
        model.save_pretrained(out / name)
        data.tokenizer.save_pretrained(out / name)
        _add_legacy_config_keys(out / name / "config.json")


def _model_report(model: Any, spec: Any, res: Any, loss_kind: str, ppl: float) -> ToyModelReport:
    from dataclasses import asdict

    return ToyModelReport(
        params=param_count(model),
        shape=asdict(spec),
        train_steps=res.steps,
        train_seconds=round(res.seconds, 1),
        final_loss=round(res.final_loss, 4),
        loss_kind=loss_kind,
        heldout_perplexity=round(ppl, 3),
    )


def _add_legacy_config_keys(path: Path) -> None:
    """transformers 5 writes `dtype` and `rope_parameters`; engines and quantizers that predate it read
    `torch_dtype` and a top-level `rope_theta`, so both spellings are saved."""
    config = json.loads(path.read_text(encoding="utf-8"))
    config.setdefault("torch_dtype", config.get("dtype", "float32"))
    config.setdefault("dtype", config["torch_dtype"])
    if isinstance(config.get("text_config"), dict):  # qwen3.5: the rope lives in the text config
        text = config["text_config"]
        text.setdefault("rope_theta", (text.get("rope_parameters") or {}).get("rope_theta", 10000.0))
        path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        return
    rope = config.get("rope_parameters") or {}
    config.setdefault("rope_theta", rope.get("rope_theta", 10000.0))
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def load_pair(pair: ToyPair, device: str = "cpu") -> tuple[Any, Any, Any]:
    """(tokenizer, target, draft) loaded with transformers, in eval mode."""
    _torch()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(pair.target)
    target: Any = AutoModelForCausalLM.from_pretrained(pair.target)
    draft: Any = AutoModelForCausalLM.from_pretrained(pair.draft)
    target.to(device).eval()
    draft.to(device).eval()
    return tokenizer, target, draft


def remeasure_acceptance(pair: ToyPair, device: str = "cpu") -> list[AcceptanceAtK]:
    """Measure acceptance afresh from the saved models, with the report's prompts and settings."""
    _torch()
    report = pair.load_report()
    tokenizer, target, draft = load_pair(pair, device)
    prompts = heldout_prompts(
        tokenizer, load_corpus().heldout, report.acceptance.prompts, report.acceptance.prompt_tokens
    )
    with cpu_threads(report.torch_threads):
        return measure_acceptance(
            target, draft, prompts, new_tokens=report.acceptance.new_tokens, max_k=MAX_K, device=device
        )
