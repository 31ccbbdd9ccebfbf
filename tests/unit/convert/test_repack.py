"""GPTQ → AWQ repack on synthetic checkpoints: every weight dequantizes bitwise-identically, with dequantizers
written here from each format's definition (not the ones in repack.py); refusals for act-order/asymmetric."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from specq.pipeline.checkpoint import Checkpoint
from specq.pipeline.convert import check_readiness, repack_gptq_to_awq
from specq.pipeline.convert.st_io import read_tensors, write_tensors
from specq.pipeline.errors import InputError
from tests.convert_dequant import dequant_awq, dequant_gptq_v1


def test_repack_is_bitwise_lossless(make_ckpt, tmp_path: Path) -> None:
    src = make_ckpt("gptq")
    out = tmp_path / "awq"
    res = repack_gptq_to_awq(src, out)
    assert res.linears == 6 and res.group_size == 128
    a, _ = read_tensors(src / "model.safetensors")
    b, _ = read_tensors(out / "model.safetensors")
    prefixes = sorted(n[: -len(".qweight")] for n in a if n.endswith(".qweight"))
    for p in prefixes:
        wg = dequant_gptq_v1(a[f"{p}.qweight"].array, a[f"{p}.qzeros"].array, a[f"{p}.scales"].array, 128)
        wa = dequant_awq(b[f"{p}.qweight"].array, b[f"{p}.qzeros"].array, b[f"{p}.scales"].array, 128)
        assert wg.shape == wa.shape
        assert np.array_equal(wg.view(np.uint16), wa.view(np.uint16)), p
        assert f"{p}.g_idx" not in b
        k, n = wg.shape
        assert list(b[f"{p}.qweight"].array.shape) == [k, n // 8]
    for name in ("model.embed_tokens.weight", "lm_head.weight", "model.norm.weight"):
        assert a[name].array.tobytes() == b[name].array.tobytes()
    cfg = json.loads((out / "config.json").read_text())
    q = cfg["quantization_config"]
    assert (q["quant_method"], q["version"], q["zero_point"], q["bits"], q["group_size"]) == (
        "awq", "gemm", True, 4, 128,
    )  # fmt: skip
    assert cfg["dtype"] == "float16"
    assert (out / "tokenizer.json").is_file()
    assert Checkpoint(out).quantization.method == "awq"


def test_repack_refuses_act_order(make_ckpt, tmp_path: Path) -> None:
    src = make_ckpt("gptq", qconfig={"desc_act": True})
    with pytest.raises(InputError, match="act-order"):
        repack_gptq_to_awq(src, tmp_path / "o")
    assert not (tmp_path / "o").exists()


def test_repack_refuses_permuted_g_idx(make_ckpt, tmp_path: Path) -> None:
    """desc_act false in the config but a permuted g_idx: act-order in fact."""
    src = make_ckpt("gptq")
    t, meta = read_tensors(src / "model.safetensors")
    items = []
    for name, v in t.items():
        arr = np.array(v.array)
        if name == "model.layers.0.mlp.down_proj.g_idx":
            arr = arr[::-1].copy()
        items.append((name, v.dtype, arr))
    write_tensors(src / "model.safetensors", items, meta)
    with pytest.raises(InputError, match="g_idx"):
        repack_gptq_to_awq(src, tmp_path / "o")
    assert not list(tmp_path.glob(".o.*"))  # atomic: no partial output left behind


@pytest.mark.parametrize("how", ["config", "zeros"])
def test_repack_refuses_asymmetric(make_ckpt, tmp_path: Path, how: str) -> None:
    src = make_ckpt("gptq", qconfig={"sym": False}) if how == "config" else make_ckpt("gptq", zero=5)
    with pytest.raises(InputError, match="asymmetric"):
        repack_gptq_to_awq(src, tmp_path / "o")


def test_repack_refuses_non_gptq(make_ckpt, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="repacks GPTQ"):
        repack_gptq_to_awq(make_ckpt("awq"), tmp_path / "o")


def test_repack_refuses_existing_out(make_ckpt, tmp_path: Path) -> None:
    (tmp_path / "o").mkdir()
    with pytest.raises(InputError, match="already exists"):
        repack_gptq_to_awq(make_ckpt("gptq"), tmp_path / "o")


def test_repack_sharded_with_split_linears(make_ckpt, tmp_path: Path) -> None:
    """scales in another shard than their qweight; the index is rewritten to the output's files."""
    src = make_ckpt("gptq")
    t, meta = read_tensors(src / "model.safetensors")
    one = [(n, v.dtype, np.array(v.array)) for n, v in t.items() if not n.endswith(".scales")]
    two = [(n, v.dtype, np.array(v.array)) for n, v in t.items() if n.endswith(".scales")]
    (src / "model.safetensors").unlink()
    write_tensors(src / "model-00001-of-00002.safetensors", one, meta)
    write_tensors(src / "model-00002-of-00002.safetensors", two, meta)
    wm = {n: "model-00001-of-00002.safetensors" for n, _, _ in one}
    wm |= {n: "model-00002-of-00002.safetensors" for n, _, _ in two}
    (src / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": wm}))
    out = tmp_path / "awq"
    repack_gptq_to_awq(src, out)
    index = json.loads((out / "model.safetensors.index.json").read_text())["weight_map"]
    b: dict = {}
    for f in sorted(out.glob("*.safetensors")):
        tensors, _ = read_tensors(f)
        assert all(index[n] == f.name for n in tensors)
        b |= tensors
    assert set(index) == set(b) and not any(n.endswith(".g_idx") for n in index)
    for n in [n for n in t if n.endswith(".qweight")]:
        p = n[: -len(".qweight")]
        wg = dequant_gptq_v1(t[f"{p}.qweight"].array, t[f"{p}.qzeros"].array, t[f"{p}.scales"].array, 128)
        wa = dequant_awq(b[f"{p}.qweight"].array, b[f"{p}.qzeros"].array, b[f"{p}.scales"].array, 128)
        assert np.array_equal(wg.view(np.uint16), wa.view(np.uint16))


def test_gptq_without_qzeros_repacks_with_zero_8(make_ckpt, tmp_path: Path) -> None:
    """TurboMind synthesises GPTQ zeros of 8 when qzeros is absent; the repack writes them explicitly."""
    src = make_ckpt("gptq", drop=("qzeros",))
    tm = check_readiness(src).verdict("turbomind")
    assert tm.status == "accepted", tm.reasons
    repack_gptq_to_awq(src, tmp_path / "awq")
    b, _ = read_tensors(tmp_path / "awq" / "model.safetensors")
    assert np.all(b["model.layers.0.mlp.down_proj.qzeros"].array.view(np.uint32) == 0x88888888)


def test_awq_without_qzeros_refused(make_ckpt) -> None:
    tm = check_readiness(make_ckpt("awq", drop=("qzeros",))).verdict("turbomind")
    assert tm.status == "refused" and "missing qzeros" in tm.reasons[0]
