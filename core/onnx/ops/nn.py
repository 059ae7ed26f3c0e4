"""Convolutions and normalisations.

Conv is im2col (a strided window view) followed by ``ctx.k.matmul``: each output element is
``acc = 0.0; for (c, k1, k2, ...) in row-major order: acc = acc + w*x`` then ``+ bias`` — the
reference order written out in docs/reference-order-nn.md.
"""

from __future__ import annotations

import numpy as np

from tapescope.core.onnx.ops.window import attrs_nd, pads_for
from tapescope.core.onnx.registry import op
from tapescope.core.ops.nn import conv_nd


@op("Conv")
def conv(ctx, x, w, b=None, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None,
         pads=None, strides=None):
    m = w.shape[0]
    k, st, dil = attrs_nd(x, kernel_shape or w.shape[2:], strides, dilations)
    padw = pads_for(x.shape[2:], k, st, dil, pads, auto_pad)
    # the tape's conv2d (core.ops.nn.conv_nd) with this kernel set's matmul, then the bias add
    y = conv_nd(x, w, st, padw, dil, group, matmul=ctx.k.matmul)
    if b is not None:
        bb = b.reshape((1, m) + (1,) * len(k))
        if bb.dtype == y.dtype and y.flags.writeable:
            np.add(y, bb, out=y)  # conv_nd's result is always a new array: the same add, in place
        else:
            y = y + bb
    return y


@op("ConvTranspose")
def conv_transpose(ctx, x, w, b=None, auto_pad="NOTSET", dilations=None, group=1,
                   kernel_shape=None, output_padding=None, output_shape=None, pads=None,
                   strides=None):
    n, c = x.shape[:2]
    sp = x.shape[2:]
    nd = len(sp)
    k = list(kernel_shape or w.shape[2:])
    st = list(strides or [1] * nd)
    dil = list(dilations or [1] * nd)
    opad = list(output_padding or [0] * nd)
    g = group
    mg = w.shape[1]
    m = mg * g
    full = [st[i] * (sp[i] - 1) + opad[i] + (k[i] - 1) * dil[i] + 1 for i in range(nd)]
    if output_shape:
        osh = list(output_shape)[-nd:]
        total = [full[i] - osh[i] for i in range(nd)]
        if auto_pad == "SAME_UPPER" or auto_pad == "NOTSET":
            padw = [(t // 2, t - t // 2) for t in total] if auto_pad == "SAME_UPPER" else \
                [(t - t // 2, t // 2) for t in total]
        else:
            padw = [(t - t // 2, t // 2) for t in total]
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        total = [full[i] - sp[i] * st[i] for i in range(nd)]
        padw = [(t // 2, t - t // 2) if auto_pad == "SAME_UPPER" else (t - t // 2, t // 2)
                for t in total]
    else:
        p = list(pads or [0] * (2 * nd))
        padw = [(p[i], p[i + nd]) for i in range(nd)]
    kprod = int(np.prod(k))
    cg = c // g
    # cols[n, g, (mg, *k), P] = sum_c w[c, mg, *k] * x[n, c, P]   (serial in c)
    wt = w.reshape(g, cg, mg * kprod).transpose(0, 2, 1)
    xs = x.reshape(n, g, cg, int(np.prod(sp)))
    cols = ctx.k.matmul(wt[None], xs).astype(x.dtype, copy=False)
    cols = cols.reshape((n, m) + tuple(k) + tuple(sp))
    y = np.zeros((n, m) + tuple(full), dtype=x.dtype)
    # scatter-add each kernel tap (a strided slice of y); taps in row-major order
    for tap in np.ndindex(*k):
        dst = [slice(None), slice(None)]
        dst += [slice(tap[i] * dil[i], tap[i] * dil[i] + st[i] * (sp[i] - 1) + 1, st[i])
                for i in range(nd)]
        y[tuple(dst)] += cols[(slice(None), slice(None)) + tap]
    if any(b < 0 or e < 0 for b, e in padw):  # output_shape larger than the full result
        y = np.pad(y, [(0, 0), (0, 0)] + [(max(-b, 0), max(-e, 0)) for b, e in padw])
        full = list(y.shape[2:])
        padw = [(max(b, 0), max(e, 0)) for b, e in padw]
    crop = [slice(None), slice(None)] + [slice(padw[i][0], full[i] - padw[i][1])
                                         for i in range(nd)]
    y = y[tuple(crop)]
    if b is not None:
        y = y + b.reshape((1, m) + (1,) * nd)
    return np.ascontiguousarray(y)


def _bcast_c(v, ndim):
    return v.reshape((1, -1) + (1,) * (ndim - 2))


@op("BatchNormalization")
def batch_norm(ctx, x, scale, bias, mean, var, epsilon=1e-5, momentum=0.9, training_mode=0,
               spatial=1, is_test=0, consumed_inputs=None):
    t = x.dtype.type
    if training_mode:
        axes = (0,) + tuple(range(2, x.ndim))
        n = x.size // x.shape[1]
        bm = ctx.k.sum(x, axes) / t(n)
        d = x - _bcast_c(bm, x.ndim)
        bv = ctx.k.sum(d * d, axes) / t(n)
        y = d / np.sqrt(_bcast_c(bv, x.ndim) + t(epsilon)) * _bcast_c(scale, x.ndim) + \
            _bcast_c(bias, x.ndim)
        rm = mean * t(momentum) + bm * t(1 - momentum)
        rv = var * t(momentum) + bv * t(1 - momentum)
        return y.astype(x.dtype), rm.astype(mean.dtype), rv.astype(var.dtype)
    # inference, written as (x - mean) / sqrt(var + eps) * scale + bias; the same four roundings
    # in place in one buffer (no full-size temporary per step)
    if all(v.dtype == x.dtype and v.size == x.shape[1] for v in (mean, var, scale, bias)) \
            and x.ndim >= 2:
        from tapescope.core import native

        den = np.sqrt(var + t(epsilon))  # per channel, as the broadcast form computes it
        y = native.channel_norm(x, mean, den, scale, bias)  # one C pass, the same roundings
        if y is not None:
            return y
    y = np.subtract(x, _bcast_c(mean, x.ndim))
    if all(v.dtype == x.dtype for v in (y, var, scale, bias)):
        np.divide(y, np.sqrt(_bcast_c(var, x.ndim) + t(epsilon)), out=y)
        np.multiply(y, _bcast_c(scale, x.ndim), out=y)
        np.add(y, _bcast_c(bias, x.ndim), out=y)
        return y
    y = y / np.sqrt(_bcast_c(var, x.ndim) + t(epsilon)) * _bcast_c(scale, x.ndim) + \
        _bcast_c(bias, x.ndim)
    return y.astype(x.dtype, copy=False)


def _norm(ctx, x, axes, eps):
    """mean = sum / n; d = x - mean; var = sum(d*d) / n; inv_std = 1 / sqrt(var + eps)."""
    t = x.dtype.type
    n = int(np.prod([x.shape[a] for a in axes]))
    mean = ctx.k.sum(x, axes, keepdims=True) / t(n)
    d = x - mean
    var = ctx.k.sum(d * d, axes, keepdims=True) / t(n)
    return mean, d, t(1) / np.sqrt(var + t(eps))


@op("InstanceNormalization")
def instance_norm(ctx, x, scale, bias, epsilon=1e-5):
    _, d, inv = _norm(ctx, x, tuple(range(2, x.ndim)), epsilon)
    return (d * inv * _bcast_c(scale, x.ndim) + _bcast_c(bias, x.ndim)).astype(x.dtype)


@op("LayerNormalization")
def layer_norm(ctx, x, scale, bias=None, axis=-1, epsilon=1e-5, stash_type=1):
    ax = axis % x.ndim
    xs = x.astype(np.float32) if stash_type == 1 and x.dtype != np.float64 else x
    mean, d, inv = _norm(ctx, xs, tuple(range(ax, x.ndim)), epsilon)
    y = d * inv * scale
    if bias is not None:
        y = y + bias
    return y.astype(x.dtype), mean.astype(xs.dtype), inv.astype(xs.dtype)


@op("GroupNormalization")
def group_norm(ctx, x, scale, bias, epsilon=1e-5, num_groups=1, stash_type=1):
    n, c = x.shape[:2]
    xg = x.reshape((n, num_groups, -1))
    _, d, inv = _norm(ctx, xg, (2,), epsilon)
    y = (d * inv).reshape(x.shape)
    if ctx.opset >= 21:  # per-channel scale/bias
        return (y * _bcast_c(scale, x.ndim) + _bcast_c(bias, x.ndim)).astype(x.dtype)
    sc = np.repeat(scale, c // num_groups)
    bi = np.repeat(bias, c // num_groups)
    return (y * _bcast_c(sc, x.ndim) + _bcast_c(bi, x.ndim)).astype(x.dtype)


@op("MeanVarianceNormalization")
def mvn(ctx, x, axes=(0, 2, 3)):
    _, d, inv = _norm(ctx, x, tuple(a % x.ndim for a in axes), 1e-9)
    return (d * inv).astype(x.dtype)


@op("LpNormalization")
def lp_norm(ctx, x, axis=-1, p=2):
    ax = axis % x.ndim
    if p == 1:
        nrm = ctx.k.sum(np.abs(x), ax, keepdims=True)
    else:
        nrm = np.sqrt(ctx.k.sum(x * x, ax, keepdims=True))
    return np.where(nrm == 0, 0, x / nrm).astype(x.dtype)


@op("LRN")
def lrn(ctx, x, size, alpha=1e-4, beta=0.75, bias=1.0):
    c = x.shape[1]
    sq = x * x
    lo, hi = (size - 1) // 2, size // 2  # window [c - floor((s-1)/2), c + ceil((s-1)/2)]
    pad = np.pad(sq, [(0, 0), (lo, hi)] + [(0, 0)] * (x.ndim - 2))
    s = np.zeros_like(x)
    for j in range(size):  # serial over the channel window, vectorised over pixels
        s = s + pad[:, j:j + c]
    t = x.dtype.type
    return (x / (t(bias) + t(alpha / size) * s) ** t(beta)).astype(x.dtype)
