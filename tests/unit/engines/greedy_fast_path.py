"""The greedy fast path of specq's `spec-step` LMDeploy patch (engines/lmdeploy_compat/spec-step.diff)
against LMDeploy 0.18.0's own path (sampling inputs expanded to k + 1 rows, then FusedLogitsProcessor, then
argmax), on random CPU tensors: the target token ids must match in every case. The fast path is the patched
`spec_agent.py`'s own code, cut from the source the compatibility hook produces; torch alone runs it, and
LMDeploy's files are read from an unpacked 0.18.0 tree (tests/fixtures/lmdeploy-0.18.0 holds the ones needed).

    python tests/unit/engines/greedy_fast_path.py [SITE]   # SITE/lmdeploy/pytorch/...

Prints the mismatches (0 expected) and each path's host time per step on CPU tensors; exits 1 on a mismatch.
"""

from __future__ import annotations

import asyncio
import sys
import textwrap
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[3]
STUBS = (
    "lmdeploy", "lmdeploy.messages", "lmdeploy.pytorch", "lmdeploy.pytorch.envs", "lmdeploy.pytorch.messages",
    "lmdeploy.pytorch.engine", "lmdeploy.pytorch.engine.guided_process",
)  # fmt: skip


def load(site: Path) -> dict[str, Any]:
    """`logits_process.py` (with stubs for the imports it needs, taken out of sys.modules again afterwards)
    and `spec_agent.py`'s `_expand_sampling_inputs`, executed from the 0.18.0 sources."""
    saved = {name: sys.modules.get(name) for name in STUBS}
    try:
        return _load(site)
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def _load(site: Path) -> dict[str, Any]:
    for name in STUBS:
        sys.modules[name] = types.ModuleType(name)
    sys.modules["lmdeploy.messages"].LogitsProcessor = object  # type: ignore[attr-defined]
    envs = sys.modules["lmdeploy.pytorch.envs"]
    envs.repetition_window_size = 1024  # type: ignore[attr-defined]
    sys.modules["lmdeploy.pytorch"].envs = envs  # type: ignore[attr-defined]
    sys.modules["lmdeploy.pytorch.messages"].SchedulerSequence = object  # type: ignore[attr-defined]
    sys.modules["lmdeploy.pytorch.engine.guided_process"].GuidedDecodingManager = object  # type: ignore[attr-defined]
    pkg = site / "lmdeploy" / "pytorch"
    src = (pkg / "engine" / "logits_process.py").read_text()
    src = src.replace("from ..messages import", "from lmdeploy.pytorch.messages import")
    src = src.replace("from .guided_process import", "from lmdeploy.pytorch.engine.guided_process import")
    lp: dict[str, Any] = {"__name__": "lp"}
    exec(compile(src, "logits_process.py", "exec", dont_inherit=True), lp)  # not this file's __future__
    agent = (pkg / "spec_decode" / "spec_agent.py").read_text()
    ns = dict(lp, np=np)
    part = agent[agent.index("_SCALAR_FIELDS = ") : agent.index("class SpecModelAgent")]
    exec(compile(part, "spec_agent.py", "exec", dont_inherit=True), ns)
    return {
        "SamplingInputs": lp["SamplingInputs"], "Fused": lp["FusedLogitsProcessor"],
        "expand": ns["_expand_sampling_inputs"], "bad_words": lp["_process_bad_words_"],
    }  # fmt: skip


SPEC_AGENT = "lmdeploy/pytorch/spec_decode/spec_agent.py"


def patched_fast_path(site: Path) -> Callable[..., torch.Tensor]:
    """The patched `spec_agent.py`'s greedy fast path, from its first statement to the argmax, as a function
    of (the module's helpers, sampling inputs, target logits, batch size, k + 1)."""
    from specq.pipeline.engines.lmdeploy_compat import STEP_PATCH, hook

    source = hook.patched_source(STEP_PATCH, SPEC_AGENT, (site / SPEC_AGENT).read_bytes()).splitlines()
    start = next(i for i, line in enumerate(source) if "# Greedy fast path" in line)
    end = next(i for i in range(start, len(source)) if "target_token_ids = " in source[i])
    block = textwrap.dedent("\n".join(source[start : end + 1]))
    code = compile(block, SPEC_AGENT, "exec", dont_inherit=True)

    def fast(m: dict[str, Any], si: Any, logits: torch.Tensor, b: int, n: int) -> torch.Tensor:
        ns = {"torch": torch, "_process_bad_words_": m["bad_words"], "si": si, "target_logits": logits,
              "batch_size": b, "num_expand_sampling": n}  # fmt: skip
        exec(code, ns)
        return ns["target_token_ids"]

    return fast


async def original(m: dict[str, Any], si: Any, logits: torch.Tensor, b: int, n: int) -> torch.Tensor:
    scores, _ = await m["Fused"](m["expand"](si, n))(logits)
    return scores.view(b, n, -1).argmax(dim=-1)


def mismatches(site: Path, cases: int = 300, seed: int = 0) -> int:
    """Random greedy batches (1-4 sequences, 2-16 rows each, bad words and stop words on and off, some
    sequences still ignoring EOS) on which the fast path's token ids differ from LMDeploy's own path."""
    m, fast = load(site), patched_fast_path(site)
    torch.manual_seed(seed)
    bad, vocab = 0, 64
    for trial in range(cases):
        b, n = int(torch.randint(1, 5, ())), int(torch.randint(2, 17, ()))
        logits = torch.randn(b * n, vocab)
        bw, bmask = torch.randint(0, vocab, (b, 3)), torch.rand(b, 3) > 0.3
        sw, smask = torch.randint(0, vocab, (b, 2)), torch.rand(b, 2) > 0.2
        for i in range(b):  # the banned ids the likely argmax, so that masking matters
            logits.view(b, n, vocab)[i, :, bw[i, 0]] += 5
            logits.view(b, n, vocab)[i, :, sw[i, 0]] += 4
        si = m["SamplingInputs"](
            max_top_k=1, batch_size=b, max_num_logprobs=-1, logits_processors=[None] * b,
            random_offsets=torch.arange(b), num_ignore_eos=torch.randint(-3, 3, (b,)),
        )  # fmt: skip
        if trial % 4 in (1, 3):
            si.bad_words, si.bad_mask = bw.where(bmask, -1), bmask
        if trial % 4 in (2, 3):
            si.stop_words, si.stop_mask = sw.where(smask, -1), smask
        want = asyncio.run(original(m, si, logits.clone(), b, n))
        bad += int(not torch.equal(want, fast(m, si, logits.clone(), b, n)))
    return bad


def main() -> int:
    site = Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "tests" / "fixtures" / "lmdeploy-0.18.0")
    cases = 300
    bad = mismatches(site, cases)
    print(f"mismatches: {bad} of {cases}")
    m, fast = load(site), patched_fast_path(site)

    b, n = 1, 16
    si = m["SamplingInputs"](
        max_top_k=1, batch_size=b, max_num_logprobs=-1, logits_processors=[None],
        random_offsets=torch.arange(b), num_ignore_eos=torch.tensor([-5]), bad_words=torch.tensor([[7, 3]]),
        bad_mask=torch.tensor([[True, True]]),
    )  # fmt: skip
    logits = torch.randn(b * n, 8)

    async def timed() -> None:
        for name, is_fast in (("orig (expand+FusedLogitsProcessor)", False), ("fast", True)):
            for rep, count in enumerate((200, 2000)):
                t = time.perf_counter()
                for _ in range(count):
                    if is_fast:
                        fast(m, si, logits, b, n)
                    else:
                        await original(m, si, logits, b, n)
                if rep:
                    us = (time.perf_counter() - t) / count * 1e6
                    print(f"{name}: {us:.0f} us/step on CPU tensors (host overhead only)")

    asyncio.run(timed())
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
