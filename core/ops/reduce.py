"""Reductions (sum, mean) and the leaves. Serial row-major sums; mean is ``sum / n``."""

from __future__ import annotations

import math

import numpy as np

from tapescope.core.ops.reference import serial_sum
from tapescope.core.optable.registry import OpDef, ShapeError, norm_axis, register


def _no_shape(shapes, attrs):
    raise ShapeError("leaves are recorded with tape.param / tape.const")


register(OpDef("param", 0, "leaf", "none", _no_shape, None, None, None,
               doc="a trainable leaf (copied in)"))
register(OpDef("const", 0, "leaf", "none", _no_shape, None, None, None,
               doc="a data leaf (copied in)"))


def reduced_axes(shape: tuple[int, ...], axis) -> tuple[int, ...]:
    """The sorted, non-negative axes a reduction over ``axis`` removes."""
    if axis is None:
        return tuple(range(len(shape)))
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    out = tuple(sorted({norm_axis(a, len(shape)) for a in axes}))
    return out


def _reduce_shape(shapes, attrs):
    s = shapes[0]
    axes = reduced_axes(s, attrs.get("axis"))
    if attrs.get("keepdims", False):
        return tuple(1 if i in axes else d for i, d in enumerate(s))
    return tuple(d for i, d in enumerate(s) if i not in axes)


def _expand(g, x, attrs):
    """g broadcast back over the reduced axes of x (exact copies)."""
    axes = reduced_axes(x.shape, attrs.get("axis"))
    kept = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    return np.broadcast_to(g.reshape(kept), x.shape)


def count(shape, attrs) -> int:
    """How many elements each output slot of a reduction over ``attrs['axis']`` sums."""
    axes = reduced_axes(shape, attrs.get("axis"))
    return math.prod([shape[a] for a in axes])  # Python ints: np.prod's call cost, no overflow


def _sample(rng, dtype):
    x = rng.uniform(-2, 2, (3, 4, 5)).astype(dtype)
    return [([x], {"axis": None, "keepdims": False}), ([x], {"axis": 1, "keepdims": False}),
            ([x], {"axis": (0, 2), "keepdims": True}), ([x], {"axis": -1, "keepdims": True})]


def _sum_fwd(M, xs, at):
    return serial_sum(xs[0], at.get("axis"), at.get("keepdims", False))


def _mean_fwd(M, xs, at):
    x = xs[0]
    return _sum_fwd(M, xs, at) / x.dtype.type(count(x.shape, at))


def _mean_bwd(M, g, xs, y, at, needs):
    x = xs[0]
    return [_expand(g / x.dtype.type(count(x.shape, at)), x, at)]


register(OpDef(
    "sum", 1, "reduce", "none", _reduce_shape, forward=_sum_fwd,
    backward=lambda M, g, xs, y, at, needs: [_expand(g, xs[0], at)], sample=_sample,
    doc="serial row-major sum per slot from +0.0; ga = g broadcast"))
register(OpDef(
    "mean", 1, "reduce", "none", _reduce_shape, forward=_mean_fwd, backward=_mean_bwd,
    sample=_sample, doc="y = serial_sum / n; ga = broadcast(g / n)"))
