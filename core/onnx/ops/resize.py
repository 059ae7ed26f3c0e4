"""Resize and Upsample: separable per-axis interpolation (nearest, linear, cubic).

Each resized axis is one gather of ``T`` taps per output position and a weighted sum over the
taps in order, computed in float64 and cast once (Resize is not a tape op).
"""

from __future__ import annotations

import numpy as np

from core.onnx.registry import as_int_list, op


def _source_coord(i, o, length, s, mode, roi_lo=0.0, roi_hi=1.0):
    """Output positions ``i`` (float64) mapped back to input coordinates."""
    if mode == "half_pixel":
        return (i + 0.5) / s - 0.5
    if mode == "half_pixel_symmetric":
        adj = o / (s * length)
        center = length / 2
        return center * (1 - adj) + (i + 0.5) / s - 0.5
    if mode == "pytorch_half_pixel":
        return (i + 0.5) / s - 0.5 if o > 1 else np.zeros_like(i)
    if mode == "align_corners":
        return i * (length - 1) / (o - 1) if o > 1 else np.zeros_like(i)
    if mode == "asymmetric":
        return i / s
    if mode == "tf_crop_and_resize":
        if o > 1:
            return roi_lo * (length - 1) + i * (roi_hi - roi_lo) * (length - 1) / (o - 1)
        return np.full_like(i, 0.5 * (roi_lo + roi_hi) * (length - 1))
    raise ValueError(f"unknown coordinate_transformation_mode {mode!r}")


def _nearest(x, rule):
    if rule == "round_prefer_floor":
        return np.ceil(x - 0.5)
    if rule == "round_prefer_ceil":
        return np.floor(x + 0.5)
    if rule == "floor":
        return np.floor(x)
    if rule == "ceil":
        return np.ceil(x)
    raise ValueError(f"unknown nearest_mode {rule!r}")


def _cubic(r, a):
    """The four cubic-convolution weights for fractional offset r (taps -1, 0, 1, 2)."""
    return np.stack([
        ((a * (r + 1) - 5 * a) * (r + 1) + 8 * a) * (r + 1) - 4 * a,
        ((a + 2) * r - (a + 3)) * r * r + 1,
        ((a + 2) * (1 - r) - (a + 3)) * (1 - r) * (1 - r) + 1,
        ((a * (2 - r) - 5 * a) * (2 - r) + 8 * a) * (2 - r) - 4 * a,
    ], axis=-1)


def _taps(xs, length, s, mode, a, exclude_outside, antialias):
    """(index, weight) arrays of shape (O, T) for source coordinates ``xs``."""
    if mode == "nearest":
        raise AssertionError("nearest handled by the caller")
    x0 = np.floor(xs)
    r = xs - x0
    if antialias and s < 1:
        if mode == "linear":
            start = int(np.floor(-1 / s) + 1)
            offs = np.arange(start, 2 - start)
            w = np.clip(1 - np.abs((offs[None, :] - r[:, None]) * s), 0, None)
        else:
            start = int(np.floor(-2 / s) + 1)
            offs = np.arange(start, 2 - start + 1)
            d = np.abs((offs[None, :] - r[:, None]) * s)
            w = np.where(d <= 1, ((a + 2) * d - (a + 3)) * d * d + 1,
                         np.where(d < 2, ((a * d - 5 * a) * d + 8 * a) * d - 4 * a, 0))
    elif mode == "linear":
        offs = np.array([0, 1])
        w = np.stack([1 - r, r], axis=-1)
    elif mode == "cubic":
        offs = np.array([-1, 0, 1, 2])
        w = _cubic(r, a)
    else:
        raise ValueError(f"unknown mode {mode!r}")
    idx = x0[:, None].astype(np.int64) + offs[None, :]
    if exclude_outside or antialias:
        w = np.where((idx < 0) | (idx >= length), 0, w)
        w = w / np.sum(w, axis=1, keepdims=True)
    return np.clip(idx, 0, length - 1), w


def _resize_axis(x, ax, o, s, ctm, mode, rule, a, excl, anti, roi, extrap):
    length = x.shape[ax]
    i = np.arange(o, dtype=np.float64)
    # the spec's "length_resized" is length * scale, unrounded, where a mode divides by it
    o_eff = length * s if ctm in ("align_corners", "tf_crop_and_resize") and o > 1 else o
    xs = _source_coord(i, o_eff, length, s, ctm, *roi)
    outside = (xs < 0) | (xs > length - 1) if ctm == "tf_crop_and_resize" else None
    if mode == "nearest":
        idx = np.clip(_nearest(xs, rule).astype(np.int64), 0, length - 1)
        y = np.take(x, idx, axis=ax).astype(np.float64)
    else:
        idx, w = _taps(xs, length, s, mode, a, excl, anti)
        shp = [1] * x.ndim
        shp[ax] = o
        y = np.zeros(x.shape[:ax] + (o,) + x.shape[ax + 1:], np.float64)
        for t in range(idx.shape[1]):  # taps in order
            y = y + np.take(x, idx[:, t], axis=ax) * w[:, t].reshape(shp)
    if outside is not None and outside.any():
        shp = [1] * x.ndim
        shp[ax] = o
        y = np.where(outside.reshape(shp), extrap, y)
    return y


def _resize(x, scales, sizes, roi, axes, mode, ctm, rule, a, excl, anti, extrap, policy):
    axes = [v % x.ndim for v in axes] if axes else list(range(x.ndim))
    if sizes is not None:
        want = dict(zip(axes, sizes, strict=False))
        if policy in ("not_larger", "not_smaller"):
            f = min if policy == "not_larger" else max
            sc = f(want[d] / x.shape[d] for d in axes)
            want = {d: int(np.floor(sc * x.shape[d] + 0.5)) for d in axes}
            sc_ax = {d: sc for d in axes}
        else:
            sc_ax = {d: want[d] / x.shape[d] for d in axes}
    else:
        sc_ax = dict(zip(axes, scales, strict=False))
        want = {d: int(np.floor(x.shape[d] * sc_ax[d])) for d in axes}
    roi_ax = {d: (0.0, 1.0) for d in axes}
    if roi is not None and len(roi):
        n = len(axes)
        roi_ax = {d: (float(roi[i]), float(roi[i + n])) for i, d in enumerate(axes)}
    y = x
    for d in axes:
        if want[d] == x.shape[d] and sc_ax[d] == 1 and ctm != "tf_crop_and_resize":
            continue
        y = _resize_axis(y, d, want[d], sc_ax[d], ctm, mode, rule, a, excl, anti,
                         roi_ax[d], extrap)
    return y.astype(x.dtype) if y.dtype != x.dtype else y


def _opt(v):
    return None if v is None or np.asarray(v).size == 0 else np.asarray(v).reshape(-1)


@op("Resize")
def resize(ctx, x, roi=None, scales=None, sizes=None, antialias=0, axes=None,
           coordinate_transformation_mode="half_pixel", cubic_coeff_a=-0.75, exclude_outside=0,
           extrapolation_value=0.0, keep_aspect_ratio_policy="stretch", mode="nearest",
           nearest_mode="round_prefer_floor"):
    if ctx.opset < 11:  # Resize-10: (X, scales), asymmetric coordinates
        scales, roi, coordinate_transformation_mode = roi, None, "asymmetric"
        nearest_mode = "floor" if mode == "nearest" else nearest_mode
    sc = _opt(scales)
    sz = _opt(sizes)
    return _resize(x, None if sc is None else [float(v) for v in sc],
                   None if sz is None else as_int_list(sz), _opt(roi), axes, mode,
                   coordinate_transformation_mode, nearest_mode, cubic_coeff_a,
                   exclude_outside, antialias, extrapolation_value, keep_aspect_ratio_policy)


@op("Upsample")
def upsample(ctx, x, scales_in=None, mode="nearest", scales=None, height_scale=None,
             width_scale=None):
    sc = scales if scales_in is None else _opt(scales_in)
    if sc is None:
        sc = [1.0, 1.0, height_scale, width_scale]
    mode = "linear" if mode in ("linear", "bilinear") else mode
    return _resize(x, [float(v) for v in sc], None, None, None, mode, "asymmetric", "floor",
                   -0.75, 0, 0, 0.0, "stretch")
