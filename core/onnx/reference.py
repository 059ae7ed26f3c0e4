"""The numeric kernels the executor computes with: the ONE place that chooses where they come from.

Two kernel sets:

* ``REFERENCE`` (the default) is the tape's own: ``core.ops.reference.matmul`` (``acc = 0.0; for
  k in order: acc = acc + a[i,k]*b[k,j]``, never BLAS), ``serial_sum`` (serial, row-major),
  ``softmax`` as the tape writes it, and transcendentals from ``core.refmath`` (through
  ``core.mathlib``). So ``tapescope onnx`` and the tape agree bit for bit.
* ``FAST`` uses numpy/BLAS as they come (pairwise sums, threaded GEMM, libm): quicker, but its
  rounding depends on the machine. Used by benchmarks and when a caller asks for ``mode="fast"``.

refmath is defined on float32/float64; narrower floats (float16, bfloat16) go through float32
and are rounded once on the way back. In reference mode a whole half node does
(core.onnx.half): its kernel sees float32 inputs, so these sums and products accumulate in
float32, and its outputs are rounded once.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from tapescope.core import mathlib
from tapescope.core.ops import reference as tape_ref

_UNARY = ("exp", "log", "tanh", "sigmoid", "erf", "expm1", "log1p")


def _widen(fn):
    """Run ``fn`` in float32 for dtypes refmath does not take; same dtype out as in."""
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


def _kernel_set(name: str, math: str, matmul, ssum, softmax_fn) -> SimpleNamespace:
    M = mathlib.get(math)
    un = {k: _widen(getattr(M, k)) for k in _UNARY}
    return SimpleNamespace(name=name, math=math, matmul=matmul, sum=ssum,
                           softmax=lambda x, axis: softmax_fn(x, axis, un["exp"]), **un)


def _fast_sum(x, axis=None, keepdims=False):
    x = np.asarray(x)
    if axis is not None and not isinstance(axis, (int, np.integer)):
        axis = tuple(int(a) for a in axis)
    return np.sum(x, axis=axis, keepdims=keepdims, dtype=x.dtype)


def _fast_softmax(x, axis, exp):
    e = exp(x - np.max(x, axis=axis, keepdims=True))
    return e / _fast_sum(e, axis, keepdims=True)


_REF_MATMUL = _vector_ends(tape_ref.matmul)
_REF_MATMUL.reference_order = True  # conv_nd may then run a direct kernel with the same chains
REFERENCE = _kernel_set("reference", "refmath", _REF_MATMUL, tape_ref.serial_sum,
                        tape_ref.softmax)
FAST = _kernel_set("fast", "platform", np.matmul, _fast_sum, _fast_softmax)
KERNELS = {"reference": REFERENCE, "fast": FAST}


def kernels(mode: str) -> SimpleNamespace:
    """The kernel set for ``mode`` (``"reference"`` or ``"fast"``)."""
    try:
        return KERNELS[mode]
    except KeyError:
        raise ValueError(f"unknown mode {mode!r}: use 'reference' or 'fast'") from None
