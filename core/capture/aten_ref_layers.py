"""Reference forms of aten's layer kernels: layer norm, batch norm, group norm, convolution,
pools, embedding and scaled dot-product attention, with their backwards. Each is the tape's own
form where it is the same op (``layer_norm``'s lines, ``conv2d`` and its backward, the
``attention`` composite, ``gather``'s scatter-add) and otherwise the composite written in
docs/reference-order.md, "Captured aten ops". Half inputs compute in float32 and round each
output once."""

from __future__ import annotations

import math

import numpy as np

from core.capture.aten_ref_table import (
    F32,
    I64,
    M,
    NoReference,
    arr,
    compute,
    form,
    opt,
    result_type,
)
from core.ops import REGISTRY
from core.ops.nn import conv_nd, windows
from core.ops.reference import matmul as ref_matmul
from core.ops.reference import serial_sum


def _w(x, dt=None):
    return None if x is None else arr(x, compute(dt if dt is not None else x.dtype))


# ---- layer norm -------------------------------------------------------------------------------
def _ln_stats(x2: np.ndarray, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """mu = serial_sum(x) / n; r = 1 / sqrt(serial_sum((x - mu)^2) / n + eps): core's lines."""
    t = x2.dtype.type
    n = t(x2.shape[-1])
    mu = serial_sum(x2, -1, keepdims=True) / n
    d = x2 - mu
    var = serial_sum(d * d, -1, keepdims=True) / n
    return mu, t(1) / np.sqrt(var + t(eps))


@form("aten.native_layer_norm.default")
def _layer_norm(args: list, kwargs: dict) -> list:
    x, shape, weight, bias, eps = args[:5]
    k = len(shape)
    lead = x.shape[:x.ndim - k]
    x2 = _w(x).reshape(-1, math.prod(shape))
    gamma = np.ones(x2.shape[-1], x2.dtype) if weight is None else _w(weight).reshape(-1)
    with np.errstate(all="ignore"):
        y = REGISTRY["layer_norm"].forward(M, [x2, gamma], {"eps": float(eps)})
        if bias is not None:
            y = y + _w(bias).reshape(-1)
        mu, r = _ln_stats(x2, eps)
    stat = lead + (1,) * k
    return [y.reshape(x.shape).astype(x.dtype), mu.reshape(stat).astype(x.dtype),
            r.reshape(stat).astype(x.dtype)]


@form("aten.native_layer_norm_backward.default")
def _layer_norm_backward(args: list, kwargs: dict) -> list:
    g, x, shape, mean, rstd, weight, bias, mask = args[:8]
    d_ = math.prod(shape)
    x2, g2 = _w(x).reshape(-1, d_), _w(g, x.dtype).reshape(-1, d_)
    mu, r = _w(mean, x.dtype).reshape(-1, 1), _w(rstd, x.dtype).reshape(-1, 1)
    t = x2.dtype.type
    n = t(d_)
    out = []
    with np.errstate(all="ignore"):
        xh = (x2 - mu) * r
        gd = g2 if weight is None else g2 * _w(weight).reshape(-1)
        if mask[0]:
            ma = serial_sum(gd, -1, keepdims=True) / n
            mb = serial_sum(gd * xh, -1, keepdims=True) / n
            out.append((r * ((gd - ma) - (xh * mb))).reshape(x.shape).astype(x.dtype))
        if mask[1] and weight is not None:
            out.append(serial_sum(g2 * xh, 0).reshape(weight.shape).astype(weight.dtype))
        if mask[2] and bias is not None:
            out.append(serial_sum(g2, 0).reshape(bias.shape).astype(bias.dtype))
    return out


# ---- batch norm and group norm ----------------------------------------------------------------
def _chan(v: np.ndarray, nd: int) -> np.ndarray:
    return v.reshape((1, -1) + (1,) * (nd - 2))


def _bn_apply(xw, mean, invstd, weight, bias):
    nd = xw.ndim
    y = (xw - _chan(mean, nd)) * _chan(invstd, nd)
    if weight is not None:
        y = y * _chan(_w(weight, xw.dtype), nd)
    if bias is not None:
        y = y + _chan(_w(bias, xw.dtype), nd)
    return y


def batch_norm(x, weight, bias, rm, rv, training: bool, momentum: float, eps: float
               ) -> tuple[list, list]:
    """([out, save_mean, save_invstd], [new running mean, new running var]) (the second list
    empty without running statistics; in eval mode they are unchanged copies)."""
    xw = _w(x)
    t = xw.dtype.type
    ax = (0,) + tuple(range(2, x.ndim))
    n = math.prod(x.shape[a] for a in ax)
    stats = [] if rm is None or rv is None else [arr(rm, rm.dtype).copy(),
                                                 arr(rv, rv.dtype).copy()]
    with np.errstate(all="ignore"):
        if not training:
            if not stats:
                raise NoReference("batch norm in eval mode without running statistics")
            mean, invstd = _w(rm, x.dtype), t(1) / np.sqrt(_w(rv, x.dtype) + t(eps))
            y = _bn_apply(xw, mean, invstd, weight, bias)
            empty = np.zeros((0,), x.dtype)
            return [y.astype(x.dtype), empty, empty.copy()], stats
        mean = serial_sum(xw, ax) / t(n)
        d = xw - _chan(mean, x.ndim)
        ss = serial_sum(d * d, ax)
        invstd = t(1) / np.sqrt((ss / t(n)) + t(eps))
        y = _bn_apply(xw, mean, invstd, weight, bias)
        out = [y.astype(x.dtype), mean.astype(x.dtype), invstd.astype(x.dtype)]
        if stats:
            ct = compute(rm.dtype)
            mo, keep = ct.type(momentum), ct.type(1.0 - momentum)
            unbiased = arr(ss, ct) / ct.type(max(n - 1, 0))
            stats = [((mo * arr(mean, ct)) + (keep * _w(rm))).astype(rm.dtype),
                     ((mo * unbiased) + (keep * _w(rv))).astype(rv.dtype)]
    return out, stats


@form("aten.native_batch_norm.default", "aten._native_batch_norm_legit.default")
def _native_batch_norm(args: list, kwargs: dict) -> list:
    # the running statistics are written arguments (marked Tensor(a!) or, for
    # native_batch_norm, written unmarked, as the recorder records them): they come first
    x, w, b, rm, rv, training, momentum, eps = args[:8]
    out, stats = batch_norm(x, w, b, rm, rv, training, momentum, eps)
    return stats + out


@form("aten._native_batch_norm_legit_functional.default")
def _bn_functional(args: list, kwargs: dict) -> list:
    x, w, b, rm, rv, training, momentum, eps = args[:8]
    out, stats = batch_norm(x, w, b, rm, rv, training, momentum, eps)
    return out + stats


@form("aten._native_batch_norm_legit.no_stats")
def _bn_no_stats(args: list, kwargs: dict) -> list:
    x, w, b, training, momentum, eps = args[:6]
    return batch_norm(x, w, b, None, None, True, momentum, eps)[0]


@form("aten._native_batch_norm_legit_no_training.default")
def _bn_no_training(args: list, kwargs: dict) -> list:
    x, w, b, rm, rv, momentum, eps = args[:7]
    return batch_norm(x, w, b, rm, rv, False, momentum, eps)[0]


@form("aten.native_batch_norm_backward.default")
def _bn_backward(args: list, kwargs: dict) -> list:
    g, x, weight, rm, rv, save_mean, save_invstd, train, eps, mask = args[:10]
    xw, gw = _w(x), _w(g, x.dtype)
    t = xw.dtype.type
    nd = x.ndim
    ax = (0,) + tuple(range(2, nd))
    n = t(math.prod(x.shape[a] for a in ax))
    with np.errstate(all="ignore"):
        if train:
            mean, invstd = _w(save_mean, x.dtype), _w(save_invstd, x.dtype)
        else:
            mean, invstd = _w(rm, x.dtype), t(1) / np.sqrt(_w(rv, x.dtype) + t(eps))
        sum_g = serial_sum(gw, ax)
        dot = serial_sum((xw - _chan(mean, nd)) * gw, ax)
        wv = np.ones(x.shape[1], xw.dtype) if weight is None else _w(weight, x.dtype)
        out = []
        if mask[0]:
            if train:
                k = ((dot * invstd) * invstd) / n
                dx = (xw - _chan(mean, nd)) * _chan(k, nd)
                gx = (((gw - _chan(sum_g / n, nd)) - dx) * _chan(invstd, nd)) * _chan(wv, nd)
            else:
                gx = gw * _chan(invstd * wv, nd)
            out.append(gx.astype(x.dtype))
        if mask[1]:
            out.append((dot * invstd).astype(x.dtype if weight is None else weight.dtype))
        if mask[2]:
            out.append(sum_g.astype(x.dtype if weight is None else weight.dtype))
    return out


@form("aten.native_group_norm.default")
def _group_norm(args: list, kwargs: dict) -> list:
    x, weight, bias, n_, c, hw, groups, eps = args[:8]
    xg = _w(x).reshape(n_, groups, -1)
    mu, r = _ln_stats(xg, eps)
    with np.errstate(all="ignore"):
        y = ((xg - mu) * r).reshape(n_, c, -1)
        if weight is not None:
            y = y * _w(weight, x.dtype).reshape(1, c, 1)
        if bias is not None:
            y = y + _w(bias, x.dtype).reshape(1, c, 1)
    return [y.reshape(x.shape).astype(x.dtype), mu.reshape(n_, groups).astype(x.dtype),
            r.reshape(n_, groups).astype(x.dtype)]


@form("aten.native_group_norm_backward.default")
def _group_norm_backward(args: list, kwargs: dict) -> list:
    g, x, mean, rstd, weight, n_, c, hw, groups, mask = args[:10]
    xw, gw = _w(x).reshape(n_, c, -1), _w(g, x.dtype).reshape(n_, c, -1)
    mu = _w(mean, x.dtype).reshape(n_, groups, 1, 1)
    r = _w(rstd, x.dtype).reshape(n_, groups, 1, 1)
    t = xw.dtype.type
    cg = c // groups
    with np.errstate(all="ignore"):
        xh = ((xw.reshape(n_, groups, cg, -1) - mu) * r)
        wv = np.ones(c, xw.dtype) if weight is None else _w(weight, x.dtype)
        gd = (gw * wv.reshape(1, c, 1)).reshape(n_, groups, cg, -1)
        out = []
        if mask[0]:
            m = t(cg * xw.shape[-1])
            ma = serial_sum(gd, (2, 3), keepdims=True) / m
            mb = serial_sum(gd * xh, (2, 3), keepdims=True) / m
            out.append((r * ((gd - ma) - (xh * mb))).reshape(x.shape).astype(x.dtype))
        if mask[1]:
            out.append(serial_sum(gw * xh.reshape(n_, c, -1), (0, 2)).astype(x.dtype))
        if mask[2]:
            out.append(serial_sum(gw, (0, 2)).astype(x.dtype))
    return out


# ---- convolution ------------------------------------------------------------------------------
def _geom(x_nd: int, stride, padding, dilation):
    k = x_nd - 2

    def rep(v):
        return [int(v)] * k if isinstance(v, int) else (
            list(v) * k if len(v) == 1 else [int(a) for a in v])
    return rep(stride), rep(padding), rep(dilation)


def _as2d(x: np.ndarray) -> np.ndarray:
    return x[:, :, None, :] if x.ndim == 3 else x


def _conv_at(x_nd: int, stride, padding, dilation, groups) -> dict:
    """The tape conv2d op's attributes (a 1-d convolution is a 2-d one of height 1)."""
    st, pd, dl = _geom(x_nd, stride, padding, dilation)
    if x_nd == 3:
        st, pd, dl = [1] + st, [0] + pd, [1] + dl
    return {"strides": tuple(st), "pads": (pd[0], pd[1], pd[0], pd[1]), "dilations": tuple(dl),
            "group": int(groups)}


def _transposed_shape(x, w, at, output_padding) -> tuple:
    """The output shape of a transposed convolution (2-d form)."""
    op = list(output_padding) if len(output_padding) == 2 else [0] + list(output_padding)
    hw = [(x.shape[2 + i] - 1) * at["strides"][i] - 2 * at["pads"][i]
          + at["dilations"][i] * (w.shape[2 + i] - 1) + op[i] + 1 for i in range(2)]
    return (x.shape[0], w.shape[1] * at["group"], *hw)


def _conv_input_grad(g, w, x_shape, at):
    """The tape conv2d's input gradient (wᵀ·g, then col2im): a transposed convolution."""
    zero = np.broadcast_to(np.zeros((), g.dtype), x_shape)
    return REGISTRY["conv2d"].backward(M, g, [zero, w], None, at, [True, False])[0]


@form("aten.convolution.default", "aten._convolution.default")
def _convolution(args: list, kwargs: dict) -> list:
    x, w, bias, stride, padding, dilation, transposed, output_padding, groups = args[:9]
    if x.ndim not in (3, 4) and (transposed or x.ndim != 5):
        raise NoReference(f"convolution of a {x.ndim}-d input")
    out = result_type(x, w)
    xw, ww = _w(x, out), _w(w, out)
    with np.errstate(all="ignore"):
        if transposed:  # the adjoint of conv2d: its input gradient, with x as the gradient
            at = _conv_at(x.ndim, stride, padding, dilation, groups)
            x2, w2 = _as2d(xw), _as2d(ww)
            y = _conv_input_grad(x2, w2, _transposed_shape(x2, w2, at, output_padding), at)
            y = y[:, :, 0, :] if x.ndim == 3 else y
        else:
            st, pd, dl = _geom(x.ndim, stride, padding, dilation)
            y = conv_nd(xw, ww, st, [(p, p) for p in pd], dl, int(groups))
        if bias is not None:
            y = y + _w(bias, out).reshape((1, -1) + (1,) * (x.ndim - 2))  # a separate add
    return [y.astype(out)]


@form("aten.convolution_backward.default")
def _convolution_backward(args: list, kwargs: dict) -> list:
    g, x, w, bias_sizes, stride, padding, dilation, transposed, out_pad, groups, mask = args[:11]
    if x.ndim not in (3, 4):
        raise NoReference("convolution_backward: only 1-d and 2-d")
    at = _conv_at(x.ndim, stride, padding, dilation, groups)
    out = result_type(x, w)
    gw_, xw, ww = _as2d(_w(g, out)), _as2d(_w(x, out)), _as2d(_w(w, out))
    res = []
    with np.errstate(all="ignore"):
        if transposed:
            # y = Aᵀx with A the conv2d of weight w: gx = A(g), gw = conv2d's weight gradient
            # with g as its input and x as its output gradient
            st, pd, dl = at["strides"], at["pads"], at["dilations"]
            gx = conv_nd(gw_, ww, st, [(pd[0], pd[0]), (pd[1], pd[1])], dl, at["group"]) \
                if mask[0] else None
            gww = REGISTRY["conv2d"].backward(M, xw, [gw_, ww], None, at,
                                              [False, True])[1] if mask[1] else None
        else:
            gx, gww = REGISTRY["conv2d"].backward(M, gw_, [xw, ww], None, at,
                                                  [mask[0], mask[1]])
        if mask[0]:
            res.append(gx.reshape(x.shape).astype(x.dtype))
        if mask[1]:
            res.append(gww.reshape(w.shape).astype(w.dtype))
        if mask[2]:
            res.append(serial_sum(gw_, (0, 2, 3)).astype(out))
    return res


def _nearest(n_out: int, n_in: int, scale) -> np.ndarray:
    """torch's nearest source index: floor(i * s), s = 1 / scale if given else in / out (float
    arithmetic as torch's ``nearest_idx``), clamped."""
    i = np.arange(n_out)
    if n_out == n_in:
        return i
    if n_out == 2 * n_in:
        return i >> 1
    s = np.float32(1.0 / scale if scale else n_in / n_out)
    return np.minimum(np.floor(i.astype(np.float32) * s).astype(np.int64), n_in - 1)


def _up_idx(in_hw, out_hw, scales):
    sh = scales[0] if scales else None
    sw = scales[1] if scales and len(scales) > 1 else None
    return _nearest(out_hw[0], in_hw[0], sh), _nearest(out_hw[1], in_hw[1], sw)


@form("aten.upsample_nearest2d.default", "aten.upsample_nearest2d.vec")
def _upsample_nearest(args: list, kwargs: dict) -> list:
    x, size = args[0], opt(kwargs, args, 1, "output_size")
    scales = [opt(kwargs, args, 2, "scales_h"), opt(kwargs, args, 3, "scales_w")]
    if isinstance(scales[0], list | tuple):  # .vec: (input, output_size, scale_factors)
        scales = list(scales[0])
    if size is None:
        size = [int(np.floor(x.shape[-2 + i] * scales[i])) for i in range(2)]
    ih, iw = _up_idx(x.shape[-2:], size, scales if any(v is not None for v in scales) else None)
    return [np.array(x[..., ih[:, None], iw[None, :]])]


@form("aten.upsample_nearest2d_backward.default")
def _upsample_nearest_backward(args: list, kwargs: dict) -> list:
    g, out_size, in_size = args[0], args[1], args[2]
    scales = [opt(kwargs, args, 3, "scales_h"), opt(kwargs, args, 4, "scales_w")]
    ih, iw = _up_idx(in_size[-2:], out_size, scales if any(v is not None for v in scales)
                     else None)
    gw = _w(g)
    gx = np.zeros(tuple(in_size[:-2]) + (in_size[-2] * in_size[-1],), gw.dtype)
    flat = (ih[:, None] * in_size[-1] + iw[None, :]).reshape(-1)
    g2 = gw.reshape(gx.shape[:-1] + (-1,))
    for j in range(flat.size):  # output pixels in row-major order, each added to its source
        gx[..., flat[j]] += g2[..., j]
    return [gx.reshape(tuple(in_size)).astype(g.dtype)]


# ---- pools ------------------------------------------------------------------------------------
def _pool_args(args: list, kwargs: dict, x: np.ndarray):
    k = list(args[1]) * (2 if len(args[1]) == 1 else 1)
    st = opt(kwargs, args, 2, "stride", []) or k
    st = list(st) * (2 if len(st) == 1 else 1)
    pd = opt(kwargs, args, 3, "padding", 0)
    pd = [pd, pd] if isinstance(pd, int) else list(pd) * (2 if len(pd) == 1 else 1)
    dl = opt(kwargs, args, 4, "dilation", 1)
    dl = [dl, dl] if isinstance(dl, int) else list(dl) * (2 if len(dl) == 1 else 1)
    return k, st, pd, dl, bool(opt(kwargs, args, 5, "ceil_mode", False))


@form("aten.max_pool2d_with_indices.default")
def _max_pool(args: list, kwargs: dict) -> list:
    x = args[0]
    x4 = x if x.ndim == 4 else x[None]
    k, st, pd, dl, cm = _pool_args(args, kwargs, x)
    low = -np.inf if x.dtype.kind in "fV" else np.iinfo(x.dtype).min
    v, outs = windows(x4, k, st, dl, [(p, p) for p in pd], low, int(cm))
    flat = v.reshape(v.shape[:4] + (-1,))
    arg = np.argmax(flat, axis=-1)  # the window's first maximum in row-major tap order
    y = np.take_along_axis(flat, arg[..., None], axis=-1)[..., 0]
    kh, kw = np.unravel_index(arg, k)
    rows = np.arange(outs[0]).reshape(-1, 1) * st[0] - pd[0] + kh * dl[0]
    cols = np.arange(outs[1]).reshape(1, -1) * st[1] - pd[1] + kw * dl[1]
    idx = (rows * x4.shape[3] + cols).astype(I64)
    return [y.reshape(x.shape[:-2] + y.shape[-2:]), idx.reshape(x.shape[:-2] + y.shape[-2:])]


@form("aten.max_pool2d_with_indices_backward.default")
def _max_pool_backward(args: list, kwargs: dict) -> list:
    g, x, idx = args[0], args[1], args[7]
    g2 = _w(g, x.dtype).reshape(-1, math.prod(g.shape[-2:]))
    i2 = np.asarray(idx).reshape(g2.shape)
    gx = np.zeros((g2.shape[0], x.shape[-2] * x.shape[-1]), g2.dtype)
    planes = np.arange(g2.shape[0]).reshape(-1, 1)
    np.add.at(gx, (np.broadcast_to(planes, i2.shape), i2), g2)  # row-major output order
    return [gx.reshape(x.shape).astype(x.dtype)]


def _avg_at(args: list, kwargs: dict) -> dict:
    k = list(args[1]) * (2 if len(args[1]) == 1 else 1)
    st = opt(kwargs, args, 2, "stride", []) or k
    st = list(st) * (2 if len(st) == 1 else 1)
    pd = opt(kwargs, args, 3, "padding", 0)
    pd = [pd, pd] if isinstance(pd, int) else list(pd) * (2 if len(pd) == 1 else 1)
    if opt(kwargs, args, 6, "divisor_override") is not None:
        raise NoReference("avg_pool2d with divisor_override")
    return {"kernel": tuple(k), "strides": tuple(st), "pads": (pd[0], pd[1], pd[0], pd[1]),
            "ceil_mode": int(bool(opt(kwargs, args, 4, "ceil_mode", False))),
            "count_include_pad": int(bool(opt(kwargs, args, 5, "count_include_pad", True)))}


@form("aten.avg_pool2d.default")
def _avg_pool(args: list, kwargs: dict) -> list:
    x = args[0]
    at = _avg_at(args, kwargs)
    x4 = _w(x) if x.ndim == 4 else _w(x)[None]
    y = REGISTRY["avgpool2d"].forward(M, [x4], at)
    return [y.reshape(x.shape[:-2] + y.shape[-2:]).astype(x.dtype)]


@form("aten.avg_pool2d_backward.default")
def _avg_pool_backward(args: list, kwargs: dict) -> list:
    g, x = args[0], args[1]
    at = _avg_at(args[1:], {})
    x4 = _w(x) if x.ndim == 4 else _w(x)[None]
    g4 = _w(g, x.dtype).reshape((-1,) + x4.shape[1:2] + g.shape[-2:])
    gx = REGISTRY["avgpool2d"].backward(M, g4, [x4], None, at, [True])[0]
    return [gx.reshape(x.shape).astype(x.dtype)]


@form("aten._adaptive_avg_pool2d.default", "aten.adaptive_avg_pool2d.default")
def _adaptive_avg(args: list, kwargs: dict) -> list:
    x, (oh, ow) = args[0], args[1]
    h, w = x.shape[-2:]
    if (oh, ow) != (1, 1) and (h % oh or w % ow):
        raise NoReference("adaptive_avg_pool2d with uneven windows")
    xw = _w(x).reshape(x.shape[:-2] + (oh, h // oh, ow, w // ow))
    with np.errstate(all="ignore"):
        y = serial_sum(xw, (-3, -1)) / xw.dtype.type((h // oh) * (w // ow))
    return [y.astype(x.dtype)]


@form("aten._adaptive_avg_pool2d_backward.default")
def _adaptive_avg_backward(args: list, kwargs: dict) -> list:
    g, x = args[0], args[1]
    oh, ow = g.shape[-2:]
    h, w = x.shape[-2:]
    if h % oh or w % ow:
        raise NoReference("adaptive_avg_pool2d_backward with uneven windows")
    gw = _w(g, x.dtype)
    gd = gw / gw.dtype.type((h // oh) * (w // ow))
    gx = np.repeat(np.repeat(gd, h // oh, axis=-2), w // ow, axis=-1)
    return [gx.astype(x.dtype)]


# ---- embedding --------------------------------------------------------------------------------
@form("aten.embedding.default")
def _embedding(args: list, kwargs: dict) -> list:
    w, idx = args[0], np.asarray(args[1]).astype(I64)
    return [np.take(w, idx, axis=0)]


@form("aten.embedding_dense_backward.default")
def _embedding_backward(args: list, kwargs: dict) -> list:
    g, idx, num, pad, scale = args[:5]
    if scale:
        raise NoReference("embedding_dense_backward with scale_grad_by_freq")
    rows = np.asarray(idx).astype(I64).reshape(-1)
    gw = _w(g).reshape(rows.size, -1)
    base = np.broadcast_to(np.zeros((), gw.dtype), (int(num), gw.shape[1]))
    # the tape's gather backward: zeros, then g's rows added in index order
    out = REGISTRY["gather"].backward(M, gw, [base, rows], None, {"axis": 0}, [True, False])[0]
    if 0 <= pad < num:
        out[pad] = 0
    return [out.astype(g.dtype)]


# ---- scaled dot-product attention -------------------------------------------------------------
def _scores(q, k, scale, is_causal, mask):
    s = ref_matmul(q, np.swapaxes(k, -1, -2))
    t = s.dtype.type
    sc = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    s = s * t(sc)  # the scale rounded once on the host, as the tape's attention
    if is_causal:
        ls, ss = s.shape[-2:]
        s = s + np.triu(np.full((ls, ss), -np.inf, s.dtype), k=1)
    if mask is not None:
        m = np.asarray(mask)
        s = np.where(m, s, t(-np.inf)) if m.dtype == np.bool_ else s + arr(m, s.dtype)
    return s, t(sc)


def _attention(q, k, v, mask, dropout_p, is_causal, scale):
    if dropout_p:
        raise NoReference("scaled dot-product attention with dropout is random")
    if q.shape[:-2] != k.shape[:-2]:
        raise NoReference("scaled dot-product attention with grouped heads (enable_gqa)")
    out = result_type(q, k, v)
    qw, kw, vw = _w(q, out), _w(k, out), _w(v, out)
    with np.errstate(all="ignore"):
        s, _ = _scores(qw, kw, scale, is_causal, mask)
        p = REGISTRY["softmax"].forward(M, [s], {"axis": -1})
        o = ref_matmul(p, vw)
        m = np.max(s, axis=-1, keepdims=True)
        lse = m + M.log(serial_sum(M.exp(s - m), -1, keepdims=True))
    return o.astype(out), lse[..., 0], p, out


@form("aten._scaled_dot_product_flash_attention_for_cpu.default")
def _sdpa_flash_cpu(args: list, kwargs: dict) -> list:
    q, k, v = args[:3]
    o, lse, _, out = _attention(q, k, v, kwargs.get("attn_mask"), opt(kwargs, args, 3,
                                "dropout_p", 0.0), opt(kwargs, args, 4, "is_causal", False),
                                kwargs.get("scale"))
    return [o, lse.astype(F32 if out != np.float64 else out)]


@form("aten._scaled_dot_product_attention_math.default")
def _sdpa_math(args: list, kwargs: dict) -> list:
    q, k, v = args[:3]
    o, _, p, out = _attention(q, k, v, opt(kwargs, args, 3, "attn_mask"),
                              opt(kwargs, args, 4, "dropout_p", 0.0),
                              opt(kwargs, args, 5, "is_causal", False), kwargs.get("scale"))
    return [o, p.astype(out)]


@form("aten.scaled_dot_product_attention.default")
def _sdpa(args: list, kwargs: dict) -> list:
    q, k, v = args[:3]
    return [_attention(q, k, v, opt(kwargs, args, 3, "attn_mask"),
                       opt(kwargs, args, 4, "dropout_p", 0.0),
                       opt(kwargs, args, 5, "is_causal", False), kwargs.get("scale"))[0]]


@form("aten._scaled_dot_product_flash_attention_for_cpu_backward.default")
def _sdpa_flash_cpu_backward(args: list, kwargs: dict) -> list:
    g, q, k, v = args[:4]
    dropout_p, is_causal = opt(kwargs, args, 6, "dropout_p", 0.0), opt(kwargs, args, 7,
                                                                      "is_causal", False)
    if dropout_p:
        raise NoReference("scaled dot-product attention with dropout is random")
    out = result_type(q, k, v)
    qw, kw, vw, gw = _w(q, out), _w(k, out), _w(v, out), _w(g, out)
    with np.errstate(all="ignore"):
        # the forward's probabilities again (the recorded out and logsumexp are not read), then
        # the tape's attention backward: bmm, softmax and muls rules in reverse
        s, sc = _scores(qw, kw, kwargs.get("scale"), is_causal, kwargs.get("attn_mask"))
        p = REGISTRY["softmax"].forward(M, [s], {"axis": -1})
        gv = ref_matmul(np.swapaxes(p, -1, -2), gw)
        gp = ref_matmul(gw, np.swapaxes(vw, -1, -2))
        gs = REGISTRY["softmax"].backward(M, gp, [s], p, {"axis": -1}, [True])[0] * sc
        gq = ref_matmul(gs, kw)
        gk = ref_matmul(np.swapaxes(gs, -1, -2), qw)
    return [gq.astype(q.dtype), gk.astype(k.dtype), gv.astype(v.dtype)]
