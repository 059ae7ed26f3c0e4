"""matmul and bmm: every inner product serial in k, never BLAS."""

from __future__ import annotations

import numpy as np

from tapescope.core.ops.reference import bmm as ref_bmm
from tapescope.core.ops.reference import mm
from tapescope.core.optable.registry import OpDef, ShapeError, register


def _mm_shape(shapes, attrs):
    a, b = shapes
    if len(a) < 2 or len(b) != 2 or a[-1] != b[0]:
        raise ShapeError(f"matmul needs [..., M, K] @ [K, N]; got {a} and {b}")
    return a[:-1] + (b[1],)


def _mm_fwd(M, xs, at):
    a, b = xs
    return mm(a.reshape(-1, a.shape[-1]), b).reshape(a.shape[:-1] + (b.shape[1],))


def _mm_bwd(M, g, xs, y, at, needs):
    a, b = xs
    a2 = a.reshape(-1, a.shape[-1])
    g2 = g.reshape(-1, g.shape[-1])
    # ga[r,k] = sum over n (in order) of g[r,n]*b[k,n]; gb[k,n] = sum over rows r (in order)
    # the transposes are views: the native product reads them in place (the numpy spelling
    # copies them itself)
    ga = mm(g2, b.T).reshape(a.shape) if needs[0] else None
    gb = mm(a2.T, g2) if needs[1] else None
    return [ga, gb]


def _mm_sample(rng, dtype):
    def r(*s):
        return rng.uniform(-1, 1, s).astype(dtype)
    return [([r(3, 4), r(4, 5)], {}), ([r(2, 3, 4), r(4, 2)], {}), ([r(1, 6), r(6, 1)], {})]


register(OpDef(
    "matmul", 2, "matmul", "row_local_matmul", _mm_shape, forward=_mm_fwd, backward=_mm_bwd,
    sample=_mm_sample,
    doc="[..., M, K] @ [K, N]: acc = 0; for k: acc = acc + a[r,k]*b[k,n]"))


def _bmm_shape(shapes, attrs):
    a, b = shapes
    if len(a) != 3 or len(b) != 3 or a[0] != b[0] or a[2] != b[1]:
        raise ShapeError(f"bmm needs [B, M, K] @ [B, K, N]; got {a} and {b}")
    return (a[0], a[1], b[2])


def _bmm_bwd(M, g, xs, y, at, needs):
    a, b = xs
    ga = ref_bmm(g, np.ascontiguousarray(b.transpose(0, 2, 1))) if needs[0] else None
    gb = ref_bmm(np.ascontiguousarray(a.transpose(0, 2, 1)), g) if needs[1] else None
    return [ga, gb]


def _bmm_sample(rng, dtype):
    def r(*s):
        return rng.uniform(-1, 1, s).astype(dtype)
    return [([r(2, 3, 4), r(2, 4, 5)], {}), ([r(3, 1, 2), r(3, 2, 2)], {})]


register(OpDef(
    "bmm", 2, "matmul", "none", _bmm_shape, forward=lambda M, xs, at: ref_bmm(xs[0], xs[1]),
    backward=_bmm_bwd, sample=_bmm_sample,
    doc="per batch as matmul; ga = g @ b^T, gb = a^T @ g per batch"))
