"""The exact arithmetic the explain variants are built from (core/explain.py and
core/explain_aten.py both build on it, so neither imports the other back): error-free
transforms and a correctly rounded ``fma``, SIMD lane folds, ATen's cascade sum, the C
library's transcendentals, and ``GradParts`` (a backward rule's contribution added in parts,
read by core.provenance)."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import numpy as np

from tapescope.core import mathlib


class GradParts(tuple):
    """A backward rule's contribution to one input as several arrays, added to the gradient
    one after another in this order (as PyTorch's autograd adds a composite op's branches:
    ``core.explain_aten``); ``total()`` is their sum in that order."""

    def total(self) -> np.ndarray:
        out = self[0]
        for c in self[1:]:
            out = out + c
        return out


def _two_sum(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _split(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    c = np.float64(134217729.0) * a  # Veltkamp: 2**27 + 1
    hi = c - (c - a)
    return hi, a - hi


def _two_prod(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    p = a * b
    ah, al = _split(a)
    bh, bl = _split(b)
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


def _round_odd_add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a + b rounded to odd (float64): exact, or the neighbour with an odd last bit."""
    s, e = _two_sum(a, b)
    even = (np.ascontiguousarray(s).view(np.uint64) & np.uint64(1)) == 0
    bump = (e != 0) & even & np.isfinite(s)
    return np.where(bump, np.nextafter(s, np.copysign(np.inf, e)), s)


def fma(a: Any, b: Any, c: Any) -> np.ndarray:
    """``a * b + c`` rounded once, elementwise, float64 or float32 (exact, like C's fma).

    float64: Boldo & Melquiond's emulation (an exact product, two exact sums, one add rounded
    to odd, one rounded to nearest); float32: the exact product in float64 plus c rounded to
    odd, then rounded to float32 (53 >= 24 + 2 bits: one correct rounding; non-finite
    operands and results come out as C's fma gives them). float64's non-finite intermediates
    fall back to the plain expression (the same inf / NaN as C's fma).
    """
    a, b, c = np.broadcast_arrays(np.asarray(a), np.asarray(b), np.asarray(c))
    dt = np.result_type(a, b, c)
    with np.errstate(all="ignore"):
        if dt == np.float32:
            # float64 holds every float32 product exactly and never overflows on one: the
            # result is right for non-finite operands too (inf * 0 NaN, a product past
            # float32's range plus -inf -inf), where the plain float32 expression is not
            # (that product overflows to inf, and inf - inf is NaN)
            a64, b64, c64 = (x.astype(np.float64) for x in (a, b, c))
            return _round_odd_add(a64 * b64, c64).astype(np.float32)
        else:
            a, b, c = (x.astype(np.float64) for x in (a, b, c))
            uh, ul = _two_prod(a, b)
            th, tl = _two_sum(c, ul)
            vh, vl = _two_sum(uh, th)
            out = vh + _round_odd_add(tl, vl)
            plain = a * b + c
        return np.where(np.isfinite(out) & np.isfinite(plain), out, plain).astype(dt)


def _fold_lanes(acc: np.ndarray, w: int, tree: bool) -> np.ndarray:
    """The ``w`` partial sums on the last axis into one: halved pairwise (``tree``: a vector
    reduction's shuffles) or added in lane order."""
    if tree:
        while acc.shape[-1] > 1:
            h = acc.shape[-1] // 2
            acc = acc[..., :h] + acc[..., h:]
        return acc[..., 0]
    out = acc[..., 0]
    for lane in range(1, w):
        out = out + acc[..., lane]
    return out


def _cascade_reduce(f: np.ndarray) -> np.ndarray:
    """PyTorch's CPU cascade sum along the last axis (ATen's SumKernel ``multi_row_sum``): four
    levels; level 0 adds ``2^p`` elements serially (``p = max(4, ceil(log2 n) / 4)``), each
    full block is carried up a level (``acc[j] += acc[j-1]``, up while the count is a multiple
    of the next level's span), the remainder goes to level 0, then the levels are added in
    order."""
    n = f.shape[-1]
    p = max(4, (int(np.ceil(np.log2(n))) if n > 1 else 0) // 4)
    step, mask = 1 << p, (1 << p) - 1
    zero = np.zeros(f.shape[:-1], dtype=f.dtype)
    acc = [zero.copy() for _ in range(4)]
    i = 0
    while i + step <= n:
        for _ in range(step):
            acc[0] = acc[0] + f[..., i]
            i += 1
        for j in range(1, 4):
            acc[j] = acc[j] + acc[j - 1]
            acc[j - 1] = zero.copy()
            if i & (mask << (j * p)):
                break
    while i < n:
        acc[0] = acc[0] + f[..., i]
        i += 1
    for j in range(1, 4):
        acc[0] = acc[0] + acc[j]
    return acc[0]


def _libc_math() -> SimpleNamespace:
    """The C library's transcendentals (``exp``, ``expf``, ...), element by element, spelled as
    core.mathlib's platform namespace: what the host and CUDA kernels call under
    math="platform" (gpu/source.py). numpy's own loops are the same functions on some CPUs but
    not on others (on AVX-512 numpy has its own exp and log: up to 2 ulp from glibc's), so libm is
    tried both ways."""
    import ctypes
    import ctypes.util

    base = mathlib.get("platform")
    lib = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")

    def lift(name: str) -> Callable[[np.ndarray], np.ndarray]:
        fns = {}
        for dt, suffix, ct in ((np.float64, "", ctypes.c_double), (np.float32, "f",
                                                                    ctypes.c_float)):
            fn = getattr(lib, name + suffix)
            fn.restype, fn.argtypes = ct, [ct]
            fns[np.dtype(dt)] = np.frompyfunc(fn, 1, 1)

        def f(x: np.ndarray) -> np.ndarray:
            x = np.asarray(x)
            u = fns.get(x.dtype)
            return getattr(base, name)(x) if u is None else u(x).astype(x.dtype)
        return f

    exp = lift("exp")

    def sigmoid(x: np.ndarray) -> np.ndarray:
        one = x.dtype.type(1)
        return one / (one + exp(-x))

    return SimpleNamespace(mode="platform", exp=exp, expm1=lift("expm1"), log=lift("log"),
                           log1p=lift("log1p"), tanh=lift("tanh"), sigmoid=sigmoid,
                           rsqrt=base.rsqrt, erf=base.erf)


_LIBC_MATH = _libc_math()
