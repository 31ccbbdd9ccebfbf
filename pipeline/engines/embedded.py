"""What specq's embedded engine (transformers, `serve/embedded/`) accepts — any checkpoint transformers
loads, and 4-bit ones when the Python package that runs their format is installed here — and how a quantized
checkpoint is loaded: the one loader the embedded engine and quantize's quality report share (torch,
transformers and gptqmodel are imported only when it runs)."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..checkpoint import Checkpoint, validate_checkpoint
from ..hardware import module_present
from .turbomind import check_quantized_tensors, tensor_problems
from .verdict import EngineVerdict

# quant_method -> the Python package that runs it in the embedded engine
LOADERS = {"gptq": "gptqmodel", "awq": "gptqmodel", "compressed-tensors": "compressed_tensors"}


def embedded_verdict(target: Checkpoint) -> EngineVerdict:
    """specq's embedded engine loads checkpoints through transformers; 4-bit ones need a backend installed
    here (gptqmodel for GPTQ/AWQ, compressed-tensors for llmcompressor output)."""
    q = target.quantization
    if q is None:
        return EngineVerdict(engine="embedded", status="accepted")
    need = LOADERS.get(q.method)
    if need is None:
        return EngineVerdict(
            engine="embedded", status="refused", reasons=[f"no embedded loader for quant_method {q.method!r}"]
        )
    problems = tensor_problems(target, q)[1]
    if problems:
        return EngineVerdict(engine="embedded", status="refused", reasons=problems[:5])
    if not module_present(need):
        return EngineVerdict(
            engine="embedded",
            status="fixable",
            reasons=[f"loading {q.method} needs the Python package {need}, which is not installed here"],
            fixes=["pip install 'specq[quant]'"],
        )
    return EngineVerdict(engine="embedded", status="accepted")


def load_quantized(path: Path, device: str, dtype: Any = None) -> Any:
    """A quantized checkpoint as an eval-mode torch model on `device`: gptqmodel for GPTQ/AWQ (it runs both
    formats on CPU and CUDA; transformers itself would need optimum), transformers for the rest. `dtype` (a
    torch dtype) is what the unquantized parts and activations run in; None: the checkpoint's. On CPU the
    embedded engine asks for float32: gptqmodel's int4 CPU kernel computes in bf16 either way, but in a
    bf16 model the logits are bf16 too, whose exact ties a k + 1-token verification breaks differently than
    a 1-token step (2026-12-04: 13-14 of 16 greedy outputs equal to plain decoding at k = 3..5 in bf16, 16
    of 16 in float32)."""
    ckpt = validate_checkpoint(Checkpoint(path), tokenizer=False, role="quantized model")
    check_quantized_tensors(ckpt, "quantized model")  # before the loader meets a missing tensor
    method = ckpt.quantization.method if ckpt.quantization is not None else ""
    if LOADERS.get(method) == "gptqmodel":
        os.environ.setdefault("GPTQMODEL_CPU_WORKERS", str(min(2, os.cpu_count() or 1) or 1))
        with output_quieted():  # gptqmodel's banner and kernel choices
            from gptqmodel import GPTQModel

            with gptqmodel_text_only(path):
                extra = {"dtype": dtype} if dtype is not None else {}
                return GPTQModel.load(str(path), device=device, **extra).model.eval()
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(path), device_map=device).eval()


@contextlib.contextmanager
def output_quieted() -> Iterator[None]:
    """While active, what is written to fd 1 and 2 (Python's streams, native code and `print` alike) goes to
    a temporary file that is dropped afterwards. gptqmodel prints a banner of some 25 lines and its kernel
    choices while it loads: on stdout they corrupt a command's data (`--json`), on stderr they bury its
    progress and its one error line. What went wrong is the exception's to say, not the banner's."""
    import sys
    import tempfile

    sys.stdout.flush()
    sys.stderr.flush()
    with tempfile.TemporaryFile() as sink:
        saved_fds = [(fd, os.dup(fd)) for fd in (1, 2)]
        saved = sys.stdout, sys.stderr
        text = open(sink.fileno(), "w", encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
        for fd, _ in saved_fds:
            os.dup2(sink.fileno(), fd)
        sys.stdout = sys.stderr = text
        try:
            yield
        finally:  # the user's streams first, whatever the sink's state (it may sit on a full disk)
            with contextlib.suppress(OSError, ValueError):
                text.flush()
            sys.stdout, sys.stderr = saved
            for fd, copy in saved_fds:
                os.dup2(copy, fd)
                os.close(copy)
            with contextlib.suppress(OSError, ValueError):
                text.close()


@contextlib.contextmanager
def gptqmodel_text_only(model: Path) -> Iterator[None]:
    """Run gptqmodel on a multimodal model's text as specq feeds it (token ids only). Two class settings of
    its definition are changed for the duration, and restored:
    - `require_load_processor` off: gptqmodel's `qwen3_5` definition loads the model's processor, and
      transformers' Qwen3-VL processor cannot be built without torchvision (not a specq dependency); gptqmodel
      uses it for nothing but saving it again (quantize copies the source's processor files instead);
    - `awq_preserve_explicit_position_embeddings` on for Qwen3.5: gptqmodel 7.6's AWQ scale search recomputes
      the rotary embedding from 2-D position ids, which Qwen3.5's 3-D (multimodal) rotary rejects
      (`IndexError: too many indices for tensor of dimension 2` in modeling_qwen3_5.py); the layer's own
      captured position embeddings are the right ones."""
    from gptqmodel.models.auto import MODEL_MAP

    try:
        model_type = json.loads((Path(model) / "config.json").read_text(encoding="utf-8")).get("model_type")
    except (OSError, ValueError):
        model_type = None
    definition = MODEL_MAP.get(str(model_type))
    if definition is None:
        yield
        return
    changes = {}
    if getattr(definition, "require_load_processor", False):
        changes["require_load_processor"] = False
    if str(model_type).startswith("qwen3_5"):
        changes["awq_preserve_explicit_position_embeddings"] = True
    saved = {name: definition.__dict__[name] for name in changes if name in definition.__dict__}
    for name, value in changes.items():
        setattr(definition, name, value)
    try:
        yield
    finally:
        for name in changes:
            if name in saved:
                setattr(definition, name, saved[name])
            else:
                delattr(definition, name)
