"""GridSample (N-D, vectorised over every output position) and AffineGrid lives in its function
body. Interpolation is separable: per spatial axis 1 (nearest), 2 (linear) or 4 (cubic) taps,
and every tap combination is gathered at once."""

from __future__ import annotations

import itertools

import numpy as np

from tapescope.core.onnx.registry import op


def _reflect(x, lo, hi):
    """Reflect coordinates by the near border until they lie within [lo, hi]."""
    rng = hi - lo
    dx_lo, dx_hi = lo - x, x - hi
    n_lo, n_hi = np.floor(dx_lo / rng), np.floor(dx_hi / rng)
    r_lo, r_hi = dx_lo - n_lo * rng, dx_hi - n_hi * rng
    below = np.where(n_lo % 2 == 0, lo + r_lo, hi - r_lo)
    above = np.where(n_hi % 2 == 0, hi - r_hi, lo + r_hi)
    return np.where(x < lo, below, np.where(x > hi, above, x))


def _cubic(f, a=-0.75):
    return [((a * (f + 1) - 5 * a) * (f + 1) + 8 * a) * (f + 1) - 4 * a,
            ((a + 2) * f - (a + 3)) * f * f + 1,
            ((a + 2) * (1 - f) - (a + 3)) * (1 - f) * (1 - f) + 1,
            ((a * (2 - f) - 5 * a) * (2 - f) + 8 * a) * (2 - f) - 4 * a]


@op("GridSample")
def grid_sample(ctx, x, grid, align_corners=0, mode="linear", padding_mode="zeros"):
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    n, c = x.shape[:2]
    dims = x.shape[2:]
    nd = len(dims)
    coords = grid[..., ::-1].astype(np.float64)  # grid's last axis is (x, y, ...) = reversed
    lo = [0.0 if align_corners else -0.5] * nd
    hi = [d - 1.0 if align_corners else d - 0.5 for d in dims]
    taps_per_axis = []
    for i, d in enumerate(dims):
        g = coords[..., i]
        v = (g + 1) / 2 * (d - 1) if align_corners else ((g + 1) * d - 1) / 2
        if mode == "nearest":
            v = np.rint(v)
        out = (v < lo[i]) | (v > hi[i])
        if padding_mode == "border":
            v = np.where(out, np.clip(v, 0, d - 1), v)
        elif padding_mode == "reflection":
            v = np.where(out, _reflect(v, lo[i], hi[i]), v)
        if mode == "nearest":
            taps = [(v.astype(np.int64), np.ones_like(v))]
        else:
            f0 = np.floor(v)
            fr = v - f0
            if mode == "linear":
                taps = [(f0.astype(np.int64), 1 - fr), (f0.astype(np.int64) + 1, fr)]
            else:
                taps = [(f0.astype(np.int64) + k - 1, w) for k, w in enumerate(_cubic(fr))]
        taps_per_axis.append([(_fix_index(idx, d, lo[i], hi[i], padding_mode), w)
                              for idx, w in taps])
    y = np.zeros((n,) + grid.shape[1:-1] + (c,), np.float64)
    bidx = np.arange(n).reshape((n,) + (1,) * (grid.ndim - 2))
    xt = np.moveaxis(x, 1, -1).astype(np.float64)  # (N, *dims, C)
    for combo in itertools.product(*taps_per_axis):
        valid = np.ones(grid.shape[:-1], bool)
        w = np.ones(grid.shape[:-1])
        index = [bidx]
        for (idx, ok), wt in combo:
            valid &= ok
            w = w * wt
            index.append(np.where(ok, idx, 0))
        vals = xt[tuple(index)]
        y = y + np.where(valid[..., None], vals, 0) * w[..., None]
    return np.moveaxis(y, -1, 1).astype(x.dtype)


def _fix_index(idx, d, lo, hi, padding_mode):
    """(index, valid) after the padding rule for pixels outside the image."""
    if padding_mode == "zeros":
        return idx, (idx >= 0) & (idx < d)
    if padding_mode == "border":
        return np.clip(idx, 0, d - 1), np.ones(idx.shape, bool)
    r = _reflect(idx.astype(np.float64), lo, hi).astype(np.int64)  # truncation, as the spec
    return np.clip(r, 0, d - 1), np.ones(idx.shape, bool)
