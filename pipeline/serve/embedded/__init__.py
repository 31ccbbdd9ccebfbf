"""specq's embedded engine: an OpenAI-compatible server on Hugging Face transformers, for CPU and CUDA
machines without LMDeploy. It runs as a child process (`python -m specq.pipeline.serve.embedded`), serves one
request at a time, and exports LMDeploy's metric names. This module is the light, parent-side half."""

from __future__ import annotations

import os
import sys

from ..base import ProcessEngine


class EmbeddedEngine(ProcessEngine):
    name = "embedded"
    log_name = "embedded.log"

    def argv(self, *, masked: bool) -> list[str]:
        spec, eng = self.spec, self.spec.options
        argv = [sys.executable, "-m", "specq.pipeline.serve.embedded", str(spec.target.path)]
        argv += ["--served-model-name", spec.model_name, "--host", spec.host, "--port", str(spec.port)]
        argv += ["--device", eng.device, "--dtype", eng.dtype, "--max-queue", str(eng.max_queue)]
        argv += ["--max-new-tokens", str(eng.max_new_tokens)]
        if spec.speculative and spec.draft_path is not None:
            argv += ["--draft-model", str(spec.draft_path), "--draft-tokens", str(spec.draft_tokens)]
        if eng.trust_remote_code:
            argv += ["--trust-remote-code"]
        return argv

    def child_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.setdefault("TOKENIZERS_PARALLELISM", "false")
        if self.api_keys:
            env["SPECQ_EMBEDDED_API_KEYS"] = ",".join(self.api_keys)
        return env
