"""Reference dequantizers for the convert tests, written from each format's definition and independent of
`specq.pipeline.convert.repack` (which packs; these only unpack, by different code)."""

from __future__ import annotations

import numpy as np


def dequant_gptq_v1(qweight: np.ndarray, qzeros: np.ndarray, scales: np.ndarray, g: int) -> np.ndarray:
    """GPTQ (v1): w[k, n] = (nibble(k % 8) of qweight[k // 8, n] − (nibble(n % 8) of qzeros[k//g, n//8] + 1))
    · scales[k // g, n], computed element by element with python ints on the bit definition."""
    qw = qweight.view(np.uint32).astype(np.int64)
    qz = qzeros.view(np.uint32).astype(np.int64)
    k, n = qw.shape[0] * 8, qw.shape[1]
    kk, nn = np.meshgrid(np.arange(k), np.arange(n), indexing="ij")
    q = (qw[kk // 8, nn] >> (4 * (kk % 8))) & 15
    z = ((qz[kk // g, nn // 8] >> (4 * (nn % 8))) & 15) + 1
    return ((q - z).astype(np.float32) * scales[kk // g, nn].astype(np.float32)).astype(np.float16)


# LMDeploy 0.18 turbomind/weight_format.py `_unpack_awq_gemm`: nibble i of every word, reordered so that
# output column 8c + m comes from nibble ORDER[m].
LMDEPLOY_AWQ_UNPACK_ORDER = [0, 4, 1, 5, 2, 6, 3, 7]


def dequant_awq(qweight: np.ndarray, qzeros: np.ndarray, scales: np.ndarray, g: int) -> np.ndarray:
    """AWQ gemm: w[k, n] = (code(k, n) − zero(k // g, n)) · scales[k // g, n], unpacking as TurboMind does."""

    def unpack(x: np.ndarray) -> np.ndarray:
        u = x.view(np.uint32)
        nibbles = [(u >> np.uint32(4 * i)) & 15 for i in range(8)]
        return np.stack([nibbles[i] for i in LMDEPLOY_AWQ_UNPACK_ORDER], axis=-1).reshape(u.shape[0], -1)

    q = unpack(qweight).astype(np.int64)
    z = unpack(qzeros).astype(np.int64)
    k = q.shape[0]
    rows = np.arange(k) // g
    return ((q - z[rows]).astype(np.float32) * scales[rows].astype(np.float32)).astype(np.float16)
