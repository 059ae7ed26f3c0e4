"""Tape ops for imported ONNX models: conv2d, conv3d, conv_transpose2d, conv_transpose3d, maxpool2d,
avgpool2d, maxpool3d, avgpool3d, erf, gather.

The numerics live here once and are shared: ``core.onnx``'s Conv/MaxPool/AveragePool kernels call
:func:`conv_nd` / :func:`pool_nd`, so the executor and the tape round identically. Reference
order (docs/reference-order-nn.md): a convolution is im2col (a strided window view) and the
reference matmul, each output ``acc = 0.0; for (c, k1, k2) row-major: acc = acc + w*x``; a pool
reduces its window in row-major tap order; col2im and pool backward add taps in row-major order.
A transposed convolution is conv2d's backward-data (``wᵀ·x``, then col2im) and its backward is
conv2d's forward and weight gradient with the roles swapped: no order of its own.

They are registered with the rest when ``core.ops`` is imported; their device kernels are in
``gpu/library_nn.py``.
"""

from __future__ import annotations

import math

import numpy as np

from tapescope.core.ops.reference import matmul as ref_matmul
from tapescope.core.ops.reference import serial_sum
from tapescope.core.optable.registry import REGISTRY, CForm, OpDef, ShapeError, register

# ---- windows (shared with core.onnx) ----------------------------------------------------------


def pads_for(in_shape, kernel, strides, dilations, pads, auto_pad="NOTSET"):
    """(begin, end) padding per spatial axis, resolving ONNX auto_pad."""
    nd = len(in_shape)
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        out = []
        for i in range(nd):
            eff = (kernel[i] - 1) * dilations[i] + 1
            o = math.ceil(in_shape[i] / strides[i])
            total = max(0, (o - 1) * strides[i] + eff - in_shape[i])
            small, big = total // 2, total - total // 2
            out.append((small, big) if auto_pad == "SAME_UPPER" else (big, small))
        return out
    if auto_pad == "VALID":
        return [(0, 0)] * nd
    p = list(pads) if pads else [0] * (2 * nd)
    return [(p[i], p[i + nd]) for i in range(nd)]


#: the largest stride, dilation, kernel extent, pad or padded extent a window may have: every
#: product of two stays inside C's long long, where native code indexes (core/native) --
#: integer geometry from a file is checked here, before it reaches C (issue 49: a Conv with
#: strides 2**32 read out of bounds)
MAX_EXTENT = (1 << 31) - 1


def check_window(n, k, s, d, pb, pe) -> None:
    """Refuse window geometry out of range (ShapeError naming the value): strides and
    dilations in [1, MAX_EXTENT], kernel extents too, pads and the padded extent within
    +-MAX_EXTENT."""
    for what, v, lo in (("stride", s, 1), ("dilation", d, 1), ("kernel extent", k, 1),
                        ("pad", pb, -MAX_EXTENT), ("pad", pe, -MAX_EXTENT),
                        ("input extent", n, 0)):
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool) \
                or not lo <= v <= MAX_EXTENT:
            raise ShapeError(f"window {what} {v!r} is out of range [{lo}, {MAX_EXTENT}]")
    if not 0 <= n + pb + pe <= MAX_EXTENT:
        raise ShapeError(f"padded extent {n} + {pb} + {pe} is out of range [0, {MAX_EXTENT}]")
    if (k - 1) * d + 1 > MAX_EXTENT:
        raise ShapeError(f"window {k} (dilation {d}) spans more than {MAX_EXTENT}")


def out_size(n, k, s, d, pb, pe, ceil_mode=0):
    """Output length of one spatial axis (the geometry checked first: :func:`check_window`)."""
    check_window(n, k, s, d, pb, pe)
    span = n + pb + pe - ((k - 1) * d + 1)
    if span < 0:
        raise ShapeError(f"window {k} (dilation {d}) is larger than the padded input {n}")
    if ceil_mode:
        o = -(-span // s) + 1
        return o - 1 if (o - 1) * s >= n + pb else o  # last window starts inside input/left pad
    return span // s + 1


def windows(x, kernel, strides, dilations, padw, fill, ceil_mode=0):
    """(N, C, *out, *kernel) strided view of x padded with ``fill``; returns (view, out sizes)."""
    nd = len(kernel)
    sp = x.shape[2:]
    outs = [out_size(sp[i], kernel[i], strides[i], dilations[i], *padw[i], ceil_mode)
            for i in range(nd)]
    effs = [(kernel[i] - 1) * dilations[i] + 1 for i in range(nd)]
    width = [(0, 0), (0, 0)] + [
        (padw[i][0], max(padw[i][1], (outs[i] - 1) * strides[i] + effs[i] - sp[i] - padw[i][0]))
        for i in range(nd)]
    xp = np.pad(x, width, constant_values=fill) if any(w != (0, 0) for w in width) else x
    v = np.lib.stride_tricks.sliding_window_view(xp, effs, axis=tuple(range(2, 2 + nd)))
    sl = [slice(None), slice(None)]
    sl += [slice(0, (outs[i] - 1) * strides[i] + 1, strides[i]) for i in range(nd)]
    sl += [slice(None, None, dilations[i]) for i in range(nd)]
    return v[tuple(sl)], outs


def im2col(x, kernel, strides, dilations, padw, group):
    """(N, G, Cg * prod(kernel), prod(out)) columns, rows in (c, k1, k2, ...) row-major order."""
    nd = len(kernel)
    n, c = x.shape[:2]
    if all(k == 1 for k in kernel) and all(s == 1 for s in strides) and \
            all(p == (0, 0) for p in padw):  # 1x1: the image already is its column matrix
        return x.reshape(n, group, c // group, -1), list(x.shape[2:])
    if nd == 2:  # the same matrix written by a C loop (core.native), ~5x quicker than the view
        from tapescope.core import native

        outs = [out_size(x.shape[2 + i], kernel[i], strides[i], dilations[i], *padw[i])
                for i in range(2)]
        cols = native.im2col2d(x, kernel, strides, dilations, padw, outs)
        if cols is not None:
            return cols.reshape(n, group, -1, outs[0] * outs[1]), outs
    v, outs = windows(x, kernel, strides, dilations, padw, 0)
    perm = [0, 1] + list(range(2 + nd, 2 + 2 * nd)) + list(range(2, 2 + nd))
    return v.transpose(perm).reshape(n, group, (c // group) * int(np.prod(kernel)),
                                     int(np.prod(outs))), outs


def conv_nd(x, w, strides, padw, dilations, group, matmul=ref_matmul):
    """Convolution without bias: im2col, then ``matmul`` (the reference one unless told)."""
    n, c = x.shape[:2]
    m = w.shape[0]
    if c % group or m % group or w.shape[1] * group != c:
        raise ShapeError(f"conv: input channels {c}, weight {w.shape}, group {group} disagree")
    if len(strides) == 2 and (
            matmul is ref_matmul or getattr(matmul, "reference_order", False)):
        # one output channel per group (depthwise): direct in C; else the product with its
        # panels packed straight from x (no im2col matrix); the same chains and bits
        from tapescope.core import native

        outs = [out_size(x.shape[2 + i], w.shape[2 + i], strides[i], dilations[i], *padw[i])
                for i in range(2)]
        if m == group:
            y = native.conv2d_one_per_group(x, w, strides, dilations, padw, outs)
        else:
            y = native.conv2d(x, w, strides, dilations, padw, outs, group)
        if y is not None:
            return y
    cols, outs = im2col(x, w.shape[2:], strides, dilations, padw, group)
    wg = w.reshape(group, m // group, -1)
    y = np.asarray(matmul(wg[None], cols)).astype(x.dtype, copy=False)
    return y.reshape((n, m) + tuple(outs))


def col2im(cols, x_shape, kernel, strides, dilations, padw, ceil_mode=0):
    """Adjoint of im2col: add each tap's columns into a padded image, taps in row-major order."""
    n, c = x_shape[:2]
    sp = x_shape[2:]
    nd = len(kernel)
    outs = [out_size(sp[i], kernel[i], strides[i], dilations[i], *padw[i], ceil_mode)
            for i in range(nd)]
    full = [max(sp[i] + padw[i][0] + padw[i][1],
                (outs[i] - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1)
            for i in range(nd)]
    gx = np.zeros((n, c) + tuple(full), cols.dtype)
    cols = cols.reshape((n, c) + tuple(kernel) + tuple(outs))
    for tap in np.ndindex(*kernel):
        dst = tuple(slice(tap[i] * dilations[i],
                          tap[i] * dilations[i] + (outs[i] - 1) * strides[i] + 1, strides[i])
                    for i in range(nd))
        gx[(slice(None), slice(None)) + dst] += cols[(slice(None), slice(None)) + tap]
    crop = tuple(slice(padw[i][0], padw[i][0] + sp[i]) for i in range(nd))
    return np.ascontiguousarray(gx[(slice(None), slice(None)) + crop])


def pool_nd(x, kind, kernel, strides, padw, dilations=None, ceil_mode=0, count_include_pad=0,
            sum_fn=serial_sum):
    """Max or average pool; average = serial window sum / count (pads counted if asked)."""
    nd = len(kernel)
    dil = list(dilations or [1] * nd)
    axes = tuple(range(-nd, 0))
    if kind == "max":
        low = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
        v, _ = windows(x, kernel, strides, dil, padw, low, ceil_mode)
        # one np.maximum per tap, vectorised over pixels (max is exact in any order; NaN wins)
        y = v[(Ellipsis,) + (0,) * nd].copy()
        for tap in list(np.ndindex(*kernel))[1:]:
            np.maximum(y, v[(Ellipsis,) + tap], out=y)
        return y
    v, _ = windows(x, kernel, strides, dil, padw, 0, ceil_mode)
    if sum_fn is serial_sum and x.dtype.kind == "f":
        # serial_sum's contract written as one np.add per tap, vectorised over pixels:
        # acc = +0.0; acc = acc + tap for taps in row-major order (the same bits, no copy of v)
        taps = list(np.ndindex(*kernel))
        s = np.add(x.dtype.type(0), v[(Ellipsis,) + taps[0]])
        for tap in taps[1:]:
            np.add(s, v[(Ellipsis,) + tap], out=s)
    else:
        s = sum_fn(v, axes)
    return (s / pool_counts(x, kernel, strides, padw, dil, ceil_mode, count_include_pad)
            ).astype(x.dtype, copy=False)


def pool_counts(x, kernel, strides, padw, dil, ceil_mode, count_include_pad):
    """Elements averaged per output position (a constant of the shapes)."""
    nd = len(kernel)
    ones = np.ones((1, 1) + x.shape[2:], x.dtype)
    outs = [out_size(x.shape[2 + i], kernel[i], strides[i], dil[i], *padw[i], ceil_mode)
            for i in range(nd)]
    if count_include_pad:  # explicit pads count; ceil_mode's extra end padding does not
        ones = np.pad(ones, [(0, 0), (0, 0)] + list(padw), constant_values=1)
        padw = [(0, 0)] * nd
    cv, _ = windows(ones, kernel, strides, dil, padw, 0, ceil_mode)
    cnt = np.sum(cv, axis=tuple(range(-nd, 0)))  # small integers: exact in any order
    return cnt[(slice(None), slice(None)) + tuple(slice(0, o) for o in outs)]


# ---- tape ops ---------------------------------------------------------------------------------

def conv_geom(at, nd=2):
    """(strides, [(begin, end)] pads per axis, dilations, group) of an ``nd``-d convolution;
    ONNX pads: every axis's begin, then every axis's end."""
    st = tuple(at.get("strides", (1,) * nd))
    p = tuple(at.get("pads", (0,) * (2 * nd)))
    dil = tuple(at.get("dilations", (1,) * nd))
    if len(st) != nd or len(p) != 2 * nd or len(dil) != nd:
        raise ShapeError(f"conv{nd}d: strides {st}, pads {p} and dilations {dil} must have "
                         f"{nd}, {2 * nd} and {nd} values")
    return st, [(p[i], p[i + nd]) for i in range(nd)], dil, int(at.get("group", 1))


_conv_geom = conv_geom  # the name core/explain.py imports


def _conv_shape_nd(nd):
    name, lay = f"conv{nd}d", ("NCL", "NCHW", "NCDHW")[nd - 1]

    def shape(shapes, at):
        xs, ws = shapes
        if len(xs) != 2 + nd or len(ws) != 2 + nd:
            raise ShapeError(f"{name} takes {lay} x and MC{'k' * nd} w, got {xs} and {ws}")
        if 0 in xs or 0 in ws:  # an empty batch (or channel): no window, no gradient rule
            raise ShapeError(f"{name}: x {xs} and w {ws} must have no zero-size dim "
                             "(empty batch?)")
        st, padw, dil, g = conv_geom(at, nd)
        if xs[1] != ws[1] * g or ws[0] % g:
            raise ShapeError(f"{name}: x {xs}, w {ws} and group {g} disagree")
        return (xs[0], ws[0]) + tuple(out_size(xs[2 + i], ws[2 + i], st[i], dil[i], *padw[i])
                                      for i in range(nd))
    return shape


_conv_shape = _conv_shape_nd(2)


def _conv_fwd(M, xs, at):
    st, padw, dil, g = conv_geom(at, xs[0].ndim - 2)
    return conv_nd(xs[0], xs[1], st, padw, dil, g)


def _conv_bwd(M, g, xs, y, at, needs):
    """gw: dot over output pixels, then a serial sum over the batch; gx: wᵀ·g, then col2im.
    Any number of spatial axes (conv2d, conv3d): pixels and taps in row-major order."""
    x, w = xs
    st, padw, dil, grp = conv_geom(at, x.ndim - 2)
    n, m = g.shape[:2]
    cols, _ = im2col(x, w.shape[2:], st, dil, padw, grp)
    gg = g.reshape(n, grp, m // grp, -1)
    gx = gw = None
    if needs[1]:
        if cols.shape[2] > gg.shape[2]:
            # colsᵀ is the larger operand: the product of cols and ggᵀ instead, each dot the
            # same products (a·b = b·a exactly) summed in the same pixel order, and the copy
            # of a transposed operand ggᵀ, not colsᵀ (2x quicker at 32+ input channels)
            per_n = ref_matmul(cols, np.swapaxes(gg, -1, -2))  # (N, G, Cg*k, M/G)
            gw = np.ascontiguousarray(np.swapaxes(serial_sum(per_n, 0), -1, -2)).reshape(w.shape)
        else:
            per_n = ref_matmul(gg, np.swapaxes(cols, -1, -2))  # (N, G, M/G, Cg*k)
            gw = serial_sum(per_n, 0).reshape(w.shape)
    if needs[0]:
        wg = w.reshape(grp, m // grp, -1)
        gcols = ref_matmul(np.swapaxes(wg, -1, -2)[None], gg)  # (N, G, Cg*k, P)
        gx = col2im(gcols, x.shape, w.shape[2:], st, dil, padw)
    return [gx, gw]


def _conv_sample(rng, dtype):
    def r(*s):
        return rng.uniform(-1, 1, s).astype(dtype)
    return [([r(2, 3, 5, 5), r(4, 3, 3, 3)], {"pads": (1, 1, 1, 1)}),
            ([r(1, 4, 6, 5), r(4, 2, 2, 3)], {"strides": (2, 1), "pads": (0, 1, 1, 0),
                                              "dilations": (2, 1), "group": 2})]


def _conv3d_sample(rng, dtype):
    def r(*s):
        return rng.uniform(-1, 1, s).astype(dtype)
    return [([r(2, 3, 4, 5, 4), r(4, 3, 2, 3, 2)], {"pads": (1, 1, 0, 0, 1, 1)}),
            ([r(1, 4, 5, 4, 5), r(4, 2, 3, 2, 2)],
             {"strides": (2, 1, 2), "pads": (1, 0, 1, 0, 1, 0), "dilations": (1, 2, 1),
              "group": 2})]


def _convt_geom(at, nd=2):
    st, padw, dil, g = conv_geom(at, nd)
    opad = tuple(at.get("output_padding", (0,) * nd))
    if len(opad) != nd:
        raise ShapeError(f"conv_transpose{nd}d: output_padding {opad} must have {nd} values")
    return st, padw, dil, g, opad


def convt_out(i, k, s, d, pb, pe, op) -> int:
    """Output length of one axis of a transposed convolution (ONNX ConvTranspose, no
    output_shape): ``s*(i-1) + op + (k-1)*d + 1 - pb - pe``; the geometry checked first."""
    check_window(i, k, s, d, pb, pe)
    if not isinstance(op, (int, np.integer)) or not 0 <= op < s:
        # NOTE: op < stride keeps conv2d of the output (the adjoint) back at i positions
        raise ShapeError(f"output_padding {op!r} must be in [0, stride {s})")
    o = s * (i - 1) + op + (k - 1) * d + 1 - pb - pe
    if o < 1:
        raise ShapeError(f"transposed convolution output {o} < 1 (input {i}, kernel {k}, "
                         f"stride {s}, pads {pb}+{pe})")
    return o


def _convt_shape_nd(nd):
    name, lay = f"conv_transpose{nd}d", ("NCL", "NCHW", "NCDHW")[nd - 1]

    def shape(shapes, at):
        xs, ws = shapes
        if len(xs) != 2 + nd or len(ws) != 2 + nd:
            raise ShapeError(f"{name} takes {lay} x and CM{'k' * nd} w, got {xs} and {ws}")
        if 0 in xs or 0 in ws:
            raise ShapeError(f"{name}: x {xs} and w {ws} must have no zero-size dim")
        st, padw, dil, g, opad = _convt_geom(at, nd)
        if xs[1] != ws[0] or ws[0] % g:
            raise ShapeError(f"{name}: x {xs}, w {ws} and group {g} disagree")
        return (xs[0], ws[1] * g) + tuple(convt_out(xs[2 + i], ws[2 + i], st[i], dil[i],
                                                    *padw[i], opad[i]) for i in range(nd))
    return shape


_convt_shape = _convt_shape_nd(2)


def conv_transpose_2d(x, w, strides, padw, dilations, group, opad):
    """ONNX ConvTranspose (2-D or 3-D, no bias) as conv2d's backward-data: ``gcols = dot over
    c of (w[c, (m, a, b)] * x[n, c, p])`` (serial in c), then col2im (taps in row-major order,
    from +0.0) cropped by the pads: the executor's order (core/onnx/ops/nn.py) bit for bit."""
    n, c = x.shape[:2]
    mg = w.shape[1]
    out = (n, mg * group) + tuple(convt_out(x.shape[2 + i], w.shape[2 + i], strides[i],
                                            dilations[i], *padw[i], opad[i])
                                  for i in range(x.ndim - 2))
    wg = w.reshape(group, c // group, -1)
    gcols = ref_matmul(np.swapaxes(wg, -1, -2)[None], x.reshape(n, group, c // group, -1))
    return col2im(np.asarray(gcols).astype(x.dtype, copy=False), out, w.shape[2:], strides,
                  dilations, padw)


def _convt_fwd(M, xs, at):
    st, padw, dil, g, opad = _convt_geom(at, xs[0].ndim - 2)
    return conv_transpose_2d(xs[0], xs[1], st, padw, dil, g, opad)


def _convt_bwd(M, g, xs, y, at, needs):
    """The adjoint of conv2d's backward-data: gx = conv2d(g, w) (its forward, the same
    chains); gw = conv2d's weight gradient with the image g and the output gradient x:
    ``serial_sum over n of (dot over p of (x[n, c, p] * im2col(g)[n, (m, a, b), p]))``."""
    x, w = xs
    st, padw, dil, grp, _ = _convt_geom(at, x.ndim - 2)
    gx = gw = None
    if needs[0]:
        gx = conv_nd(g, w, st, padw, dil, grp)
    if needs[1]:
        n, c = x.shape[:2]
        cols, _ = im2col(g, w.shape[2:], st, dil, padw, grp)
        per_n = ref_matmul(x.reshape(n, grp, c // grp, -1), np.swapaxes(cols, -1, -2))
        gw = serial_sum(np.asarray(per_n), 0).reshape(w.shape)
    return [gx, gw]


def _convt_sample(rng, dtype):
    def r(*s):
        return rng.uniform(-1, 1, s).astype(dtype)
    return [([r(2, 3, 3, 3), r(3, 2, 2, 2)], {"strides": (2, 2)}),
            ([r(1, 4, 3, 4), r(4, 2, 3, 3)], {"strides": (2, 2), "pads": (1, 1, 1, 0),
                                              "output_padding": (1, 0), "group": 2}),
            ([r(1, 2, 4, 3), r(2, 3, 2, 3)], {"dilations": (2, 1), "pads": (0, 1, 1, 0)})]


def _convt3d_sample(rng, dtype):
    def r(*s):
        return rng.uniform(-1, 1, s).astype(dtype)
    return [([r(2, 3, 2, 3, 2), r(3, 2, 2, 2, 2)], {"strides": (2, 1, 2)}),
            ([r(1, 4, 2, 3, 3), r(4, 1, 3, 2, 3)],
             {"strides": (2, 2, 1), "pads": (1, 0, 1, 0, 1, 0), "output_padding": (1, 0, 0),
              "dilations": (1, 1, 2), "group": 2})]


def pool_geom(at, nd=2):
    """(kernel, strides, [(begin, end)] pads per axis, ceil_mode) of an ``nd``-d pool."""
    k = tuple(at["kernel"])
    st = tuple(at.get("strides", k))
    p = tuple(at.get("pads", (0,) * (2 * nd)))
    if len(k) != nd or len(st) != nd or len(p) != 2 * nd:
        raise ShapeError(f"pool{nd}d: kernel {k}, strides {st} and pads {p} must have {nd}, "
                         f"{nd} and {2 * nd} values")
    return k, st, [(p[i], p[i + nd]) for i in range(nd)], int(at.get("ceil_mode", 0))



def _pool_shape_nd(nd):
    lay = ("NCL", "NCHW", "NCDHW")[nd - 1]

    def shape(shapes, at):
        xs = shapes[0]
        if len(xs) != 2 + nd:
            raise ShapeError(f"pool{nd}d takes {lay}, got {xs}")
        if 0 in xs:  # an empty batch (or channel): no window to reduce, no gradient rule
            raise ShapeError(f"pool{nd}d: x {xs} must have no zero-size dim (empty batch?)")
        k, st, padw, cm = pool_geom(at, nd)
        return xs[:2] + tuple(out_size(xs[2 + i], k[i], st[i], 1, *padw[i], cm)
                              for i in range(nd))
    return shape


_pool_shape = _pool_shape_nd(2)


def _max_fwd(M, xs, at):
    k, st, padw, cm = pool_geom(at, xs[0].ndim - 2)
    return pool_nd(xs[0], "max", k, st, padw, None, cm)


def _max_bwd(M, g, xs, y, at, needs):
    """Each output's gradient goes to its window's first maximum (row-major), added in
    row-major output order (np.add.at is unbuffered and sequential). Any number of axes."""
    x = xs[0]
    nd = x.ndim - 2
    k, st, padw, cm = pool_geom(at, nd)
    v, outs = windows(x, k, st, (1,) * nd, padw, -np.inf, cm)
    arg = np.argmax(v.reshape(v.shape[:2 + nd] + (-1,)), axis=-1)
    offs = np.unravel_index(arg, k)
    n, c = x.shape[:2]
    full = tuple(max(x.shape[2 + i] + padw[i][0] + padw[i][1], (outs[i] - 1) * st[i] + k[i])
                 for i in range(nd))
    gx = np.zeros((n, c) + full, g.dtype)
    index = [np.arange(n).reshape((-1,) + (1,) * (1 + nd)),
             np.arange(c).reshape((1, -1) + (1,) * nd)]
    for i in range(nd):  # padded position of each output's first maximum along axis i
        index.append(np.arange(outs[i]).reshape((1, 1) + (1,) * i + (-1,) + (1,) * (nd - 1 - i))
                     * st[i] + offs[i])
    np.add.at(gx, tuple(index), g)
    crop = tuple(slice(padw[i][0], padw[i][0] + x.shape[2 + i]) for i in range(nd))
    return [np.ascontiguousarray(gx[(slice(None), slice(None)) + crop])]


def _avg_fwd(M, xs, at):
    k, st, padw, cm = pool_geom(at, xs[0].ndim - 2)
    return pool_nd(xs[0], "avg", k, st, padw, None, cm, int(at.get("count_include_pad", 0)))


def _avg_bwd(M, g, xs, y, at, needs):
    """ga = (g / count) added to every tap of its window, taps in row-major order (col2im)."""
    x = xs[0]
    nd = x.ndim - 2
    k, st, padw, cm = pool_geom(at, nd)
    cnt = pool_counts(x, k, st, padw, (1,) * nd, cm, int(at.get("count_include_pad", 0)))
    gd = g / cnt.astype(g.dtype)
    cols = np.broadcast_to(gd[(slice(None), slice(None)) + (None,) * nd],
                           g.shape[:2] + k + g.shape[2:])
    return [col2im(cols, x.shape, k, st, (1,) * nd, padw, cm)]


def _pool_sample(extra):
    def sample(rng, dtype):
        # distinct values: finite differences stay off max-pool's ties
        x = rng.permutation(2 * 3 * 6 * 5).reshape(2, 3, 6, 5).astype(dtype) / 10
        return [([x], {"kernel": (2, 2), **extra}),
                ([x], {"kernel": (3, 2), "strides": (2, 1), "pads": (1, 0, 1, 1), **extra}),
                ([x], {"kernel": (3, 3), "strides": (2, 2), "ceil_mode": 1, **extra})]
    return sample


def _pool3d_sample(extra):
    def sample(rng, dtype):
        x = rng.permutation(2 * 2 * 4 * 5 * 4).reshape(2, 2, 4, 5, 4).astype(dtype) / 10
        return [([x], {"kernel": (2, 2, 2), **extra}),
                ([x], {"kernel": (3, 2, 2), "strides": (1, 2, 1), "pads": (1, 0, 1, 1, 1, 0),
                       **extra}),
                ([x], {"kernel": (2, 3, 3), "strides": (2, 2, 2), "ceil_mode": 1, **extra})]
    return sample


_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


def _erf_bwd(M, g, xs, y, at, needs):
    x = xs[0]
    # ga = g * (c * exp(-(x * x))), c = 2/sqrt(pi) rounded to the dtype once
    return [g * (x.dtype.type(_TWO_OVER_SQRT_PI) * M.exp(-(x * x)))]


def _gather_idx(idx, dim):
    i = np.asarray(idx).astype(np.int64)
    if i.size and (i.min() < -dim or i.max() >= dim):
        raise ShapeError(f"gather: index out of range [{-dim}, {dim})")
    return np.where(i < 0, i + dim, i)


def _gather_shape(shapes, at):
    xs, ids = shapes
    ax = int(at.get("axis", 0)) % len(xs)
    return xs[:ax] + ids + xs[ax + 1:]


def _gather_fwd(M, xs, at):
    x, idx = xs
    ax = int(at.get("axis", 0)) % x.ndim
    return np.take(x, _gather_idx(idx, x.shape[ax]), axis=ax)


def _gather_bwd(M, g, xs, y, at, needs):
    """Scatter-add into zeros, indices in row-major order (repeats accumulate in that order)."""
    x, idx = xs
    ax = int(at.get("axis", 0)) % x.ndim
    i = _gather_idx(idx, x.shape[ax]).reshape(-1)
    gx = np.zeros_like(x, dtype=g.dtype)
    gm = g.reshape(x.shape[:ax] + (i.size,) + x.shape[ax + 1:])
    np.add.at(gx, (slice(None),) * ax + (i,), gm)
    return [gx, None]


def _gather_sample(rng, dtype):
    x = rng.uniform(-1, 1, (4, 3)).astype(dtype)
    return [([x, np.array([[0, 2], [3, 0]], dtype)], {"axis": 0}),
            ([x, np.array([2, -1, 2], dtype)], {"axis": 1})]


def _erf_sample(rng, dtype):
    return [([rng.uniform(-2, 2, s).astype(dtype)], {}) for s in [(3, 4), (5,)]]


NN_OPS = (
    OpDef("conv2d", 2, "matmul", "none", _conv_shape, _conv_fwd, _conv_bwd, _conv_sample,
          doc="y = im2col(x) contracted with w, serial over (c, kh, kw); bias is a separate add"),
    OpDef("conv3d", 2, "matmul", "none", _conv_shape_nd(3), _conv_fwd, _conv_bwd,
          _conv3d_sample,
          doc="y = im2col(x) contracted with w, serial over (c, kd, kh, kw); conv2d's rules "
              "with three spatial axes"),
    OpDef("conv_transpose2d", 2, "matmul", "none", _convt_shape, _convt_fwd, _convt_bwd,
          _convt_sample,
          doc="y = col2im(wᵀ·x) cropped by the pads (conv2d's backward-data); gx = conv2d(g, w)"),
    OpDef("conv_transpose3d", 2, "matmul", "none", _convt_shape_nd(3), _convt_fwd, _convt_bwd,
          _convt3d_sample,
          doc="conv_transpose2d with three spatial axes: y = col2im(wᵀ·x) cropped by the pads"),
    OpDef("maxpool2d", 1, "reduce", "none", _pool_shape, _max_fwd, _max_bwd, _pool_sample({}),
          doc="y = max over each window; ga routes g to the first max of its window"),
    OpDef("avgpool2d", 1, "reduce", "none", _pool_shape, _avg_fwd, _avg_bwd,
          _pool_sample({"count_include_pad": 1}),
          doc="y = serial window sum / count; ga = g / count on every tap"),
    OpDef("maxpool3d", 1, "reduce", "none", _pool_shape_nd(3), _max_fwd, _max_bwd,
          _pool3d_sample({}), doc="maxpool2d with three spatial axes (the first max routes g)"),
    OpDef("avgpool3d", 1, "reduce", "none", _pool_shape_nd(3), _avg_fwd, _avg_bwd,
          _pool3d_sample({"count_include_pad": 1}),
          doc="avgpool2d with three spatial axes: serial window sum / count"),
    OpDef("erf", 1, "unary", "row_local", lambda s, a: s[0],
          lambda M, xs, at: M.erf(xs[0]), _erf_bwd, _erf_sample, transcendental=True,
          doc="y = erf(a) (refmath); ga = g * (2/sqrt(pi) * exp(-(a*a)))",
          # {s} = T(2/sqrt(pi)), rounded once on the host
          c=CForm("ERF({x})", ("MUL({g}, MUL({s}, EXP(-(MUL({x}, {x})))))",),
                  scalar=lambda at: _TWO_OVER_SQRT_PI), onnx=("Erf",)),
    OpDef("gather", 2, "movement", "none", _gather_shape, _gather_fwd, _gather_bwd,
          _gather_sample, nondiff_inputs=(1,),
          doc="y = take(x, indices, axis); indices are a const input (integers in the dtype)"),
)


def register_nn() -> None:
    """Add the nn ops to the tape's REGISTRY (``core.ops`` does it on import; idempotent)."""
    for d in NN_OPS:
        if d.name not in REGISTRY:
            register(d)
