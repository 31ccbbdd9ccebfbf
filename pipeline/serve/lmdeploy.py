"""LMDeploy 0.18's `api_server` as an engine: the argument list for `python -m lmdeploy serve api_server`
built from the `ServeSpec`. Plain decoding on TurboMind (the default baseline; `--model-format
awq|gptq` from the checkpoint's `quantization_config`) or the PyTorch engine; speculative decoding only on the
PyTorch engine (`--speculative-algorithm`, `--speculative-draft-model`, `--speculative-num-draft-tokens`,
`--speculative-dflash-block-size`); `--tp N` over N GPUs of this host (engines/parallel.py); the PyTorch
engine's `--logprobs-mode` (`engine.logprobs_mode`: without it the api_server answers a request for logprobs
with HTTP 400; TurboMind serves them without it). Preflight runs before the launch."""

from __future__ import annotations

import os
import sys

from .. import hardware
from ..engines import lmdeploy_compat
from ..engines.qwen35 import needs_compat
from ..kernels import FUSE_SILU_ENV
from .base import MASK, ProcessEngine
from .preflight import require_lmdeploy
from .spec import write_fp16_copy

# TurboMind's --model-format values for the quantization methods it reads from HF checkpoints.
MODEL_FORMATS = {"awq": "awq", "gptq": "gptq"}
# engine.w4a16_kernel -> LMDeploy's LMDEPLOY_W4A16_GEMM_BACKEND (specq's kernel is the w4a16-specq patch)
W4A16_ENV = "LMDEPLOY_W4A16_GEMM_BACKEND"
W4A16_BACKENDS = {"lmdeploy": "triton", "turbomind": "turbomind"}
W4A16_NAMES = {
    "specq": "specq (deterministic, pipeline/kernels/w4a16.py)",
    "lmdeploy": "LMDeploy's Triton AWQ kernel",
    "turbomind": "TurboMind's W4A16 GEMM (fp16)",
}


def attention_kernels() -> str:
    """What LMDeploy's PyTorch engine runs attention on here. Where `flash_attn_interface` imports, LMDeploy
    0.18 takes its FA3 path for head dims up to 256, which runs FA3 for prefill and for verify steps of
    several tokens, and its own Triton paged attention for one-token decode steps
    (`backends/cuda/attention/fa3.py`; a profiled plain step shows only the Triton kernels). Else every step
    runs LMDeploy's Triton kernels."""
    if hardware.flash_attention_3() is None:
        return "FlashAttention-3 for prefill and verify steps, Triton paged attention for one-token steps"
    return "LMDeploy's Triton kernels (FlashAttention-3 does not import; `specq fa3 build` builds it)"


class LMDeployEngine(ProcessEngine):
    name = "lmdeploy"
    log_name = "lmdeploy.log"

    def argv(self, *, masked: bool) -> list[str]:
        spec, eng = self.spec, self.spec.options
        backend = spec.backend or "turbomind"
        argv = [sys.executable, "-m", "lmdeploy", "serve", "api_server", str(spec.target.path)]
        argv += ["--backend", backend, "--server-name", spec.host, "--server-port", str(spec.port)]
        argv += ["--model-name", spec.model_name]
        quant = spec.target.quantization
        if backend == "turbomind" and quant is not None and quant.method in MODEL_FORMATS:
            argv += ["--model-format", MODEL_FORMATS[quant.method]]
        if eng.dtype != "auto":
            argv += ["--dtype", eng.dtype]
        if eng.session_len is not None:
            argv += ["--session-len", str(eng.session_len)]
        argv += ["--cache-max-entry-count", f"{eng.cache_max_entry_count:g}"]
        # The value `specq plan` sized the memory for (LMDeploy's own default is 8192 as well).
        argv += ["--max-prefill-token-num", str(eng.max_prefill_token_num)]
        argv += ["--max-batch-size", str(eng.max_batch_size)]
        if eng.tp != 1:
            argv += ["--tp", str(eng.tp)]
            if backend == "pytorch" and eng.distributed_executor_backend:
                argv += ["--distributed-executor-backend", eng.distributed_executor_backend]
        if eng.enable_prefix_caching:
            argv += ["--enable-prefix-caching"]
        if eng.eager_mode and backend == "pytorch":
            argv += ["--eager-mode"]
        if eng.logprobs_mode and backend == "pytorch":  # TurboMind serves logprobs without it
            argv += ["--logprobs-mode", eng.logprobs_mode]
        if spec.speculative:
            assert spec.method is not None
            argv += ["--speculative-algorithm", spec.method]
            if spec.draft_path is not None:
                argv += ["--speculative-draft-model", str(spec.draft_path)]
            argv += ["--speculative-num-draft-tokens", str(spec.draft_tokens)]
            if spec.method == "dflash" and eng.dflash_block_size is not None:
                argv += ["--speculative-dflash-block-size", str(eng.dflash_block_size)]
        if self.api_keys:
            argv += ["--api-keys", *([MASK] * len(self.api_keys) if masked else self.api_keys)]
        return argv

    def needs_compat(self) -> bool:
        """The PyTorch engine on a quantized Gated DeltaNet target: specq's LMDeploy patch must run in it."""
        return self.spec.backend == "pytorch" and needs_compat(self.spec.target)

    def needs_draft_compat(self) -> bool:
        """A 4-bit drafter on the PyTorch engine: specq's dflash-awq patch builds it from its own
        quantization config."""
        draft = self.spec.draft
        return (
            self.spec.backend == "pytorch"
            and self.spec.speculative
            and draft is not None
            and draft.quantization is not None
        )

    def compat(self) -> list[lmdeploy_compat.CompatStatus]:
        """The compatibility patches this launch runs: qwen35-awq-bf16 where the target needs it, spec-step
        where `engine.step_patch` asks for it (the PyTorch engine only: resolve_spec refuses TurboMind),
        w4a16-specq where specq's W4A16 kernel runs the 4-bit linears (`ServeSpec.w4a16_kernel`), dflash-awq
        where the drafter is 4-bit."""
        out = [lmdeploy_compat.status()] if self.needs_compat() else []
        if self.spec.options.step_patch and self.spec.backend == "pytorch":
            out.append(lmdeploy_compat.status(patch=lmdeploy_compat.STEP_PATCH))
        if self.spec.w4a16_kernel == "specq":
            out.append(lmdeploy_compat.status(patch=lmdeploy_compat.W4A16_PATCH))
        if self.needs_draft_compat():
            out.append(lmdeploy_compat.status(patch=lmdeploy_compat.DFLASH_AWQ_PATCH))
        return out

    def child_env(self) -> dict[str, str]:
        """The server's environment; with a compatibility patch, `boot/` on PYTHONPATH so that every process
        LMDeploy starts (the spawned engine, ray workers) patches itself, and each patched module recorded in
        the run's `compat.log`."""
        env = super().child_env()
        compat = self.compat()
        env = lmdeploy_compat.launch_env(env, *compat)
        backend = W4A16_BACKENDS.get(self.spec.w4a16_kernel or "")
        if backend:  # LMDeploy's own choice between its two W4A16 kernels
            env[W4A16_ENV] = backend
        if any(c.needs_hook for c in compat):
            env[lmdeploy_compat.hook.LOG_ENV] = str(self.run_dir / "compat.log")
        return env

    def shown_env(self) -> dict[str, str]:
        """The compatibility patch's variables, when this launch sets them."""
        env = self.child_env()
        names = ("PYTHONPATH", lmdeploy_compat.ENV, lmdeploy_compat.hook.LOG_ENV, W4A16_ENV)
        return {k: env[k] for k in names if k in env and os.environ.get(k) != env[k]}

    def preflight(self) -> None:
        require_lmdeploy(self.spec.backend or "turbomind", self.spec.speculative, self.spec.request)
        if self.needs_compat():
            compat = lmdeploy_compat.require(f"{self.spec.target.name} (quantized, Gated DeltaNet)")
            self.progress(compat.summary())
        if self.spec.options.step_patch:
            compat = lmdeploy_compat.require("engine.step_patch", lmdeploy_compat.STEP_PATCH)
            self.progress(compat.summary())
        if self.needs_draft_compat():
            assert self.spec.draft is not None
            what = f"{self.spec.draft.name} (a 4-bit drafter)"
            compat = lmdeploy_compat.require(what, lmdeploy_compat.DFLASH_AWQ_PATCH)
            self.progress(compat.summary())
        if self.spec.w4a16_kernel == "specq":
            lmdeploy_compat.require("engine.w4a16_kernel = specq", lmdeploy_compat.W4A16_PATCH)
        if self.spec.w4a16_kernel:
            kernel = W4A16_NAMES[self.spec.w4a16_kernel]
            if self.spec.w4a16_kernel == "specq" and os.environ.get(FUSE_SILU_ENV) == "1":
                kernel += f"; gate_up linears store silu(gate) * up ({FUSE_SILU_ENV}=1)"
            self.progress(f"W4A16 kernel: {kernel}")
        if self.spec.backend == "pytorch":  # LMDeploy takes FA3 whenever it imports, speculating or not
            self.progress(f"attention: {attention_kernels()}")

    def prepare(self) -> None:
        write_fp16_copy(self.spec, self.progress)
