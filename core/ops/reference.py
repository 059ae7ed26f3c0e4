"""Reference-order kernels: the exact rounding sequences of docs/reference-order.md, in numpy.

Every function here fixes the ORDER of its floating-point operations, so a device kernel that
follows the same order gets the same bits. Nothing here may call BLAS or numpy's pairwise sums:
``np.sum``/``np.dot``/``@`` reorder additions. ``np.add.accumulate`` is strictly sequential
(out[i] = out[i-1] + x[i]) and is what vectorises our serial loops.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

# (at the top, not in serial_sum: an import statement there ran on every call, ~1 us each,
# 1-3 a call: ~0.9 ms of a zoo GPT capture's judge)
from tapescope.core import native


def reduced_axes(axis: int | Sequence[int] | None, nd: int) -> tuple[int, ...]:
    """The axes a reduction over ``axis`` (None: all; negative counts from the end) visits, in
    increasing order."""
    if axis is None:
        return tuple(range(nd))
    if isinstance(axis, int):
        return (axis % max(nd, 1),)
    return tuple(sorted(a % max(nd, 1) for a in axis))


def serial_sum(x: np.ndarray, axis: int | Sequence[int] | None = None,
               keepdims: bool = False) -> np.ndarray:
    """Sum in serial row-major order: ``acc = 0.0; for e in order: acc = acc + e`` per slot.

    The reduced elements of one output slot are visited in the row-major order of their positions
    in ``x`` (the lexicographic order of the reduced indices).
    """
    x = np.asarray(x)
    nd = x.ndim
    axes = reduced_axes(axis, nd)
    keep = [a for a in range(nd) if a not in axes]
    out_shape = tuple(1 if a in axes else x.shape[a] for a in range(nd)) if keepdims else \
        tuple(x.shape[a] for a in keep)
    if nd == 0:
        return (x + x.dtype.type(0)).reshape(out_shape)
    if nd >= 3 and keep == [1] and x.size:
        # every axis but the second (a batch-norm channel sum of NCHW): the same order per
        # channel without the transposed copy below (most of the sum's time: 4.8 -> 0.35 ms
        # on 16x32x64x64 float32)
        fast = native.chansum(x.reshape(x.shape[0], x.shape[1], -1))
        if fast is not None:
            return fast.reshape(out_shape)
    if keep and keep[-1] == len(keep) - 1 < nd - 1 and x.size and x.flags.c_contiguous:
        # the trailing axes (a row's sum: layer norm's and softmax's statistics): chansum's
        # order on one batch entry, each row one chain from +0.0, without the transposed copy
        # below (the judge's ascontiguousarray of gpt-256: 0.2 of its 3.8 CPU s)
        rows = math.prod([x.shape[a] for a in keep])
        fast = native.chansum(x.reshape(1, rows, -1))
        if fast is not None:
            return fast.reshape(out_shape)
    order = axes + tuple(keep)
    # NOTE: no transpose when the reduced axes lead already, and math.prod of the (Python int)
    # sizes: np.prod's ~5 us a call were most of a small bias gradient's cost (issue 29)
    moved = x if order == tuple(range(nd)) else np.transpose(x, order)
    r = math.prod([x.shape[a] for a in axes])
    n = math.prod([x.shape[a] for a in keep])
    flat = np.ascontiguousarray(moved).reshape(r, n)
    if r == 0:
        return np.zeros(out_shape, dtype=x.dtype)
    fast = native.colsum(flat)  # the contract itself in C, vectorised over the kept slots
    if fast is not None:
        return fast.reshape(out_shape)
    # NOTE: accumulate starts from x[0], the contract starts from +0.0. They differ only when
    # every element is -0.0 (x[0] + ... = -0.0, 0.0 + ... = +0.0): the final "+ 0.0" settles it
    # and changes no other value.
    acc = np.add.accumulate(flat, axis=0)[-1] + x.dtype.type(0)
    return acc.reshape(out_shape)


def unbroadcast(g: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Reduce a broadcast-shaped gradient to ``shape``: serial row-major sum over broadcast axes."""
    if g.shape == shape or g.shape == tuple(shape):  # (a tuple already: the common case)
        return g
    lead = g.ndim - len(shape)
    axes = list(range(lead)) + [lead + i for i, s in enumerate(shape)
                                if s == 1 and g.shape[lead + i] != 1]
    return serial_sum(g, tuple(axes), keepdims=True).reshape(shape)


def mm(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """2-D product in the reference order: ``acc = 0.0; for k: acc = acc + a[i,k]*b[k,j]``."""
    fast = native.mm(a, b)
    if fast is not None:
        return fast
    return mm_numpy(a, b)


def mm_numpy(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The numpy spelling of ``mm`` (the oracle the native kernel is tested against)."""
    m, k = a.shape
    k2, n = b.shape
    assert k == k2, (a.shape, b.shape)
    acc = np.zeros((m, n), dtype=np.result_type(a, b))
    if m == 0 or n == 0:
        return acc
    prod = np.empty_like(acc)
    with np.errstate(all="ignore"):  # inf * 0 is NaN by IEEE, as in the C kernel: no warning
        for kk in range(k):
            # one rounding for the product, one for the add: never a fused multiply-add
            np.multiply(a[:, kk, None], b[None, kk, :], out=prod)
            np.add(acc, prod, out=acc)
    return acc


def bmm(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Batched product ``[B,M,K] @ [B,K,N]``, each batch in the reference order of ``mm``."""
    fast = native.bmm(a, b)
    if fast is not None:
        return fast
    return bmm_numpy(a, b)


def bmm_numpy(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The numpy spelling of ``bmm`` (the oracle the native kernel is tested against)."""
    bsz, m, k = a.shape
    _, _, n = b.shape
    acc = np.zeros((bsz, m, n), dtype=np.result_type(a, b))
    if acc.size == 0:
        return acc
    prod = np.empty_like(acc)
    with np.errstate(all="ignore"):
        for kk in range(k):
            np.multiply(a[:, :, kk, None], b[:, None, kk, :], out=prod)
            np.add(acc, prod, out=acc)
    return acc


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` with numpy's batch broadcasting, every inner product serial in k."""
    a = np.asarray(a)
    b = np.asarray(b)
    if a.ndim == 1:
        return matmul(a[None, :], b)[..., 0, :]
    if b.ndim == 1:
        return matmul(a, b[:, None])[..., 0]
    if a.ndim == 2 and b.ndim == 2:
        return mm(a, b)
    if b.ndim == 2:
        lead = a.shape[:-2]
        out = mm(a.reshape(-1, a.shape[-1]), b)
        return out.reshape(*lead, a.shape[-2], b.shape[-1])
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a3 = np.broadcast_to(a, batch + a.shape[-2:]).reshape(-1, *a.shape[-2:])
    b3 = np.broadcast_to(b, batch + b.shape[-2:]).reshape(-1, *b.shape[-2:])
    return bmm(a3, b3).reshape(*batch, a.shape[-2], b.shape[-1])


def softmax(x: np.ndarray, axis: int, exp) -> np.ndarray:
    """Softmax written out: m = max; e = exp(x - m); s = serial_sum(e); y = e / s."""
    m = np.max(x, axis=axis, keepdims=True)  # max is exact whatever the order
    e = exp(x - m)
    s = serial_sum(e, axis, keepdims=True)
    return e / s
