"""Reference forms of aten's convolutions (plain and transposed, 1-d, 2-d and 3-d) and their
backward, pools (max with indices, average, adaptive average; 3-d max with indices and
average), reflection and replication padding, im2col / col2im (``F.unfold`` / ``F.fold``) and
nearest, linear (1-d), bilinear, trilinear and bicubic upsampling, with their backwards. A
convolution is the tape's ``conv2d`` (im2col and the reference product; a 1-d one is a 2-d one
of height 1; the bias a separate add), its backward the tape's ``conv2d`` backward; a
transposed convolution is that backward's input gradient (the adjoint); a 3-d one is the
tape's ``conv3d`` / ``conv_transpose3d`` (the same orders with a depth axis). Scatter-adds run
in row-major output order. Orders: docs/reference-order.md, "Captured aten ops"."""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any

import numpy as np

from tapescope.core import native
from tapescope.core.capture.aten_ref_table import (
    F32,
    I64,
    M,
    NoReference,
    check_elems,
    compute,
    form,
    fp_quiet,
    is_float,
    opt,
    result_type,
    wide,
)
from tapescope.core.ops import REGISTRY
from tapescope.core.ops.nn import conv_nd, conv_transpose_2d, out_size, windows
from tapescope.core.ops.reference import serial_sum

_w = wide


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


def _at3d(stride, padding, dilation, groups, output_padding=None) -> dict:
    """The tape conv3d / conv_transpose3d op's attributes (aten's symmetric padding)."""
    st, pd, dl = _geom(5, stride, padding, dilation)
    at = {"strides": tuple(st), "pads": tuple(pd) + tuple(pd), "dilations": tuple(dl),
          "group": int(groups)}
    if output_padding is not None:
        at["output_padding"] = tuple(_geom(5, output_padding, 0, 1)[0])
    return at


@form("aten.convolution.default", "aten._convolution.default")
def _convolution(args: list, kwargs: dict) -> list:
    x, w, bias, stride, padding, dilation, transposed, output_padding, groups = args[:9]
    if x.ndim not in (3, 4, 5):
        raise NoReference(f"convolution of a {x.ndim}-d input")
    out = result_type(x, w)
    xw, ww = _w(x, out), _w(w, out)
    with fp_quiet():
        if transposed and x.ndim == 5:  # the tape's conv_transpose3d (col2im of wᵀ·x)
            at = _at3d(stride, padding, dilation, groups, output_padding)
            y = conv_transpose_2d(xw, ww, at["strides"], [(p, p) for p in at["pads"][:3]],
                                  at["dilations"], at["group"], at["output_padding"])
        elif transposed:  # the adjoint of conv2d: its input gradient, with x as the gradient
            at = _conv_at(x.ndim, stride, padding, dilation, groups)
            x2, w2 = _as2d(xw), _as2d(ww)
            y = _conv_input_grad(x2, w2, _transposed_shape(x2, w2, at, output_padding), at)
            y = y[:, :, 0, :] if x.ndim == 3 else y
        else:
            st, pd, dl = _geom(x.ndim, stride, padding, dilation)
            y = conv_nd(xw, ww, st, [(p, p) for p in pd], dl, int(groups))
        if bias is not None:
            y = y + _w(bias, out).reshape((1, -1) + (1,) * (x.ndim - 2))  # a separate add
    return [y.astype(out, copy=False)]


@form("aten.convolution_backward.default")
def _convolution_backward(args: list, kwargs: dict) -> list:
    g, x, w, bias_sizes, stride, padding, dilation, transposed, out_pad, groups, mask = args[:11]
    if x.ndim == 5:  # the tape's conv3d / conv_transpose3d backward
        out = result_type(x, w)
        op = "conv_transpose3d" if transposed else "conv3d"
        at = _at3d(stride, padding, dilation, groups, out_pad if transposed else None)
        gw_ = _w(g, out)
        with fp_quiet():
            gx, gww = REGISTRY[op].backward(M, gw_, [_w(x, out), _w(w, out)], None, at,
                                            [mask[0], mask[1]])
            res = []
            if mask[0]:
                res.append(np.asarray(gx).reshape(x.shape).astype(x.dtype, copy=False))
            if mask[1]:
                res.append(np.asarray(gww).reshape(w.shape).astype(w.dtype, copy=False))
            if mask[2]:
                res.append(serial_sum(gw_, (0, 2, 3, 4)).astype(out))
        return res
    if x.ndim not in (3, 4):
        raise NoReference("convolution_backward: only 1-d, 2-d and 3-d")
    at = _conv_at(x.ndim, stride, padding, dilation, groups)
    out = result_type(x, w)
    gw_, xw, ww = _as2d(_w(g, out)), _as2d(_w(x, out)), _as2d(_w(w, out))
    res = []
    with fp_quiet():
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
            res.append(gx.reshape(x.shape).astype(x.dtype, copy=False))
        if mask[1]:
            res.append(gww.reshape(w.shape).astype(w.dtype, copy=False))
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


def _nearest_exact(n_out: int, n_in: int, scale) -> np.ndarray:
    """torch's nearest-exact source index: ``min(floor((i + 0.5) * s), in - 1)``, the product
    rounded to float (``floorf``'s argument), ``s`` as ``_nearest``'s."""
    s = np.float32(1.0 / scale if scale else n_in / n_out)
    i = np.arange(n_out).astype(np.float32) + np.float32(0.5)
    return np.minimum(np.floor(i * s).astype(np.int64), n_in - 1)


def _up_idx(in_hw, out_hw, scales, exact: bool = False):
    sh = scales[0] if scales else None
    sw = scales[1] if scales and len(scales) > 1 else None
    f = _nearest_exact if exact else _nearest
    return f(out_hw[0], in_hw[0], sh), f(out_hw[1], in_hw[1], sw)


@form("aten.upsample_nearest2d.default", "aten.upsample_nearest2d.vec")
def _upsample_nearest(args: list, kwargs: dict, exact: bool = False) -> list:
    x, size = args[0], opt(kwargs, args, 1, "output_size")
    scales = [opt(kwargs, args, 2, "scales_h"), opt(kwargs, args, 3, "scales_w")]
    if isinstance(scales[0], list | tuple):  # .vec: (input, output_size, scale_factors)
        scales = list(scales[0])
    if size is None:
        size = [int(np.floor(x.shape[-2 + i] * scales[i])) for i in range(2)]
    ih, iw = _up_idx(x.shape[-2:], size, scales if any(v is not None for v in scales) else None,
                     exact)
    return [np.array(x[..., ih[:, None], iw[None, :]])]


@form("aten._upsample_nearest_exact2d.default", "aten._upsample_nearest_exact2d.vec")
def _upsample_nearest_exact(args: list, kwargs: dict) -> list:
    """``mode="nearest-exact"``: each output pixel the input's at ``min(floor((i + 0.5) *
    s), in - 1)`` per axis (exact)."""
    return _upsample_nearest(args, kwargs, exact=True)


@form("aten.upsample_nearest2d_backward.default")
def _upsample_nearest_backward(args: list, kwargs: dict, exact: bool = False) -> list:
    g, out_size, in_size = args[0], args[1], args[2]
    scales = [opt(kwargs, args, 3, "scales_h"), opt(kwargs, args, 4, "scales_w")]
    ih, iw = _up_idx(in_size[-2:], out_size, scales if any(v is not None for v in scales)
                     else None, exact)
    gw = _w(g)
    planes = math.prod(in_size[:-2])
    gx = np.zeros((planes, in_size[-2] * in_size[-1]), gw.dtype)
    flat = (ih[:, None] * in_size[-1] + iw[None, :]).reshape(1, -1)
    rows = np.arange(planes).reshape(-1, 1)
    # output pixels in row-major order, each added to its source (np.add.at is sequential)
    np.add.at(gx, (np.broadcast_to(rows, (planes, flat.size)),
                   np.broadcast_to(flat, (planes, flat.size))), gw.reshape(planes, -1))
    return [gx.reshape(tuple(in_size)).astype(g.dtype)]


@form("aten._upsample_nearest_exact2d_backward.default")
def _upsample_nearest_exact_backward(args: list, kwargs: dict) -> list:
    """From +0 each output pixel's gradient added to its nearest-exact source, the pixels in
    row-major order."""
    return _upsample_nearest_backward(args, kwargs, exact=True)


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


def _first_max(v: np.ndarray, k: list) -> tuple[np.ndarray, np.ndarray]:
    """Per window of ``v`` (N, C, OH, OW, kh, kw): the value and row-major tap index of its
    first maximum, as ``np.argmax`` over the flattened taps picks it (the first NaN if any,
    else the first of equal maxima, -0.0 and +0.0 equal), one pass per tap over strided views
    of the taps (no copy of the windows, no per-window argmax); a tap replaces the best so far
    by a branch-free blend of the bits (a masked copy mispredicts on every other element)."""
    best = v[..., 0, 0].copy()
    ity = {1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}[best.itemsize]
    bb = best.view(ity)
    aty = np.int16 if k[0] * k[1] < 1 << 15 else np.int64
    arg = np.zeros(best.shape, aty)
    bnan = np.isnan(best) if v.dtype.kind == "f" else None
    take = np.empty(best.shape, np.bool_)
    m, ma, x = np.empty(best.shape, ity), np.empty(best.shape, aty), np.empty_like(bb)
    for t in range(1, k[0] * k[1]):
        tap = v[..., t // k[1], t % k[1]]
        np.greater(tap, best, out=take)
        if bnan is not None:
            tnan = np.isnan(tap)
            if tnan.any():  # a NaN is the maximum: the first one
                take |= tnan & ~bnan
                bnan |= tnan
        np.negative(take.view(np.int8), out=m, casting="unsafe")  # all ones where taken
        np.bitwise_xor(bb, tap.view(ity), out=x)
        x &= m
        bb ^= x
        np.negative(take.view(np.int8), out=ma, casting="unsafe")
        ma &= arg ^ aty(t)
        arg ^= ma
    return best, arg


@form("aten.max_pool2d_with_indices.default")
def _max_pool(args: list, kwargs: dict) -> list:
    x = args[0]
    x4 = x if x.ndim == 4 else x[None]
    k, st, pd, dl, cm = _pool_args(args, kwargs, x)
    outs = [out_size(x4.shape[2 + i], k[i], st[i], dl[i], pd[i], pd[i], int(cm))
            for i in range(2)]
    got = native.maxpool2d_with_indices(x4, k, st, pd, dl, outs)
    if got is not None:  # the same rule in C (~10x quicker on a 16x32x64x64 2x2 pool)
        y, idx = got
        return [y.reshape(x.shape[:-2] + y.shape[-2:]), idx.reshape(x.shape[:-2] + y.shape[-2:])]
    low = -np.inf if x.dtype.kind in "fV" else np.iinfo(x.dtype).min
    v, outs = windows(x4, k, st, dl, [(p, p) for p in pd], low, int(cm))
    y, arg = _first_max(v, k)  # the window's first maximum in row-major tap order
    w_in = x4.shape[3]
    # the flat input index: the window's origin plus its tap's offset (row-major taps)
    base = (np.arange(outs[0], dtype=I64).reshape(-1, 1) * st[0] - pd[0]) * w_in \
        + np.arange(outs[1], dtype=I64).reshape(1, -1) * st[1] - pd[1]
    taps = np.arange(k[0] * k[1], dtype=I64)
    off = (taps // k[1]) * dl[0] * w_in + (taps % k[1]) * dl[1]
    idx = np.take(off, arg)
    idx += base
    return [y.reshape(x.shape[:-2] + y.shape[-2:]), idx.reshape(x.shape[:-2] + y.shape[-2:])]


@form("aten.max_pool2d_with_indices_backward.default")
def _max_pool_backward(args: list, kwargs: dict) -> list:
    g, x, idx = args[0], args[1], args[7]
    gx = native.maxpool2d_with_indices_backward(_w(g, x.dtype), np.asarray(idx), x.shape)
    if gx is not None:  # np.add.at's order in C (an index outside its plane: numpy's error)
        return [gx.astype(x.dtype, copy=False)]
    g2 = _w(g, x.dtype).reshape(-1, math.prod(g.shape[-2:]))
    i2 = np.asarray(idx).reshape(g2.shape)
    if i2.size and (i2.min() < 0 or i2.max() >= x.shape[-2] * x.shape[-1]):
        # (a recorded index is the file's data: numpy would wrap a negative one, or reach
        # into the next plane, where the C declined)
        raise NoReference("max_pool2d_with_indices_backward: an index outside its plane")
    gx = np.zeros((g2.shape[0], x.shape[-2] * x.shape[-1]), g2.dtype)
    planes = np.arange(g2.shape[0]).reshape(-1, 1)
    flat = (planes * gx.shape[1] + i2).reshape(-1)
    seen = np.zeros(gx.size, np.bool_)
    seen[flat] = True
    if np.count_nonzero(seen) == flat.size and flat.size:
        # no input taken by two windows (the pools that do not overlap): each sum has one
        # term, +0.0 + g, as np.add.at would make it (a -0.0 gradient becomes +0.0)
        gx.reshape(-1)[flat] = g2.reshape(-1)
        gx += gx.dtype.type(0)
    else:
        np.add.at(gx, (np.broadcast_to(planes, i2.shape), i2), g2)  # row-major output order
    return [gx.reshape(x.shape).astype(x.dtype, copy=False)]


def _max_unpool(x: np.ndarray, idx: np.ndarray, size: list, name: str) -> np.ndarray:
    """ATen's CPU unpool (MaxUnpoolKernel.cpp): zeros of ``x.shape[:-k] + size``, then per
    plane (the leading dimensions) each input element in row-major order written at its flat
    index into the plane's ``prod(size)`` outputs, so where two name one output the later
    one's value stays. A copy, so exact; an index outside the plane is ATen's error (a file's
    data here: no reference)."""
    k = len(size)
    idx = np.asarray(idx)
    if x.ndim < k + 1 or idx.shape != x.shape or any(int(n) < 0 for n in size):
        raise NoReference(f"{name}: input {list(x.shape)}, indices {list(idx.shape)} and output "
                          f"size {list(size)} do not go together")
    plane = math.prod(int(n) for n in size)
    lead = x.shape[:-k]
    check_elems(math.prod(lead) * plane, name)  # (the output size is the file's number)
    n_in = math.prod(x.shape[-k:])
    out = np.zeros((math.prod(lead), plane), x.dtype)
    i2 = idx.reshape(-1, n_in).astype(I64, copy=False)
    if i2.size and (i2.min() < 0 or i2.max() >= plane):
        raise NoReference(f"{name}: an index outside its output plane of {plane}")
    flat = (np.arange(i2.shape[0], dtype=I64)[:, None] * plane + i2).reshape(-1)
    # the last write of each output: the first of the reversed order
    _, first = np.unique(flat[::-1], return_index=True)
    keep = flat.size - 1 - first
    out.reshape(-1)[flat[keep]] = x.reshape(-1)[keep]
    return out.reshape(lead + tuple(int(n) for n in size))


@form("aten.max_unpool2d.default")
def _max_unpool2d(args: list, kwargs: dict) -> list:
    return [_max_unpool(np.asarray(args[0]), args[1], list(args[2]), "max_unpool2d")]


@form("aten.max_unpool3d.default")
def _max_unpool3d(args: list, kwargs: dict) -> list:
    return [_max_unpool(np.asarray(args[0]), args[1], list(args[2]), "max_unpool3d")]


@form("aten.adaptive_max_pool2d.default")
def _adaptive_max_pool(args: list, kwargs: dict) -> list:
    """(self (C, H, W) or (N, C, H, W), output_size) -> (out, indices): output cell (oh, ow)
    takes rows floor(oh H / OH) .. ceil((oh + 1) H / OH) (and columns alike); ATen's loop
    keeps the first of equal maxima and the last NaN (``val > max || isnan(val)``, from
    -inf at the window's first tap); an index is the tap's place in its plane (exact)."""
    x = np.asarray(args[0])
    oh_n, ow_n = (int(v) for v in args[1])
    if x.ndim not in (3, 4) or oh_n <= 0 or ow_n <= 0 or 0 in x.shape:
        raise NoReference("adaptive_max_pool2d of a non-3-D/4-D or empty input")
    h, w = x.shape[-2:]
    planes = x.reshape(-1, h, w)
    out = np.empty((planes.shape[0], oh_n, ow_n), x.dtype)
    idx = np.empty(out.shape, I64)
    for oh in range(oh_n):
        h0, h1 = (oh * h) // oh_n, -((-(oh + 1) * h) // oh_n)
        for ow in range(ow_n):
            w0, w1 = (ow * w) // ow_n, -((-(ow + 1) * w) // ow_n)
            win = planes[:, h0:h1, w0:w1].reshape(planes.shape[0], -1)
            at = np.argmax(win, axis=1)  # the first maximum (the first NaN, if any)
            if x.dtype.kind in "fV":
                nan = np.isnan(win)
                last = win.shape[1] - 1 - np.argmax(nan[:, ::-1], axis=1)
                at = np.where(nan.any(axis=1), last, at)  # the last NaN
            out[:, oh, ow] = win[np.arange(win.shape[0]), at]
            idx[:, oh, ow] = (h0 + at // (w1 - w0)) * w + w0 + at % (w1 - w0)
    return [out.reshape(x.shape[:-2] + (oh_n, ow_n)), idx.reshape(x.shape[:-2] + (oh_n, ow_n))]


@form("aten.adaptive_max_pool2d_backward.default")
def _adaptive_max_pool_backward(args: list, kwargs: dict) -> list:
    """(grad_output, self, indices): each output's gradient added at its index in its plane,
    in output order (max_pool2d_with_indices_backward's rule)."""
    g, x, idx = args[:3]
    return _max_pool_backward([g, x, None, None, None, None, None, idx], {})


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


def _adaptive_spans(n_out: int, n_in: int) -> tuple[np.ndarray, np.ndarray]:
    """ATen's adaptive windows along one axis (AdaptivePooling.h, integer arithmetic): output
    cell ``o`` covers ``start_index = floor(o I / O)`` to ``end_index = ceil((o + 1) I / O)``
    (exclusive)."""
    o = np.arange(n_out, dtype=I64)
    return (o * n_in) // n_out, -((-(o + 1) * n_in) // n_out)


def _adaptive_covers(n_out: int, n_in: int) -> tuple[np.ndarray, np.ndarray]:
    """Per input index ``i`` along one axis, the output cells whose windows hold it (an
    ascending run, windows' starts and ends both ascending): (first cell, how many)."""
    start, end = _adaptive_spans(n_out, n_in)
    i = np.arange(n_in, dtype=I64)
    first = np.searchsorted(end, i, side="right")
    return first, np.searchsorted(start, i, side="right") - first


def _adaptive_size(size, what: str) -> tuple[int, int]:
    try:
        oh, ow = (int(v) for v in size)
    except (TypeError, ValueError):
        raise NoReference(f"{what}: output_size {size} not 2 integers") from None
    if oh < 1 or ow < 1:
        raise NoReference(f"{what}: output_size {(oh, ow)} not over 0")
    return oh, ow


@form("aten._adaptive_avg_pool2d.default", "aten.adaptive_avg_pool2d.default")
def _adaptive_avg(args: list, kwargs: dict) -> list:
    """(self (C, H, W) or (N, C, H, W), output_size): ATen's ``cpu_adaptive_avg_pool2d``
    (contiguous): output cell (oh, ow) takes rows ``floor(oh H / OH)`` to
    ``ceil((oh + 1) H / OH)`` and columns alike (``kh`` by ``kw`` taps); ``sum`` from +0.0 in
    the opmath type (float32 for the half types), each tap added in row-major window order,
    then ``(sum / T(kh)) / T(kw)`` (two divisions, as ATen's ``sum / kh / kw``), rounded once
    to the input's type. A 1-d pool (``F.adaptive_avg_pool1d``) is this of height 1."""
    x = args[0]
    oh, ow = _adaptive_size(opt(kwargs, args, 1, "output_size"), "adaptive_avg_pool2d")
    if x.ndim not in (3, 4) or 0 in x.shape[-2:] or not is_float(x.dtype):
        raise NoReference(f"adaptive_avg_pool2d of a {x.ndim}-d {x.dtype} input "
                          f"{tuple(x.shape)}")
    check_elems(math.prod(x.shape[:-2]) * oh * ow, "adaptive_avg_pool2d")
    h, w = x.shape[-2:]
    xw = _w(x)
    h0, h1 = _adaptive_spans(oh, h)
    w0, w1 = _adaptive_spans(ow, w)
    kh, kw = h1 - h0, w1 - w0
    planes = xw.reshape(-1, h, w)
    with fp_quiet():
        if h % oh == 0 and w % ow == 0:  # equal windows: the same serial sum, one call
            s = serial_sum(planes.reshape(-1, oh, h // oh, ow, w // ow), (-3, -1))
        else:
            s = np.zeros((planes.shape[0], oh, ow), xw.dtype)
            for a in range(int(kh.max())):  # tap (a, b) of every window at once, row-major
                rows, in_h = np.minimum(h0 + a, h - 1), a < kh
                for b in range(int(kw.max())):
                    cols, in_w = np.minimum(w0 + b, w - 1), b < kw
                    tap = planes[:, rows[:, None], cols[None, :]]
                    if in_h.all() and in_w.all():
                        s += tap
                    else:  # (a window past its last tap: that cell's sum left as it is)
                        np.add(s, tap, out=s, where=in_h[:, None] & in_w[None, :])
        y = (s / kh.astype(xw.dtype)[:, None]) / kw.astype(xw.dtype)[None, :]
    return [y.reshape(x.shape[:-2] + (oh, ow)).astype(x.dtype)]


@form("aten._adaptive_avg_pool2d_backward.default")
def _adaptive_avg_backward(args: list, kwargs: dict) -> list:
    """(grad_output, self): ATen's ``cpu_adaptive_avg_pool2d_backward`` (contiguous): zeros,
    then per plane, output cells in row-major order (oh outer, ow inner), ``delta =
    (g / kh) / kw`` added to every input element of the cell's window. Windows overlap where
    uneven, so an input element takes its covering cells' deltas in row-major cell order. All
    in the gradient's own type, as ATen's kernel (no opmath buffer): a half type's divisions
    and each addition computed in float32 and rounded to the half type, one rounding per
    operation as ATen's ``c10::Half`` / ``BFloat16`` operators."""
    g, x = args[0], args[1]
    if (g.ndim != x.ndim or x.ndim not in (3, 4) or g.shape[:-2] != x.shape[:-2]
            or 0 in g.shape[-2:] or 0 in x.shape[-2:] or not is_float(g.dtype)
            or g.dtype != x.dtype):
        raise NoReference(f"adaptive_avg_pool2d_backward: a {g.dtype} gradient of "
                          f"{tuple(g.shape)} for a {x.dtype} input of {tuple(x.shape)}")
    oh, ow = g.shape[-2:]
    h, w = x.shape[-2:]
    gw = _w(g)
    ct = gw.dtype
    half = g.dtype != ct

    def rnd(v):  # (a half type's operation: rounded to it)
        return v.astype(g.dtype).astype(ct) if half else v

    h0, h1 = _adaptive_spans(oh, h)
    w0, w1 = _adaptive_spans(ow, w)
    (fh, nh), (fw, nw) = _adaptive_covers(oh, h), _adaptive_covers(ow, w)
    planes = gw.reshape(-1, oh, ow)
    gx = np.zeros((planes.shape[0], h, w), ct)
    with fp_quiet():
        delta = rnd(rnd(planes / (h1 - h0).astype(ct)[:, None]) / (w1 - w0).astype(ct)[None, :])
        # each input element's a-th covering row and b-th covering column: a outer, b inner is
        # row-major over its covering cells
        for a in range(int(nh.max())):
            rows, in_h = np.minimum(fh + a, oh - 1), a < nh
            for b in range(int(nw.max())):
                cols, in_w = np.minimum(fw + b, ow - 1), b < nw
                tap = delta[:, rows[:, None], cols[None, :]]
                full = in_h.all() and in_w.all()
                if not half and full:
                    gx += tap
                elif not half:
                    np.add(gx, tap, out=gx, where=in_h[:, None] & in_w[None, :])
                else:
                    gx = rnd(gx + tap) if full else np.where(
                        in_h[:, None] & in_w[None, :], rnd(gx + tap), gx)
    return [gx.reshape(x.shape).astype(x.dtype)]


def _scatter_planes(g2: np.ndarray, src: np.ndarray, n_in: int) -> np.ndarray:
    """gx[plane, src[j]] += g2[plane, j], j in order (np.add.at is sequential): every output
    element's gradient added to its source, in row-major output order."""
    planes = g2.shape[0]
    gx = np.zeros((planes, n_in), g2.dtype)
    rows = np.broadcast_to(np.arange(planes).reshape(-1, 1), g2.shape)
    np.add.at(gx, (rows, np.broadcast_to(src.reshape(1, -1), g2.shape)), g2)
    return gx


def _pad_geom(shape: tuple, pad: list, mode: str, what: str) -> tuple:
    """torch's checks of a reflection / replication pad of an input of ``shape`` (NoReference
    naming ``what``), then (lead dims, padded trailing dims, the (before, after) pad of each
    trailing dim): ``len(pad) // 2`` trailing dims, torch's pad order (last dim first)."""
    pad = [int(p) for p in pad]
    k = len(pad) // 2
    if len(pad) % 2 or k not in (1, 2, 3) or len(shape) not in (k + 1, k + 2):
        raise NoReference(f"{what}: {len(pad)} pads for a {len(shape)}-d input")
    lead, sp = tuple(shape[:len(shape) - k]), tuple(shape[len(shape) - k:])
    if 0 in sp or lead[-1] == 0:  # (a batch of 0 is allowed, as torch's)
        raise NoReference(f"{what}: an empty input {tuple(shape)}")
    width = [(pad[2 * (k - 1 - i)], pad[2 * (k - 1 - i) + 1]) for i in range(k)]
    out = tuple(sp[i] + a + b for i, (a, b) in enumerate(width))
    if min(out) < 1:
        raise NoReference(f"{what}: the padded size {out} of {sp} is under 1")
    if mode == "reflect" and any(a >= sp[i] or b >= sp[i] for i, (a, b) in enumerate(width)):
        raise NoReference(f"{what}: a pad of {pad} not under the input's size {sp}")
    return lead, out, width


def _pad_src(sp: tuple, width: list, mode: str) -> np.ndarray:
    """The flat source index (within the trailing dims ``sp``) of every element of their
    padded form; ``mode`` is np.pad's: "reflect" (reflection_pad) or "edge" (replication_pad).
    A negative pad crops: np.pad's positive part, then the cut (ATen's ``index(j) + offset``,
    PaddingKernel.cpp)."""
    idx = np.arange(math.prod(sp)).reshape(sp)
    src = np.pad(idx, [(max(a, 0), max(b, 0)) for a, b in width], mode=mode)
    cut = tuple(slice(max(-a, 0), src.shape[i] - max(-b, 0)) for i, (a, b) in enumerate(width))
    return src[cut]


def _pad_copy(args: list, mode: str, what: str) -> list:
    """(self, padding): every output element the copy of its source (exact); the output's
    size (from the arguments) bounded by ``check_elems`` before anything is made."""
    x, pad = args[0], list(args[1])
    lead, out, width = _pad_geom(x.shape, pad, mode, what)
    check_elems(math.prod(lead) * math.prod(out), what)
    sp = x.shape[len(lead):]
    src = _pad_src(sp, width, mode)
    y = x.reshape(math.prod(lead), math.prod(sp))[:, src.reshape(-1)]
    return [y.reshape(lead + out)]


def _pad_backward(args: list, mode: str, what: str) -> list:
    """(grad_output, self, padding): zeros, then every output element's gradient added to its
    source in row-major output order (ATen's ``cpu_padding_backward``)."""
    g, x, pad = args[0], args[1], list(args[2])
    lead, out, width = _pad_geom(x.shape, pad, mode, what)
    if tuple(g.shape) != lead + out:
        raise NoReference(f"{what}: a gradient of shape {tuple(g.shape)} for an output of "
                          f"{lead + out}")
    sp = x.shape[len(lead):]
    src = _pad_src(sp, width, mode)
    with fp_quiet():
        gx = _scatter_planes(_w(g, x.dtype).reshape(math.prod(lead), src.size), src,
                             math.prod(sp))
    return [gx.reshape(x.shape).astype(x.dtype)]


@form("aten.reflection_pad1d.default", "aten.reflection_pad2d.default",
      "aten.reflection_pad3d.default")
def _reflection_pad(args: list, kwargs: dict) -> list:
    return _pad_copy(args, "reflect", "reflection_pad")


@form("aten.reflection_pad1d_backward.default", "aten.reflection_pad2d_backward.default",
      "aten.reflection_pad3d_backward.default")
def _reflection_pad_backward(args: list, kwargs: dict) -> list:
    return _pad_backward(args, "reflect", "reflection_pad_backward")


@form("aten.replication_pad1d.default", "aten.replication_pad2d.default",
      "aten.replication_pad3d.default")
def _replication_pad(args: list, kwargs: dict) -> list:
    return _pad_copy(args, "edge", "replication_pad")


@form("aten.replication_pad1d_backward.default", "aten.replication_pad2d_backward.default",
      "aten.replication_pad3d_backward.default")
def _replication_pad_backward(args: list, kwargs: dict) -> list:
    return _pad_backward(args, "edge", "replication_pad_backward")


def _mad(p, q, r):
    """``(p * q) + r``, two roundings: the reference's (``--explain`` hands in an fma)."""
    return (p * q) + r


def _linear_src(n_out: int, n_in: int, align: bool, scale, ct: np.dtype, guard: bool = False,
                mad=_mad):
    """torch's linear source index and weights, in the compute type: align_corners:
    ``s = (in - 1) / (out - 1)``, ``src = s * i``; else ``s = 1 / scale`` or ``in / out`` and
    ``src = max(s * (i + 0.5) - 0.5, 0)``; ``i0 = floor(src)``, ``i1 = i0 + (i0 < in - 1)``,
    ``l1 = src - i0``, ``l0 = 1 - l1``. ``guard`` (linear1d's): the rest of ATen's
    ``compute_source_index_and_lambda`` (UpSample.h): ``out == in`` the copy (``i0 = i1 = i``,
    ``l0 = 1``, ``l1 = 0``); a scale taken only when positive; ``guard_index_and_lambda``:
    ``i0 = min(floor(float32(src)), in - 1)`` (``floorf``), ``l1 = min(max(src - i0, 0), 1)``."""
    t = ct.type
    if guard and n_out == n_in:
        i = np.arange(n_out, dtype=np.int64)
        return i, i.copy(), np.ones(n_out, ct), np.zeros(n_out, ct)
    if align:
        s = t((n_in - 1) / (n_out - 1)) if n_out > 1 else t(0)
    else:
        s = t(1.0 / scale) if scale and (not guard or scale > 0) else t(n_in / n_out)
    i = np.arange(n_out).astype(ct)
    src = s * i if align else np.maximum(mad(s, i + t(0.5), -t(0.5)), t(0))
    if guard:
        i0 = np.minimum(np.floor(src.astype(np.float32)).astype(np.int64), n_in - 1)
        l1 = np.minimum(np.maximum(src - i0.astype(ct), t(0)), t(1))
    else:
        i0 = np.floor(src).astype(np.int64)
        l1 = src - i0.astype(ct)
    i1 = i0 + (i0 < n_in - 1)
    return i0, i1, t(1) - l1, l1


def _bilinear_args(args: list, kwargs: dict, x_hw, out_hw, i: int):
    align = bool(opt(kwargs, args, i, "align_corners", False))
    sh, sw = opt(kwargs, args, i + 1, "scales_h"), opt(kwargs, args, i + 2, "scales_w")
    if isinstance(sh, list | tuple):  # .vec: scale_factors
        sh, sw = sh
    return align, sh, sw


@form("aten.upsample_bilinear2d.default", "aten.upsample_bilinear2d.vec")
def _upsample_bilinear(args: list, kwargs: dict) -> list:
    x = args[0]
    size = opt(kwargs, args, 1, "output_size")
    align, sh, sw = _bilinear_args(args, kwargs, x.shape[-2:], size, 2)
    if size is None:
        size = [int(np.floor(x.shape[-2] * sh)), int(np.floor(x.shape[-1] * sw))]
    xw = _w(x)
    ct = xw.dtype
    h0, h1, lh0, lh1 = _linear_src(size[0], x.shape[-2], align, sh, ct)
    w0, w1, lw0, lw1 = _linear_src(size[1], x.shape[-1], align, sw, ct)
    with fp_quiet():
        def row(h):  # along w first: (x[h, w0] * lw0) + (x[h, w1] * lw1)
            r = xw[..., h, :]
            return (r[..., w0] * lw0) + (r[..., w1] * lw1)
        y = (row(h0) * lh0[:, None]) + (row(h1) * lh1[:, None])
    return [y.astype(x.dtype)]


_AA_WEIGHTS = 1 << 24


def _cubic_aa_filter(x: Any, T: type, fused: Callable | None) -> Any:
    """ATen's antialias cubic filter (Keys, a = -0.5) in the type ``T``: ``((a + 2) x - (a +
    3)) x x + 1`` below 1, ``((a x - 5a) x + 8a) x - 4a`` below 2, else 0 (``fused``: each
    multiply-add contracted, as gcc may)."""
    a = T(-0.5)
    x = abs(T(x))

    def ma(u, v, w):  # u * v + w
        return T(fused(u, v, w)) if fused is not None else T(T(u * v) + w)
    if x < 1.0:
        return ma(T(ma(T(a + T(2)), x, -T(a + T(3))) * x), x, T(1))
    if x < 2.0:
        return ma(ma(ma(a, x, -T(T(5) * a)), x, T(T(8) * a)), x, -T(T(4) * a))
    return T(0)


def aa_weights(in_size: int, out_size: int, align: bool, scale_opt: Any, dt: np.dtype,
               cubic: bool = False, fused: Callable | None = None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(xmin, xsize, weights (out, max taps)) of antialiased resampling along one axis,
    as ATen computes them (``_compute_indices_min_size_weights_aa``, Pillow's triangle filter)
    in the input's type ``dt``: the scale ``in / out`` (or ``1 / scale_factor``; align_corners
    ``(in - 1) / (out - 1)``), the support ``scale`` past 1 (else 1), each tap's weight ``1 -
    |(j + xmin - center + 0.5) * invscale|`` (the steps' double and float roundings
    ATen's), the weights divided by their float sum. ``cubic``: the bicubic filter
    (``_cubic_aa_filter``, ``fused`` its contraction) with twice the support."""
    T = dt.type
    if align:
        scale = T(T(in_size - 1) / T(out_size - 1)) if out_size > 1 else T(0)
    elif scale_opt is not None and float(scale_opt) > 0:
        scale = T(1.0 / float(scale_opt))
    else:
        scale = T(T(in_size) / T(out_size))
    s64 = float(scale)
    half = 2.0 if cubic else 1.0  # (interp_size * 0.5)
    support = T(half * s64) if s64 >= 1.0 else T(half)
    taps = int(math.ceil(float(support))) * 2 + 1
    if out_size * taps > _AA_WEIGHTS:  # (about twice the input's extent plus the output's)
        raise NoReference(f"antialiased resampling's weights: {out_size * taps:,} past "
                          f"{_AA_WEIGHTS:,}")
    invscale = T(1.0 / s64) if s64 >= 1.0 else T(1.0)
    xmin = np.zeros(out_size, np.int64)
    xsize = np.zeros(out_size, np.int64)
    wts = np.zeros((out_size, taps), dt)
    for i in range(out_size):
        center = T(s64 * (i + 0.5))
        lo = max(int(float(T(center - support)) + 0.5), 0)
        hi = min(int(float(T(center + support)) + 0.5), in_size)
        n = min(max(hi - lo, 0), taps)
        xmin[i], xsize[i] = lo, n
        total = T(0)
        for j in range(n):
            a = abs(T((float(T(T(j + lo) - center)) + 0.5) * float(invscale)))
            w = _cubic_aa_filter(a, T, fused) if cubic else T(1.0 - float(a)) if a < 1.0 \
                else T(0)
            wts[i, j] = w
            total = T(total + w)
        if total != 0:
            wts[i, :n] = (wts[i, :n] / total).astype(dt)
    return xmin, xsize, wts


def aa_resample(x: np.ndarray, axis: int, xmin: np.ndarray, xsize: np.ndarray,
                wts: np.ndarray, fused: Callable | None = None, lanes: int = 0
                ) -> np.ndarray:
    """``x`` resampled along ``axis``: output ``i`` is ``x[xmin] * w0``, then ``+ x[xmin +
    j] * w_j`` in order, each step rounded to the type. ``fused`` (``fused(a, b, acc)``, an
    ``fma``) takes the last ``(taps - 1) % lanes`` steps (all of them for ``lanes`` 0): gcc's
    loop, its products in vectors of ``lanes`` added in order, its scalar tail contracted."""
    xm = np.moveaxis(x, axis, -1)
    out = np.empty(xm.shape[:-1] + (len(xmin),), x.dtype)
    for i in range(len(xmin)):
        lo, n = int(xmin[i]), int(xsize[i])
        tail = n if not lanes else 1 + (n - 1) - (n - 1) % lanes
        acc = (xm[..., lo] * wts[i, 0]).astype(x.dtype)
        for j in range(1, n):
            a = xm[..., lo + j]
            acc = (fused(a, np.full_like(a, wts[i, j]), acc) if fused is not None and j >= tail
                   else acc + (a * wts[i, j]).astype(x.dtype)).astype(x.dtype)
        out[..., i] = acc
    return np.moveaxis(out, -1, axis)


def _scalar_fused(fused: Callable) -> Callable:
    """``fused`` (an array fma) on three scalars, its result a scalar of their type."""
    return lambda u, v, w: fused(np.asarray(u), np.asarray(v), np.asarray(w))[()]


def upsample_aa(args: list, kwargs: dict, fused: Callable | None = None, lanes: int = 0,
                cubic: bool = False) -> list:
    """``_upsample_bilinear2d_aa`` (``F.interpolate(..., antialias=True)``: torchvision's
    resize of a tensor; ``cubic``: ``_upsample_bicubic2d_aa``'s filter) as ATen's separable
    kernel orders it: the width first (where it changes) into a buffer of the input's type,
    then the height; each output a sum over its taps in order from the first product
    (``aa_weights``'s weights)."""
    x = np.asarray(args[0])
    if x.ndim != 4 or x.dtype not in (F32, np.dtype(np.float64)):
        raise NoReference("antialiased resampling of other than 4-d float32 / float64 input")
    wf = _scalar_fused(fused) if cubic and fused is not None else None
    size = opt(kwargs, args, 1, "output_size")
    align, sh, sw = _bilinear_args(args, kwargs, x.shape[-2:], size, 2)
    if size is None:
        if sh is None or sw is None:
            raise NoReference("antialiased resampling with neither a size nor scales")
        size = [int(np.floor(x.shape[-2] * sh)), int(np.floor(x.shape[-1] * sw))]
    size = [int(v) for v in size]
    if min(size) < 1 or min(x.shape[-2:]) < 1:
        raise NoReference("antialiased resampling to or from an empty size (torch raises)")
    check_elems(x.shape[0] * x.shape[1] * size[0] * size[1], "_upsample_bilinear2d_aa")
    y = x
    with fp_quiet():
        for axis, n, sc in ((3, size[1], sw), (2, size[0], sh)):
            if y.shape[axis] != n:
                y = aa_resample(y, axis, *aa_weights(y.shape[axis], n, align, sc,
                                                             x.dtype, cubic, wf),
                                fused=fused, lanes=lanes)
    return [np.array(y, x.dtype)]


def _fractional_intervals(samples: np.ndarray, in_size: int, out_size: int,
                          pool: int) -> np.ndarray:
    """ATen's ``generate_intervals`` for each plane's sample (in the samples' type): window
    ``i`` starts at ``int((i + u) * alpha) - int(u * alpha)``, ``alpha = (in - pool) / (out -
    1)``; the last at ``in - pool``."""
    T = samples.dtype.type
    seq = np.empty(samples.shape + (out_size,), np.int64)
    if out_size > 1:
        alpha = T(T(in_size - pool) / T(out_size - 1))
        i = np.arange(out_size - 1)
        with fp_quiet():
            a = ((i.astype(samples.dtype)[None, :] + samples[:, None]) * alpha).astype(
                samples.dtype)
            b = (samples * alpha).astype(samples.dtype)
        seq[:, :-1] = np.trunc(a).astype(np.int64) - np.trunc(b).astype(np.int64)[:, None]
    seq[:, -1] = in_size - pool
    return seq


def _fractional_args(x: np.ndarray, kernel: Any, out: Any, samples: np.ndarray) -> tuple:
    if x.ndim not in (3, 4) or x.dtype not in (F32, np.dtype(np.float64)):
        raise NoReference("fractional_max_pool2d of other than 3-4 d float32 / float64 input")
    kh, kw = (int(v) for v in kernel)
    oh, ow = (int(v) for v in out)
    x4 = x if x.ndim == 4 else x[None]
    n, c, h, w = x4.shape
    s = np.asarray(samples).reshape(-1, 2)
    if s.shape[0] != n * c or min(kh, kw, oh, ow) < 1 or kh > h or kw > w \
            or oh + kh - 1 > h or ow + kw - 1 > w:
        raise NoReference("fractional_max_pool2d: samples, kernel or output size outside "
                          "the input (torch raises)")
    return x4, n, c, h, w, kh, kw, oh, ow, s.astype(x.dtype)


@form("aten.fractional_max_pool2d.default")
def _fractional_max_pool2d(args: list, kwargs: dict) -> list:
    """(values, indices): each plane's windows placed by its two recorded samples (W's, then
    H's: ATen's ``generate_intervals``); in each window, rows then columns, the first
    element greater than all before it, or a NaN (the last NaN wins), from -inf with the
    window's first index (ATen's loop)."""
    x = np.asarray(args[0])
    x4, n, c, h, w, kh, kw, oh, ow, s = _fractional_args(x, args[1], args[2], args[3])
    check_elems(n * c * oh * ow, "fractional_max_pool2d")  # (the windows: one tap at a time)
    sw = _fractional_intervals(s[:, 0], w, ow, kw)
    sh = _fractional_intervals(s[:, 1], h, oh, kh)
    planes = x4.reshape(n * c, h * w)
    p = np.arange(n * c)[:, None, None]
    maxv = np.full((n * c, oh, ow), -np.inf, x.dtype)
    maxi = (sh[:, :, None] * w + sw[:, None, :]).astype(np.int64)
    with fp_quiet():
        for dy in range(kh):
            for dx in range(kw):
                idx = (sh[:, :, None] + dy) * w + (sw[:, None, :] + dx)
                v = planes[p, idx]
                up = (v > maxv) | np.isnan(v)
                maxv = np.where(up, v, maxv)
                maxi = np.where(up, idx, maxi)
    shape = (n, c, oh, ow) if x.ndim == 4 else (c, oh, ow)
    return [maxv.reshape(shape), maxi.reshape(shape)]


@form("aten.fractional_max_pool2d_backward.default")
def _fractional_max_pool2d_backward(args: list, kwargs: dict) -> list:
    """From +0 per plane, each output's gradient added at its recorded index, the outputs in
    row-major order (ATen's loop)."""
    g, x, idx = np.asarray(args[0]), np.asarray(args[1]), np.asarray(args[4])
    if x.ndim not in (3, 4) or g.shape != idx.shape or g.ndim != x.ndim \
            or g.dtype != x.dtype or idx.dtype.kind not in "iu":
        raise NoReference("fractional_max_pool2d_backward of mismatched gradient, input or "
                          "indices")
    x4 = x if x.ndim == 4 else x[None]
    n, c, h, w = x4.shape
    g2 = g.reshape(n * c, -1)
    i2 = idx.reshape(n * c, -1).astype(np.int64)
    if g2.shape[0] != n * c or (i2.size and (i2.min() < 0 or i2.max() >= h * w)):
        raise NoReference("fractional_max_pool2d_backward: an index outside its plane")
    gi = np.zeros((n * c, h * w), x.dtype)
    rows = np.arange(n * c)
    with fp_quiet():
        for k in range(g2.shape[1]):
            gi[rows, i2[:, k]] = gi[rows, i2[:, k]] + g2[:, k]
    return [gi.reshape(x.shape)]


_AA_BACKWARD_TERMS = 1 << 20  # (output pixels times taps: the backward's loop is per pixel)


def upsample_aa_backward(args: list, kwargs: dict, fused: Callable | None = None,
                         cubic: bool = False) -> list:
    """``_upsample_bilinear2d_aa_backward`` (``cubic``: the bicubic one's) as ATen's
    ``cpu_upsample_genNd_backward_aa`` orders it: the gradient from +0; for each output pixel
    in row-major order, each of its taps (rows, then columns; the forward's weights) ``gi[tap]
    += (wx * wy) * g``, each step rounded (``fused``: ``fused(wx * wy, g, acc)``, the
    compiler's contraction)."""
    g = np.asarray(args[0])
    out_hw, in_size = [int(v) for v in args[1]], [int(v) for v in args[2]]
    if g.ndim != 4 or g.dtype not in (F32, np.dtype(np.float64)) or len(in_size) != 4 \
            or len(out_hw) != 2 or g.shape != tuple(in_size[:2]) + tuple(out_hw) \
            or min(in_size[2:] + out_hw) < 1:
        raise NoReference("antialiased bilinear backward of other than a 4-d float32 / "
                          "float64 gradient of the output's shape")
    align, sh, sw = _bilinear_args(args, kwargs, in_size[-2:], out_hw, 3)
    check_elems(math.prod(in_size), "_upsample_bilinear2d_aa_backward")
    wf = _scalar_fused(fused) if cubic and fused is not None else None
    ymin, ysize, wy = aa_weights(in_size[2], out_hw[0], align, sh, g.dtype, cubic, wf)
    xmin, xsize, wx = aa_weights(in_size[3], out_hw[1], align, sw, g.dtype, cubic, wf)
    if out_hw[0] * out_hw[1] * wy.shape[1] * wx.shape[1] > _AA_BACKWARD_TERMS:
        raise NoReference("antialiased bilinear backward past the form's "
                          f"{_AA_BACKWARD_TERMS:,} pixel taps")
    planes = in_size[0] * in_size[1]
    g2 = g.reshape(planes, *out_hw)
    gi = np.zeros((planes, in_size[2], in_size[3]), g.dtype)
    with fp_quiet():
        for oh in range(out_hw[0]):
            for ow in range(out_hw[1]):
                gv = g2[:, oh, ow]
                for y in range(int(ysize[oh])):
                    for x in range(int(xsize[ow])):
                        w = (wx[ow, x] * wy[oh, y]).astype(g.dtype)
                        at = (slice(None), int(ymin[oh]) + y, int(xmin[ow]) + x)
                        gi[at] = (fused(np.full_like(gv, w), gv, gi[at]) if fused is not None
                                  else gi[at] + (w * gv).astype(g.dtype)).astype(g.dtype)
    return [gi.reshape(in_size)]


@form("aten._upsample_bilinear2d_aa_backward.default",
      "aten._upsample_bilinear2d_aa_backward.vec")
def _upsample_bilinear_aa_backward(args: list, kwargs: dict) -> list:
    return upsample_aa_backward(args, kwargs)


@form("aten._upsample_bilinear2d_aa.default", "aten._upsample_bilinear2d_aa.vec")
def _upsample_bilinear_aa(args: list, kwargs: dict) -> list:
    return upsample_aa(args, kwargs)


@form("aten._upsample_bicubic2d_aa.default", "aten._upsample_bicubic2d_aa.vec")
def _upsample_bicubic_aa(args: list, kwargs: dict) -> list:
    """``interpolate(mode="bicubic", antialias=True)``: the bilinear one's order with ATen's
    cubic filter (Keys, a = -0.5; twice the support) computed without an fma."""
    return upsample_aa(args, kwargs, cubic=True)


@form("aten._upsample_bicubic2d_aa_backward.default",
      "aten._upsample_bicubic2d_aa_backward.vec")
def _upsample_bicubic_aa_backward(args: list, kwargs: dict) -> list:
    return upsample_aa_backward(args, kwargs, cubic=True)


@form("aten.upsample_bilinear2d_backward.default")
def _upsample_bilinear_backward(args: list, kwargs: dict) -> list:
    g, out_hw, in_size = args[0], list(args[1]), list(args[2])
    align, sh, sw = _bilinear_args(args, kwargs, in_size[-2:], out_hw, 3)
    gw = _w(g)
    ct = gw.dtype
    h0, h1, lh0, lh1 = _linear_src(out_hw[0], in_size[-2], align, sh, ct)
    w0, w1, lw0, lw1 = _linear_src(out_hw[1], in_size[-1], align, sw, ct)
    iw = in_size[-1]
    # per output pixel (row-major), four contributions in this order: (h0, w0), (h0, w1),
    # (h1, w0), (h1, w1), each (lh * lw) * g
    src = np.stack([h0[:, None] * iw + w0[None, :], h0[:, None] * iw + w1[None, :],
                    h1[:, None] * iw + w0[None, :], h1[:, None] * iw + w1[None, :]], axis=-1)
    wts = np.stack([lh0[:, None] * lw0[None, :], lh0[:, None] * lw1[None, :],
                    lh1[:, None] * lw0[None, :], lh1[:, None] * lw1[None, :]], axis=-1)
    planes = int(np.prod(in_size[:-2]))
    with fp_quiet():
        contrib = (wts[None] * gw.reshape(planes, out_hw[0], out_hw[1], 1)).reshape(planes, -1)
    gx = _scatter_planes(contrib, src.reshape(-1), in_size[-2] * iw)
    return [gx.reshape(tuple(in_size)).astype(g.dtype)]


def _linear1d_args(args: list, kwargs: dict, at: int, n_in: int, what: str) -> tuple:
    """(output width, align_corners, scale) of ``.default`` (output_size at ``args[1]``, then
    from ``args[at]``: align_corners, scales) or ``.vec`` (output_size or None, align_corners,
    scale_factors: the width ``int(in * scale)``, as ATen's ``compute_output_size``, and the
    scale passed on)."""
    size = opt(kwargs, args, 1, "output_size")
    align = bool(opt(kwargs, args, at, "align_corners", False))
    sc = opt(kwargs, args, at + 1, "scales")
    factors = kwargs.get("scale_factors", sc if isinstance(sc, list | tuple) else None)
    try:
        if factors is not None:  # .vec
            factors = [float(v) for v in factors]
            if size is not None or len(factors) != 1 or not math.isfinite(factors[0]):
                raise NoReference(f"{what}: output_size {size} with scale_factors {factors}")
            sc = factors[0]
            size = [int(n_in * sc)]
        sc = None if sc is None else float(sc)
        if size is None or len(size) != 1:
            raise NoReference(f"{what}: no output_size of 1 (got {size})")
        n_out = int(size[0])
    except (TypeError, ValueError):
        raise NoReference(f"{what}: output_size {size}, scale {sc} not numbers") from None
    if n_out < 1 or n_in < 1 or (sc is not None and not math.isfinite(sc)):
        raise NoReference(f"{what}: input width {n_in}, output width {n_out}, scale {sc}")
    return n_out, align, sc


@form("aten.upsample_linear1d.default", "aten.upsample_linear1d.vec")
def _upsample_linear1d(args: list, kwargs: dict) -> list:
    return upsample_linear1d(args, kwargs)


def upsample_linear1d(args: list, kwargs: dict, mad=_mad) -> list:
    """(self (N, C, W), output_size, align_corners, scales): ATen's CPU forward
    (``upsample_generic_Nd_kernel_impl<1, HelperInterpLinear>``): the indices and weights of
    ``_linear_src`` with ATen's guard (computed in the opmath type, float32 for the half types;
    a half type's ``l1`` stored in it, then ``l0 = 1 - l1`` of the stored one, stored, as
    ATen's ``scalar_t`` lambdas), then
    ``y = (x[i0] * l0) + (x[i1] * l1)`` (the bilinear form's w axis), rounded once to the
    input's type. (ATen's ``t0 * w0 + t1 * w1`` compiles to an FMA: ``mad``, ``--explain``'s:
    ``fma(x[i0], l0, x[i1] * l1)``, the source index ``fma(s, i + 0.5, -0.5)``.)"""
    x = args[0]
    if x.ndim != 3 or 0 in x.shape[1:] or not is_float(x.dtype):
        raise NoReference(f"upsample_linear1d of a {x.ndim}-d {x.dtype} input "
                          f"{tuple(x.shape)}")
    n_out, align, sc = _linear1d_args(args, kwargs, 2, x.shape[2], "upsample_linear1d")
    check_elems(x.shape[0] * x.shape[1] * n_out, "upsample_linear1d")
    xw = _w(x)
    ct = xw.dtype
    i0, i1, l0, l1 = _linear_src(n_out, x.shape[2], align, sc, ct, guard=True, mad=mad)
    if x.dtype != ct:  # (a half type's weights: l1 stored, then l0 = 1 - l1 of it, stored)
        l1 = l1.astype(x.dtype).astype(ct)
        l0 = (ct.type(1) - l1).astype(x.dtype).astype(ct)
    with fp_quiet():
        y = mad(xw[..., i0], l0, xw[..., i1] * l1)
    return [y.astype(x.dtype)]


@form("aten.upsample_linear1d_backward.default")
def _upsample_linear1d_backward(args: list, kwargs: dict) -> list:
    return upsample_linear1d_backward(args, kwargs)


def upsample_linear1d_backward(args: list, kwargs: dict, mad=None) -> list:
    """(grad_output, output_size, input_size, align_corners, scales): ATen's
    ``cpu_upsample_linear_backward`` (UpSampleMoreKernel.cpp, ``loop1d``): per plane zeros (in
    the opmath type: a half type's float32 buffer), then per output position in order
    ``l0 * g`` added at ``i0``, then ``l1 * g`` at ``i1`` (the weights of ``_linear_src`` with
    ATen's guard, in the opmath type), rounded once to the gradient's type. (ATen's
    ``acc += w * g`` compiles to an FMA: ``mad``, ``--explain``'s, ``acc = fma(w, g, acc)``
    position by position, the source index ``fma(s, i + 0.5, -0.5)``.)"""
    g, in_size = args[0], args[2]
    try:
        in_size = [int(v) for v in in_size]
    except (TypeError, ValueError):
        raise NoReference("upsample_linear1d_backward: input_size not integers") from None
    if len(in_size) != 3 or min(in_size) < 0 or in_size[1] < 1 or not is_float(g.dtype):
        raise NoReference(f"upsample_linear1d_backward: input_size {in_size} of a {g.dtype} "
                          f"gradient")
    n_out, align, sc = _linear1d_args(args, kwargs, 3, in_size[2], "upsample_linear1d_backward")
    if tuple(g.shape) != (in_size[0], in_size[1], n_out):
        raise NoReference(f"upsample_linear1d_backward: a gradient of {tuple(g.shape)} for an "
                          f"output of {(in_size[0], in_size[1], n_out)}")
    check_elems(math.prod(in_size), "upsample_linear1d_backward")
    gw = _w(g)
    ct = gw.dtype
    i0, i1, l0, l1 = _linear_src(n_out, in_size[2], align, sc, ct, guard=True,
                                 mad=mad or _mad)
    planes = in_size[0] * in_size[1]
    g2 = gw.reshape(planes, n_out)
    if mad is not None:  # (each contribution fused into its accumulator, in order)
        gx = np.zeros((planes, in_size[2]), ct)
        for k in range(n_out):
            for i, w in ((i0[k], l0[k]), (i1[k], l1[k])):
                gx[:, i] = mad(w, g2[:, k], gx[:, i])
        return [gx.reshape(tuple(in_size)).astype(g.dtype)]
    with fp_quiet():
        # per output position its two contributions, i0's first
        con = np.stack([g2 * l0, g2 * l1], axis=-1).reshape(planes, -1)
        gx = _scatter_planes(con, np.stack([i0, i1], axis=-1).reshape(-1), in_size[2])
    return [gx.reshape(tuple(in_size)).astype(g.dtype)]


# ---- im2col / col2im (F.unfold / F.fold) ------------------------------------------------------
def _patch_geom(args: list, i: int, what: str) -> tuple:
    """(kernel_size, dilation, padding, stride) from ``args[i:i + 4]`` as (h, w) pairs, with
    torch's checks (``im2col_shape_check``): NoReference naming ``what``."""
    try:
        k, d, p, s = ([int(v) for v in args[i + j]] for j in range(4))
    except (TypeError, ValueError, IndexError):
        raise NoReference(f"{what}: kernel_size, dilation, padding, stride not integer pairs")\
            from None
    if not len(k) == len(d) == len(p) == len(s) == 2:
        raise NoReference(f"{what}: kernel_size, dilation, padding, stride not pairs")
    if min(k) < 1 or min(d) < 1 or min(s) < 1 or min(p) < 0:
        raise NoReference(f"{what}: kernel {k}, dilation {d}, stride {s} (each at least 1), "
                          f"padding {p} (not negative)")
    return k, d, p, s


def _blocks(hw, k, d, p, s) -> list:
    """The sliding blocks along each axis: ``(n + 2 p - (d (k - 1) + 1)) // s + 1``."""
    return [(hw[i] + 2 * p[i] - (d[i] * (k[i] - 1) + 1)) // s[i] + 1 for i in range(2)]


def _tap_span(n_out: int, n_im: int, k_dil: int, p: int, s: int) -> tuple:
    """For the tap at offset ``k_dil`` (its index times the dilation): the blocks ``[a, b)``
    whose image index ``o * s - p + k_dil`` is inside ``[0, n_im)``, and block ``a``'s index."""
    a = -((k_dil - p) // s) if k_dil < p else 0  # the first o with o s >= p - k_dil
    b = min(n_out, (n_im - 1 + p - k_dil) // s + 1)
    return a, max(a, b), a * s - p + k_dil


@form("aten.im2col.default")
def _im2col(args: list, kwargs: dict) -> list:
    """(self (N, C, H, W) or (C, H, W), kernel_size, dilation, padding, stride) -> (N,
    C kh kw, L): the copy of every patch, zeros where it reaches into the padding (exact)."""
    x = args[0]
    k, d, p, s = _patch_geom(args, 1, "im2col")
    if x.ndim not in (3, 4) or 0 in x.shape[-3:] or not is_float(x.dtype):
        raise NoReference(f"im2col of a {x.ndim}-d {x.dtype} input {tuple(x.shape)}")
    x4 = x if x.ndim == 4 else x[None]
    n, c, h, w = x4.shape
    oh, ow = _blocks((h, w), k, d, p, s)
    if oh < 1 or ow < 1:
        raise NoReference(f"im2col: kernel {k} (dilation {d}) larger than the padded input "
                          f"{(h + 2 * p[0], w + 2 * p[1])}")
    check_elems(n * c * k[0] * k[1] * oh * ow, "im2col")
    col = np.zeros((n, c, k[0], k[1], oh, ow), x.dtype)
    for i in range(k[0]):
        a, b, h0 = _tap_span(oh, h, i * d[0], p[0], s[0])
        for j in range(k[1]):
            e, f, w0 = _tap_span(ow, w, j * d[1], p[1], s[1])
            if b > a and f > e:
                col[:, :, i, j, a:b, e:f] = x4[:, :, h0:h0 + (b - a - 1) * s[0] + 1:s[0],
                                               w0:w0 + (f - e - 1) * s[1] + 1:s[1]]
    col = col.reshape(n, c * k[0] * k[1], oh * ow)
    return [col if x.ndim == 4 else col[0]]


@form("aten.col2im.default")
def _col2im(args: list, kwargs: dict) -> list:
    """(self (N, C kh kw, L) or (C kh kw, L), output_size, kernel_size, dilation, padding,
    stride) -> (N, C, H, W): zeros, then every column element added to its image pixel, in
    ATen's ``col2im`` order (im2col.h: ``c_col`` = (c, kh, kw) row-major, then (h_col, w_col)):
    per pixel its taps' contributions in (kh, kw) row-major order, one rounding each (one tap
    reaches each pixel from one block at most, so a tap's adds are one vectorised add)."""
    x = args[0]
    try:
        size = [int(v) for v in args[1]]
    except (TypeError, ValueError):
        raise NoReference("col2im: output_size not integers") from None
    k, d, p, s = _patch_geom(args, 2, "col2im")
    if len(size) != 2 or x.ndim not in (2, 3) or 0 in x.shape[-2:] or not is_float(x.dtype):
        raise NoReference(f"col2im of a {x.ndim}-d {x.dtype} input {tuple(x.shape)} to "
                          f"output_size {size}")
    x3 = x if x.ndim == 3 else x[None]
    n, ckk, L = x3.shape
    oh, ow = _blocks(size, k, d, p, s)
    if ckk % (k[0] * k[1]) or min(size) < 1 or oh < 1 or ow < 1 or L != oh * ow:
        raise NoReference(f"col2im: {ckk} x {L} columns do not fit kernel {k} over "
                          f"output_size {size} ({oh} x {ow} blocks)")
    c = ckk // (k[0] * k[1])
    check_elems(n * c * size[0] * size[1], "col2im")
    ct = compute(x.dtype)
    col = _w(x3, x.dtype).reshape(n, c, k[0], k[1], oh, ow)
    im = np.zeros((n, c, size[0], size[1]), ct)
    with fp_quiet():
        for i in range(k[0]):
            a, b, h0 = _tap_span(oh, size[0], i * d[0], p[0], s[0])
            for j in range(k[1]):
                e, f, w0 = _tap_span(ow, size[1], j * d[1], p[1], s[1])
                if b > a and f > e:
                    im[:, :, h0:h0 + (b - a - 1) * s[0] + 1:s[0],
                       w0:w0 + (f - e - 1) * s[1] + 1:s[1]] += col[:, :, i, j, a:b, e:f]
    im = im.astype(x.dtype, copy=False)
    return [im if x.ndim == 3 else im[0]]


# ---- bicubic upsampling (F.interpolate(mode="bicubic")) ---------------------------------------
def _cubic_coeffs(t: np.ndarray, mad=_mad) -> list:
    """ATen's ``get_cubic_upsample_coefficients`` (UpSample.h, A = -0.75) in ``t``'s type, one
    rounding per operation as written: ``cc1(x) = (((A + 2) x - (A + 3)) x) x + 1``,
    ``cc2(x) = (((A x - 5 A) x + 8 A) x) - 4 A``; the taps ``cc2(t + 1)``, ``cc1(t)``,
    ``cc1(1 - t)``, ``cc2((1 - t) + 1)``. ``mad``: the multiply-adds gcc contracts in torch's
    build (``--explain``'s fma), as written otherwise."""
    T = t.dtype.type
    a = T(-0.75)

    def cc1(x):
        return (mad(a + T(2), x, -(a + T(3))) * x) * x + T(1)

    def cc2(x):
        return (mad(mad(a, x, -(T(5) * a)), x, T(8) * a) * x) - (T(4) * a)

    t2 = T(1) - t
    return [cc2(t + T(1)), cc1(t), cc1(t2), cc2(t2 + T(1))]


def _cubic_src(n_out: int, n_in: int, align: bool, scale, ct: np.dtype, mad=_mad) -> tuple:
    """One axis' 4 clamped source indices and 4 weights (UpSample.h, ``ct`` = ATen's opmath
    type): ``s = (in - 1) / (out - 1)`` (align_corners, out > 1; else 0), or ``1 / scale``
    (rounded from float64) when a positive scale is given, else ``in / out``;
    ``src = s * i`` (align_corners) or ``(s * (i + 0.5)) - 0.5`` (not clamped at 0: cubic);
    ``guard_index_and_lambda``: ``i0 = min(floor(float32(src)), in - 1)`` (ATen's ``floorf``),
    ``t = min(max(src - i0, 0), 1)``; tap ``j`` reads ``clamp(i0 - 1 + j, 0, in - 1)``."""
    T = ct.type
    if align:
        s = T(n_in - 1) / T(n_out - 1) if n_out > 1 else T(0)
    else:
        s = T(1.0 / scale) if scale is not None and scale > 0 else T(n_in) / T(n_out)
    i = np.arange(n_out).astype(ct)
    src = s * i if align else mad(s, i + T(0.5), -T(0.5))
    i0 = np.minimum(np.floor(src.astype(np.float32)).astype(np.int64), n_in - 1)
    t = np.minimum(np.maximum(src - i0.astype(ct), T(0)), T(1))
    idx = [np.clip(i0 - 1 + j, 0, n_in - 1) for j in range(4)]
    return idx, _cubic_coeffs(t, mad)


def _bicubic_args(args: list, kwargs: dict, at: int, in_hw, what: str) -> tuple:
    """(output_size, align_corners, scales_h, scales_w) of the ``.default`` overloads
    (output_size at ``args[1]``, then from ``args[at]``: align_corners, scales_h, scales_w) or
    ``.vec`` (output_size or None, align_corners, scale_factors: the size ``int(in * scale)``,
    as ATen's ``compute_output_size``)."""
    size = opt(kwargs, args, 1, "output_size")
    align = bool(opt(kwargs, args, at, "align_corners", False))
    sh = opt(kwargs, args, at + 1, "scales_h")
    sw = opt(kwargs, args, at + 2, "scales_w")
    factors = kwargs.get("scale_factors", sh if isinstance(sh, list | tuple) else None)
    if factors is not None:  # .vec
        factors = [float(v) for v in factors]
        if size is not None or len(factors) != 2 or not all(math.isfinite(v) for v in factors):
            raise NoReference(f"{what}: output_size {size} with scale_factors {factors}")
        sh, sw = factors
        size = [int(in_hw[0] * sh), int(in_hw[1] * sw)]
    if size is None or len(size) != 2:
        raise NoReference(f"{what}: no output_size of 2 (got {size})")
    size = [int(v) for v in size]
    if min(size) < 1 or min(in_hw) < 1:
        raise NoReference(f"{what}: input {tuple(in_hw)} and output {size} not both over 0")
    return size, align, sh, sw


@form("aten.upsample_bicubic2d.default", "aten.upsample_bicubic2d.vec")
def _upsample_bicubic(args: list, kwargs: dict) -> list:
    return upsample_bicubic(args, kwargs)


def upsample_bicubic(args: list, kwargs: dict, mad=_mad) -> list:
    """ATen's CPU forward (``upsample_generic_Nd_kernel_impl<2, HelperInterpCubic>``, the
    float types' path): per axis the 4 indices and weights of ``_cubic_src`` (the weights
    stored in the input's type, as ATen's weight tensors; computed in the opmath type: float32
    for the half types); per output pixel, each of the 4 source rows along x
    ``r_j = (((x[j, w0] * wx0) + (x[j, w1] * wx1)) + (x[j, w2] * wx2)) + (x[j, w3] * wx3)``,
    then ``y = (((r_0 * wy0) + (r_1 * wy1)) + (r_2 * wy2)) + (r_3 * wy3)``, rounded once to
    the input's type. ``mad``: ``_cubic_coeffs``'; with an fma each 4-term sum is
    ``fma(a3, w3, fma(a2, w2, fma(a0, w0, a1 * w1)))`` (torch's build: ``--explain``)."""
    x = args[0]
    if x.ndim != 4 or 0 in x.shape[1:] or not is_float(x.dtype):
        raise NoReference(f"upsample_bicubic2d of a {x.ndim}-d {x.dtype} input")
    size, align, sh, sw = _bicubic_args(args, kwargs, 2, x.shape[2:], "upsample_bicubic2d")
    check_elems(x.shape[0] * x.shape[1] * size[0] * size[1], "upsample_bicubic2d")
    xw = _w(x)
    ct = xw.dtype
    (iy, wy), (ix, wx) = (_cubic_src(size[a], x.shape[2 + a], align, sc, ct, mad)
                          for a, sc in ((0, sh), (1, sw)))
    # (ATen keeps the weights in the input's type: a half input's are rounded to it)
    wy, wx = ([v.astype(x.dtype).astype(ct) for v in w] for w in (wy, wx))

    def total(a: list, w: list) -> np.ndarray:  # ((a0 w0 + a1 w1) + a2 w2) + a3 w3
        return mad(a[3], w[3], mad(a[2], w[2], mad(a[0], w[0], a[1] * w[1])))
    with fp_quiet():
        rows = [total([xw[:, :, iy[j], :][..., ix[m]] for m in range(4)], wx) for j in range(4)]
        y = total(rows, [w[:, None] for w in wy])
    return [y.astype(x.dtype)]


@form("aten.upsample_bicubic2d_backward.default")
def _upsample_bicubic_backward(args: list, kwargs: dict) -> list:
    """ATen's ``upsample_bicubic2d_backward_out_frame`` (UpSampleBicubic2d.cpp): the same
    sizes as the input: the gradient's copy; else per plane zeros, then per output pixel in
    row-major order, for x tap ``i`` then y tap ``j`` (i outer), ``(g * wy[j]) * wx[i]`` added
    at the clamped source (weights and sums in the opmath type: float32 for the half types,
    rounded once at the end, as ATen's float buffer)."""
    g, in_size = args[0], args[2]
    try:
        in_size = [int(v) for v in in_size]
    except (TypeError, ValueError):
        raise NoReference("upsample_bicubic2d_backward: input_size not integers") from None
    if len(in_size) != 4 or min(in_size) < 0 or not is_float(g.dtype):
        raise NoReference(f"upsample_bicubic2d_backward: input_size {in_size} of a "
                          f"{g.dtype} gradient")
    size, align, sh, sw = _bicubic_args(args, kwargs, 3, in_size[2:],
                                        "upsample_bicubic2d_backward")
    if tuple(g.shape) != (in_size[0], in_size[1], size[0], size[1]):
        raise NoReference(f"upsample_bicubic2d_backward: a gradient of {tuple(g.shape)} for "
                          f"an output of {(in_size[0], in_size[1], *size)}")
    check_elems(math.prod(in_size), "upsample_bicubic2d_backward")
    if list(size) == in_size[2:]:
        return [np.array(g)]  # (ATen's special case: the same size, a copy)
    gw = _w(g)
    ct = gw.dtype
    (iy, wy), (ix, wx) = (_cubic_src(size[a], in_size[2 + a], align, sc, ct)
                          for a, sc in ((0, sh), (1, sw)))
    h_in, w_in = in_size[2:]
    planes = in_size[0] * in_size[1]
    g3 = gw.reshape(planes, size[0], size[1])
    # per output pixel (row-major) its 16 sources and contributions, x tap i outer, y tap j
    # inner (ATen's ii, jj)
    src = np.stack([iy[j][:, None] * w_in + ix[i][None, :]
                    for i in range(4) for j in range(4)], axis=-1).reshape(-1)
    step = max(1, (1 << 22) // max(src.size, 1))  # (planes a pass: bounded memory)
    parts = []
    with fp_quiet():
        for p0 in range(0, planes, step):
            gp = g3[p0:p0 + step]
            con = np.stack([(gp * wy[j][:, None]) * wx[i][None, :]
                            for i in range(4) for j in range(4)], axis=-1)
            parts.append(_scatter_planes(con.reshape(gp.shape[0], -1), src, h_in * w_in))
    gx = np.concatenate(parts) if parts else np.zeros((0, h_in * w_in), ct)
    return [gx.reshape(tuple(in_size)).astype(g.dtype)]


# ---- 3-d pools (nn.MaxPool3d, nn.AvgPool3d) and trilinear upsampling --------------------------
_INT_MAX = (1 << 31) - 1  # (torch takes a pool's geometry as C ints: checked_convert<int>)


def _triple(v, what: str, name: str, empty: list | None = None) -> list:
    """A 3-d op's ``int[3]`` argument (one int, or a list of 1 or 3) as 3 ints; ``empty``: what
    an empty list stands for (the stride's: the kernel)."""
    try:
        vals = [operator.index(v)] if not isinstance(v, list | tuple) \
            else [operator.index(a) for a in v]
    except TypeError:
        raise NoReference(f"{what}: {name} {v!r} not integers") from None
    if not vals and empty is not None:
        return list(empty)
    if len(vals) not in (1, 3):
        raise NoReference(f"{what}: {name} {vals} not 1 or 3 integers")
    return vals * 3 if len(vals) == 1 else vals


def _pool3d_args(args: list, kwargs: dict, at: int, what: str, dilation: bool) -> tuple:
    """(kernel, stride, padding, dilation) from ``args[at:]`` (or keywords), each 3 ints (an
    empty stride: the kernel; no dilation: 1)."""
    k = _triple(opt(kwargs, args, at, "kernel_size"), what, "kernel_size")
    st = _triple(opt(kwargs, args, at + 1, "stride", []), what, "stride", empty=k)
    pd = _triple(opt(kwargs, args, at + 2, "padding", 0), what, "padding")
    dl = _triple(opt(kwargs, args, at + 3, "dilation", 1), what, "dilation") if dilation \
        else [1, 1, 1]
    return k, st, pd, dl


def _pool3d_out(n: int, k: int, s: int, p: int, d: int, ceil: bool) -> int:
    """ATen's ``pooling_output_shape``: ``floor((n + 2p - d (k - 1) - 1 (+ s - 1 with
    ceil_mode)) / s) + 1``, one less where ceil_mode's last window would start past the input
    and its left padding."""
    o = (n + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil else 0)) // s + 1
    return o - 1 if ceil and (o - 1) * s >= n + p else o


def _pool3d_geom(shape: tuple, k, st, pd, dl, ceil: bool, what: str, avg: bool) -> list:
    """torch's ``pool3d_shape_check`` (NoReference naming ``what``), then the output's
    (OD, OH, OW)."""
    if len(shape) not in (4, 5) or 0 in shape[-4:]:
        raise NoReference(f"{what} of a {len(shape)}-d input {tuple(shape)} (4-d or 5-d with "
                          f"non-empty planes)")
    if min(k + st + dl) < 1 or min(pd) < 0 or max(k + st + dl + pd) > _INT_MAX:
        raise NoReference(f"{what}: kernel {k}, stride {st}, dilation {dl} (each at least 1), "
                          f"padding {pd} (not negative)")
    if any(pd[i] > k[i] // 2 for i in range(3)):
        raise NoReference(f"{what}: padding {pd} over half the kernel {k}")
    n = shape[-3:]
    if avg and any(n[i] < k[i] for i in range(3)):
        raise NoReference(f"{what}: input {tuple(n)} smaller than the kernel {k}")
    outs = [_pool3d_out(n[i], k[i], st[i], pd[i], dl[i], ceil) for i in range(3)]
    if min(outs) < 1:
        raise NoReference(f"{what}: kernel {k} (dilation {dl}) larger than the padded input "
                          f"{tuple(n)} (padding {pd}): output {outs}")
    return outs


def _axis_taps(n_out: int, n: int, k: int, s: int, p: int, d: int) -> tuple:
    """ATen's window loop along one axis (``cpu_max_pool``, ``avg_pool3d_out_frame``), per
    output position ``o``: ``start = o s - p``, ``end = min(start + d (k - 1) + 1, n)``, the
    first tap ``first`` = ``start`` moved on by ``d`` while below 0; the in-bound taps
    ``first + j d < end``. (positions (n_out, m) clipped into the input, valid (n_out, m),
    first (n_out,)): ``m`` the most in-bound taps of a window (at most ``n``)."""
    start = np.arange(n_out, dtype=I64) * s - p
    end = np.minimum(start + d * (k - 1) + 1, n)
    first = np.where(start < 0, start + ((d - 1 - start) // d) * d, start)
    cnt = np.maximum((end - first + d - 1) // d, 0)
    j = np.arange(int(cnt.max()) if cnt.size else 0, dtype=I64)
    return (np.clip(first[:, None] + j[None, :] * d, 0, n - 1), j[None, :] < cnt[:, None],
            first)


def _flat3(d: np.ndarray, h: np.ndarray, w: np.ndarray, hw: tuple) -> np.ndarray:
    """The flat index ``d H W + h W + w`` of every (d, h, w) of three per-axis vectors (an
    array of (len(d), len(h), len(w)))."""
    return (d[:, None, None] * hw[0] + h[None, :, None]) * hw[1] + w[None, None, :]


@form("aten.max_pool3d_with_indices.default")
def _max_pool3d(args: list, kwargs: dict) -> list:
    """(self (C, D, H, W) or (N, C, D, H, W), kernel_size, stride, padding, dilation,
    ceil_mode) -> (out, indices): ATen's ``cpu_max_pool`` (3-d): per output voxel ``max`` from
    the type's lowest (-inf), index that of the window's first in-bound tap, then the in-bound
    taps in row-major (d, h, w) order, a tap taken where ``val > max || isnan(val)``: the first
    of equal maxima (-0.0 and +0.0 equal), the last NaN; index ``d H W + h W + w`` in its plane
    (exact: values are copied)."""
    x = np.asarray(args[0])
    what = "max_pool3d_with_indices"
    k, st, pd, dl = _pool3d_args(args, kwargs, 1, what, dilation=True)
    ceil = bool(opt(kwargs, args, 5, "ceil_mode", False))
    if not (is_float(x.dtype) or x.dtype.kind in "iu"):
        raise NoReference(f"{what} of a {x.dtype} input")
    outs = _pool3d_geom(x.shape, k, st, pd, dl, ceil, what, avg=False)
    lead, (n_d, n_h, n_w) = x.shape[:-3], x.shape[-3:]
    planes = math.prod(lead)
    check_elems(planes * math.prod(outs), what)
    x3 = x.reshape(planes, n_d, n_h, n_w)
    (pd_, vd, fd), (ph, vh, fh), (pw, vw, fw) = (
        _axis_taps(outs[i], x.shape[-3 + i], k[i], st[i], pd[i], dl[i]) for i in range(3))
    low = -np.inf if is_float(x.dtype) else np.iinfo(x.dtype).min
    best = np.full((planes, *outs), low, x.dtype)
    idx = np.broadcast_to(_flat3(fd, fh, fw, (n_h, n_w)), best.shape).copy()
    take = np.empty(best.shape, np.bool_)
    with fp_quiet():
        for ok, v, flat in _max3d_taps(x3, outs, k, st, pd, dl, ceil, low,
                                       ((pd_, vd), (ph, vh), (pw, vw))):
            np.greater(v, best, out=take)
            if is_float(x.dtype):
                take |= np.isnan(v)
            if ok is not None:
                take &= ok
            np.copyto(best, v, where=take)
            np.copyto(idx, flat, where=take)
    shape = lead + tuple(outs)
    return [best.reshape(shape), idx.reshape(shape)]


def _max3d_taps(x3: np.ndarray, outs: list, k, st, pd, dl, ceil: bool, low, axes):
    """The max pool's taps in row-major (d, h, w) order, each (in-bound mask or None, values
    (planes, OD, OH, OW), flat index (OD, OH, OW)). Where the input padded with ``low`` is at
    most twice the input (every geometry but a hostile kernel): strided views of the padded
    input's windows, every tap of the kernel (a padded tap is ``low``, which never beats the
    running maximum from ``low``: the same taps taken); else each window's in-bound taps
    (``_axis_taps``), gathered."""
    n, hw = x3.shape[1:], x3.shape[2:]
    grown = [max(n[i] + 2 * pd[i], (outs[i] - 1) * st[i] + dl[i] * (k[i] - 1) + 1)
             for i in range(3)]
    if math.prod(grown) <= 2 * math.prod(n) + 4096:
        v, w_outs = windows(x3[None], k, st, dl, [(p, p) for p in pd], low, int(ceil))
        if list(w_outs) == list(outs):
            o = [np.arange(outs[i], dtype=I64) * st[i] - pd[i] for i in range(3)]
            for a, b, c in np.ndindex(*k):
                yield None, v[0, ..., a, b, c], _flat3(o[0] + a * dl[0], o[1] + b * dl[1],
                                                       o[2] + c * dl[2], hw)
            return
    (pd_, vd), (ph, vh), (pw, vw) = axes
    for a in range(vd.shape[1]):  # each window's in-bound taps
        for b in range(vh.shape[1]):
            for c in range(vw.shape[1]):
                yield (vd[:, a, None, None] & vh[None, :, b, None] & vw[None, None, :, c],
                       x3[:, pd_[:, a, None, None], ph[None, :, b, None], pw[None, None, :, c]],
                       _flat3(pd_[:, a], ph[:, b], pw[:, c], hw))


@form("aten.max_pool3d_with_indices_backward.default")
def _max_pool3d_backward(args: list, kwargs: dict) -> list:
    """(grad_output, self, kernel_size, stride, padding, dilation, ceil_mode, indices): ATen's
    ``cpu_max_pool_backward`` (3-d): per plane zeros in the gradient's own type (no float
    buffer: a half type's every addition rounded to it), then per output voxel in row-major
    order ``gx[idx] = gx[idx] + g`` (an index of -1 skipped, as ATen's)."""
    g, x, idx = (np.asarray(a) for a in (args[0], args[1], opt(kwargs, args, 7, "indices")))
    what = "max_pool3d_with_indices_backward"
    k, st, pd, dl = _pool3d_args(args, kwargs, 2, what, dilation=True)
    ceil = bool(opt(kwargs, args, 6, "ceil_mode", False))
    outs = _pool3d_geom(x.shape, k, st, pd, dl, ceil, what, avg=False)
    want = x.shape[:-3] + tuple(outs)
    if (g.shape != want or idx.shape != want or not is_float(g.dtype) or g.dtype != x.dtype
            or idx.dtype.kind not in "iu"):
        raise NoReference(f"{what}: a {g.dtype} gradient of {g.shape}, {idx.dtype} indices of "
                          f"{idx.shape} for a {x.dtype} output of {want}")
    planes, n_in = math.prod(x.shape[:-3]), math.prod(x.shape[-3:])
    i2 = idx.reshape(planes, math.prod(outs)).astype(I64)
    keep = i2 != -1
    if keep.any() and (i2[keep].min() < 0 or i2[keep].max() >= n_in):
        raise NoReference(f"{what}: an index outside its plane of {n_in}")
    gx = np.zeros((planes, n_in), g.dtype)
    rows = np.broadcast_to(np.arange(planes).reshape(-1, 1), i2.shape)
    with fp_quiet():  # (np.add.at is sequential: row-major output order)
        np.add.at(gx, (rows[keep], i2[keep]), g.reshape(i2.shape)[keep])
    return [gx.reshape(x.shape)]


def _avg3d_setup(x: np.ndarray, args: list, kwargs: dict, at: int, what: str) -> tuple:
    """The checks, windows and divisors of avg_pool3d (``args[at:]``: kernel_size, stride,
    padding, ceil_mode, count_include_pad, divisor_override): (outs, per-axis windows,
    divisor (OD, OH, OW), empty windows). ``divisor_override``: NoReference (as
    avg_pool2d's form); the divisor ATen's: ``count_include_pad`` the window clipped to the
    padded input (ceil_mode's overhang not counted), else its in-bound taps."""
    k, st, pd, _ = _pool3d_args(args, kwargs, at, what, dilation=False)
    ceil = bool(opt(kwargs, args, at + 3, "ceil_mode", False))
    include = bool(opt(kwargs, args, at + 4, "count_include_pad", True))
    if opt(kwargs, args, at + 5, "divisor_override") is not None:
        raise NoReference(f"{what} with divisor_override")
    if x.dtype not in (np.float32, np.float64, np.int64):
        raise NoReference(f"{what} of a {x.dtype} input (torch's CPU kernel: float32, float64, "
                          f"int64)")
    outs = _pool3d_geom(x.shape, k, st, pd, [1, 1, 1], ceil, what, avg=True)
    n = x.shape[-3:]
    axes = [_axis_taps(outs[i], n[i], k[i], st[i], pd[i], 1) for i in range(3)]
    per_axis = []
    for i in range(3):
        start = np.arange(outs[i], dtype=I64) * st[i] - pd[i]
        per_axis.append(np.minimum(start + k[i], n[i] + pd[i]) - start if include
                        else np.count_nonzero(axes[i][1], axis=1).astype(I64))
    cnt = [np.count_nonzero(a[1], axis=1) for a in axes]
    div = (per_axis[0][:, None, None] * per_axis[1][None, :, None]) * per_axis[2][None, None, :]
    empty = (cnt[0][:, None, None] == 0) | (cnt[1][None, :, None] == 0) \
        | (cnt[2][None, None, :] == 0)
    return outs, axes, div, empty


def _avg3d_divide(s: np.ndarray, div: np.ndarray) -> np.ndarray:
    """``s / divide_factor`` as ATen's C++: the float types' division by ``T(div)``, int64's
    truncated toward zero."""
    if s.dtype.kind == "f":
        return s / div.astype(s.dtype)
    return (s - np.fmod(s, div)) // div


@form("aten.avg_pool3d.default")
def _avg_pool3d(args: list, kwargs: dict) -> list:
    """(self (C, D, H, W) or (N, C, D, H, W), kernel_size, stride, padding, ceil_mode,
    count_include_pad, divisor_override): ATen's ``avg_pool3d_out_frame`` (torch 2.13's CPU
    kernel; float32, float64, int64): per output voxel ``sum`` from 0 in the input's own type,
    the in-bound taps added in row-major (d, h, w) order (the tape's ``avgpool3d`` serial sum:
    its padded taps add +0.0, no change), then ``0 + sum / T(divisor)`` (ATen's
    ``*op += sum / divide_factor`` into a zeroed output; int64 divides truncating); a window
    with no in-bound tap stays 0."""
    x = np.asarray(args[0])
    what = "avg_pool3d"
    outs, ((pd_, vd, _), (ph, vh, _), (pw, vw, _)), div, empty = \
        _avg3d_setup(x, args, kwargs, 1, what)
    lead, (n_d, n_h, n_w) = x.shape[:-3], x.shape[-3:]
    planes = math.prod(lead)
    check_elems(planes * math.prod(outs), what)
    x3 = x.reshape(planes, n_d, n_h, n_w)
    s = np.zeros((planes, *outs), x.dtype)
    with fp_quiet():
        for a in range(vd.shape[1]):  # the in-bound taps in row-major (d, h, w) order
            for b in range(vh.shape[1]):
                for c in range(vw.shape[1]):
                    ok = vd[:, a, None, None] & vh[None, :, b, None] & vw[None, None, :, c]
                    v = x3[:, pd_[:, a, None, None], ph[None, :, b, None], pw[None, None, :, c]]
                    np.add(s, v, out=s, where=np.broadcast_to(ok, s.shape))
        y = x.dtype.type(0) + _avg3d_divide(s, np.where(empty, 1, div))
        y[:, empty] = 0
    return [y.reshape(lead + tuple(outs))]


@form("aten.avg_pool3d_backward.default")
def _avg_pool3d_backward(args: list, kwargs: dict) -> list:
    """(grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad,
    divisor_override): ATen's ``avg_pool3d_backward_out_frame``: per plane zeros, then per
    output voxel in row-major order ``delta = g / T(divisor)`` (int64: truncated) added to
    each of its window's in-bound taps in row-major (d, h, w) order, all in the gradient's own
    type (overlapping windows: an element takes its windows' deltas in row-major output
    order)."""
    g, x = np.asarray(args[0]), np.asarray(args[1])
    what = "avg_pool3d_backward"
    outs, ((pd_, vd, _), (ph, vh, _), (pw, vw, _)), div, _ = \
        _avg3d_setup(x, args, kwargs, 2, what)
    if g.shape != x.shape[:-3] + tuple(outs) or g.dtype != x.dtype:
        raise NoReference(f"{what}: a {g.dtype} gradient of {g.shape} for a {x.dtype} output "
                          f"of {x.shape[:-3] + tuple(outs)}")
    planes, n_in = math.prod(x.shape[:-3]), math.prod(x.shape[-3:])
    hw = x.shape[-2:]
    # per output voxel (row-major) its in-bound taps (row-major): (OD, OH, OW, md, mh, mw)
    src = _flat3(pd_.reshape(-1), ph.reshape(-1), pw.reshape(-1), hw).reshape(
        pd_.shape + ph.shape + pw.shape).transpose(0, 2, 4, 1, 3, 5)
    ok = (vd[:, None, None, :, None, None] & vh[None, :, None, None, :, None]
          & vw[None, None, :, None, None, :]).reshape(-1)
    src = src.reshape(-1)[ok]
    which = np.nonzero(ok)[0] // (vd.shape[1] * vh.shape[1] * vw.shape[1])
    step = max(1, (1 << 22) // max(src.size, 1))  # (planes a pass: bounded memory)
    parts = []
    with fp_quiet():
        delta = _avg3d_divide(g.reshape(planes, math.prod(outs)), div.reshape(-1))
        for p0 in range(0, planes, step):
            parts.append(_scatter_planes(delta[p0:p0 + step][:, which], src, n_in))
    gx = np.concatenate(parts) if parts else np.zeros((0, n_in), g.dtype)
    return [gx.reshape(x.shape)]


def _trilinear_args(args: list, kwargs: dict, at: int, in_dhw, what: str) -> tuple:
    """(output_size, align_corners, [scales_d, scales_h, scales_w]) of the ``.default``
    overloads (output_size at ``args[1]``, then from ``args[at]``: align_corners, scales_d,
    scales_h, scales_w) or ``.vec`` (output_size or None, align_corners, scale_factors: the
    size ``int(in * factor)``, as ATen's ``compute_output_size``, and the factors passed on
    as the scales)."""
    size = opt(kwargs, args, 1, "output_size")
    align = bool(opt(kwargs, args, at, "align_corners", False))
    sc = [opt(kwargs, args, at + 1 + i, f"scales_{a}") for i, a in enumerate("dhw")]
    factors = kwargs.get("scale_factors", sc[0] if isinstance(sc[0], list | tuple) else None)
    try:
        if factors is not None:  # .vec
            factors = [float(v) for v in factors]
            if size is not None or len(factors) != 3 or not all(map(math.isfinite, factors)):
                raise NoReference(f"{what}: output_size {size} with scale_factors {factors}")
            sc = factors
            size = [int(in_dhw[i] * factors[i]) for i in range(3)]
        elif isinstance(sc[0], list | tuple):
            sc = [None] * 3  # (.vec's scale_factors None)
        sc = [None if v is None else float(v) for v in sc]
        if size is None or len(size) != 3:
            raise NoReference(f"{what}: no output_size of 3 (got {size})")
        size = [operator.index(v) for v in size]
    except (TypeError, ValueError):
        raise NoReference(f"{what}: output_size {size}, scales {sc} not numbers") from None
    if min(size) < 1 or min(in_dhw) < 1 or not all(v is None or math.isfinite(v) for v in sc):
        raise NoReference(f"{what}: input {tuple(in_dhw)}, output {size}, scales {sc}")
    return size, align, sc


def _trilinear_src(size, in_dhw, align: bool, sc, ct: np.dtype, store=None, mad=_mad) -> list:
    """Per axis (d, h, w) ``_linear_src`` with ATen's guard in the opmath type ``ct``; a half
    type's forward weights stored in it (``l1``, then ``l0 = 1 - l1`` of the stored one, as
    ATen's ``scalar_t`` weight tensors)."""
    axes = []
    for i in range(3):
        i0, i1, l0, l1 = _linear_src(size[i], in_dhw[i], align, sc[i], ct, guard=True, mad=mad)
        if store is not None and store != ct:
            l1 = l1.astype(store).astype(ct)
            l0 = (ct.type(1) - l1).astype(store).astype(ct)
        axes.append((i0, i1, l0, l1))
    return axes


@form("aten.upsample_trilinear3d.default", "aten.upsample_trilinear3d.vec")
def _upsample_trilinear(args: list, kwargs: dict) -> list:
    return upsample_trilinear3d(args, kwargs)


def upsample_trilinear3d(args: list, kwargs: dict, mad=_mad) -> list:
    """(self (N, C, D, H, W), output_size, align_corners, scales_d, scales_h, scales_w; or
    .vec's scale_factors): ATen's ``upsample_generic_Nd_kernel_impl<3, HelperInterpLinear>``:
    per axis the indices and weights of ``_trilinear_src``; per output voxel along w first
    ``r(d, h) = (x[d, h, w0] * lw0) + (x[d, h, w1] * lw1)``, then along h
    ``t(d) = (r(d, h0) * lh0) + (r(d, h1) * lh1)``, then along d
    ``y = (t(d0) * ld0) + (t(d1) * ld1)``, in the opmath type (float32 for the half types),
    rounded once to the input's type. ``mad``: torch's build contracts each ``a * w0 + b * w1``
    to ``fma(a, w0, b * w1)`` and the source index to ``fma(s, i + 0.5, -0.5)``
    (``--explain``'s); as written otherwise."""
    x = np.asarray(args[0])
    what = "upsample_trilinear3d"
    if x.ndim != 5 or 0 in x.shape[1:] or not is_float(x.dtype):
        raise NoReference(f"{what} of a {x.ndim}-d {x.dtype} input {tuple(x.shape)}")
    size, align, sc = _trilinear_args(args, kwargs, 2, x.shape[2:], what)
    check_elems(x.shape[0] * x.shape[1] * math.prod(size), what)
    xw = _w(x)
    ct = xw.dtype
    (d0, d1, ld0, ld1), (h0, h1, lh0, lh1), (w0, w1, lw0, lw1) = \
        _trilinear_src(size, x.shape[2:], align, sc, ct, store=x.dtype, mad=mad)

    def tap(d, h, w):  # x at every output voxel's (d, h, w) corner: (N, C, OD, OH, OW)
        return xw[:, :, d[:, None, None], h[None, :, None], w[None, None, :]]

    with fp_quiet():
        def row(d, h):  # along w
            return mad(tap(d, h, w0), lw0, tap(d, h, w1) * lw1)

        def plane(d):  # along h
            return mad(row(d, h0), lh0[:, None], row(d, h1) * lh1[:, None])
        y = mad(plane(d0), ld0[:, None, None], plane(d1) * ld1[:, None, None])  # along d
    return [y.astype(x.dtype)]


def _scatter_mad(acc: np.ndarray, src: np.ndarray, w: np.ndarray, g: np.ndarray,
                 mad) -> None:
    """``acc[:, src[j]] = mad(w[j], g[:, j], acc[:, src[j]])`` for j in order: each target's
    contributions in their order, a pass per rank among a target's contributions (the
    targets of one pass distinct)."""
    order = np.argsort(src, kind="stable")
    s = src[order]
    starts = np.r_[0, np.nonzero(np.diff(s))[0] + 1]
    rank = np.empty(src.size, I64)
    rank[order] = np.arange(src.size) - np.repeat(starts, np.diff(np.r_[starts, src.size]))
    for r in range(int(rank.max()) + 1 if src.size else 0):
        j = np.nonzero(rank == r)[0]
        acc[:, src[j]] = mad(w[j], g[:, j], acc[:, src[j]])


@form("aten.upsample_trilinear3d_backward.default")
def _upsample_trilinear_backward(args: list, kwargs: dict) -> list:
    return upsample_trilinear3d_backward(args, kwargs)


def upsample_trilinear3d_backward(args: list, kwargs: dict, mad=None) -> list:
    """(grad_output, output_size, input_size, align_corners, scales_d, scales_h, scales_w):
    ATen's ``cpu_upsample_linear_backward`` (``loop3d``): per plane zeros in the opmath type
    (a half type's float32 buffer), then per output voxel in row-major order its 8 corners
    (d0 h0 w0), (d0 h0 w1), (d0 h1 w0), (d0 h1 w1), (d1 h0 w0), ..., (d1 h1 w1), each
    ``((ld * lh) * lw) * g`` added (the weights of ``_trilinear_src`` in the opmath type, not
    stored in a half type), rounded once to the gradient's type. ``mad``: torch's build
    contracts each ``acc += w * g`` to ``acc = fma(w, g, acc)`` (``--explain``'s)."""
    g = np.asarray(args[0])
    what = "upsample_trilinear3d_backward"
    try:
        in_size = [operator.index(v) for v in opt(kwargs, args, 2, "input_size")]
    except TypeError:
        raise NoReference(f"{what}: input_size not integers") from None
    if len(in_size) != 5 or min(in_size) < 0 or min(in_size[1:]) < 1 or not is_float(g.dtype):
        raise NoReference(f"{what}: input_size {in_size} of a {g.dtype} gradient")
    size, align, sc = _trilinear_args(args, kwargs, 3, in_size[2:], what)
    if tuple(g.shape) != (in_size[0], in_size[1], *size):
        raise NoReference(f"{what}: a gradient of {tuple(g.shape)} for an output of "
                          f"{(in_size[0], in_size[1], *size)}")
    check_elems(math.prod(in_size), what)
    gw = _w(g)
    ct = gw.dtype
    d_, h_, w_ = _trilinear_src(size, in_size[2:], align, sc, ct, mad=mad or _mad)
    hw, n_in = tuple(in_size[3:]), math.prod(in_size[2:])
    planes = in_size[0] * in_size[1]
    corners = [(a, b, c) for a in (0, 1) for b in (0, 1) for c in (0, 1)]  # row-major
    # per output voxel (row-major) its 8 corners' flat sources and weights ((ld * lh) * lw)
    src = np.stack([_flat3(d_[a], h_[b], w_[c], hw) for a, b, c in corners], axis=-1)
    with fp_quiet():
        wts = np.stack([(d_[2 + a][:, None, None] * h_[2 + b][None, :, None])
                        * w_[2 + c][None, None, :] for a, b, c in corners], axis=-1)
        g4 = gw.reshape(planes, *size, 1)
        if mad is not None:  # (each contribution fused into its accumulator, in order)
            gx = np.zeros((planes, n_in), ct)
            if planes:
                _scatter_mad(gx, src.reshape(-1), wts.reshape(-1), np.broadcast_to(
                    g4, (planes, *wts.shape)).reshape(planes, -1), mad)
            return [gx.reshape(tuple(in_size)).astype(g.dtype)]
        step = max(1, (1 << 22) // max(src.size, 1))  # (planes a pass: bounded memory)
        parts = [_scatter_planes((wts[None] * g4[p0:p0 + step]).reshape(
            min(step, planes - p0), -1), src.reshape(-1), n_in)
            for p0 in range(0, planes, step)]
    gx = np.concatenate(parts) if parts else np.zeros((0, n_in), ct)
    return [gx.reshape(tuple(in_size)).astype(g.dtype)]
