"""Stage: quantize. `quantize(request)` turns a Hugging Face checkpoint into a 4-bit GPTQ or AWQ checkpoint
that LMDeploy 0.18 loads directly: it resolves the method for the intended use (`for = "speculative"` → AWQ,
the only 4-bit format the PyTorch engine speculates with; `"plain"` → GPTQ), refuses combinations TurboMind
would reject before any work, packs the calibration data, runs a backend from the registry with per-layer
progress, measures the quality cost, and writes everything atomically: the checkpoint, tokenizer files,
generation config, `specq-quantize.toml` (the resolved config) and `quant_report.json`. Its one input is a
`QuantizeRequest` (the quantize settings with the model and output paths, frozen); its result a
`QuantizeResult`."""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ConfigDict

from ..calibration import Calibration, CalibrationReport
from ..checkpoint import Checkpoint, validate_checkpoint
from ..config import SpecqConfig, config_to_toml
from ..config.models import QuantizeSection
from ..engines.embedded import LOADERS
from ..engines.turbomind import turbomind_problems
from ..errors import EnvironmentMissing, InputError, UsageError
from ..fsutil import atomic_dir, atomic_write_text, check_writable, temporary_dir
from ..hardware import pick_device
from ..progress import Progress, null_progress
from .backends import BACKENDS, REFUSED, Backend, BackendRunner, Job, architecture_refusal, resolve_backend
from .quality import QualityReport
from .result import (
    CONFIG_FILE,
    REPORT_FILE,
    SCHEMA_VERSION,
    DrafterQuantReport,
    QuantizeResult,
    checkpoint_bytes,
    versions_of,
)

LOG_FILE = "quantize.log"
# Files a server needs besides the weights; copied from the source when the backend did not write them.
SIDE_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "added_tokens.json",
    "chat_template.jinja",
    "chat_template.json",
    "generation_config.json",
    "preprocessor_config.json",  # a multimodal model's processor (Qwen3.5): LMDeploy's VL input path reads it
    "video_preprocessor_config.json",
    "processor_config.json",
)


class QuantizeRequest(QuantizeSection):
    """Everything `quantize` needs, frozen: the `[quantize]` settings with the model and the output
    directory required. Build it once with `from_config`."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    model: str
    out: str

    @classmethod
    def from_config(
        cls,
        cfg: SpecqConfig | QuantizeSection,
        *,
        model: str | Path | None = None,
        out: str | Path | None = None,
    ) -> QuantizeRequest:
        """The request for `cfg`'s quantize section (or the section itself); `model`/`out` override it."""
        section = cfg.quantize if isinstance(cfg, SpecqConfig) else cfg
        model = model or section.model
        out = out or section.out
        if not model:
            raise UsageError("no model to quantize: pass MODEL or set quantize.model")
        if not out:
            raise UsageError("no output directory: pass --out DIR")
        return cls.model_validate({**section.model_dump(), "model": str(model), "out": str(out)})

    @property
    def section(self) -> QuantizeSection:
        """The settings as the plain config section (what is saved next to the checkpoint)."""
        return QuantizeSection.model_validate(self.model_dump())


def resolve_method(cfg: QuantizeSection) -> tuple[str, bool]:
    """(method, sym) after the `for` default and TurboMind's per-method sym convention."""
    method = cfg.method or ("awq" if cfg.target == "speculative" else "gptq")
    sym = cfg.sym if cfg.sym is not None else method == "gptq"
    return method, sym


def plan(cfg: QuantizeSection) -> tuple[str, bool, Backend, list[str]]:
    """Validate a config without touching the model: (method, sym, backend, warnings)."""
    method, sym = resolve_method(cfg)
    if cfg.backend and cfg.backend.lower() in REFUSED:
        raise UsageError(REFUSED[cfg.backend.lower()])
    warnings: list[str] = []
    problems = turbomind_problems(method, cfg.bits, cfg.group_size, sym, cfg.desc_act)
    if problems:
        reason = "; ".join(problems)
        if cfg.turbomind_check:
            raise UsageError(
                f"TurboMind would refuse this checkpoint: {reason} "
                "(pass --no-turbomind-check to quantize anyway)"
            )
        warnings.append(f"TurboMind will refuse this checkpoint: {reason}")
    if method == "gptq" and cfg.target == "speculative":
        warnings.append(
            "GPTQ is refused by LMDeploy's PyTorch engine, the only one that speculates; "
            "it must be repacked to AWQ (`specq convert MODEL --to awq --out DIR`)"
        )
    backend = resolve_backend(method, cfg.backend)
    if not cfg.calib:
        raise UsageError("no calibration data: pass --calib FILE|DIR|HUB_NAME[:CONFIG[:SPLIT]]")
    if not backend.local_calibration:
        from ..calibration import parse_source

        kind, _ = parse_source(cfg.calib)
        if kind == "local":
            raise UsageError(
                f"backend '{backend.name}' calibrates only on named hub datasets (e.g. wikitext2, c4), "
                f"not on local data like {cfg.calib}; "
                "use --quant-backend gptqmodel to calibrate on your own data"
            )
    return method, sym, backend, warnings


def check_group_size(ckpt: Checkpoint, group_size: int) -> None:
    """Groups must tile every quantized layer's input: hidden_size and intermediate_size must be multiples
    of `group_size` (checked before calibration, not by the backend after it)."""
    if group_size <= 0:
        return
    text = ckpt.text_config
    sizes = [s for s in (text.get("hidden_size"), text.get("intermediate_size")) if isinstance(s, int)]
    for key in ("hidden_size", "intermediate_size"):
        size = text.get(key)
        if isinstance(size, int) and size % group_size:
            fits = [g for g in (256, 128, 64, 32, 16) if all(s % g == 0 for s in sizes)]
            such = f"such as {', '.join(map(str, fits[:3]))}, " if fits else ""
            raise UsageError(
                f"--group-size {group_size} does not divide the model's {key} {size}; choose a divisor "
                f"{such}or -1 for whole rows"
            )


def speculative_shape_warnings(ckpt: Checkpoint, method: str, cfg: QuantizeSection) -> list[str]:
    """For `--for speculative`: layer sizes LMDeploy's PyTorch engine will refuse once quantized to 4-bit
    AWQ (or GPTQ repacked to AWQ), read from the unquantized weights' headers before any work is done."""
    if cfg.target != "speculative" or method not in ("awq", "gptq") or not ckpt.has_weights:
        return []  # (a .bin-only model has no headers to read: the check is skipped)
    from ..engines.pytorch import fused_alignment_problems

    outputs = {
        name.removesuffix(".weight"): t.shape[0]
        for name, t in ckpt.tensors.items()
        if name.endswith(".weight") and len(t.shape) == 2
    }
    problems = fused_alignment_problems(outputs, cfg.bits, cfg.group_size)
    if not problems:
        return []
    return [
        "LMDeploy's PyTorch engine (the one that speculates) will refuse this model's 4-bit AWQ: "
        + "; ".join(problems[:3])
        + "; TurboMind (plain decoding) is not affected"
    ]


def _mark_unquantized_mtp(out: Path, progress: Progress) -> None:
    """Qwen3.5: gptqmodel keeps the MTP layer (`mtp.*`) unquantized, and LMDeploy's `qwen3_5_mtp` builds it
    quantized unless `modules_to_not_convert` names its fused modules (engines/qwen35.py); name them, and
    declare the other modules kept in bf16 (the Gated DeltaNet gates, the vision tower) the same way."""
    import json

    from ..engines.qwen35 import mtp_not_convert, plain_not_convert

    ckpt = Checkpoint(out)
    names = mtp_not_convert(ckpt)
    plain = plain_not_convert(ckpt)
    if not names and not plain:
        return
    path = out / "config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    qc = config.get("quantization_config") or {}
    declared = [*(qc.get("modules_to_not_convert") or []), *names, *plain]
    qc["modules_to_not_convert"] = list(dict.fromkeys(declared))
    config["quantization_config"] = qc
    atomic_write_text(path, json.dumps(config, indent=2) + "\n")
    if names:
        progress(
            f"MTP layer kept unquantized; modules_to_not_convert names it for LMDeploy: {', '.join(names)}"
        )
    if plain:
        progress(f"kept in bf16 and declared in modules_to_not_convert: {len(plain)} modules (gates, vision)")


def _copy_side_files(src: Path, dst: Path) -> None:
    for name in SIDE_FILES:
        if (src / name).is_file() and not (dst / name).exists():
            shutil.copy2(src / name, dst / name)


def _check_evaluator(cfg: QuantizeRequest, method: str) -> None:
    """The quality check loads GPTQ/AWQ output through gptqmodel whichever backend wrote it: refuse before a
    long quantization whose evaluation could not run (seen on the H200: autoawq quantized, then the check
    died on the missing package and nothing was written)."""
    import importlib.util

    if cfg.evaluate and LOADERS.get(method) == "gptqmodel" and importlib.util.find_spec("gptqmodel") is None:
        raise EnvironmentMissing(
            f"the quality check loads {method.upper()} checkpoints with gptqmodel, which is not installed; "
            "install it with: pip install 'specq[quant]', or pass --no-eval"
        )


def quantize(cfg: QuantizeRequest, progress: Progress = null_progress) -> QuantizeResult:
    """Quantize `cfg.model` into `cfg.out` (which must not exist) as `cfg` says; see the module docstring."""
    t0 = time.perf_counter()
    model, out = Path(cfg.model), Path(cfg.out)
    ckpt = Checkpoint(model)
    if ckpt.quantization is not None:
        raise InputError(
            f"{model} is already quantized ({ckpt.quantization.method}); pass the original model"
        )
    if ckpt.draft_kind in ("dflash", "eagle3", "eagle"):
        from .drafter import quantize_drafter

        return quantize_drafter(cfg, progress, t0)
    if cfg.target_model:
        raise UsageError(
            f"--target-model is for quantizing a drafter (calibrated on the target's hidden states); "
            f"{model.name} is not a DFlash drafter"
        )
    method, sym, backend, warnings = plan(cfg)
    refusal = architecture_refusal(backend, ckpt.config.get("model_type"))
    if refusal:
        raise UsageError(f"backend '{backend.name}' cannot quantize {model.name}: {refusal}")
    warnings += speculative_shape_warnings(ckpt, method, cfg)
    for w in warnings:
        progress(f"warning: {w}")
    if out.exists():
        raise InputError(f"{out} already exists; choose another --out or remove it")
    validate_checkpoint(ckpt, role="model")
    check_group_size(ckpt, cfg.group_size)
    _check_evaluator(cfg, method)
    check_writable(out, need_bytes=ckpt.file_bytes // 4)  # 4-bit weights at least; before calibration
    run = _Run(cfg, model, out, method, sym, backend, pick_device(cfg.device), warnings, progress, t0)
    calib = run.calibrate()
    resolved = cfg.section.model_copy(
        update={"method": method, "sym": sym, "backend": backend.name, "device": run.device}
    )
    runner = backend.load()
    with atomic_dir(out, progress=progress) as tmp, temporary_dir(out, ".work") as scratch:
        t_quant, layers = run.quantize_into(tmp, scratch, runner, calib)
        quality, t_eval = run.evaluate(tmp, scratch, calib)
        result = run.result(tmp, calib.report, quality, layers=layers, t_quant=t_quant, t_eval=t_eval)
        atomic_write_text(tmp / CONFIG_FILE, config_to_toml(SpecqConfig(quantize=resolved), ("quantize",)))
        atomic_write_text(tmp / REPORT_FILE, result.model_dump_json(indent=2) + "\n")
    progress(f"wrote {out}")
    return result


@dataclass
class _Run:
    """What the phases of one quantize run share, once the plan has been checked."""

    cfg: QuantizeRequest
    model: Path
    out: Path
    method: str
    sym: bool
    backend: Backend
    device: str
    warnings: list[str]
    progress: Progress
    started: float  # perf_counter() at the call

    @property
    def repack(self) -> bool:
        """GPTQ for speculation is quantized to scratch and repacked to AWQ into the output."""
        return self.method == "gptq" and self.cfg.target == "speculative" and self.cfg.repack

    def calibrate(self) -> Calibration:
        from ..calibration import load_calibration, load_tokenizer

        cfg, backend = self.cfg, self.backend
        assert cfg.calib is not None
        if backend.local_calibration:
            calib = load_calibration(
                cfg.calib,
                load_tokenizer(self.model),
                text_field=cfg.text_field,
                samples=cfg.samples,
                seqlen=cfg.seqlen,
                seed=cfg.seed,
                heldout_samples=cfg.eval_samples if cfg.evaluate else 0,
                progress=self.progress,
            )
        else:  # the backend reads its own named calibration set
            calib = Calibration(
                samples=[[] for _ in range(cfg.samples)],
                heldout=[],
                report=CalibrationReport(
                    source=cfg.calib, kind="backend", texts=0, tokens_total=cfg.samples * cfg.seqlen,
                    samples=cfg.samples, samples_requested=cfg.samples, seqlen=cfg.seqlen,
                    tokens_used=cfg.samples * cfg.seqlen, heldout_samples=0, heldout_tokens=0,
                    notes=[f"calibrated by {backend.name} on its named set '{cfg.calib}'"],
                ),
            )  # fmt: skip
        rep = calib.report
        self.progress(
            f"calibration: {rep.samples} samples, {rep.tokens_used} tokens (seqlen {rep.seqlen}) "
            f"from {rep.texts} texts; {rep.heldout_samples} held out"
        )
        for note in rep.notes:
            self.progress(f"calibration: {note}")
        return calib

    def quantize_into(
        self, tmp: Path, scratch: Path, runner: BackendRunner, calib: Calibration
    ) -> tuple[float, int]:
        """Run the backend (its output captured to the log) and repack if asked: (seconds, layers)."""
        from ._capture import backend_output_to

        cfg, method, progress = self.cfg, self.method, self.progress
        assert cfg.calib is not None  # plan() refuses a config without one
        layers = [0]
        capture: list[Any] = []

        def on_layer(i: int, n: int) -> None:
            layers[0] = n
            with capture[0].passthrough():
                progress(f"{method.upper()} ({self.backend.name}): layer {i}/{n}")

        qdir = scratch / "gptq" if self.repack else tmp
        qdir.mkdir(exist_ok=True)
        job = Job(
            model=self.model,
            out=qdir,
            method=method,
            bits=cfg.bits,
            group_size=cfg.group_size,
            sym=self.sym,
            desc_act=cfg.desc_act,
            device=self.device,
            seqlen=cfg.seqlen,
            seed=cfg.seed,
            calib_source=cfg.calib,
            work=scratch,
        )
        progress(
            f"quantizing {self.model.name} with {self.backend.name} ({method.upper()}, {self.device}); "
            f"log: {LOG_FILE}"
        )
        tq = time.perf_counter()
        with backend_output_to(scratch / LOG_FILE) as cap:
            capture[:] = [cap]
            runner(job, calib, on_layer)
        t_quant = time.perf_counter() - tq
        _copy_side_files(self.model, qdir)
        _mark_unquantized_mtp(qdir, progress)
        if self.repack:
            from ..convert.repack import repack_gptq_to_awq

            repack_gptq_to_awq(qdir, scratch / "awq", progress=progress)
            for p in (scratch / "awq").iterdir():
                shutil.move(str(p), tmp / p.name)
            progress("repacked GPTQ → AWQ for LMDeploy's PyTorch engine")
        shutil.copy2(scratch / LOG_FILE, tmp / LOG_FILE)
        return t_quant, layers[0]

    def evaluate(self, tmp: Path, scratch: Path, calib: Calibration) -> tuple[QualityReport | None, float]:
        """The quality cost, original vs quantized, when asked for: (report, seconds)."""
        if not self.cfg.evaluate:
            return None, 0.0
        self.progress("evaluating: perplexity on held-out text and logits cosine, original vs quantized")
        te = time.perf_counter()
        from ._capture import backend_output_to
        from .quality import evaluate

        prompts = calib.heldout or calib.samples
        with backend_output_to(scratch / "eval.log"):
            quality = evaluate(self.model, tmp, calib.heldout, prompts, self.device)
        return quality, time.perf_counter() - te

    def result(
        self,
        tmp: Path,
        calibration: CalibrationReport,
        quality: QualityReport | None,
        *,
        layers: int,
        t_quant: float,
        t_eval: float,
    ) -> QuantizeResult:
        cfg = self.cfg
        fmt = Checkpoint(tmp).quantization
        size_o, size_q = checkpoint_bytes(self.model), checkpoint_bytes(tmp)
        return QuantizeResult(
            model=str(self.model),
            out=str(self.out),
            method=self.method,
            backend=self.backend.name,
            target=cfg.target,
            bits=cfg.bits,
            group_size=cfg.group_size,
            sym=self.sym,
            desc_act=cfg.desc_act,
            device=self.device,
            format=fmt.method if fmt else "unknown",
            turbomind_check=cfg.turbomind_check,
            warnings=self.warnings,
            calibration=calibration,
            quality=quality,
            size_original_bytes=size_o,
            size_quantized_bytes=size_q,
            compression_ratio=(size_o / size_q) if size_q else 0.0,
            seconds_total=time.perf_counter() - self.started,
            seconds_quantize=t_quant,
            seconds_eval=t_eval,
            layers=layers,
            repacked_to_awq=self.repack,
            versions=_versions(self.backend),
        )


def _versions(backend: Backend) -> dict[str, str | None]:
    return versions_of(["torch", "transformers", backend.package])


def load_result(path: Path) -> QuantizeResult:
    """Read a saved `quant_report.json` (from a file or an output directory)."""
    path = Path(path)
    if path.is_dir():
        path = path / REPORT_FILE
    try:
        return QuantizeResult.model_validate_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise InputError(f"{path}: not a readable quantize report ({type(e).__name__})") from None


def backend_table() -> list[dict[str, Any]]:
    """Every registered backend with its methods and whether it is installed (for docs and doctor)."""
    return [
        {"name": b.name, "methods": list(b.methods), "installed": b.installed, "note": b.note}
        for b in BACKENDS.values()
    ]


__all__ = [
    "CONFIG_FILE",
    "REPORT_FILE",
    "SCHEMA_VERSION",
    "DrafterQuantReport",
    "QuantizeRequest",
    "QuantizeResult",
    "backend_table",
    "load_result",
    "plan",
    "quantize",
    "resolve_method",
]
