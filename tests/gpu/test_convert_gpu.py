"""GPU check of `specq convert`'s GPTQ → AWQ repack (run by `make gpu-check` on the H200): a GPTQ checkpoint
repacked by `specq convert --to awq` loads in LMDeploy 0.18's PyTorch engine and decodes greedily the same
tokens as the GPTQ source dequantized to fp16 in transformers on CUDA; and `specq convert`'s verdict agrees
with the engine. Skips cleanly without CUDA or lmdeploy. Run with `-s` to see whether the match was exact."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

PROMPT = "def add(a, b):\n    return"
NEW_TOKENS = 12


@pytest.fixture(scope="module")
def gptq_and_awq(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    pytest.importorskip("lmdeploy")
    from specq.pipeline.convert import repack_gptq_to_awq

    root = tmp_path_factory.mktemp("convert-gpu")
    prepared = os.environ.get("SPECQ_GPU_QUANT_ROOT")
    if prepared:
        # A GPTQ checkpoint quantized elsewhere (the device has no gptqmodel): ROOT/model and ROOT/gptq.
        shutil.copytree(Path(prepared) / "model", root / "model")
        shutil.copytree(Path(prepared) / "gptq", root / "gptq")
    else:
        pytest.importorskip("gptqmodel")
        from specq.pipeline.toy import ToyRequest, build_toy_pair
        from tests.integration.convert.conftest import quantize_gptq

        shutil.copytree(build_toy_pair(ToyRequest(size="small", seed=0)).target, root / "model")
        quantize_gptq(root / "model", root, "cuda")
    repack_gptq_to_awq(root / "gptq", root / "awq")
    return root / "gptq", root / "awq"


def _pytorch_verdict(model: Path):
    from specq.pipeline.convert import check_readiness

    return next(v for v in check_readiness(model).verdicts if v.engine == "pytorch")


LOAD_AWQ = """
import sys
from lmdeploy import GenerationConfig, PytorchEngineConfig, pipeline
cfg = PytorchEngineConfig(model_format="awq", dtype="float16", session_len=256, cache_max_entry_count=0.05,
                          eager_mode=True)
pipe = pipeline(sys.argv[1], backend_config=cfg)
print(pipe(["def f("], gen_config=GenerationConfig(max_new_tokens=4), do_preprocess=False)[0].token_ids)
"""


def test_narrow_kv_head_refused_by_specq_and_by_lmdeploy(tmp_path: Path) -> None:
    """SPECQ_GPU_NARROW_ROOT: ROOT/gptq of a model with one 64-wide KV head (the toy of format 2). specq
    refuses it for the PyTorch engine even after the repack; LMDeploy itself must fail to load it."""
    import subprocess
    import sys

    pytest.importorskip("lmdeploy")
    prepared = os.environ.get("SPECQ_GPU_NARROW_ROOT")
    if not prepared:
        pytest.skip("SPECQ_GPU_NARROW_ROOT is not set")
    from specq.pipeline.convert import repack_gptq_to_awq

    gptq = Path(prepared) / "gptq"
    assert _pytorch_verdict(gptq).status == "refused"
    awq = tmp_path / "awq"
    repack_gptq_to_awq(gptq, awq)
    v = _pytorch_verdict(awq)
    assert v.status == "refused" and "k_proj output 64" in v.reasons[0], v
    proc = subprocess.run(
        [sys.executable, "-c", LOAD_AWQ, str(awq)],
        capture_output=True, text=True, timeout=420,
    )  # fmt: skip
    tail = (proc.stdout + proc.stderr)[-3000:]
    print(f"\nissue 9 GPU check, narrow KV head: LMDeploy exit {proc.returncode}; tail:\n{tail}")
    assert proc.returncode != 0 and "AssertionError" in tail, tail


def _dequantized_reference(gptq: Path, fp: Path):
    """transformers Qwen3 on CUDA in fp16 with every GPTQ linear replaced by its dequantized weight."""
    import torch
    from transformers import AutoModelForCausalLM

    from specq.pipeline.convert.st_io import read_tensors
    from tests.convert_dequant import dequant_gptq_v1

    model = AutoModelForCausalLM.from_pretrained(fp, dtype=torch.float16).cuda().eval()
    t, _ = read_tensors(gptq / "model.safetensors")
    state = model.state_dict()
    for name in t:
        if name.endswith(".qweight"):
            p = name[: -len(".qweight")]
            w = dequant_gptq_v1(t[f"{p}.qweight"].array, t[f"{p}.qzeros"].array, t[f"{p}.scales"].array, 128)
            state[f"{p}.weight"].copy_(torch.from_numpy(np.ascontiguousarray(w.T)))
        elif not name.endswith((".qzeros", ".scales", ".g_idx")):
            state[name].copy_(torch.from_numpy(t[name].as_float32()).to(torch.float16))
    return model


def test_repacked_awq_greedy_matches_gptq_source(gptq_and_awq: tuple[Path, Path]) -> None:
    import torch
    from lmdeploy import GenerationConfig, PytorchEngineConfig, pipeline
    from transformers import AutoTokenizer

    gptq, awq = gptq_and_awq
    assert _pytorch_verdict(awq).status == "accepted", _pytorch_verdict(awq)
    ids = AutoTokenizer.from_pretrained(awq)(PROMPT)["input_ids"]
    ref = _dequantized_reference(gptq, gptq.parent / "model")
    with torch.inference_mode():
        out = ref.generate(torch.tensor([ids]).cuda(), max_new_tokens=NEW_TOKENS, do_sample=False)
    want = out[0, len(ids) :].tolist()

    engine = PytorchEngineConfig(
        model_format="awq", dtype="float16", session_len=256, cache_max_entry_count=0.05
    )
    gen = GenerationConfig(max_new_tokens=NEW_TOKENS, do_sample=False, ignore_eos=True)
    pipe = pipeline(str(awq), backend_config=engine)
    try:
        res = pipe([PROMPT], gen_config=gen, do_preprocess=False)[0]
    finally:
        if hasattr(pipe, "close"):
            pipe.close()
    got = list(res.token_ids)[:NEW_TOKENS]
    assert len(got) == NEW_TOKENS, res
    if got == want:
        print(f"\nissue 9 GPU check: LMDeploy AWQ greedy tokens == GPTQ reference, exact: {got}")
        return
    # A random tiny model has near-ties that two fp16 kernels may break differently. Teacher-force the
    # reference on LMDeploy's tokens: each must be the reference's argmax up to fp16 noise. A wrong packing
    # order or zero point gives tokens far from the argmax.
    with torch.inference_mode():
        logits = (
            ref(torch.tensor([ids + got]).cuda())
            .logits[0, len(ids) - 1 : len(ids) - 1 + len(got)]
            .float()
            .cpu()
        )
    gaps = (logits.max(-1).values - logits[torch.arange(len(got)), torch.tensor(got)]).tolist()
    tol = 0.01 * float(logits.abs().max())
    assert max(gaps) <= tol, f"LMDeploy AWQ {got} vs reference {want}: gaps to argmax {gaps} (tol {tol:.4f})"
    print(f"\nissue 9 GPU check: not exact; {got} vs {want}, every gap to the argmax <= {tol:.4f}: {gaps}")
