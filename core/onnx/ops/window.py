"""Shared sliding-window machinery for convolution and pooling (N-D, vectorised).

``windows`` turns an (N, C, *spatial) array into (N, C, *out, *kernel) views: strides and
dilations are slicing, padding is one np.pad. No Python loop ever runs over pixels.
"""

from __future__ import annotations

import math

import numpy as np


def pads_for(in_shape, kernel, strides, dilations, pads, auto_pad, ceil_mode=0):
    """(begin, end) padding per spatial axis, resolving auto_pad like the ONNX spec."""
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


def out_size(n, k, s, d, pb, pe, ceil_mode=0):
    """Output length of one spatial axis."""
    eff = (k - 1) * d + 1
    span = n + pb + pe - eff
    if ceil_mode:
        o = -(-span // s) + 1
        if (o - 1) * s >= n + pb:  # the last window must start inside the input or left pad
            o -= 1
        return o
    return span // s + 1


def windows(x, kernel, strides, dilations, padw, fill, ceil_mode=0):
    """(N, C, *out, *kernel) view of x padded with ``fill`` (extra end padding for ceil_mode)."""
    nd = len(kernel)
    sp = x.shape[2:]
    outs = [out_size(sp[i], kernel[i], strides[i], dilations[i], *padw[i], ceil_mode)
            for i in range(nd)]
    width = [(0, 0), (0, 0)]
    for i in range(nd):
        eff = (kernel[i] - 1) * dilations[i] + 1
        need = (outs[i] - 1) * strides[i] + eff  # padded length the windows reach
        b, e = padw[i]
        e2 = max(e, need - sp[i] - b)
        width.append((b, e2))
    xp = np.pad(x, width, mode="constant", constant_values=fill) if any(
        w != (0, 0) for w in width) else x
    effs = [(kernel[i] - 1) * dilations[i] + 1 for i in range(nd)]
    v = np.lib.stride_tricks.sliding_window_view(xp, effs, axis=tuple(range(2, 2 + nd)))
    sl = [slice(None), slice(None)]
    sl += [slice(0, (outs[i] - 1) * strides[i] + 1, strides[i]) for i in range(nd)]
    sl += [slice(None, None, dilations[i]) for i in range(nd)]
    return v[tuple(sl)], outs, width


def attrs_nd(x, kernel_shape, strides, dilations):
    """Default strides/dilations to ones for the spatial rank of x."""
    nd = x.ndim - 2
    k = list(kernel_shape)
    return k, list(strides) if strides else [1] * nd, list(dilations) if dilations else [1] * nd
