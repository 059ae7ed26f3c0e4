"""The exact arithmetic the explain variants are built from (core/explain.py and
core/explain_aten.py both build on it, so neither imports the other back): error-free
transforms and a correctly rounded ``fma``, SIMD lane folds, ATen's cascade sum, the C
library's transcendentals, and ``GradParts`` (a backward rule's contribution added in parts,
read by core.provenance)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import numpy as np

from tapescope.core import mathlib, native


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
    # (ascontiguousarray makes a 0-d array 1-d: the shape put back, or a 0-d fma comes out (1,))
    even = ((np.ascontiguousarray(s).view(np.uint64) & np.uint64(1)) == 0).reshape(np.shape(s))
    bump = (e != 0) & even & np.isfinite(s)
    return np.where(bump, np.nextafter(s, np.copysign(np.inf, e)), s)


def fma(a: Any, b: Any, c: Any) -> np.ndarray:
    """``a * b + c`` rounded once, elementwise, float64 or float32 (exact, like C's fma): C's
    ``fma`` / ``fmaf`` in native code (``core.native.fma_into``: one call, not the dozen numpy
    passes of the emulation) where it runs, else :func:`fma_emulated`: the same bits, but in
    float64 where the emulation misses (a subnormal result, rounded twice; a finite product
    past the range added to an infinity, NaN), and a NaN's sign and payload (the policy's: a
    NaN is a NaN)."""
    a, b, c = np.broadcast_arrays(np.asarray(a), np.asarray(b), np.asarray(c))
    dt = np.result_type(a, b, c)
    if (dt == np.float32 or dt == np.float64) and 1 <= c.ndim <= 4 and c.size:
        out = np.array(c, dtype=dt, order="C")  # (a copy: the caller's c stays as it was)
        if native.fma_into(out, a.astype(dt, copy=False), b.astype(dt, copy=False)):
            return out
    return fma_emulated(a, b, c)


def fma_emulated(a: Any, b: Any, c: Any) -> np.ndarray:
    """``a * b + c`` rounded once, elementwise, float64 or float32, in numpy alone.

    float64: Boldo & Melquiond's emulation (an exact product, two exact sums, one add rounded
    to odd, one rounded to nearest); float32: the exact product in float64 plus c rounded to
    odd, then rounded to float32 (53 >= 24 + 2 bits: one correct rounding; non-finite
    operands and results come out as C's fma gives them). float64's non-finite intermediates
    fall back to the plain expression (the same inf / NaN as C's fma, but for a finite
    product past the range added to an infinity: NaN, where C's fma gives the infinity); a
    subnormal float64 result is rounded twice (C's fma rounds it once: tests/capture/
    test_native_fma_step.py).
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


@functools.cache
def libm() -> Any:
    """The C library's math library (ctypes), loaded once."""
    import ctypes
    import ctypes.util

    return ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")


def libc_elementwise(name: str, other: Callable[[np.ndarray], np.ndarray] | None = None
                     ) -> Callable[[np.ndarray], np.ndarray]:
    """The C library's ``name`` (float64) / ``name + "f"`` (float32), element by element
    (ctypes); ``other`` for any other dtype (None: a ValueError)."""
    import ctypes

    lib = libm()
    fns = {}
    for dt, suffix, ct in ((np.float64, "", ctypes.c_double), (np.float32, "f", ctypes.c_float)):
        fn = getattr(lib, name + suffix)
        fn.restype, fn.argtypes = ct, [ct]
        fns[np.dtype(dt)] = np.frompyfunc(fn, 1, 1)

    def f(x: np.ndarray) -> np.ndarray:
        x = np.asarray(x)
        u = fns.get(x.dtype)
        if u is not None:
            return np.asarray(u(x)).astype(x.dtype)  # (a 0-d input gives a Python float)
        if other is None:
            raise ValueError(f"the C library's {name} of {x.dtype}")
        return other(x)
    return f


def _libc_math() -> SimpleNamespace:
    """The C library's transcendentals (``exp``, ``expf``, ...), element by element, spelled as
    core.mathlib's platform namespace: what the host and CUDA kernels call under
    math="platform" (gpu/source.py). numpy's own loops are the same functions on some CPUs but
    not on others (on AVX-512 numpy has its own exp and log: up to 2 ulp from glibc's), so libm is
    tried both ways."""
    base = mathlib.get("platform")

    def lift(name: str) -> Callable[[np.ndarray], np.ndarray]:
        return libc_elementwise(name, getattr(base, name))

    exp = lift("exp")

    def sigmoid(x: np.ndarray) -> np.ndarray:
        one = x.dtype.type(1)
        return one / (one + exp(-x))

    return SimpleNamespace(mode="platform", exp=exp, expm1=lift("expm1"), log=lift("log"),
                           log1p=lift("log1p"), tanh=lift("tanh"), sigmoid=sigmoid,
                           rsqrt=base.rsqrt, erf=base.erf)


_LIBC_MATH = _libc_math()


def std_sort_order(keys: Any) -> np.ndarray:
    """The positions of ``keys`` (integers, 1-D) in the order libstdc++'s ``std::sort`` leaves
    them, sorting (key, position) pairs by key alone: ``torch.sort``'s unstable CPU sort below
    fbgemm's radix sort (which takes 1-D integer keys from 32,768 on, stably). Introsort as
    libstdc++ writes it: median of (second, middle, last) moved to the front, Hoare's unguarded
    partition, the right part recursed, heapsort past 2 log2(n) levels, then insertion sort of
    the first 16 and unguarded insertion of the rest. Equal keys end where this order puts
    them, which is what an accumulation in sorted order (ATen's embedding_bag backward) adds
    in. Python loops: O(n log n) steps, for the explainer's rare calls."""
    k = [int(v) for v in np.asarray(keys).reshape(-1)]
    p = list(range(len(k)))

    def swap(i: int, j: int) -> None:
        k[i], k[j] = k[j], k[i]
        p[i], p[j] = p[j], p[i]

    def adjust_heap(first: int, hole: int, ln: int, vk: int, vp: int) -> None:
        top = second = hole
        while second < (ln - 1) // 2:
            second = 2 * (second + 1)
            if k[first + second] < k[first + second - 1]:
                second -= 1
            k[first + hole], p[first + hole] = k[first + second], p[first + second]
            hole = second
        if ln % 2 == 0 and second == (ln - 2) // 2:
            second = 2 * (second + 1)
            k[first + hole], p[first + hole] = k[first + second - 1], p[first + second - 1]
            hole = second - 1
        parent = (hole - 1) // 2
        while hole > top and k[first + parent] < vk:
            k[first + hole], p[first + hole] = k[first + parent], p[first + parent]
            hole, parent = parent, (parent - 1) // 2
        k[first + hole], p[first + hole] = vk, vp

    def heap_sort(first: int, last: int) -> None:
        ln = last - first
        for parent in range((ln - 2) // 2, -1, -1):
            adjust_heap(first, parent, ln, k[first + parent], p[first + parent])
        while last - first > 1:
            last -= 1
            vk, vp = k[last], p[last]
            k[last], p[last] = k[first], p[first]
            adjust_heap(first, 0, last - first, vk, vp)

    def median_to_first(a: int, b: int, c: int) -> None:
        if k[a] < k[b]:
            swap(a - 1, b if k[b] < k[c] else (c if k[a] < k[c] else a))
        else:
            swap(a - 1, a if k[a] < k[c] else (c if k[b] < k[c] else b))

    def partition(first: int, last: int, pivot: int) -> int:
        while True:
            while k[first] < k[pivot]:
                first += 1
            last -= 1
            while k[pivot] < k[last]:
                last -= 1
            if first >= last:
                return first
            swap(first, last)
            first += 1

    def introsort(first: int, last: int, depth: int) -> None:
        while last - first > 16:
            if depth == 0:
                heap_sort(first, last)
                return
            depth -= 1
            median_to_first(first + 1, first + (last - first) // 2, last - 1)
            cut = partition(first + 1, last, first)
            introsort(cut, last, depth)
            last = cut

    def linear_insert(i: int) -> None:  # (unguarded: a key no greater sits before i)
        vk, vp = k[i], p[i]
        while vk < k[i - 1]:
            k[i], p[i] = k[i - 1], p[i - 1]
            i -= 1
        k[i], p[i] = vk, vp

    n = len(k)
    if n:
        introsort(0, n, 2 * (n.bit_length() - 1))
        for i in range(1, min(n, 16)):  # (insertion sort: a key below the first goes first)
            if k[i] < k[0]:
                vk, vp = k[i], p[i]
                k[1:i + 1], p[1:i + 1] = k[:i], p[:i]
                k[0], p[0] = vk, vp
            else:
                linear_insert(i)
        for i in range(16, n):
            linear_insert(i)
    return np.array(p, np.int64)
