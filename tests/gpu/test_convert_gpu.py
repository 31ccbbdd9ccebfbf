"""GPU check of issue 9 (run by `make gpu-check` on the H200): a GPTQ checkpoint repacked by `specq convert
--to awq` loads in LMDeploy 0.18's PyTorch engine and decodes greedily the same tokens as the GPTQ source
dequantized to fp16 in transformers on CUDA. Skips cleanly without CUDA or lmdeploy."""

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
        from tests.integration.convert.conftest import quantize_gptq
        from tests.tinymodel import build_tiny_model

        quantize_gptq(build_tiny_model(root / "model"), root, "cuda")
    repack_gptq_to_awq(root / "gptq", root / "awq")
    return root / "gptq", root / "awq"


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
