"""The numeric kernels the executor computes with: the ONE place that chooses where they come from.

Two kernel sets:

* ``REFERENCE`` (the default) computes the ops the tape also has in the tape's reference order
  (docs/reference-order.md), so ``tapescope onnx`` and the tape agree bit for bit: matmul is
  ``acc = 0.0; for k in order: acc = acc + a[i,k]*b[k,j]`` (never BLAS), sums are serial in
  row-major order, mean is ``sum / n`` and transcendentals come from ``core.refmath``.
* ``FAST`` uses numpy/BLAS as they come (pairwise sums, threaded GEMM, libm): quicker, but its
  rounding depends on the machine. Used by benchmarks and when a caller asks for ``mode="fast"``.

When the lead's ``core.ops.reference`` and ``core.refmath`` are importable they are used; until
then the private fallbacks below stand in (numpy libm for transcendentals: NOT bit-portable).
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np

try:  # the tape's own reference kernels, when they have landed
    from core.ops import reference as _lead  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - depends on what has landed
    _lead = None
try:  # the tape's transcendentals (core.refmath through core.mathlib), when they have landed
    from core import mathlib as _mathlib  # type: ignore[attr-defined]

    _refmath = _mathlib.get("refmath")
except Exception:  # pragma: no cover - ImportError until refmath lands
    _refmath = None


def _ref_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """numpy.matmul semantics, reference order: one rounded multiply and add per k, k ascending."""
    a = np.asarray(a)
    b = np.asarray(b)
    a1, b1 = a.ndim == 1, b.ndim == 1
    if a1:
        a = a[None, :]
    if b1:
        b = b[:, None]
    if a.shape[-1] != b.shape[-2]:
        raise ValueError(f"matmul: shapes {a.shape} and {b.shape} do not align")
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    dtype = np.result_type(a, b)
    acc = np.zeros(batch + (a.shape[-2], b.shape[-1]), dtype)
    tmp = np.empty_like(acc)
    # NOTE: acc starts at 0.0 and each step rounds the product, then the sum: the device
    # kernels do exactly this (no FMA), so the loop order IS the parity contract.
    for k in range(a.shape[-1]):
        np.multiply(a[..., :, k:k + 1], b[..., k:k + 1, :], out=tmp)
        np.add(acc, tmp, out=acc)
    if a1:
        acc = acc[..., 0, :]
    if b1:
        acc = acc[..., 0]
    return acc


def _norm_axes(axis, ndim: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, (int, np.integer)):
        axis = (int(axis),)
    return tuple(sorted({int(a) % ndim if ndim else 0 for a in axis}))


def _ref_serial_sum(x: np.ndarray, axis=None, keepdims: bool = False) -> np.ndarray:
    """Sum in serial row-major order over ``axis`` (all when None), starting from 0."""
    x = np.asarray(x)
    axes = _norm_axes(axis, x.ndim)
    keep = [i for i in range(x.ndim) if i not in axes]
    out_shape = tuple(1 if i in axes else x.shape[i] for i in range(x.ndim))
    n = int(np.prod([x.shape[i] for i in axes])) if axes else 1
    moved = np.transpose(x, keep + list(axes)).reshape([x.shape[i] for i in keep] + [n])
    if n == 0:
        res = np.zeros(moved.shape[:-1], x.dtype)
    else:
        # np.add.accumulate is a strictly sequential left-to-right loop (unlike np.sum, which is
        # pairwise); 0 + s fixes the one case it differs from acc=0.0: an all -0.0 input.
        last = np.add.accumulate(moved, axis=-1, dtype=x.dtype)[..., -1]
        res = np.add(np.zeros((), x.dtype), last)
    res = np.asarray(res, dtype=x.dtype)
    return res.reshape(out_shape) if keepdims else res.reshape([x.shape[i] for i in keep])


def _np_erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(x).astype(x.dtype)


def _fallback_unary() -> dict:
    """numpy libm stand-ins: used only until core.refmath lands (not bit-portable)."""
    return {
        "exp": np.exp, "log": np.log, "tanh": np.tanh, "expm1": np.expm1, "log1p": np.log1p,
        # sigmoid written as 1 / (1 + exp(-x)), the textbook order
        "sigmoid": lambda x: (1 / (1 + np.exp(-x))).astype(x.dtype), "erf": _np_erf,
    }


def _refmath_unary() -> dict:
    if _refmath is None:
        return _fallback_unary()
    fb = _fallback_unary()
    return {name: getattr(_refmath, name, fb[name]) for name in fb}


def _softmax_with(sum_fn, exp_fn):
    def softmax(x: np.ndarray, axis: int) -> np.ndarray:
        # max-subtracted for range; then e / sum(e) with the sum in the kernel set's order
        m = np.max(x, axis=axis, keepdims=True)
        e = exp_fn(x - m)
        return e / sum_fn(e, axis=axis, keepdims=True)
    return softmax


def _widen(fn):
    """refmath is defined on float32/float64: narrower floats go through float32, rounded once."""
    def f(x):
        x = np.asarray(x)
        if x.dtype in (np.float32, np.float64):
            return fn(x)
        return np.asarray(fn(x.astype(np.float32))).astype(x.dtype)
    return f


def _vector_ends(mm):
    """numpy's 1-D operand rules around a matmul that wants both operands at least 2-D."""
    def matmul(a, b):
        a, b = np.asarray(a), np.asarray(b)
        if a.ndim == 1 and b.ndim == 1:
            return mm(a[None, :], b[:, None])[0, 0]
        if a.ndim == 1:
            return mm(a[None, :], b)[..., 0, :]
        if b.ndim == 1:
            return mm(a, b[:, None])[..., 0]
        return mm(a, b)
    return matmul


def _make_reference() -> SimpleNamespace:
    un = {k: _widen(f) for k, f in _refmath_unary().items()}
    matmul = _vector_ends(getattr(_lead, "matmul", _ref_matmul))
    ssum = getattr(_lead, "serial_sum", _ref_serial_sum)
    softmax = _softmax_with(ssum, un["exp"])
    if getattr(_lead, "softmax", None) is not None:
        def softmax(x, axis, _f=_lead.softmax, _e=un["exp"]):  # the tape's own formula
            return _f(x, axis, _e)
    return SimpleNamespace(name="reference", matmul=matmul, sum=ssum, softmax=softmax, **un)


def _fast_sum(x, axis=None, keepdims=False):
    x = np.asarray(x)
    return np.sum(x, axis=None if axis is None else _norm_axes(axis, x.ndim),
                  keepdims=keepdims, dtype=x.dtype)


def _make_fast() -> SimpleNamespace:
    un = _fallback_unary()
    return SimpleNamespace(name="fast", matmul=np.matmul, sum=_fast_sum,
                           softmax=_softmax_with(_fast_sum, np.exp), **un)


REFERENCE = _make_reference()
FAST = _make_fast()
KERNELS = {"reference": REFERENCE, "fast": FAST}


def kernels(mode: str) -> SimpleNamespace:
    """The kernel set for ``mode`` (``"reference"`` or ``"fast"``)."""
    try:
        return KERNELS[mode]
    except KeyError:
        raise ValueError(f"unknown mode {mode!r}: use 'reference' or 'fast'") from None
