"""Which linear layers of a checkpoint are quantized, and whether each one's tensors have the names, dtypes
and shapes its format defines — read from safetensors headers only (no weights, no torch).

Formats (K = input features, N = output features, g = group size, int4 codes packed 8 per int32):
- GPTQ:  `qweight` I32 [K/8, N] (packed along the input dim), `qzeros` I32 [K/g, N/8], `scales` [K/g, N],
  optional `g_idx` I32 [K].
- AWQ (gemm): `qweight` I32 [K, N/8] (packed along the output dim), `qzeros` I32 [K/g, N/8],
  `scales` [K/g, N].
- compressed-tensors pack-quantized: `weight_packed` I32 [N, K/8], `weight_scale` [N, K/g], optional
  `weight_zero_point` I32 [N/8, K/g], `weight_shape` [2].
TurboMind tells GPTQ from AWQ by exactly these shapes (LMDeploy 0.18 `lmdeploy/turbomind/weight_format.py`:
`GPTQFormat.accepts` wants `qweight.shape[-1] == scales.shape[-1]`, `AWQFormat.accepts` wants
`qweight.shape[-1] * 8 == scales.shape[-1]`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..checkpoint import Checkpoint, QuantInfo

GPTQ_SUFFIXES = ("qweight", "qzeros", "scales", "g_idx")
CT_SUFFIXES = ("weight_packed", "weight_scale", "weight_zero_point", "weight_shape")
FLOAT_DTYPES = ("F16", "BF16", "F32")
PACK = 8  # int4 codes per int32


@dataclass
class QuantLinear:
    prefix: str
    format: str  # gptq | awq | compressed-tensors
    in_features: int | None = None
    out_features: int | None = None
    problems: list[str] = field(default_factory=list)


def layout_format(q: QuantInfo) -> str | None:
    """The tensor layout a quantization method implies (None: not a packed int4 format specq checks)."""
    if q.method in ("gptq", "awq", "compressed-tensors"):
        return q.method
    return None


def quantized_linears(ckpt: Checkpoint, q: QuantInfo) -> list[QuantLinear]:
    """Every quantized linear, with the problems found in its tensors."""
    fmt = layout_format(q)
    if fmt is None:
        return []
    suffixes = CT_SUFFIXES if fmt == "compressed-tensors" else GPTQ_SUFFIXES
    prefixes: dict[str, set[str]] = {}
    for name in ckpt.tensors:
        prefix, _, suffix = name.rpartition(".")
        if suffix in suffixes:
            prefixes.setdefault(prefix, set()).add(suffix)
    g = q.group_size
    out = []
    for prefix in sorted(prefixes):
        if fmt == "compressed-tensors":
            out.append(_check_ct(ckpt, prefix, g))
        else:
            out.append(_check_gptq_awq(ckpt, prefix, fmt, g))
    return out


def _check_gptq_awq(ckpt: Checkpoint, prefix: str, fmt: str, g: int | None) -> QuantLinear:
    t = ckpt.tensors
    lin = QuantLinear(prefix, fmt)
    # TurboMind synthesises GPTQ's zeros (8) when `qzeros` is absent, but has no way to for AWQ
    # (weight_format.py: GPTQFormat.synthesize_zeros exists, AWQFormat's does not).
    required = ("qweight", "qzeros", "scales") if fmt == "awq" else ("qweight", "scales")
    missing = [s for s in required if f"{prefix}.{s}" not in t]
    if missing:
        lin.problems.append(f"{prefix}: missing {', '.join(missing)}")
        return lin
    qw, sc = t[f"{prefix}.qweight"], t[f"{prefix}.scales"]
    qz = t.get(f"{prefix}.qzeros")
    checks = [("qweight", qw, ("I32",)), ("scales", sc, FLOAT_DTYPES)]
    if qz is not None:
        checks.append(("qzeros", qz, ("I32",)))
    for name, info, want in checks:
        if info.dtype not in want:
            lin.problems.append(f"{prefix}.{name}: dtype {info.dtype}, expected {'/'.join(want)}")
    if len(qw.shape) != 2 or len(sc.shape) != 2 or (qz is not None and len(qz.shape) != 2):
        lin.problems.append(f"{prefix}: qweight/qzeros/scales must be 2-D")
        return lin
    if fmt == "gptq":
        k, n = qw.shape[0] * PACK, qw.shape[1]
        if sc.shape[1] != n:
            hint = " (this is the AWQ layout)" if qw.shape[1] * PACK == sc.shape[1] else ""
            lin.problems.append(
                f"{prefix}.qweight {qw.shape} does not match scales {sc.shape} in the GPTQ layout{hint}"
            )
            return lin
    else:
        k, n = qw.shape[0], qw.shape[1] * PACK
        if sc.shape[1] != n:
            hint = " (this is the GPTQ layout)" if qw.shape[1] == sc.shape[1] else ""
            lin.problems.append(
                f"{prefix}.qweight {qw.shape} does not match scales {sc.shape} in the AWQ gemm layout{hint}"
            )
            return lin
    lin.in_features, lin.out_features = k, n
    if g and g > 0:
        if k % g:
            lin.problems.append(f"{prefix}: input size {k} is not a multiple of the group size {g}")
        elif sc.shape[0] != k // g:
            lin.problems.append(
                f"{prefix}.scales has {sc.shape[0]} groups, but input size {k} / group_size {g} = {k // g}"
                " (quantization_config.group_size does not match the tensors)"
            )
    if qz is not None and list(qz.shape) != [sc.shape[0], n // PACK]:
        lin.problems.append(f"{prefix}.qzeros shape {qz.shape}, expected {[sc.shape[0], n // PACK]}")
    gi = t.get(f"{prefix}.g_idx")
    if gi is not None and gi.shape != [k]:
        lin.problems.append(f"{prefix}.g_idx shape {gi.shape}, expected [{k}]")
    return lin


def _check_ct(ckpt: Checkpoint, prefix: str, g: int | None) -> QuantLinear:
    t = ckpt.tensors
    lin = QuantLinear(prefix, "compressed-tensors")
    missing = [s for s in ("weight_packed", "weight_scale") if f"{prefix}.{s}" not in t]
    if missing:
        lin.problems.append(f"{prefix}: missing {', '.join(missing)}")
        return lin
    wp, ws = t[f"{prefix}.weight_packed"], t[f"{prefix}.weight_scale"]
    if wp.dtype != "I32":
        lin.problems.append(f"{prefix}.weight_packed: dtype {wp.dtype}, expected I32")
    if ws.dtype not in FLOAT_DTYPES:
        lin.problems.append(f"{prefix}.weight_scale: dtype {ws.dtype}, expected F16/BF16/F32")
    if len(wp.shape) != 2 or len(ws.shape) != 2:
        lin.problems.append(f"{prefix}: weight_packed/weight_scale must be 2-D")
        return lin
    n, k = wp.shape[0], wp.shape[1] * PACK
    lin.in_features, lin.out_features = k, n
    if ws.shape[0] != n:
        lin.problems.append(f"{prefix}.weight_scale shape {ws.shape} does not match weight_packed {wp.shape}")
    elif g and g > 0:
        if k % g:
            lin.problems.append(f"{prefix}: input size {k} is not a multiple of the group size {g}")
        elif ws.shape[1] != k // g:
            lin.problems.append(
                f"{prefix}.weight_scale has {ws.shape[1]} groups, but input size {k} / group_size {g} ="
                f" {k // g} (quantization_config group_size does not match the tensors)"
            )
    return lin
