"""The reduce family (ReduceSum, ReduceMean, ..., ArgMax) and the softmax family.

Sums go through ``ctx.k.sum``: in reference mode a serial row-major sum, so ReduceSum/ReduceMean
round like the tape's sum/mean (mean = sum / n).
"""

from __future__ import annotations

import numpy as np

from tapescope.core.onnx.registry import as_int_list, op

# opset from which `axes` is an input instead of an attribute
_AXES_INPUT_SINCE = {"ReduceSum": 13}


def _axes(ctx, x, axes_in, axes_attr, noop_with_empty_axes):
    """The reduced axes, or None for all; () for 'reduce nothing'."""
    since = _AXES_INPUT_SINCE.get(ctx.node.op_type, 18)
    axes = axes_in if ctx.opset >= since else axes_attr
    if axes is None or (np.asarray(axes).size == 0):
        return () if noop_with_empty_axes else None
    return tuple(sorted({a % max(x.ndim, 1) for a in as_int_list(axes)}))


def _reducer(body):
    def kernel(ctx, x, axes_in=None, axes=None, keepdims=1, noop_with_empty_axes=0):
        ax = _axes(ctx, x, axes_in, axes, noop_with_empty_axes)
        if ax == ():
            return body(ctx, x, None, True, identity=True)
        return body(ctx, x, ax, bool(keepdims), identity=False)
    return kernel


def _sum(ctx, x, ax, keep, identity=False):
    return x if identity else ctx.k.sum(x, ax, keepdims=keep).astype(x.dtype, copy=False)


def _count(x, ax) -> int:
    return int(np.prod([x.shape[a] for a in (range(x.ndim) if ax is None else ax)]))


def _mean(ctx, x, ax, keep, identity=False):
    if identity:
        return x
    s = ctx.k.sum(x, ax, keepdims=keep)
    return (s / x.dtype.type(_count(x, ax))).astype(x.dtype, copy=False)  # sum / n


def _np_reduce(fn, empty):
    def body(ctx, x, ax, keep, identity=False):
        if identity:
            return x
        if x.size == 0:
            shp = [1 if (ax is None or i in ax) else d for i, d in enumerate(x.shape)]
            out = np.full(shp, empty(x.dtype), dtype=x.dtype)
            return out if keep else out.reshape([d for i, d in enumerate(x.shape)
                                                 if ax is not None and i not in ax])
        return fn(x, axis=ax, keepdims=keep).astype(x.dtype, copy=False)
    return body


def _min_value(dt):
    if dt.kind == "b":
        return False
    return -np.inf if dt.kind == "f" else np.iinfo(dt).min


def _max_value(dt):
    if dt.kind == "b":
        return True
    return np.inf if dt.kind == "f" else np.iinfo(dt).max


def _prod(ctx, x, ax, keep, identity=False):
    return x if identity else np.prod(x, axis=ax, keepdims=keep).astype(x.dtype, copy=False)


def _l1(ctx, x, ax, keep, identity=False):
    return np.abs(x) if identity else _sum(ctx, np.abs(x), ax, keep)


def _l2(ctx, x, ax, keep, identity=False):
    if identity:
        return np.abs(x)
    s = _sum(ctx, x * x, ax, keep)
    return np.sqrt(s.astype(np.float64) if s.dtype.kind in "iu" else s).astype(x.dtype)


def _sum_square(ctx, x, ax, keep, identity=False):
    return x * x if identity else _sum(ctx, x * x, ax, keep)


def _log_sum(ctx, x, ax, keep, identity=False):
    return ctx.k.log(x if identity else _sum(ctx, x, ax, keep))


def _log_sum_exp(ctx, x, ax, keep, identity=False):
    if identity:
        return x
    # max-shifted for range: m + log(sum(exp(x - m)))
    m = np.max(x, axis=ax, keepdims=True) if x.size else np.zeros((), x.dtype)
    m = np.where(np.isfinite(m), m, 0).astype(x.dtype)
    s = ctx.k.log(_sum(ctx, ctx.k.exp(x - m), ax, True))
    y = (s + m).astype(x.dtype)
    return y if keep else y.reshape([d for i, d in enumerate(x.shape)
                                     if ax is not None and i not in ax])


for _name, _body in {
    "ReduceSum": _sum, "ReduceMean": _mean, "ReduceProd": _prod, "ReduceL1": _l1,
    "ReduceL2": _l2, "ReduceSumSquare": _sum_square, "ReduceLogSum": _log_sum,
    "ReduceLogSumExp": _log_sum_exp,
    "ReduceMax": _np_reduce(np.max, _min_value), "ReduceMin": _np_reduce(np.min, _max_value),
}.items():
    op(_name)(_reducer(_body))


def _arg(fn):
    def kernel(ctx, x, axis=0, keepdims=1, select_last_index=0):
        ax = axis % x.ndim
        if select_last_index:
            y = x.shape[ax] - 1 - fn(np.flip(x, ax), axis=ax)
        else:
            y = fn(x, axis=ax)
        y = y.astype(np.int64)
        return np.expand_dims(y, ax) if keepdims else y
    return kernel


op("ArgMax")(_arg(np.argmax))
op("ArgMin")(_arg(np.argmin))


def _softmax_like(ctx, x, axis, f):
    """Softmax-family axis rule: before opset 13 the input is flattened to 2-D at ``axis``."""
    if ctx.opset < 13:
        ax = axis % x.ndim
        flat = x.reshape(int(np.prod(x.shape[:ax])), -1)
        return f(flat, 1).reshape(x.shape).astype(x.dtype, copy=False)
    return f(x, axis % x.ndim).astype(x.dtype, copy=False)


@op("Softmax")
def softmax(ctx, x, axis=None):
    ax = (1 if ctx.opset < 13 else -1) if axis is None else axis
    return _softmax_like(ctx, x, ax, ctx.k.softmax)


@op("LogSoftmax")
def log_softmax(ctx, x, axis=None):
    ax = (1 if ctx.opset < 13 else -1) if axis is None else axis

    def f(v, a):
        # (x - m) - log(sum(exp(x - m))): the shifted form, one log per row
        d = v - np.max(v, axis=a, keepdims=True)
        return d - ctx.k.log(ctx.k.sum(ctx.k.exp(d), a, keepdims=True))
    return _softmax_like(ctx, x, ax, f)
