"""The pool family: MaxPool, AveragePool, LpPool and their global forms (vectorised windows).

AveragePool sums each window serially in row-major tap order (``ctx.k.sum``) and divides by the
count once: ``sum / n``, like the tape's mean.
"""

from __future__ import annotations

import numpy as np

from tapescope.core.onnx import arena as _arena
from tapescope.core.onnx.ops.window import attrs_nd, out_size, pads_for, windows
from tapescope.core.onnx.registry import op
from tapescope.core.ops.nn import pool_counts, pool_nd
from tapescope.core.ops.reference import serial_sum


def _lowest(dt):
    return -np.inf if dt.kind == "f" else np.iinfo(dt).min


def _win_axes(nd):
    return tuple(range(-nd, 0))


def _tup(v):
    """An attribute as a hashable key part (lists as tuples)."""
    return tuple(v) if isinstance(v, list) else v


#: (kind, x shape, dtype, the attributes) -> the window geometry a pool computes from them (a
#: pure function of the key: a plan run's pools look theirs up instead of computing it again)
_GEOMETRY: dict = {}


def _geometry(kind: str, x, attrs: tuple, make):
    key = (kind, x.shape, x.dtype, *map(_tup, attrs))
    got = _GEOMETRY.get(key)
    if got is None:
        got = make()  # (raises, as before, on attributes the window helpers refuse)
        if len(_GEOMETRY) > 512:
            _GEOMETRY.clear()
        _GEOMETRY[key] = got
    return got


@op("MaxPool")
def max_pool(ctx, x, auto_pad="NOTSET", ceil_mode=0, dilations=None, kernel_shape=(),
             pads=None, storage_order=0, strides=None):
    def make():
        k, st, dil = attrs_nd(x, kernel_shape, strides, dilations)
        padw = pads_for(x.shape[2:], k, st, dil, pads, auto_pad)
        outs = None
        if len(k) == 2 and x.dtype in (np.float32, np.float64) and x.size:
            try:
                outs = [out_size(x.shape[2 + i], k[i], st[i], dil[i], *padw[i], ceil_mode)
                        for i in range(2)]
            except Exception:  # noqa: BLE001 - windows() below says what is wrong
                outs = None
        return k, st, dil, padw, outs

    k, st, dil, padw, outs = _geometry("max", x, (auto_pad, ceil_mode, dilations,
                                                  kernel_shape, pads, strides), make)
    nd = len(k)
    if outs is not None and not ctx.wants(1):
        # the tap loop below in one C pass (the same np.maximum choices, see core.native)
        from tapescope.core import native

        y = native.pool2d("max", x, None, k, st, dil, padw, outs, _arena.empty)
        if y is not None:
            return y
    v, outs = windows(x, k, st, dil, padw, _lowest(x.dtype), ceil_mode)
    # one np.maximum per tap in row-major tap order, as the tape's pool (core.ops.nn.pool_nd):
    # the same choice between -0.0 and +0.0, and ~10x quicker than np.max over a strided view
    y = v[(Ellipsis,) + (0,) * nd].copy()
    for tap in list(np.ndindex(*k))[1:]:
        np.maximum(y, v[(Ellipsis,) + tap], out=y)
    if not ctx.wants(1):
        return y
    # indices into the flattened (N, C, *spatial) input, row-major (or column-major spatial)
    sp = x.shape[2:]
    if storage_order:
        strides_sp = np.cumprod((1,) + sp[:-1])
    else:
        strides_sp = np.cumprod((1,) + sp[::-1][:-1])[::-1]
    pos = np.zeros((1, 1) + sp, dtype=np.int64)
    for i in range(nd):
        shp = [1] * (nd + 2)
        shp[2 + i] = sp[i]
        pos = pos + (np.arange(sp[i]) * strides_sp[i]).reshape(shp)
    pos_v, _ = windows(pos, k, st, dil, padw, -1, ceil_mode)
    flat = v.reshape(v.shape[:2 + nd] + (-1,))
    arg = np.argmax(flat, axis=-1)
    pos_flat = np.broadcast_to(pos_v.reshape(pos_v.shape[:2 + nd] + (-1,)),
                               flat.shape[:2] + pos_v.shape[2:2 + nd] + flat.shape[-1:])
    idx = np.take_along_axis(pos_flat, arg[..., None], axis=-1)[..., 0]
    n, c = x.shape[:2]
    base = (np.arange(n * c).reshape(n, c) * int(np.prod(sp))).reshape((n, c) + (1,) * nd)
    return y, (idx + base).astype(np.int64)


@op("AveragePool")
def avg_pool(ctx, x, auto_pad="NOTSET", ceil_mode=0, count_include_pad=0, dilations=None,
             kernel_shape=(), pads=None, strides=None):
    serial = ctx.k.sum is serial_sum

    def make():
        k, st, dil = attrs_nd(x, kernel_shape, strides, dilations)
        padw = pads_for(x.shape[2:], k, st, dil, pads, auto_pad)
        cnt = None
        if serial and len(k) == 2 and x.dtype in (np.float32, np.float64) \
                and min(st) >= 1 and min(dil) >= 1 and x.size:
            cnt = _avg_counts(x, k, st, dil, padw, ceil_mode, count_include_pad)
        return k, st, dil, padw, cnt

    k, st, dil, padw, cnt = _geometry("avg", x, (serial, auto_pad, ceil_mode,
                                                 count_include_pad, dilations, kernel_shape,
                                                 pads, strides), make)
    if cnt is not None:
        # pool_nd's per-tap loop in one C pass (the same additions in the same order)
        from tapescope.core import native

        y = native.pool2d("avg", x, cnt, k, st, dil, padw, cnt.shape[2:], _arena.empty)
        if y is not None:
            return y
    # the tape's avgpool2d (core.ops.nn.pool_nd) with this kernel set's sum
    return pool_nd(x, "avg", k, st, padw, dil, ceil_mode, count_include_pad, sum_fn=ctx.k.sum)


def _avg_pool2d_native(x, k, st, dil, padw, ceil_mode, count_include_pad):
    """The native average pool of ``x`` with pool_nd's divisors, or None (no native code)."""
    from tapescope.core import native

    cnt = _avg_counts(x, k, st, dil, padw, ceil_mode, count_include_pad)
    if cnt is None:
        return None
    return native.pool2d("avg", x, cnt, k, st, dil, padw, cnt.shape[2:], _arena.empty)


def _avg_counts(x, k, st, dil, padw, ceil_mode, count_include_pad):
    """pool_nd's divisors for x's planes, read-only, or None without native code."""
    from tapescope.core import native

    if native.library() is None:
        return None
    cnt = pool_counts(x[:1, :1], k, st, padw, dil, ceil_mode, count_include_pad)
    cnt = np.ascontiguousarray(cnt, dtype=x.dtype)
    cnt.flags.writeable = False
    return cnt


@op("LpPool")
def lp_pool(ctx, x, auto_pad="NOTSET", ceil_mode=0, dilations=None, kernel_shape=(), p=2,
            pads=None, strides=None):
    k, st, dil = attrs_nd(x, kernel_shape, strides, dilations)
    padw = pads_for(x.shape[2:], k, st, dil, pads, auto_pad)
    v, _ = windows(x, k, st, dil, padw, 0, ceil_mode)
    t = x.dtype.type
    s = ctx.k.sum(np.abs(v) ** t(p), _win_axes(len(k)))
    return (s ** t(1.0 / p)).astype(x.dtype)


@op("GlobalAveragePool")
def global_avg_pool(ctx, x):
    axes = tuple(range(2, x.ndim))
    n = int(np.prod(x.shape[2:]))
    if ctx.k.sum is serial_sum and x.ndim >= 3 and x.dtype in (np.float32, np.float64) \
            and x.size:
        # the serial sum over each plane (flattened, row-major) and the divide in one C pass:
        # one 1 x n window per plane, without serial_sum's transposed copy of x
        from tapescope.core import native

        cnt = np.full(1, n, x.dtype)
        y = native.pool2d("avg", x.reshape(x.shape[:2] + (1, n)), cnt, (1, n), (1, 1), (1, 1),
                          ((0, 0), (0, 0)), (1, 1))
        if y is not None:
            return y.reshape(x.shape[:2] + (1,) * (x.ndim - 2))
    return (ctx.k.sum(x, axes, keepdims=True) / x.dtype.type(n)).astype(x.dtype)


@op("GlobalMaxPool")
def global_max_pool(ctx, x):
    return np.max(x, axis=tuple(range(2, x.ndim)), keepdims=True)


@op("GlobalLpPool")
def global_lp_pool(ctx, x, p=2):
    t = x.dtype.type
    s = ctx.k.sum(np.abs(x) ** t(p), tuple(range(2, x.ndim)), keepdims=True)
    return (s ** t(1.0 / p)).astype(x.dtype)


@op("MaxUnpool")
def max_unpool(ctx, x, indices, output_shape=None, kernel_shape=(), pads=None, strides=None):
    nd = x.ndim - 2
    st = list(strides or [1] * nd)
    p = list(pads or [0] * (2 * nd))
    if output_shape is not None:
        shp = [int(v) for v in np.asarray(output_shape).reshape(-1)]
    else:
        shp = list(x.shape[:2]) + [(x.shape[2 + i] - 1) * st[i] + kernel_shape[i] - p[i] -
                                   p[i + nd] for i in range(nd)]
    y = np.zeros(int(np.prod(shp)), x.dtype)
    y[np.asarray(indices).reshape(-1)] = x.reshape(-1)
    return y.reshape(shp)
