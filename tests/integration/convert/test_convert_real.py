"""`specq convert` on a real gptqmodel GPTQ checkpoint: the layout it writes is what repack.py assumes, the
AWQ repack dequantizes bitwise-identically and gives the same logits through gptqmodel's CPU kernels, and
copies of it broken on purpose are refused with the right reason."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from specq.pipeline.convert import check_readiness, repack_gptq_to_awq
from specq.pipeline.convert.st_io import read_tensors, write_tensors
from tests.convert_dequant import dequant_awq, dequant_gptq_v1

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def repacked(gptq_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("repack") / "awq"
    repack_gptq_to_awq(gptq_checkpoint, out)
    return out


def test_gptqmodel_writes_v1_sym_layout(gptq_checkpoint: Path) -> None:
    cfg = json.loads((gptq_checkpoint / "config.json").read_text())["quantization_config"]
    assert cfg["checkpoint_format"] == "gptq" and cfg["sym"] is True and cfg["desc_act"] is False
    t, _ = read_tensors(gptq_checkpoint / "model.safetensors")
    qz = t["model.layers.0.self_attn.q_proj.qzeros"].array.view(np.uint32)
    assert np.all(qz == 0x77777777)  # v1 stores zero − 1 = 7 in every nibble
    cfg_all = json.loads((gptq_checkpoint / "config.json").read_text())
    inter, hidden = cfg_all["intermediate_size"], cfg_all["hidden_size"]
    assert list(t["model.layers.0.mlp.down_proj.qweight"].array.shape) == [inter // 8, hidden]
    assert np.array_equal(t["model.layers.0.mlp.down_proj.g_idx"].array, np.arange(inter) // 128)


def test_repack_real_bitwise(gptq_checkpoint: Path, repacked: Path) -> None:
    a, _ = read_tensors(gptq_checkpoint / "model.safetensors")
    b, _ = read_tensors(repacked / "model.safetensors")
    prefixes = [n[: -len(".qweight")] for n in a if n.endswith(".qweight")]
    layers = json.loads((gptq_checkpoint / "config.json").read_text())["num_hidden_layers"]
    assert len(prefixes) == 7 * layers
    for p in prefixes:
        wg = dequant_gptq_v1(a[f"{p}.qweight"].array, a[f"{p}.qzeros"].array, a[f"{p}.scales"].array, 128)
        wa = dequant_awq(b[f"{p}.qweight"].array, b[f"{p}.qzeros"].array, b[f"{p}.scales"].array, 128)
        assert np.array_equal(wg.view(np.uint16), wa.view(np.uint16)), p
    assert set(b) == {n for n in a if not n.endswith(".g_idx")}


def test_repacked_verdicts(repacked: Path) -> None:
    r = check_readiness(repacked)
    v = {x.engine: x.status for x in r.verdicts}
    assert v == {"turbomind": "accepted", "pytorch": "accepted", "embedded": "accepted"}


def test_logits_match_through_gptqmodel(gptq_checkpoint: Path, repacked: Path) -> None:
    """Load the GPTQ source with gptqmodel's torch GPTQ kernel and the repack with its AWQ torch kernel."""
    torch = pytest.importorskip("torch")
    from gptqmodel import BACKEND, GPTQModel

    ids = torch.tensor([[1, 5, 9, 100, 200, 300, 17, 42, 7, 3]])
    with torch.inference_mode():
        g = GPTQModel.load(str(gptq_checkpoint), device="cpu", backend=BACKEND.TORCH, dtype=torch.float16)
        lg = g.model(ids).logits.float()
        del g
        a = GPTQModel.load(str(repacked), device="cpu", backend=BACKEND.AWQ_TORCH, dtype=torch.float16)
        la = a.model(ids).logits.float()
    # Same integer codes and scales: equal up to fp16 rounding of the two kernels' accumulation order.
    tol = 2 * float(torch.finfo(torch.float16).eps) * float(lg.abs().max())
    print(
        f"max |logit| {float(lg.abs().max()):.4f}, max |Δ| {float((lg - la).abs().max()):.6f}, tol {tol:.5f}"
    )
    assert float((lg - la).abs().max()) <= tol
    assert torch.equal(lg.argmax(-1), la.argmax(-1))


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    (dst / "specq-manifest.json").unlink(missing_ok=True)
    return dst


def _edit_config(d: Path, **q: object) -> None:
    cfg = json.loads((d / "config.json").read_text())
    for k, v in q.items():
        if k == "architectures":
            cfg[k] = v
        else:
            cfg["quantization_config"][k] = v
    (d / "config.json").write_text(json.dumps(cfg))


def test_broken_copies_refused(gptq_checkpoint: Path, tmp_path: Path, cli) -> None:
    # missing scales: every engine refuses, exit 2
    d = _copy(gptq_checkpoint, tmp_path / "noscales")
    t, meta = read_tensors(d / "model.safetensors")
    items = [
        (n, x.dtype, np.array(x.array)) for n, x in t.items() if n != "model.layers.1.mlp.up_proj.scales"
    ]
    write_tensors(d / "model.safetensors", items, meta)
    code, _, err = cli("convert", str(d))
    assert code == 2 and "not ready" in err
    tm = check_readiness(d).verdict("turbomind")
    assert tm.status == "refused" and "model.layers.1.mlp.up_proj: missing scales" in tm.reasons

    d = _copy(gptq_checkpoint, tmp_path / "group64")
    _edit_config(d, group_size=64)
    tm = check_readiness(d).verdict("turbomind")
    assert any("group_size 64 for gptq" in r for r in tm.reasons)
    assert any("does not match the tensors" in r for r in tm.reasons)

    d = _copy(gptq_checkpoint, tmp_path / "actorder")
    _edit_config(d, desc_act=True)
    r = check_readiness(d)
    assert "desc_act" in r.verdict("turbomind").reasons[0]
    assert r.verdict("pytorch").status == "refused" and "act-order" in r.verdict("pytorch").reasons[1]

    d = _copy(gptq_checkpoint, tmp_path / "arch")
    _edit_config(d, architectures=["Phi3ForCausalLM"])
    assert "not in TurboMind's supported list" in check_readiness(d).verdict("turbomind").reasons[0]


def test_toy_drafter_bf16_to_fp16(toy_pair, tmp_path: Path) -> None:
    """The toy drafter made bf16 (like a published DFlash drafter), then the fp16 copy an AWQ target needs."""
    from specq.pipeline.convert import cast_drafter

    cast_drafter(toy_pair.draft, tmp_path / "bf16", "bfloat16")
    res = cast_drafter(tmp_path / "bf16", tmp_path / "fp16", "float16")
    a, _ = read_tensors(tmp_path / "bf16" / "model.safetensors")
    b, _ = read_tensors(tmp_path / "fp16" / "model.safetensors")
    assert res.tensors_cast == len(a) and {t.dtype for t in b.values()} == {"F16"}
    for name, t in a.items():
        x, y = t.as_float32(), b[name].array.astype(np.float32)
        normal = np.abs(x) >= np.finfo(np.float16).tiny  # below it fp16 is subnormal: precision, not range
        assert np.array_equal(x[normal], y[normal]), name
    assert json.loads((tmp_path / "fp16" / "config.json").read_text())["torch_dtype"] == "float16"


def test_toy_pair_verdicts(toy_pair, repacked: Path) -> None:
    """The repacked toy target with the toy draft (a plain model): LMDeploy cannot use a plain draft model,
    the embedded engine can; without a draft the PyTorch engine accepts the repack."""
    r = check_readiness(repacked, toy_pair.draft, draft_tokens=4, write_manifest=False)
    assert r.verdict("pytorch").status == "refused" and r.verdict("embedded").status == "accepted"
    assert r.ready and r.engine == "embedded"
    assert check_readiness(repacked, write_manifest=False).verdict("pytorch").status == "accepted"
