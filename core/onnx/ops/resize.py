"""Resize and Upsample: separable per-axis interpolation (nearest, linear, cubic).

Each resized axis is one gather of ``T`` taps per output position and a weighted sum over the
taps in order: in the input's own type for float32 / float64 (the order the tape import
records: core/onnx/lowerings.py ``resize``), in float64 and cast once for the other types.
"""

from __future__ import annotations

import numpy as np

from tapescope.core.onnx.registry import as_int_list, op


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


def axis_taps(length, o, s, ctm, mode, rule, a, excl, anti, roi):
    """One resized axis: (idx [O, T] int64, w [O, T] float64 or None for nearest, outside [O]
    bool or None): output ``i`` is ``sum over t of x[idx[i, t]] * w[i, t]`` (or x[idx[i, 0]])."""
    i = np.arange(o, dtype=np.float64)
    # the spec's "length_resized" is length * scale, unrounded, where a mode divides by it
    o_eff = length * s if ctm in ("align_corners", "tf_crop_and_resize") and o > 1 else o
    xs = _source_coord(i, o_eff, length, s, ctm, *roi)
    outside = (xs < 0) | (xs > length - 1) if ctm == "tf_crop_and_resize" else None
    if outside is not None and not outside.any():
        outside = None
    if mode == "nearest":
        return np.clip(_nearest(xs, rule).astype(np.int64), 0, length - 1)[:, None], None, outside
    idx, w = _taps(xs, length, s, mode, a, excl, anti)
    return idx, w, outside


def _resize_axis(x, ax, idx, w, outside, extrap):
    """One axis: nearest is a take; the taps in order, ``y = x[i0] * T(w0)``, then ``y = y +
    x[it] * T(wt)`` in x's own type for float32 / float64 (the tape's order: the import
    records these very gathers, products and sums), in float64 otherwise."""
    o = idx.shape[0]
    shp = [1] * x.ndim
    shp[ax] = o
    if w is None:
        y = np.take(x, idx[:, 0], axis=ax)
    else:
        own = x.dtype in (np.float32, np.float64)
        ws = w.astype(x.dtype if own else np.float64)
        xv = x if own else x.astype(np.float64)
        y = np.take(xv, idx[:, 0], axis=ax) * ws[:, 0].reshape(shp)
        for t in range(1, idx.shape[1]):  # taps in order
            y = y + np.take(xv, idx[:, t], axis=ax) * ws[:, t].reshape(shp)
    if outside is not None:
        y = np.where(outside.reshape(shp), extrap, y)
    return y


def resize_taps(shape, scales, sizes, roi, axes, mode, ctm, rule, a, excl, anti, policy):
    """The resized axes in order, each ``(axis, idx, w, outside)`` (:func:`axis_taps`): what
    the executor computes and the tape import records (core/onnx/lowerings.py)."""
    nd = len(shape)
    axes = [v % nd for v in axes] if axes else list(range(nd))
    if sizes is not None:
        want = dict(zip(axes, sizes, strict=False))
        if policy in ("not_larger", "not_smaller"):
            f = min if policy == "not_larger" else max
            sc = f(want[d] / shape[d] for d in axes)
            want = {d: int(np.floor(sc * shape[d] + 0.5)) for d in axes}
            sc_ax = {d: sc for d in axes}
        else:
            sc_ax = {d: want[d] / shape[d] for d in axes}
    else:
        sc_ax = dict(zip(axes, scales, strict=False))
        want = {d: int(np.floor(shape[d] * sc_ax[d])) for d in axes}
    roi_ax = {d: (0.0, 1.0) for d in axes}
    if roi is not None and len(roi):
        n = len(axes)
        roi_ax = {d: (float(roi[i]), float(roi[i + n])) for i, d in enumerate(axes)}
    out = []
    for d in axes:
        if want[d] == shape[d] and sc_ax[d] == 1 and ctm != "tf_crop_and_resize":
            continue
        out.append((d, *axis_taps(shape[d], want[d], sc_ax[d], ctm, mode, rule, a, excl, anti,
                                  roi_ax[d])))
    return out


def _resize(x, scales, sizes, roi, axes, mode, ctm, rule, a, excl, anti, extrap, policy):
    y = x
    for d, idx, w, outside in resize_taps(x.shape, scales, sizes, roi, axes, mode, ctm, rule,
                                          a, excl, anti, policy):
        y = _resize_axis(y, d, idx, w, outside, extrap)
    return y.astype(x.dtype) if y.dtype != x.dtype else y


def _opt(v):
    return None if v is None or np.asarray(v).size == 0 else np.asarray(v).reshape(-1)


def resize_args(opset, roi=None, scales=None, sizes=None, antialias=0, axes=None,
                coordinate_transformation_mode="half_pixel", cubic_coeff_a=-0.75,
                exclude_outside=0, extrapolation_value=0.0, keep_aspect_ratio_policy="stretch",
                mode="nearest", nearest_mode="round_prefer_floor") -> tuple:
    """A Resize node's inputs and attributes as ``_resize``'s arguments after x."""
    if opset < 11:  # Resize-10: (X, scales), asymmetric coordinates
        scales, roi, coordinate_transformation_mode = roi, None, "asymmetric"
        nearest_mode = "floor" if mode == "nearest" else nearest_mode
    sc = _opt(scales)
    sz = _opt(sizes)
    return (None if sc is None else [float(v) for v in sc],
            None if sz is None else as_int_list(sz), _opt(roi), axes, mode,
            coordinate_transformation_mode, nearest_mode, cubic_coeff_a, exclude_outside,
            antialias, extrapolation_value, keep_aspect_ratio_policy)


@op("Resize")
def resize(ctx, x, roi=None, scales=None, sizes=None, **attrs):
    return _resize(x, *resize_args(ctx.opset, roi, scales, sizes, **attrs))


def upsample_args(scales_in=None, mode="nearest", scales=None, height_scale=None,
                  width_scale=None) -> tuple:
    """An Upsample node's inputs and attributes as ``_resize``'s arguments after x."""
    sc = scales if scales_in is None else _opt(scales_in)
    if sc is None:
        sc = [1.0, 1.0, height_scale, width_scale]
    mode = "linear" if mode in ("linear", "bilinear") else mode
    return ([float(v) for v in sc], None, None, None, mode, "asymmetric", "floor", -0.75, 0, 0,
            0.0, "stretch")


@op("Upsample")
def upsample(ctx, x, scales_in=None, **attrs):
    return _resize(x, *upsample_args(scales_in, **attrs))
