"""Why a node introduced error: re-run its reference op under documented variants of the
reference order and name the first that reproduces the candidate's bits (no gpu, no Qt).

``explain(node, xs, cand)`` takes a node provenance marked introduced (its ``"value"``), the
candidate's own inputs ``xs`` and the candidate's output, and tries, in this fixed order, the
variants of ``VARIANTS`` that apply to the node's op (docs/candidates.md lists them):

==================  ==========================================================================
``fma``             multiply-adds contracted to one rounding: ``acc = fma(a, b, acc)`` in a
                    product, ``fma(x, x, acc)`` in a sum of squares
``reciprocal``      ``x / y`` computed as ``x * (1 / y)`` (softmax, mean, div, rms_norm, ...);
                    a norm's ``x * (1/sqrt(v))`` as ``x / sqrt(v)`` or a once-rounded rsqrt
``libm``            the platform's transcendentals (numpy's, the C library's) instead of
                    refmath; PyTorch's CPU kernels written out (``core.explain_aten``:
                    SLEEF's exp in softmax and silu, rms_norm's and silu's backward); MKL
                    VML's sqrt in an optimizer step (``UPDATE_VARIANTS``)
``reassociation``   numpy's pairwise ``np.sum``, a halving tree (a GPU block reduction), BLAS's
                    blocked ``np.matmul`` instead of the serial reference order; tiles,
                    lanes, split-K; layer_norm's Welford / one-pass variance; online softmax
``accumulator``     sums and products accumulated in a wider type (float32 in float64, float64
                    in long double) or a narrower one (float64 in float32), rounded once at the
                    end; in a half episode a float64 accumulator, or the half type itself (every
                    term and every add rounded to float16 / bfloat16, not float32's one rounding);
                    TF32 inputs to a float32 product (a GPU's tensor cores)
``ftz``             subnormal inputs and outputs flushed to (signed) zero
==================  ==========================================================================

The answer (``Cause``) is the first variant equal bit for bit to the candidate (NaN policy of
``core.parity``), or ``unknown`` with the closest variant tried and its max ulp / n_diff.
Before any variant, provenance checks ``signed_zero``: arrays equal but for the sign of zeros
(the reference's sums start at +0.0) are ``signed-zero``, read from the diff alone.

Each variant is the reference formula of the op (``core.ops``, docs/reference-order.md) with ONE
primitive swapped: ``Prims`` holds the primitives (sum, division, product, math namespace) and
``FORMULAS`` writes the ops that use them; ``ftz`` and ``libm`` apply to every op (``libm`` to the
transcendental ones, through the op table's own forward). A test holds every formula with the
reference primitives to the op table's forward, bit for bit.

A half episode (float16, bfloat16; ``core.precision``) runs every variant as the tape runs the
reference: on the inputs widened to float32, rounded once to the half type at the end; only the
half accumulator variant rounds to the half type inside the loop.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from tapescope.core import mathlib, precision
from tapescope.core.explain_aten import (
    ATEN_BACKWARD,
    ATEN_FORWARD,
    aten_moments,
    aten_sum,
    mkl_col_gemv_rows,
    mkl_few,
    mkl_gemv,
    mkl_gemv_amd,
    mkl_row_gemv,
    mkl_sgemm,
    mkl_sgemm_amd,
    mkl_sgemm_wide,
)
from tapescope.core.explain_prims import (
    _LIBC_MATH,
    _cascade_reduce,
    _fold_lanes,
    _round_odd_add,
    _split,
    _two_sum,
    fma,
)
from tapescope.core.ops.reference import mm, reduced_axes, serial_sum
from tapescope.core.optable.registry import REGISTRY
from tapescope.core.parity import compare_arrays

__all__ = ["CAUSES", "SIGNED_ZERO", "Cause", "FORMULAS", "Prims", "VARIANTS", "Variant",
           "cause_text", "closer", "distance", "explain", "explain_grad", "fma",
           "reference_prims", "signed_zero", "variants_for"]

CAUSES = ("fma", "reciprocal", "libm", "reassociation", "accumulator", "ftz")
# not a variant: the arrays are equal but for the sign of some zeros (checked before the
# variants, from the diff alone). The reference's sums start at +0.0, so +0.0 + -0.0 makes
# +0.0 where an order that never adds to +0.0 (PyTorch's autograd) keeps -0.0
SIGNED_ZERO = "signed-zero"


# ---- exact multiply-add (numpy has none) -------------------------------------------------------


# ---- primitives and their variants -------------------------------------------------------------
def _axes_last(x: np.ndarray, axis: Any) -> tuple[np.ndarray, tuple[int, ...]]:
    """x with the reduced axes moved last and flattened into one: [kept..., R]."""
    nd = x.ndim
    axes = reduced_axes(axis, nd)
    keep = [a for a in range(nd) if a not in axes]
    moved = np.transpose(x, tuple(keep) + axes)
    kshape = tuple(x.shape[a] for a in keep)
    return np.ascontiguousarray(moved).reshape(kshape + (-1,)), axes


def _finish(r: np.ndarray, x: np.ndarray, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
    if keepdims:
        r = r.reshape(tuple(1 if a in axes else x.shape[a] for a in range(x.ndim)))
    return np.asarray(r, dtype=x.dtype)


def _sum_pairwise(x: np.ndarray, axis: Any = None, keepdims: bool = False) -> np.ndarray:
    """numpy's np.sum: pairwise (blocks of 8, unrolled) along a contiguous axis."""
    x = np.asarray(x)
    f, axes = _axes_last(x, axis)
    return _finish(np.add.reduce(f, axis=-1), x, axes, keepdims)


def _sum_tree(x: np.ndarray, axis: Any = None, keepdims: bool = False) -> np.ndarray:
    """A halving tree (a GPU block reduction): pad to a power of two with +0, then
    ``s[i] = s[i] + s[i + n/2]`` until one remains."""
    x = np.asarray(x)
    f, axes = _axes_last(x, axis)
    n = f.shape[-1]
    p = 1
    while p < n:
        p *= 2
    if p != n:
        f = np.concatenate([f, np.zeros(f.shape[:-1] + (p - n,), dtype=f.dtype)], axis=-1)
    while f.shape[-1] > 1:
        h = f.shape[-1] // 2
        f = f[..., :h] + f[..., h:]
    r = f[..., 0] if n else np.zeros(f.shape[:-1], dtype=x.dtype)
    return _finish(r + x.dtype.type(0), x, axes, keepdims)


def _lanes_reduce(f: np.ndarray, w: int, step: Callable, tree: bool) -> np.ndarray:
    """``w`` partial sums along the last axis of ``f`` (SIMD lanes: lane ``l`` takes elements
    ``l, l + w, ...``, ``acc = step(acc, x)``), then the lanes added in sequence or as a
    halving tree. Zero padding adds exact zeros."""
    n = f.shape[-1]
    nn = -(-n // w) * w
    if nn != n:
        f = np.concatenate([f, np.zeros(f.shape[:-1] + (nn - n,), dtype=f.dtype)], axis=-1)
    P = f.reshape(f.shape[:-1] + (nn // w, w))
    acc = np.zeros(f.shape[:-1] + (w,), dtype=f.dtype)
    for s in range(nn // w):
        acc = step(acc, P[..., s, :])
    return _fold_lanes(acc, w, tree)


def _sum_cascade(x: np.ndarray, axis: Any = None, keepdims: bool = False) -> np.ndarray:
    """``_cascade_reduce`` over the reduced axes (flattened row-major, as ``serial_sum``)."""
    x = np.asarray(x)
    f, axes = _axes_last(x, axis)
    return _finish(_cascade_reduce(f), x, axes, keepdims)


def _sum_lanes(w: int, tree: bool) -> Callable:
    """A vectorised sum: ``w`` lanes, serial in each, then added (``_lanes_reduce``)."""
    def s(x: np.ndarray, axis: Any = None, keepdims: bool = False) -> np.ndarray:
        x = np.asarray(x)
        f, axes = _axes_last(x, axis)
        return _finish(_lanes_reduce(f, w, np.add, tree), x, axes, keepdims)
    return s


def _sumsq_lanes(w: int, use_fma: bool, tree: bool) -> Callable:
    """A vectorised sum of squares: ``w`` lanes of ``acc + x * x`` (or ``fma(x, x, acc)``)."""
    def step(acc: np.ndarray, v: np.ndarray) -> np.ndarray:
        return fma(v, v, acc) if use_fma else acc + v * v

    def s(x: np.ndarray, axis: Any = None, keepdims: bool = False) -> np.ndarray:
        x = np.asarray(x)
        f, axes = _axes_last(x, axis)
        return _finish(_lanes_reduce(f, w, step, tree), x, axes, keepdims)
    return s


def _acc_type(dt: np.dtype, wider: bool) -> Any:
    if wider:
        return np.float64 if dt == np.float32 else np.longdouble
    return np.float32 if dt == np.float64 else None


def _sum_acc(wider: bool, to: Any = None) -> Callable:
    """serial sum in a wider / narrower accumulator (``to``: that type, else ``_acc_type``);
    a half ``to`` rounds every term and every add to it (numpy's float16 and ml_dtypes'
    bfloat16 round each + to nearest even)."""
    def s(x: np.ndarray, axis: Any = None, keepdims: bool = False) -> np.ndarray:
        x = np.asarray(x)
        at = _acc_type(x.dtype, wider) if to is None else np.dtype(to)
        f, axes = _axes_last(x, axis)
        acc = np.zeros(f.shape[:-1], dtype=at)
        for k in range(f.shape[-1]):  # serial, in the accumulator's type
            acc = acc + f[..., k].astype(at)
        return _finish(acc.astype(x.dtype), x, axes, keepdims)
    return s


def _sumsq_fma(x: np.ndarray, axis: Any = None, keepdims: bool = False) -> np.ndarray:
    """serial sum of x * x with each step ``acc = fma(x, x, acc)``."""
    x = np.asarray(x)
    f, axes = _axes_last(x, axis)
    acc = np.zeros(f.shape[:-1], dtype=x.dtype)
    for k in range(f.shape[-1]):
        acc = fma(f[..., k], f[..., k], acc)
    return _finish(acc, x, axes, keepdims)


def _sumsq_ref(x: np.ndarray, axis: Any = None, keepdims: bool = False) -> np.ndarray:
    return serial_sum(x * x, axis, keepdims)


def _mm_fma(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``acc = fma(a[:, k], b[k, :], acc)`` for k in order (``fma``'s bits), its operands
    split once (float64: Veltkamp halves; float32: exact float64 products) instead of per
    step; a chain that leaves the finite range is redone by ``fma`` itself."""
    dt = np.result_type(a, b)
    m, n = a.shape[0], b.shape[1]
    if dt not in (np.float64, np.float32) or not (np.isfinite(a).all() and np.isfinite(b).all()):
        return _mm_fma_plain(a, b)
    with np.errstate(all="ignore"):
        if dt == np.float32:
            a64, b64 = a.astype(np.float64), b.astype(np.float64)
            acc = np.zeros((m, n), dtype=np.float32)
            for k in range(a.shape[1]):
                p = a64[:, k, None] * b64[None, k, :]  # exact: 24 + 24 bits
                acc = _round_odd_add(p, acc.astype(np.float64)).astype(np.float32)
        else:
            a64, b64 = a.astype(np.float64), b.astype(np.float64)
            ah, al = _split(a64)
            bh, bl = _split(b64)
            acc = np.zeros((m, n), dtype=np.float64)
            for k in range(a.shape[1]):
                x, y = a64[:, k, None], b64[None, k, :]
                xh, xl, yh, yl = ah[:, k, None], al[:, k, None], bh[None, k, :], bl[None, k, :]
                uh = x * y
                ul = ((xh * yh - uh) + xh * yl + xl * yh) + xl * yl
                th, tl = _two_sum(acc, ul)
                vh, vl = _two_sum(uh, th)
                acc = vh + _round_odd_add(tl, vl)
        if not np.isfinite(acc).all():
            return _mm_fma_plain(a, b)
    return acc


def _mm_fma_plain(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    acc = np.zeros((a.shape[0], b.shape[1]), dtype=np.result_type(a, b))
    for k in range(a.shape[1]):
        acc = fma(a[:, k, None], b[None, k, :], acc)
    return acc


def _mm_blas(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.matmul(a, b)


# the last contracted products (a search tries the plain fma chain and several tilings of one
# product, a gradient's rule both of its products per try: each reuses them). Keyed by the
# operands' bytes: equal inputs, equal product. At most _FMA_CACHE_BYTES held, oldest out
_FMA_CACHE: dict[tuple, np.ndarray] = {}
_FMA_CACHE_BYTES = 64 << 20


def _mm_fma_cached(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    key = (a.shape, b.shape, a.dtype.str, b.dtype.str, hash(a.tobytes()), hash(b.tobytes()))
    got = _FMA_CACHE.get(key)
    if got is None:
        got = _mm_fma(a, b)
        _FMA_CACHE[key] = got
        while _FMA_CACHE and sum(v.nbytes for v in _FMA_CACHE.values()) > _FMA_CACHE_BYTES:
            _FMA_CACHE.pop(next(iter(_FMA_CACHE)))
    return got.copy()


def _mm_lanes(w: int, use_fma: bool, tree: bool) -> Callable:
    """A product whose k-loop keeps ``w`` partial sums (SIMD lanes along k, as a dot-product
    kernel over a k-contiguous operand has): lane ``l`` accumulates ``k = l, l + w, ...``
    serially (``acc = fma(a, b, acc)`` with ``use_fma``), then the lanes are added in
    sequence (``((l0 + l1) + l2) + ...``) or as a halving tree (a horizontal reduction)."""
    def m(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        dt = np.result_type(a, b)
        rows, k = a.shape
        n = b.shape[1]
        kk = -(-k // w) * w
        ap = np.zeros((rows, kk), dtype=dt)
        ap[:, :k] = a
        bp = np.zeros((kk, n), dtype=dt)
        bp[:k] = b  # zero padding adds exact zeros
        A = ap.reshape(rows, kk // w, w)
        B = np.transpose(bp.reshape(kk // w, w, n), (0, 2, 1))  # [step, n, lane]
        acc = np.zeros((rows, n, w), dtype=dt)
        for s in range(kk // w):
            x, y = A[:, s, None, :], B[s][None]
            acc = fma(x, y, acc) if use_fma else acc + x * y
        return _fold_lanes(acc, w, tree)
    return m


def _mm_tiles(t: int, edge: Callable) -> Callable:
    """A blocked BLAS micro-kernel: the output's full tiles of ``t`` columns computed by a
    contracted serial k-loop (``fma``), the remaining edge columns by another kernel
    (``edge``: serial without fma, or 2 k-lanes). Measured: MKL 2024.2's dgemm under PyTorch
    2.13 on an AVX-512 CPU is this with t = 12 (edge serial for a row-major B, 2 k-lanes for a
    transposed one)."""
    def m(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        n = b.shape[1]
        c = (n // t) * t
        out = np.empty((a.shape[0], n), dtype=np.result_type(a, b))
        if c:  # the contracted chain is column by column: the whole product's columns,
            # shared by every tiling and the plain fma variant (one chain per search)
            out[:, :c] = _mm_fma_cached(a, b)[:, :c]
        if c < n:
            out[:, c:] = edge(a, np.ascontiguousarray(b[:, c:]))
        return out
    return m


def _mm_acc(wider: bool, to: Any = None) -> Callable:
    """serial product in a wider / narrower accumulator (as ``_sum_acc``; a half ``to`` rounds
    each product and each add to it)."""
    def m(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        at = _acc_type(a.dtype, wider) if to is None else np.dtype(to)
        a2, b2 = a.astype(at), b.astype(at)
        acc = np.zeros((a.shape[0], b.shape[1]), dtype=at)
        for k in range(a.shape[1]):
            acc = acc + a2[:, k, None] * b2[None, k, :]
        return acc.astype(a.dtype)
    return m


def _mm_tree(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """products summed over k by the halving tree."""
    return _sum_tree(a[:, :, None] * b[None, :, :], axis=1)


def _div_ref(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a / b


def _div_recip(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    b = np.asarray(b)
    return a * (np.asarray(b.dtype.type(1)) / b)


def _mm_splitk(slices: int, use_fma: bool) -> Callable:
    """split-K (cuBLAS / CUTLASS): k cut into ``slices`` contiguous slices of ceil(k/S), each
    summed serially from zero (``acc = fma(a, b, acc)`` with ``use_fma``), then the slices'
    partial products added in sequence (``((p0 + p1) + p2) + ...``, the split-K reduction).
    A k shorter than 2 S has no such split here (ValueError: skipped without a try)."""
    def m(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        k = a.shape[1]
        if k < 2 * slices:
            raise ValueError(f"split-K by {slices} needs k >= {2 * slices}")
        step = -(-k // slices)
        acc = None
        for k0 in range(0, k, step):
            sa = np.ascontiguousarray(a[:, k0:k0 + step])
            sb = np.ascontiguousarray(b[k0:k0 + step])
            part = _mm_fma(sa, sb) if use_fma else mm(sa, sb)
            acc = part if acc is None else acc + part
        return acc
    return m


def tf32(x: np.ndarray) -> np.ndarray:
    """float32 rounded to TF32 (a 10-bit mantissa): round to nearest even on the 13 dropped
    bits; infinities and NaNs kept (an overflowing round gives infinity, as the hardware)."""
    x = np.asarray(x, dtype=np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    r = ((u + 0xFFF + ((u >> 13) & 1)) & ~np.uint64(0x1FFF)).astype(np.uint32)
    return np.where(np.isfinite(x), r.view(np.float32), x)


def _mm_tf32(use_fma: bool) -> Callable:
    """A GPU product on TF32 tensor cores: both operands rounded to TF32 (``tf32``), the
    products (exact in float32) accumulated serially in float32 (with fma or without);
    float32 data only (ValueError otherwise: skipped)."""
    def m(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if np.result_type(a, b) != np.float32:
            raise ValueError("TF32 inputs apply to float32 data only")
        ta, tb = tf32(a), tf32(b)
        return _mm_fma_cached(ta, tb) if use_fma else mm(ta, tb)
    return m


def _var_two_pass(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """layer_norm's reference statistics over the last axis: ``mu = serial_sum(x) / n``,
    ``var = serial_sum((x - mu)^2) / n`` (two passes)."""
    n = x.dtype.type(x.shape[-1])
    mu = serial_sum(x, -1, keepdims=True) / n
    d = x - mu
    return mu, serial_sum(d * d, -1, keepdims=True) / n


def _var_welford(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Welford's single pass: ``delta = x - mean; mean += delta / k; m2 += delta * (x -
    mean)`` for k = 1..n in order, ``var = m2 / n`` (PyTorch's and cuDNN's norm kernels)."""
    mean = np.zeros(x.shape[:-1] + (1,), dtype=x.dtype)
    m2 = np.zeros_like(mean)
    for k in range(x.shape[-1]):
        v = x[..., k:k + 1]
        delta = v - mean
        mean = mean + delta / x.dtype.type(k + 1)
        m2 = m2 + delta * (v - mean)
    return mean, m2 / x.dtype.type(x.shape[-1])


def _var_moments(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One pass of both moments: ``var = max(sum(x^2) / n - mean^2, 0)`` (serial sums)."""
    n = x.dtype.type(x.shape[-1])
    mu = serial_sum(x, -1, keepdims=True) / n
    ex2 = serial_sum(x * x, -1, keepdims=True) / n
    return mu, np.maximum(ex2 - mu * mu, x.dtype.type(0))


def _rnorm_ref(x: np.ndarray, v: np.ndarray) -> np.ndarray:
    """The reference's normalisation: ``x * (1 / sqrt(v))`` (two roundings, then the product)."""
    return x * (np.asarray(x.dtype.type(1), dtype=x.dtype) / np.sqrt(v))


def _rnorm_div(x: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``x / sqrt(v)``: one division instead of the reciprocal and the product."""
    return x / np.sqrt(v)


def _rnorm_rsqrt(x: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``x * rsqrt(v)`` with rsqrt rounded once (computed in a wider type: float64 for
    float32, long double for float64), as a hardware / library rsqrt that is exact. Where
    the wide result lies so near the midpoint of two results that its own error could put it
    on the wrong side (rounding twice: ~1 float64 in 3,000 from an x87 long double), the side
    is settled exactly (``m**2 * v < 1``, in fractions: no ties, m having one bit more)."""
    wt = np.float64 if x.dtype == np.float32 else np.longdouble
    with np.errstate(all="ignore"):  # v <= 0: inf and NaN, as rsqrt gives them
        rw = wt(1) / np.sqrt(v.astype(wt))
        r = rw.astype(x.dtype)
        lo = np.where(rw.astype(wt) >= r.astype(wt), r, np.nextafter(r, x.dtype.type(-np.inf)))
        hi = np.nextafter(lo, x.dtype.type(np.inf))
        mid = (lo.astype(wt) + hi.astype(wt)) / 2
        # the wide result is within ~1.5 of its own ulps of the exact one: 4 is the margin
        near = np.abs(rw - mid) <= np.abs(mid) * (4 * np.finfo(wt).eps)
    if near.any():
        from fractions import Fraction

        flat_r, flat_lo, flat_hi, flat_v = r.reshape(-1), lo.reshape(-1), hi.reshape(-1), \
            v.reshape(-1)
        for i in np.flatnonzero(near.reshape(-1)):
            m = (Fraction(float(flat_lo[i])) + Fraction(float(flat_hi[i]))) / 2
            flat_r[i] = flat_hi[i] if m * m * Fraction(float(flat_v[i])) < 1 else flat_lo[i]
    return x * r


def _softmax_online(bc: int) -> Callable:
    """Online (flash) softmax with blocks of ``bc`` along the axis: per block the running max
    ``m' = max(m, max(block))`` and the running sum ``l' = l * exp(m - m') + sum(exp(block -
    m'))`` (the block serially), as FlashAttention computes it; then ``exp(x - m) / l``. A row
    no longer than one block is the reference (ValueError: skipped without a try)."""
    def f(xs: Sequence[np.ndarray], at: dict) -> np.ndarray:
        M = mathlib.get("refmath")
        x = np.asarray(xs[0])
        axis = at.get("axis", -1)
        xm = np.moveaxis(x, axis, -1)
        n = xm.shape[-1]
        if n <= bc:
            raise ValueError(f"a row of {n} is one block of {bc}")
        m = np.full(xm.shape[:-1] + (1,), -np.inf, dtype=x.dtype)
        s = np.zeros_like(m)
        for j in range(0, n, bc):
            blk = xm[..., j:j + bc]
            mn = np.maximum(m, np.max(blk, axis=-1, keepdims=True))
            s = s * M.exp(m - mn) + serial_sum(M.exp(blk - mn), -1, keepdims=True)
            m = mn
        return np.moveaxis(M.exp(xm - m) / s, -1, axis)
    return f


@dataclass(frozen=True)
class Prims:
    """The primitives a reference formula is written in; the reference's are serial and exact."""

    sum: Callable = serial_sum  # (x, axis, keepdims)
    sumsq: Callable = _sumsq_ref  # sum of x * x (rms_norm)
    div: Callable = _div_ref  # x / y
    mm: Callable = mm  # 2-D product
    conv: Callable | None = None  # conv2d computed otherwise than im2col + ``mm`` (None: that)
    var: Callable = _var_two_pass  # layer_norm's (mean, variance) over the last axis
    rnorm: Callable = _rnorm_ref  # x normalised by a variance: x * (1 / sqrt(v))
    M: Any = None  # the math namespace (None: refmath)

    def math(self) -> Any:
        return self.M if self.M is not None else mathlib.get("refmath")


def reference_prims() -> Prims:
    """The reference order's primitives."""
    return Prims()


# ---- the ops written in the primitives ---------------------------------------------------------
def _mean(P: Prims, xs: Sequence[np.ndarray], at: dict) -> np.ndarray:
    from tapescope.core.ops.reduce import count

    x = xs[0]
    return P.div(P.sum(x, at.get("axis"), at.get("keepdims", False)),
                 x.dtype.type(count(x.shape, at)))


def _softmax(P: Prims, xs: Sequence[np.ndarray], at: dict) -> np.ndarray:
    x, axis = xs[0], at.get("axis", -1)
    m = np.max(x, axis=axis, keepdims=True)
    e = P.math().exp(x - m)
    return P.div(e, P.sum(e, axis, keepdims=True))


def _rms_norm(P: Prims, xs: Sequence[np.ndarray], at: dict) -> np.ndarray:
    x, gamma = xs
    one = x.dtype.type(1)
    ms = P.div(P.sumsq(x, -1, keepdims=True), x.dtype.type(x.shape[-1]))
    if P.rnorm is _rnorm_ref:  # the reference: r = 1 / sqrt(.) through P.div
        r = P.div(np.asarray(one, dtype=x.dtype), np.sqrt(ms + x.dtype.type(at["eps"])))
        return (x * r) * gamma
    return P.rnorm(x, ms + x.dtype.type(at["eps"])) * gamma


def _layer_norm(P: Prims, xs: Sequence[np.ndarray], at: dict) -> np.ndarray:
    x, gamma = xs
    mu, var = P.var(x)
    return P.rnorm(x - mu, var + x.dtype.type(at.get("eps", 1e-5))) * gamma


def _matmul(P: Prims, xs: Sequence[np.ndarray], at: dict) -> np.ndarray:
    a, b = xs
    return P.mm(a.reshape(-1, a.shape[-1]), b).reshape(a.shape[:-1] + (b.shape[1],))


def _bmm(P: Prims, xs: Sequence[np.ndarray], at: dict) -> np.ndarray:
    a, b = xs
    if a.shape[0] == 0:
        return np.zeros((0, a.shape[1], b.shape[2]), dtype=a.dtype)
    return np.stack([P.mm(a[i], b[i]) for i in range(a.shape[0])])


def _cross_entropy(P: Prims, xs: Sequence[np.ndarray], at: dict) -> np.ndarray:
    from tapescope.core.ops.rowwise import _ce_parts

    M = P.math()
    z, e, _, ti = _ce_parts(M, xs[0], xs[1])
    s = P.sum(e, -1, keepdims=True)
    nll = M.log(s[:, 0]) - z[np.arange(len(ti)), ti]
    return P.div(P.sum(nll), z.dtype.type(len(ti)))


def _conv2d(P: Prims, xs: Sequence[np.ndarray], at: dict) -> np.ndarray:
    """conv2d as im2col + product (the reference's own order, core.ops.nn.conv_nd): per image
    and group, ``weight [M/G, C/G*kh*kw] @ columns [C/G*kh*kw, pixels]`` with ``P.mm``, as
    PyTorch's CPU convolution without oneDNN (slow_conv2d: unfold, then one gemm per image).
    conv3d the same with a depth axis (its variants are the product's only)."""
    from tapescope.core.ops.nn import _conv_geom, conv_nd

    if P.conv is not None:
        return P.conv(xs, at)
    st, padw, dil, g = _conv_geom(at, np.ndim(xs[0]) - 2)

    def per_image(A: np.ndarray, B: np.ndarray) -> np.ndarray:
        # A: [1, G, M/G, K] weights, B: [N, G, K, pixels] columns
        return np.stack([np.stack([P.mm(np.ascontiguousarray(A[0, j]),
                                        np.ascontiguousarray(B[i, j]))
                                   for j in range(B.shape[1])]) for i in range(B.shape[0])])

    return conv_nd(xs[0], xs[1], st, padw, dil, g, matmul=per_image)


def _conv_direct(block: int, bias: str | None = None) -> Callable:
    """A direct convolution in oneDNN's order: per output element, the taps in (kh, kw,
    channel) order with every multiply-add contracted (``fma``), the input channels in blocks
    of ``block`` (0: one block) whose partial sums are added in sequence. Measured: PyTorch
    2.13's float32 CPU conv2d (oneDNN 3.12, AVX-512) is this with 16-channel blocks (up to 32
    channels; longer channel loops are blocked otherwise, not reproduced).

    ``bias`` (a third input, the conv's bias; a capture's ``aten.convolution``): ``"first"``,
    the sum starts from the bias and each block's partial is added to it in order (measured:
    3x3 convolutions of up to 40 channels); ``"start"``, the first block's ``fma`` chain starts
    from the bias (measured: 1x1 convolutions); None, no bias."""
    def conv(xs: Sequence[np.ndarray], at: dict) -> np.ndarray:
        from tapescope.core.ops.nn import _conv_geom, im2col

        x, w = (np.asarray(a) for a in xs[:2])
        bv = None
        if bias is not None:
            if len(xs) < 3 or xs[2] is None:
                raise ValueError("this order is written for a convolution with a bias")
            bv = np.asarray(xs[2]).reshape(-1, 1)
        st, padw, dil, g = _conv_geom(at)
        if g != 1:
            raise ValueError("the direct-conv order is written for group = 1")
        n, c = x.shape[:2]
        m, _, kh, kw = w.shape
        cols, outs = im2col(x, (kh, kw), st, dil, padw, 1)
        cols = cols[:, 0]  # [N, C*kh*kw, pixels], rows in (c, kh, kw) order
        idx = np.arange(c * kh * kw).reshape(c, kh, kw)
        wm = w.reshape(m, -1)
        b = block or c
        out = []
        for i in range(n):
            acc = None if bv is None or bias != "first" else \
                np.broadcast_to(bv, (m, cols.shape[-1])).astype(np.result_type(x, w))
            for c0 in range(0, c, b):
                perm = idx[c0:c0 + b].transpose(1, 2, 0).reshape(-1)  # (kh, kw, channel)
                if bias == "start" and c0 == 0:
                    a, bb = wm[:, perm], cols[i][perm]
                    part = np.broadcast_to(bv, (m, cols.shape[-1])).astype(np.result_type(a, bb))
                    for k in range(a.shape[1]):
                        part = fma(a[:, k:k + 1], bb[k:k + 1, :], part)
                else:
                    part = _mm_fma_cached(wm[:, perm], cols[i][perm])
                acc = part if acc is None else acc + part
            out.append(acc)
        return np.stack(out).reshape((n, m) + tuple(outs))
    return conv


# Winograd F(2,3) (Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks", 2016):
# Y = A^T [ sum_c (G g_c G^T) * (B^T d_c B) ] A, 2x2 outputs from 4x4 input tiles
_WG_BT = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], dtype=np.float64)
_WG_G = np.array([[1, 0, 0], [.5, .5, .5], [.5, -.5, .5], [0, 0, 1]], dtype=np.float64)
_WG_AT = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], dtype=np.float64)


def _wg_lin(L: np.ndarray, X: np.ndarray, axis: int) -> np.ndarray:
    """``L @ X`` along ``axis``: each row's terms in index order, zero coefficients skipped,
    +-1 as a plain add / subtract (the transforms as the paper writes them out)."""
    X = np.moveaxis(X, axis, 0)
    rows = []
    for i in range(L.shape[0]):
        acc = None
        for k in range(L.shape[1]):
            c = L[i, k]
            if c == 0:
                continue
            t = X[k] if c == 1 else X[k] * X.dtype.type(c)
            if acc is None:
                acc = t if c != -1 else -X[k]
            else:
                acc = acc + t if c != -1 else acc - X[k]
        rows.append(acc)
    return np.moveaxis(np.stack(rows), 0, axis)


def _conv_winograd(xs: Sequence[np.ndarray], at: dict) -> np.ndarray:
    """conv2d by Winograd F(2,3) in the data's type: per 4x4 input tile (stride 2) and channel
    ``V = B^T d B`` and per filter ``U = G g G^T`` (each: the rows, then the columns), ``M =
    U * V`` summed over the channels in order, ``Y = A^T M A``; 3x3 kernels, stride 1,
    dilation 1, group 1 only (ValueError otherwise: skipped without a try). cuDNN picks it for
    such convolutions on the GPU."""
    from tapescope.core.ops.nn import _conv_geom

    x, w = (np.asarray(a) for a in xs)
    st, padw, dil, g = _conv_geom(at)
    if w.shape[2:] != (3, 3) or tuple(st) != (1, 1) or tuple(dil) != (1, 1) or g != 1:
        raise ValueError("Winograd F(2,3) is for 3x3, stride-1, undilated, ungrouped conv2d")
    dt = np.result_type(x, w)
    xp = np.pad(x, ((0, 0), (0, 0), tuple(padw[0]), tuple(padw[1])))
    H, W = xp.shape[2] - 2, xp.shape[3] - 2
    if H < 1 or W < 1:
        raise ValueError("no output")
    th, tw = -(-H // 2), -(-W // 2)
    xp = np.pad(xp, ((0, 0), (0, 0), (0, 2 * th + 2 - xp.shape[2]),
                     (0, 2 * tw + 2 - xp.shape[3])))
    ih = 2 * np.arange(th)[:, None] + np.arange(4)
    iw = 2 * np.arange(tw)[:, None] + np.arange(4)
    d = xp[:, :, ih[:, None, :, None], iw[None, :, None, :]]  # [N, C, th, tw, 4, 4]
    V = _wg_lin(_WG_BT, _wg_lin(_WG_BT, d, -2), -1)
    U = _wg_lin(_WG_G, _wg_lin(_WG_G, w.astype(dt), -2), -1)  # [M, C, 4, 4]
    acc = None
    for c in range(x.shape[1]):
        t = U[None, :, c, None, None] * V[:, None, c]  # [N, M, th, tw, 4, 4]
        acc = t if acc is None else acc + t
    Y = _wg_lin(_WG_AT, _wg_lin(_WG_AT, acc, -2), -1)  # [N, M, th, tw, 2, 2]
    n, m = x.shape[0], w.shape[0]
    return Y.transpose(0, 1, 2, 4, 3, 5).reshape(n, m, 2 * th, 2 * tw)[:, :, :H, :W]


# op -> (formula, the primitives it uses): which variants apply
FORMULAS: dict[str, tuple[Callable, frozenset[str]]] = {
    "sum": (lambda P, xs, at: P.sum(xs[0], at.get("axis"), at.get("keepdims", False)),
            frozenset({"sum"})),
    "mean": (_mean, frozenset({"sum", "div"})),
    "div": (lambda P, xs, at: P.div(xs[0], xs[1]), frozenset({"div"})),
    "softmax": (_softmax, frozenset({"sum", "div", "M"})),
    "rms_norm": (_rms_norm, frozenset({"sumsq", "div", "rnorm"})),
    "layer_norm": (_layer_norm, frozenset({"var", "rnorm"})),
    "matmul": (_matmul, frozenset({"mm"})),
    "bmm": (_bmm, frozenset({"mm"})),
    "conv2d": (_conv2d, frozenset({"mm", "conv"})),
    "conv3d": (_conv2d, frozenset({"mm"})),
    "cross_entropy": (_cross_entropy, frozenset({"sum", "div", "M"})),
}


@dataclass(frozen=True)
class Variant:
    """One departure from the reference order: its cause, what it computes, what it swaps."""

    cause: str
    label: str  # as the report prints it: "x * (1/y)"
    prim: str  # the Prims field it replaces ("" : applies to every op, see ``run``)
    value: Any = None  # the replacement primitive

    def applies(self, op: str) -> bool:
        if self.prim.startswith(("aten:", "op:")):
            return op == self.prim.split(":", 1)[1]
        if self.cause == "ftz":
            return REGISTRY[op].forward is not None
        if self.cause == "libm":
            return REGISTRY[op].transcendental
        f = FORMULAS.get(op)
        return f is not None and self.prim in f[1]

    def run(self, node: Any, xs: Sequence[np.ndarray], dtype: np.dtype) -> np.ndarray:
        """The node's op under this variant on ``xs``, in ``dtype``, shaped as the node."""
        op, at = node.op, dict(node.attrs)
        with np.errstate(all="ignore"):
            if self.cause == "ftz":
                y = _reference(node, [_flush(x) for x in xs], dtype)
                return _flush(y)
            if self.prim == "half_steps":  # no widening: each step rounds to the half type
                try:
                    y = REGISTRY[op].forward(mathlib.get("refmath"),
                                             [np.asarray(x) for x in xs], at)
                except Exception as e:  # noqa: BLE001 - a form numpy cannot run in the half
                    raise ValueError(f"{op} in {np.dtype(dtype).name}: {e}") from None
                return _cast(y, dtype).reshape(node.shape)
            ws = [precision.widen(np.asarray(x)) for x in xs]  # half: computed in float32
            if self.prim.startswith(("aten:", "op:")):
                y = self.value(ws, at)
            elif self.cause == "libm" and node.op not in FORMULAS:
                y = REGISTRY[op].forward(self.value, ws, at)
            else:
                formula = FORMULAS[op][0]
                y = formula(replace(Prims(), **{self.prim: self.value}), ws, at)
        return _cast(y, dtype).reshape(node.shape)


# MKL's vector math library as PyTorch's CPU calls it (ATen's vml.h: ``vm[ds]Sqrt(n, in, out,
# VML_HA | VML_FTZDAZ_OFF | VML_ERRMODE_IGNORE)``): its "high accuracy" sqrt is not correctly
# rounded (measured: 1,260 of 100,000 float64 and ~15,600 of 100,000 float32 elements 1 ulp
# off IEEE sqrt, each where the exact root lies within 0.025 ulp of a rounding midpoint), so
# it is called, not rewritten: from MKL's runtime (libmkl_rt) or the copy PyTorch's CPU
# library links in (found by path; torch is not imported)
_VML_MODE = 0x2 | 0x140000 | 0x100  # VML_HA | VML_FTZDAZ_OFF | VML_ERRMODE_IGNORE
_VML: list = []  # [lib or None] once looked for


def _vml_lib() -> Any:
    import ctypes
    import ctypes.util
    import importlib.util
    import os

    if _VML:
        return _VML[0]
    paths = [ctypes.util.find_library("mkl_rt")]
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        spec = None
    for loc in (spec.submodule_search_locations or []) if spec is not None else []:
        paths.append(os.path.join(loc, "lib", "libtorch_cpu.so"))
    lib = None
    for p in paths:
        if not p or (os.sep in p and not os.path.isfile(p)):
            continue
        try:
            cand = ctypes.CDLL(p)
            if hasattr(cand, "vmdSqrt") and hasattr(cand, "vmsSqrt"):
                lib = cand
                break
        except OSError:
            continue
    _VML.append(lib)
    return lib


def _vml(name: str, x: Any) -> np.ndarray:
    """MKL VML's HA-mode ``vmd<name>`` / ``vms<name>`` on x (float64 / float32); a ValueError
    when no MKL is here (the variant then explains nothing)."""
    import ctypes

    x = np.asarray(x)
    lib = _vml_lib()
    if lib is None or x.dtype not in (np.float64, np.float32):
        raise ValueError("MKL's vector math library is not here")
    src = np.ascontiguousarray(x)
    out = np.empty_like(src)
    f = getattr(lib, ("vmd" if src.dtype == np.float64 else "vms") + name, None)
    if f is None:
        raise ValueError(f"this MKL has no {name}")
    for i in range(0, src.size, 1 << 30):  # MKL_INT is 32-bit
        n = min(src.size - i, 1 << 30)
        f(ctypes.c_int(n), ctypes.c_void_p(src.ctypes.data + i * src.itemsize),
          ctypes.c_void_p(out.ctypes.data + i * src.itemsize), ctypes.c_longlong(_VML_MODE))
    return out.reshape(x.shape)


def vml_sqrt(x: Any) -> np.ndarray:
    """MKL VML's HA-mode square root (PyTorch's CPU ``torch.sqrt``), float64 / float32."""
    return _vml("Sqrt", x)


def vml_tanh(x: Any) -> np.ndarray:
    """MKL VML's HA-mode tanh: PyTorch's CPU ``torch.tanh`` (ATen's vml::vtanh with MKL:
    measured bit for bit, float32 and float64, whole arrays with their tails), called, not
    rewritten, as ``vml_sqrt``."""
    return _vml("Tanh", x)


# the square roots an optimizer step may take (core.optim's Adam and the clipping norm), in the
# order tried: (cause, label, sqrt)
UPDATE_VARIANTS: tuple[tuple[str, str, Callable], ...] = (
    ("libm", "MKL VML's sqrt (HA mode: PyTorch's CPU torch.sqrt)", vml_sqrt),
)


def explain_update(rerun: Callable[[Callable], list], cands: Sequence[Sequence[Any]],
                   raws: Sequence[Any]) -> list[Cause]:
    """The causes of one optimizer step's updates. ``rerun(sqrt)`` recomputes the reference
    step (core.optim's order) with ``sqrt`` for every square root, per parameter ``(w, m, v)``;
    ``cands[i]`` is parameter i's ``(w, m, v)`` after the candidate's step (m, v None for SGD),
    ``raws[i]`` the reference's diff of its first differing part. A variant explains parameter
    i when all its parts equal the candidate's bit for bit; else ``unknown``, with the closest
    variant only when strictly closer than the reference (``closer``)."""
    best: list[tuple | None] = [None] * len(cands)
    found: list[Cause | None] = [None] * len(cands)
    tried = 0
    for cause, label, sq in UPDATE_VARIANTS:
        try:
            with np.errstate(all="ignore"):
                outs = rerun(sq)
        except (ValueError, TypeError, FloatingPointError):
            continue
        tried += 1
        for i, (out, cand) in enumerate(zip(outs, cands, strict=True)):
            if found[i] is not None:
                continue
            ds = [compare_arrays(np.asarray(o), np.asarray(c))
                  for o, c in zip(out, cand, strict=True)
                  if o is not None and c is not None and np.shape(o) == np.shape(c)]
            if ds and all(d.n_diff == 0 for d in ds):
                found[i] = Cause(cause, label)
                continue
            worst = max((d for d in ds if d.n_diff), key=distance, default=None)
            if worst is not None and (best[i] is None or distance(worst) < best[i][0]):
                best[i] = (distance(worst), cause, label, worst)
    out: list[Cause] = []
    for i in range(len(cands)):
        if found[i] is not None:
            out.append(found[i])
        elif best[i] is None or not closer(best[i][3], raws[i]):
            out.append(Cause("unknown", "", tried=tried))
        else:
            _, cause, label, d = best[i]
            out.append(Cause("unknown", label, cause, int(d.max_ulp), int(d.n_diff), tried))
    return out


def _cast(y: Any, dtype: np.dtype) -> np.ndarray:
    """``y`` in ``dtype``; a half dtype rounds the float32 result once (as the tape)."""
    dt = np.dtype(dtype)
    return np.asarray(y).astype(dt) if dt in precision.HALF else np.asarray(y, dtype=dt)


VARIANTS: tuple[Variant, ...] = (
    Variant("fma", "acc = fma(a, b, acc)", "mm", _mm_fma_cached),
    # MKL's own kernels for one to three output columns against a transposed weight (session
    # 24, core/explain_aten.py, measured on an Intel Xeon: nn.Linear(d, 1..3), a batch of one)
    Variant("fma", "MKL's dot-product kernel for one output column or one row (nn.Linear(d, 1), "
            "a batch of one): the first product apart, rows in fours summed in 16-, 8- and "
            "4-wide fma stages, the rest in pairs of 16-lane accumulators, halving folds", "mm",
            mkl_gemv),
    Variant("fma", "MKL's sgemm for 2-3 output columns, rows in pairs: the first two 16-lane "
            "fma accumulators over alternate vectors of k, the second one, halving folds", "mm",
            mkl_few("pairs")),
    Variant("fma", "MKL's sgemm for 2-3 output columns, or 2-15 rows over long k: one 16-lane "
            "fma chain an output, folded by 128-bit quarters in turn, then in pairs", "mm",
            mkl_few("dots")),
    Variant("fma", "MKL's row-vector kernel for one row against a matrix laid out by rows "
            "(attention's p @ v on a one-row query block): k in blocks of eight, pairs of "
            "products fma'd, two terms a block fma'd onto the sum, 16-column vectors", "mm",
            mkl_row_gemv),
    Variant("fma", "MKL's row-vector kernel for one output column of a transposed matrix "
            "(x.t() @ g: nn.Linear(d, 1)'s weight gradient, a bmm's transposed operand): "
            "(g.t() @ x).t(), k in blocks of eight over x's rows, 16-column vectors", "mm",
            mkl_col_gemv_rows),
    # MKL's sgemm past 384 terms on an Intel CPU (sessions 23, 40, 41): k in panels, each an
    # fma chain added in turn; wide outputs past 768 terms in 384-term panels
    Variant("fma", "MKL's sgemm on an Intel CPU: one fma chain an output over k in panels (384 "
            "terms at a time while more than 768 are left, the rest in equal panels), added "
            "in turn", "mm", mkl_sgemm),
    Variant("fma", "MKL's sgemm on an Intel CPU in 384-term panels (past 768 terms: without "
            "AMX from 192 output columns, with AMX from 192 rows and columns, on two threads "
            "for some narrower products): one fma chain an output over each panel, the rest "
            "last, added in turn", "mm", mkl_sgemm_wide),
    # MKL's sgemm as it runs on an AMD CPU (session 31, measured on an AMD EPYC): the table's
    # first variant's chains, but k in panels of at most 192 terms
    Variant("fma", "MKL's sgemm on an AMD CPU: one fma chain an output over k in panels of at "
            "most 192 terms (two halves and the odd term up to 384), added in turn", "mm",
            mkl_sgemm_amd),
    Variant("fma", "acc = fma(x, x, acc)", "sumsq", _sumsq_fma),
    Variant("reciprocal", "x * (1/y)", "div", _div_recip),
    # rms_norm / layer_norm's normalisation (issue 44): the reference's x * (1/sqrt(v)) as one
    # division, or as x * rsqrt(v) with the rsqrt rounded once
    Variant("reciprocal", "x / sqrt(v) (no reciprocal)", "rnorm", _rnorm_div),
    Variant("reciprocal", "x * rsqrt(v) (rsqrt rounded once)", "rnorm", _rnorm_rsqrt),
    Variant("libm", "the platform's (numpy's) transcendentals", "M", mathlib.get("platform")),
    Variant("libm", "the C library's transcendentals", "M", _LIBC_MATH),
    # PyTorch's CPU kernels written out (core/explain_aten.py): SLEEF's vectorised exp with
    # the kernel's own reduction and division (issue 44)
    *(Variant("libm", label, "aten:" + op, fn) for op, (fn, label) in ATEN_FORWARD.items()),
    Variant("libm", UPDATE_VARIANTS[0][1], "aten:sqrt", lambda xs, at: vml_sqrt(xs[0])),
    Variant("libm", "MKL VML's tanh (HA mode: PyTorch's CPU torch.tanh)", "aten:tanh",
            lambda xs, at: vml_tanh(xs[0])),
    Variant("reassociation", "pairwise sum (numpy's np.sum)", "sum", _sum_pairwise),
    Variant("reassociation", "pairwise sum of squares", "sumsq",
            lambda x, axis=None, keepdims=False: _sum_pairwise(x * x, axis, keepdims)),
    Variant("reassociation", "blocked product (BLAS np.matmul)", "mm", _mm_blas),
    # MKL's dot-product kernel as it runs on an AMD CPU (session 31, measured on an AMD EPYC)
    Variant("reassociation", "MKL's dot-product kernel on an AMD CPU (one output column or "
            "row): no FMA, rows in fours summed in 4-lane vectors after a short head, the rest "
            "in pairs of 8- and 4-lane accumulators over 8-term blocks, halving folds", "mm",
            mkl_gemv_amd),
    Variant("reassociation", "halving-tree sum", "sum", _sum_tree),
    Variant("reassociation", "halving-tree sum of squares", "sumsq",
            lambda x, axis=None, keepdims=False: _sum_tree(x * x, axis, keepdims)),
    Variant("reassociation", "halving-tree product", "mm", _mm_tree),
    # layer_norm's variance (issue 44): PyTorch's CPU moments, Welford's single pass,
    # E[x^2] - mean^2
    Variant("reassociation", "PyTorch's CPU layer_norm moments (ATen RowwiseMoments: lane "
            "Welford, chunks of 16 merged by a cascade, AVX2 lanes)", "var", aten_moments),
    Variant("reassociation", "Welford variance (single pass)", "var", _var_welford),
    Variant("reassociation", "variance as E[x^2] - mean^2 (single pass)", "var", _var_moments),
    # online (flash) softmax (issue 44): running max and rescaled running sum per block of Bc
    *(Variant("reassociation", f"online softmax, blocks of {bc} (FlashAttention)",
              "op:softmax", _softmax_online(bc)) for bc in (16, 32, 64, 128)),
    # a direct convolution's tap order (issue 44): oneDNN's (kh, kw, channel), channel blocks
    *(Variant("reassociation", "direct conv: (kh, kw, channel) taps with fma, "
              + (f"{b}-channel blocks added in sequence" if b else "one block") + " (oneDNN)",
              "conv", _conv_direct(b)) for b in (16, 0, 8)),
    # Winograd F(2,3) (issue 44; cuDNN on the GPU): 3x3 stride-1 convolutions only
    Variant("reassociation", "Winograd F(2,3) (4x4 tiles, channels summed in the transformed "
            "domain)", "conv", _conv_winograd),
    # blocked BLAS kernels (issue 44): a micro-kernel's column tiles, then W lanes along k
    *(Variant("reassociation", f"fma on {t}-column tiles, edge columns "
              f"{'serial' if e == 'serial' else 'in 2 k-lanes'} (blocked BLAS)", "mm",
              _mm_tiles(t, mm if e == "serial" else _mm_lanes(2, False, False)))
      for t in (12, 8, 16, 24) for e in ("serial", "lanes")),
    Variant("reassociation", "PyTorch's cascade sum (levels of 16)", "sum", _sum_cascade),
    # vectorised reductions (issue 44): W lanes, each serial, then added. Measured: PyTorch
    # 2.13's CPU rms_norm sums its squares in 4 (float64) / 8 (float32) lanes added in
    # sequence, on rows of 16
    *(Variant("reassociation", f"{w}-lane vector sum, lanes added "
              f"{'as a tree' if tree else 'in sequence'}", "sum", _sum_lanes(w, tree))
      for w in (4, 8, 16, 32, 2) for tree in (False, True)),
    *(Variant("reassociation", f"{w}-lane vector sum of squares{' with fma' if f else ''}, "
              f"lanes added {'as a tree' if tree else 'in sequence'}", "sumsq",
              _sumsq_lanes(w, f, tree))
      for w in (4, 8, 16, 32, 2) for f in (False, True) for tree in (False, True)),
    *(Variant("reassociation", f"{w} partial sums over k{' with fma' if f else ''}, added "
              f"{'as a tree' if tree else 'in sequence'}", "mm", _mm_lanes(w, f, tree))
      for w in (2, 4, 8, 16, 32) for f in (False, True) for tree in (False, True)),
    # split-K (issue 44; cuBLAS / CUTLASS on the GPU): S serial slices of k, added in sequence
    *(Variant("reassociation", f"split-K: {sl} slices of k{' with fma' if f else ''}, added "
              "in sequence", "mm", _mm_splitk(sl, f)) for sl in (2, 4, 8) for f in (True, False)),
    # ATen's CPU sum kernel as a whole, after the plain lane orders it often equals
    # (core/explain_aten.py: its inner / outer paths, longer rows' partial cascades)
    Variant("reassociation", "PyTorch's CPU sum kernel (ATen SumKernel, AVX2 lanes)", "sum",
            aten_sum),
    Variant("reassociation", "PyTorch's CPU sum kernel of squares (ATen SumKernel, AVX2 "
            "lanes)", "sumsq", lambda x, axis=None, keepdims=False: aten_sum(x * x, axis,
                                                                             keepdims)),
    Variant("accumulator", "wider accumulator", "sum", _sum_acc(True)),
    Variant("accumulator", "wider accumulator", "mm", _mm_acc(True)),
    Variant("accumulator", "narrower accumulator (float32)", "sum", _sum_acc(False)),
    Variant("accumulator", "narrower accumulator (float32)", "mm", _mm_acc(False)),
    # TF32 tensor cores (issue 44; GPU, float32 data only): inputs with a 10-bit mantissa
    *(Variant("accumulator", f"TF32 inputs (10-bit mantissa), float32 accumulator"
              f"{' with fma' if f else ''}", "mm", _mm_tf32(f)) for f in (True, False)),
    Variant("ftz", "subnormals flushed to zero", ""),
)


def _in_dtype(v: Variant, dt: np.dtype) -> Variant | None:
    """``v`` as it runs in a tape of dtype ``dt`` (None: not in that dtype). float32 has no
    narrower accumulator here; a half dtype's narrower one is the half type itself (its
    reference accumulates in float32), its wider one float64."""
    if v.cause == "accumulator" and v.label.startswith("TF32"):
        return v if dt == np.float32 else None  # float32 data only
    if v.cause != "accumulator" or "narrower" not in v.label:
        return v
    if dt in precision.HALF:
        return _HALF_ACC[(v.prim, dt)]
    return None if dt == np.float32 else v


# one Variant per (primitive, half dtype): equal to itself wherever variants_for is asked again
_HALF_ACC = {(prim, dt): Variant("accumulator", f"narrower accumulator ({dt.name}, rounded at "
                                 "every add)", prim, make(False, dt))
             for prim, make in (("sum", _sum_acc), ("mm", _mm_acc)) for dt in precision.HALF}


# a half episode's composite op computed with every step in the half type (the op's forward on
# the half inputs themselves, numpy rounding each primitive's result to the half type), where
# the reference keeps float32 intermediates and rounds once: PyTorch's half rope (cos/sin cast
# to the half type), its bfloat16 cross_entropy and float16 log_softmax on the CPU do this
_HALF_STEPS = {dt: Variant("accumulator", f"{dt.name} intermediates (every step rounded to "
                           f"{dt.name})", "half_steps") for dt in precision.HALF}


_FOR: dict[tuple, list] = {}  # (op, dtype, the table's identity) -> variants_for's answer


def variants_for(op: str, dtype: Any = np.float64) -> list[Variant]:
    """The variants that apply to ``op`` in ``dtype``, in the order they are tried (made once
    per op, dtype and table)."""
    dt = np.dtype(dtype)
    key = (op, dt.str if dt.kind != "V" else dt.name, id(VARIANTS))
    got = _FOR.get(key)
    if got is None:
        got = _FOR[key] = _variants_for(op, dt)
    return list(got)


def _variants_for(op: str, dt: np.dtype) -> list[Variant]:
    out = []
    for v in VARIANTS:
        if v.cause == "ftz" and dt in precision.HALF and REGISTRY[op].forward is not None \
                and REGISTRY[op].kind != "leaf":
            out.append(_HALF_STEPS[dt])  # the last accumulator variant, before ftz
        w = _in_dtype(v, dt) if v.applies(op) else None
        if w is not None:
            out.append(w)
    return out


def _flush(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x)
    if x.dtype.kind != "f" and x.dtype not in precision.HALF:  # bfloat16's kind is "V"
        return x
    tiny = precision.finfo(x.dtype).tiny
    return np.where((x != 0) & (np.abs(x) < tiny), np.copysign(x.dtype.type(0), x), x)


def _reference(node: Any, xs: Sequence[np.ndarray], dtype: np.dtype) -> np.ndarray:
    y = REGISTRY[node.op].forward(mathlib.get("refmath"),
                                  [precision.widen(np.asarray(x)) for x in xs], dict(node.attrs))
    return _cast(y, dtype).reshape(node.shape)


@dataclass(frozen=True)
class Cause:
    """Why a node's output left the reference: the first variant that reproduces it, or
    ``unknown`` with the closest variant tried (``closest``; None when none applies)."""

    cause: str  # one of CAUSES or "unknown"
    variant: str  # the matching variant's label ("" when unknown and none was tried)
    closest: str | None = None  # unknown: the closest variant's cause
    max_ulp: int = 0  # unknown: the closest variant's max ulp to the candidate
    n_diff: int = 0  # unknown: ... and its differing elements
    # unknown: how many variants were tried (0: none applies to the op). A closest variant is
    # kept only when it is strictly closer to the candidate than the reference itself is
    # (``closer``): else ``closest`` is None and the cause reads ``unknown`` alone
    tried: int = 0
    # the array's class (core.bounds: "valid reordering" / "outside reordering bound"; "" when
    # not classified), printed after the cause wherever the cause is
    klass: str = ""
    # unknown: why nothing is tried or matches, where that is known (a kernel whose order is
    # not written out, e.g. oneDNN's LSTM layer): said instead of "no variant applies"
    note: str = ""

    def text(self) -> str:
        """``matches the reference with x * (1/y)``, ``unknown (closest: ...)`` or ``unknown``,
        then ``; valid reordering`` / ``; outside reordering bound`` when classified."""
        return self._text() + (f"; {self.klass}" if self.klass else "")

    def _text(self) -> str:
        if self.cause == SIGNED_ZERO:
            return f"equal but for the sign of zero ({self.variant})"
        if self.cause != "unknown":
            return f"matches the reference with {self.variant}"
        if self.closest is None:
            return f"unknown ({self.note})" if self.note else "unknown" if self.tried else \
                "unknown (no variant of the reference order applies to this op)"
        return (f"unknown (closest: {self.closest}, {self.variant}: {self.n_diff} elements, "
                f"max {self.max_ulp} ulp)" + (f"; {self.note}" if self.note else ""))

    def to_json(self) -> dict:
        """``{"cause", "variant"}`` plus ``"closest", "max_ulp", "n_diff"`` when unknown, and
        ``"tried"`` (variants tried) when some were."""
        d = {"cause": self.cause, "variant": self.variant}
        if self.cause == "unknown":
            d.update(closest=self.closest, max_ulp=self.max_ulp, n_diff=self.n_diff)
            if self.tried:
                d["tried"] = self.tried
            if self.note:
                d["note"] = self.note
        if self.klass:
            d["class"] = self.klass
        return d


def signed_zero(diff: Any) -> Cause | None:
    """``signed-zero`` when every differing element of ``diff`` (a ``TensorDiff``) is +0.0
    against -0.0, else None."""
    if diff.n_diff and diff.n_signed_zero == diff.n_diff:
        return Cause(SIGNED_ZERO, "the reference's sums start at +0.0: +0.0 + -0.0 = +0.0")
    return None


def cause_text(d: dict) -> str:
    """``Cause.text`` of a ``Cause.to_json`` dict (as the JSON and the wire carry it)."""
    return Cause(str(d["cause"]), str(d.get("variant", "")), d.get("closest"),
                 int(d.get("max_ulp", 0)), int(d.get("n_diff", 0)),
                 int(d.get("tried", 0)), str(d.get("class", "")),
                 str(d.get("note", ""))).text()


def distance(d: Any) -> tuple[int, int, int]:
    """How far a ``TensorDiff`` is, as variants are ranked: NaN mismatches first, then the
    number of differing elements, then the max ulp (smaller is closer)."""
    return (int(d.n_nan), int(d.n_diff), int(d.max_ulp))


def closer(d: Any, raw: Any) -> bool:
    """A variant's diff ``d`` to the candidate is strictly closer than the reference's own
    diff ``raw``: fewer NaN mismatches, or as many and fewer differing elements, or as many
    and a smaller max ulp. A variant only as far as the reference explains nothing."""
    return raw is None or distance(d) < distance(raw)


# the search's memory (issue 44's cost): per (value or gradient, op or consumers, shapes, dtype,
# attributes) the labels of the variants that last reproduced a candidate there (latest first,
# at most 4), tried first the next time (the next step's same node, another node of the same
# op and shape: a library picks its kernel by op and shape). At most _HINTS_MAX keys,
# forgotten all at once when full
_HINTS: dict[tuple, tuple[str, ...]] = {}
_HINTS_MAX = 4096


def remember(key: tuple, label: str) -> None:
    """``label`` reproduced a candidate at ``key``: first of the (at most 4) labels tried
    first there next time (a key can need two: a product's two gradients of one shape)."""
    if len(_HINTS) >= _HINTS_MAX:
        _HINTS.clear()
    old = _HINTS.get(key, ())
    _HINTS[key] = ((label,) + tuple(x for x in old if x != label))[:4]


def _try(cands: list[tuple[str, str, Callable[[], np.ndarray]]], cand: np.ndarray,
         raw: Any = None, key: tuple | None = None) -> Cause:
    """The first of ``cands`` equal to ``cand`` (the one ``key``'s last search found tried
    first); else ``unknown`` with the closest one, kept only when it is strictly closer than
    ``raw`` (the reference's diff to ``cand``)."""
    best: tuple[Any, ...] | None = None
    tried = 0
    hints = () if key is None else _HINTS.get(key, ())
    if hints:  # the labels that reproduced this key before, latest first; the rest in order
        rank = {lab: i for i, lab in enumerate(hints)}
        cands = sorted(cands, key=lambda c: rank.get(c[1], len(rank)))
    for cause, label, make in cands:
        try:
            y = make()
        except (ValueError, TypeError, FloatingPointError):
            continue  # a variant that cannot run on these inputs explains nothing
        if y.shape != cand.shape:
            continue
        tried += 1
        d = compare_arrays(y, cand)
        if d.n_diff == 0:
            if key is not None:
                remember(key, label)
            return Cause(cause, label)
        far = distance(d)
        if best is None or far < best[0]:
            best = (far, cause, label, d)
    if best is None or not closer(best[3], raw):
        return Cause("unknown", "", tried=tried)
    _, cause, label, d = best
    return Cause("unknown", label, cause, int(d.max_ulp), int(d.n_diff), tried)


def explain(node: Any, xs: Sequence[np.ndarray], cand: np.ndarray, raw: Any = None) -> Cause:
    """The first variant of the reference order (``variants_for``) under which ``node``'s op on
    the candidate's inputs ``xs`` gives the candidate's output ``cand`` bit for bit. ``raw``:
    the reference's own ``TensorDiff`` to ``cand`` (computed here when None): an unknown
    cause names a closest variant only when it is strictly closer than that (``closer``)."""
    dt = np.asarray(cand).dtype
    xs = [np.asarray(x) for x in xs]
    cand = np.asarray(cand)
    if raw is None:
        with np.errstate(all="ignore"):
            raw = compare_arrays(_reference(node, xs, dt), cand)
    key = ("value", node.op, tuple(x.shape for x in xs), dt.str,
           repr(sorted(dict(node.attrs).items())))
    return _try([(v.cause, v.label, lambda v=v: v.run(node, xs, dt))
                 for v in variants_for(node.op, dt)], cand, raw, key)


def _mm_rule(mmf: Callable) -> Callable:
    """matmul's backward rule (core/ops/linalg.py) with its product swapped."""
    def bwd(M: Any, g: np.ndarray, xs: Sequence[np.ndarray], y: Any, at: Any,
            nd: Sequence[bool]) -> list:
        a, b = xs
        a2, g2 = a.reshape(-1, a.shape[-1]), g.reshape(-1, g.shape[-1])
        ga = mmf(g2, np.ascontiguousarray(b.T)).reshape(a.shape) if nd[0] else None
        gb = mmf(np.ascontiguousarray(a2.T), g2) if nd[1] else None
        return [ga, gb]
    return bwd


def _bmm_rule(mmf: Callable) -> Callable:
    def per(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.stack([mmf(a[i], b[i]) for i in range(a.shape[0])])

    def bwd(M: Any, g: np.ndarray, xs: Sequence[np.ndarray], y: Any, at: Any,
            nd: Sequence[bool]) -> list:
        a, b = xs
        ga = per(g, np.ascontiguousarray(b.transpose(0, 2, 1))) if nd[0] else None
        gb = per(np.ascontiguousarray(a.transpose(0, 2, 1)), g) if nd[1] else None
        return [ga, gb]
    return bwd


_GRAD_RULES = {"matmul": _mm_rule, "bmm": _bmm_rule}


def _unbroadcast_with(sumf: Callable) -> Callable:
    """``core.ops.reference.unbroadcast`` with its sum (serial, row-major) swapped."""
    def unb(g: np.ndarray, shape: tuple) -> np.ndarray:
        g = np.asarray(g)
        shape = tuple(shape)
        if g.shape == shape:
            return g
        lead = g.ndim - len(shape)
        axes = list(range(lead)) + [lead + i for i, n in enumerate(shape)
                                    if n == 1 and g.shape[lead + i] != 1]
        return np.asarray(sumf(g, tuple(axes), keepdims=True)).reshape(shape)
    return unb


def _unb_rule(op: str, sumf: Callable) -> Callable:
    """The backward rule of a broadcasting op (core.ops: add, sub, mul; rms_norm's gamma) with
    the reduction of a broadcast gradient (autograd's ``sum_to_size``) in another order."""
    unb = _unbroadcast_with(sumf)
    if op == "rms_norm":
        from tapescope.core.ops.rowwise import _inv_rms

        def rms(M: Any, g: np.ndarray, xs: Sequence[np.ndarray], y: Any, at: Any,
                nd: Sequence[bool]) -> list:
            x, gamma = xs
            gx = REGISTRY["rms_norm"].backward(M, g, xs, y, at, [nd[0], False])[0]
            gg = unb(g * (x * _inv_rms(x, at["eps"])), gamma.shape) if nd[1] else None
            return [gx, gg]
        return rms

    def bwd(M: Any, g: np.ndarray, xs: Sequence[np.ndarray], y: Any, at: Any,
            nd: Sequence[bool]) -> list:
        a, b = xs
        if op == "add":
            return [unb(g, a.shape) if nd[0] else None, unb(g, b.shape) if nd[1] else None]
        if op == "sub":
            return [unb(g, a.shape) if nd[0] else None, unb(-g, b.shape) if nd[1] else None]
        if a is b and nd[0] and nd[1]:  # mul(x, x): g * x once (the op table's rule)
            c = unb(g * a, a.shape)
            return [c, c]
        return [unb(g * b, a.shape) if nd[0] else None, unb(g * a, b.shape) if nd[1] else None]
    return bwd


_UNB_OPS = frozenset({"add", "sub", "mul", "rms_norm"})


def explain_grad(recompute: Callable[..., np.ndarray | None], consumers: Sequence[str],
                 cand: np.ndarray, raw: Any = None) -> Cause:
    """A gradient's cause. ``recompute(math=None, rules=None)`` reruns the reference gradient
    with another math namespace or other backward rules (``rules(op)``); ``consumers`` are the
    ops whose rules made it. Tried in CAUSES order: the product variants (fma, blocked, tree,
    accumulators) of matmul / bmm consumers' rules; the sum variants of a broadcast's reduction
    (a bias: autograd's ``sum_to_size``) when every consumer is add / sub / mul / rms_norm's
    gamma; the platform's transcendentals when a consumer's rule calls one. Other gradients
    are ``unknown`` (docs/candidates.md). ``raw``:
    the reference gradient's ``TensorDiff`` to ``cand`` (a closest variant must beat it;
    recomputed here when None)."""
    tries: list[tuple[str, str, Callable[[], np.ndarray | None]]] = []
    dt = np.asarray(cand).dtype
    mm_only = bool(consumers) and all(op in _GRAD_RULES for op in consumers)
    unb_only = bool(consumers) and all(op in _UNB_OPS for op in consumers)
    trans = any(REGISTRY[op].transcendental for op in consumers)
    aten = any(op in ATEN_BACKWARD for op in consumers)
    mm_variants = variants_for("matmul", dt)  # in dt: a half dtype's own accumulator
    for v in VARIANTS:
        w = _in_dtype(v, np.dtype(dt))  # as it runs in dt (None: not in dt)
        if v.cause == "libm" and trans and v.prim == "M":
            tries.append((v.cause, v.label, lambda v=v: recompute(v.value)))
        if aten and v.value is _LIBC_MATH:  # then PyTorch's CPU backward kernels (the other
            # consumers' rules the reference's: an add's gradient is exact)
            def arules(op: str) -> Callable:
                return ATEN_BACKWARD[op][0] if op in ATEN_BACKWARD else REGISTRY[op].backward
            label = "; ".join(dict.fromkeys(ATEN_BACKWARD[op][1] for op in consumers
                                            if op in ATEN_BACKWARD))
            tries.append(("libm", label, lambda rules=arules: recompute(None, rules)))
        elif v.prim == "mm" and mm_only and w is not None and w in mm_variants:
            def rules(op: str, f: Callable = w.value) -> Callable:
                return _GRAD_RULES[op](f) if op in _GRAD_RULES else REGISTRY[op].backward
            tries.append((w.cause, w.label, lambda rules=rules: recompute(None, rules)))
        elif v.prim == "sum" and unb_only and w is not None:
            def urules(op: str, f: Callable = w.value) -> Callable:
                return _unb_rule(op, f) if op in _UNB_OPS else REGISTRY[op].backward
            tries.append((w.cause, w.label, lambda rules=urules: recompute(None, rules)))
    tries = [(c, lab, (lambda f=f: _nonnull(f()))) for c, lab, f in tries]
    cand = np.asarray(cand)
    if raw is None:
        ref = recompute()
        raw = None if ref is None or np.shape(ref) != cand.shape else compare_arrays(ref, cand)
    return _try(tries, cand, raw, ("grad", tuple(consumers), cand.shape, dt.str))


def _nonnull(y: np.ndarray | None) -> np.ndarray:
    if y is None:
        raise ValueError("no gradient")
    return y
