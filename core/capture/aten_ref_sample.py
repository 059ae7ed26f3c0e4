"""Reference forms of aten's spatial sampling: ``affine_grid_generator`` and ``grid_sampler_2d``
with its backward (a spatial transformer: ``F.affine_grid`` + ``F.grid_sample``). Orders:
docs/reference-order.md, "Captured aten ops".

Every operation is rounded once in the input's dtype (float32 or float64; nothing else is taken),
no FMA. The order is ATen's scalar one (GridSampler.h and GridSampler.cpp's
``_grid_sampler_2d_cpu_fallback`` and its backward; torch's CPU kernel, cpu/GridSamplerKernel.cpp,
is vectorised and may order otherwise):

- source index: unnormalize (``align_corners``: ``((c + 1) / 2) * (size - 1)``, else
  ``((c + 1) * size - 1) / 2``), then border: clip to ``[0, size - 1]``; reflection: reflect
  (``m = lo / 2``, ``span = (hi - lo) / 2``, ``a = |v - m|``, ``extra = fmod(a, span)``,
  ``flips = floor(a / span)``: ``extra + m`` for even flips, ``(span - extra) + m`` for odd; ``lo,
  hi`` = ``0, 2 (size - 1)`` with ``align_corners``, else ``-1, 2 size - 1``), then clip. A NaN
  clips to 0 (torch's kernel: ``clamp_min(0, v)``; the scalar code's ``std::min`` / ``std::max``
  give ``size - 1``).
- bilinear: ``x0 = floor(ix)``, ``x1 = x0 + 1`` (likewise y), ``e = x1 - ix``, ``w = ix - x0``,
  ``s = y1 - iy``, ``n = iy - y0``; weights ``nw = e * s``, ``ne = w * s``, ``sw = e * n``,
  ``se = w * n``; ``out = (((0 + v_nw * nw) + v_ne * ne) + v_sw * sw) + v_se * se`` where a tap
  outside the input reads 0 (the same bits as leaving it out wherever its weight is finite; a
  NaN or infinite coordinate makes a NaN, as torch's kernel does).
- nearest: ``rint`` (half to even) of the source index; outside: 0.
- bicubic: unnormalize only (no padding on the point), ``x0 = floor(ix)``, ``t = ix - x0``,
  coefficients ``get_cubic_upsample_coefficients`` (A = -0.75: ``c0 = cc2(t + 1)``, ``c1 =
  cc1(t)``, ``c2 = cc1(1 - t)``, ``c3 = cc2((1 - t) + 1)``, ``cc1(x) = ((((A + 2) x) - (A + 3))
  x) x + 1``, ``cc2(x) = (((A x - 5A) x + 8A) x) - 4A``); each tap ``(x0 - 1) + i`` is padded
  (clip / reflect) and truncated, outside reads 0; per row ``r_j = ((v0 c0 + v1 c1) + v2 c2) +
  v3 c3`` along x, then ``out = ((r0 cy0 + r1 cy1) + r2 cy2) + r3 cy3``.
- backward: ``grad_input`` from zeros, ``weight * g`` added to each tap inside the input, per
  (sample, channel) plane in row-major output order, the taps of one pixel in the order above
  (bicubic: ``(g * cx_i) * cy_j``, i over x outer, j over y inner); ``grad_grid`` per pixel from
  zeros over channels in order, each tap (outside: value 0) as written in the scalar code
  (bilinear ``gx -= (v_nw * s) * g``, ``gy -= (v_nw * e) * g``, ``gx += (v_ne * s) * g``, ``gy
  -= (v_ne * w) * g``, ``gx -= (v_sw * n) * g``, ``gy += (v_sw * e) * g``, ``gx += (v_se * n) *
  g``, ``gy += (v_se * w) * g``; bicubic ``gx -= ((v * dcx_i) * cy_j) * g``, ``gy -= ((v *
  dcy_j) * cx_i) * g``), then times the index's derivative (unnormalize ``(size - 1) / 2`` or
  ``size / 2``, times reflection's ±1, times clip's 0 or 1: 0 on and past the borders); nearest:
  ``grad_grid`` is zeros. ``grad_input`` is returned where ``output_mask`` asks for it;
  ``grad_grid`` always (ATen computes and returns it whatever the mask says).
- ``affine_grid_generator`` (4-d size): the base grid ``(x, y, 1)`` from the linspace form's
  ``linspace(-1, 1, steps)`` (times ``steps - 1``, then divided by ``steps``, without
  ``align_corners``; a single step is 0), ``grid = base @ thetaᵀ`` by the reference product
  (serial in k: ``((x t0 + y t1) + 1 t2)``).
"""

from __future__ import annotations

import numpy as np

from tapescope.core.capture import aten_ref_shape  # noqa: F401  (registers linspace's form)
from tapescope.core.capture.aten_ref_conv import _cubic_coeffs
from tapescope.core.capture.aten_ref_nn import product
from tapescope.core.capture.aten_ref_table import (
    F32,
    F64,
    FORMS,
    NoReference,
    check_elems,
    form,
    fp_quiet,
    opt,
)

BILINEAR, NEAREST, BICUBIC = 0, 1, 2
ZEROS, BORDER, REFLECTION = 0, 1, 2
_MODES = {BILINEAR: "bilinear", NEAREST: "nearest", BICUBIC: "bicubic"}
_PADS = {ZEROS: "zeros", BORDER: "border", REFLECTION: "reflection"}


# ---- arguments ----------------------------------------------------------------------------------
def _int_arg(v, what: str, allowed: dict) -> int:
    if type(v) is not int or v not in allowed:
        raise NoReference(f"{what} {v!r} (written for {', '.join(map(str, allowed))})")
    return v


def _bool_arg(v, what: str) -> bool:
    if type(v) is bool or (type(v) is int and v in (0, 1)):
        return bool(v)
    raise NoReference(f"{what} {v!r} is not a bool")


def _float_array(a, what: str) -> np.ndarray:
    if type(a) is not np.ndarray or a.dtype not in (F32, F64):
        raise NoReference(f"{what} of dtype {getattr(a, 'dtype', type(a).__name__)} (written "
                          "for float32 and float64 arrays)")
    return a


def _sample_args(args: list, kwargs: dict, at: int) -> tuple:
    """(input, grid, interpolation, padding, align_corners) from ``args[at:]``, checked as
    ATen's ``check_grid_sampler_common`` / ``check_grid_sampler_2d`` do."""
    x = _float_array(opt(kwargs, args, at, "input"), "input")
    grid = _float_array(opt(kwargs, args, at + 1, "grid"), "grid")
    if x.ndim != 4 or grid.ndim != 4:
        raise NoReference(f"input of {x.ndim} dims and grid of {grid.ndim} (written for 4-d "
                          "(N, C, H, W) and (N, H_out, W_out, 2))")
    if grid.shape[-1] != 2:
        raise NoReference(f"grid's last dim is {grid.shape[-1]}, not 2")
    if grid.shape[0] != x.shape[0]:
        raise NoReference(f"grid's batch {grid.shape[0]} is not input's {x.shape[0]}")
    if grid.dtype != x.dtype:
        raise NoReference(f"grid of {grid.dtype} and input of {x.dtype}")
    if x.shape[2] == 0 or x.shape[3] == 0:
        raise NoReference("input with an empty spatial dim")
    interp = _int_arg(opt(kwargs, args, at + 2, "interpolation_mode"), "interpolation_mode",
                      _MODES)
    pad = _int_arg(opt(kwargs, args, at + 3, "padding_mode"), "padding_mode", _PADS)
    align = _bool_arg(opt(kwargs, args, at + 4, "align_corners"), "align_corners")
    return x, grid, interp, pad, align


# ---- the source index (GridSampler.h) -----------------------------------------------------------
def _unnormalize(c: np.ndarray, size: int, align: bool) -> np.ndarray:
    t = c.dtype.type
    if align:
        return ((c + t(1)) / t(2)) * t(size - 1)
    return ((c + t(1)) * t(size) - t(1)) / t(2)


def _unnormalize_grad(t: type, size: int, align: bool):
    return t(size - 1) / t(2) if align else t(size) / t(2)


def _clip(v: np.ndarray, size: int) -> np.ndarray:
    """``min(size - 1, max(v, 0))``, a NaN to 0."""
    t = v.dtype.type
    return np.minimum(np.fmax(v, t(0)), t(size - 1))


def _clip_grad(v: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """``clip_coordinates_set_grad``: (0, 0) at or below 0 (or NaN), (size - 1, 0) at or past
    it, else (v, 1)."""
    t = v.dtype.type
    hi = t(size - 1)
    low = ~(v > t(0))
    high = ~low & (v >= hi)
    out = np.where(low, t(0), np.where(high, hi, v))
    return out, np.where(low | high, t(0), t(1))


def _reflect_parts(v: np.ndarray, twice_low: int, twice_high: int):
    t = v.dtype.type
    mn = t(twice_low) / t(2)
    span = t(twice_high - twice_low) / t(2)
    d = v - mn
    neg = d < t(0)
    a = np.abs(d)
    extra = np.fmod(a, span)
    even = np.fmod(np.floor(a / span), t(2)) == t(0)
    return np.where(even, extra + mn, (span - extra) + mn), even, neg


def _bounds(size: int, align: bool) -> tuple[int, int]:
    return (0, 2 * (size - 1)) if align else (-1, 2 * size - 1)


def _pad(v: np.ndarray, size: int, pad: int, align: bool) -> np.ndarray:
    """``compute_coordinates``: border clips, reflection reflects and clips, zeros leaves."""
    if pad == BORDER:
        return _clip(v, size)
    if pad == REFLECTION:
        lo, hi = _bounds(size, align)
        if lo == hi:
            return np.zeros_like(v)
        return _clip(_reflect_parts(v, lo, hi)[0], size)
    return v


def _source(c: np.ndarray, size: int, pad: int, align: bool) -> np.ndarray:
    return _pad(_unnormalize(c, size, align), size, pad, align)


def _source_grad(c: np.ndarray, size: int, pad: int, align: bool):
    """``grid_sampler_compute_source_index_set_grad``: (index, d index / d c)."""
    t = c.dtype.type
    v = _unnormalize(c, size, align)
    g = np.full(c.shape, _unnormalize_grad(t, size, align), c.dtype)
    if pad == BORDER:
        v, gc = _clip_grad(v, size)
        g = g * gc
    elif pad == REFLECTION:
        lo, hi = _bounds(size, align)
        if lo == hi:
            return np.zeros_like(v), np.zeros_like(v)
        v, even, neg = _reflect_parts(v, lo, hi)
        gr = np.where(even != neg, t(1), t(-1))
        v, gc = _clip_grad(v, size)
        g = (g * gr) * gc
    return v, g


# ---- taps ---------------------------------------------------------------------------------------
class _Taps:
    """Reads (and scatters into) the (N, C, H, W) input at float coordinates of shape (N, P):
    a coordinate is truncated toward zero (``static_cast<int64_t>``); outside the input (or not
    a number) it reads 0 and takes nothing."""

    def __init__(self, x: np.ndarray):
        self.n, self.c, self.h, self.w = x.shape
        self.flat = x.reshape(self.n, self.c, self.h * self.w)
        self._n = np.arange(self.n).reshape(-1, 1, 1)
        self._c = np.arange(self.c).reshape(1, -1, 1)

    def place(self, xs: np.ndarray, ys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(inside (N, P), flat index (N, P), 0 where outside)."""
        xi, yi = np.trunc(xs), np.trunc(ys)
        inside = (xi >= 0) & (xi <= self.w - 1) & (yi >= 0) & (yi <= self.h - 1)
        with fp_quiet():
            zero = xs.dtype.type(0)
            idx = (np.where(inside, yi, zero).astype(np.int64) * self.w
                   + np.where(inside, xi, zero).astype(np.int64))
        return inside, idx

    def read(self, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
        """The values (N, C, P) at the points, 0 outside."""
        inside, idx = self.place(xs, ys)
        v = self.flat[self._n, self._c, idx[:, None, :]]
        return np.where(inside[:, None, :], v, self.flat.dtype.type(0))

    def scatter(self, places: list, contribs: list) -> np.ndarray:
        """A zero (N, C, H * W) with each tap's contribution (N, C, P) added where its place
        (inside, idx) is inside: per plane in pixel order, a pixel's taps in list order
        (``np.add.at`` adds in index order)."""
        inside = np.stack([p[0] for p in places], axis=-1)  # (N, P, T)
        idx = np.stack([p[1] for p in places], axis=-1)
        vals = np.stack(contribs, axis=-1)  # (N, C, P, T)
        plane = (np.arange(self.n).reshape(-1, 1) * self.c
                 + np.arange(self.c).reshape(1, -1)) * (self.h * self.w)  # (N, C)
        flat_idx = plane[:, :, None, None] + idx[:, None, :, :]
        keep = np.broadcast_to(inside[:, None, :, :], vals.shape)
        out = np.zeros(self.n * self.c * self.h * self.w, vals.dtype)
        np.add.at(out, flat_idx[keep], vals[keep])
        return out.reshape(self.n, self.c, self.h * self.w)


def _bilinear_setup(ix: np.ndarray, iy: np.ndarray):
    t = ix.dtype.type
    x0, y0 = np.floor(ix), np.floor(iy)
    x1, y1 = x0 + t(1), y0 + t(1)
    e, w, s, n = x1 - ix, ix - x0, y1 - iy, iy - y0
    corners = [(x0, y0, e * s), (x1, y0, w * s), (x0, y1, e * n), (x1, y1, w * n)]
    return corners, (e, w, s, n)


def _cubic_coeffs_grad(tt: np.ndarray) -> list:
    """``get_cubic_coefficients_grad`` (GridSampler.h), A = -0.75."""
    t = tt.dtype.type
    a = t(-0.75)
    x = t(-1) - tt
    c0 = (t(-3) * a * x - t(10) * a) * x - t(8) * a
    x = -tt
    c1 = (t(-3) * (a + t(2)) * x - t(2) * (a + t(3))) * x
    x = t(1) - tt
    c2 = (t(3) * (a + t(2)) * x - t(2) * (a + t(3))) * x
    x = t(2) - tt
    c3 = (t(3) * a * x - t(10) * a) * x + t(8) * a
    return [c0, c1, c2, c3]


def _cubic_taps(ix, iy, size_w, size_h, pad, align, forward: bool = False):
    """The 4 x 4 tap coordinates ``((x0 - 1) + i, (y0 - 1) + j)`` (the forward's x: ``x0 + k``,
    k = -1, 0, 1, 2, as written there), padded; and ``ix - x0``, ``iy - y0``."""
    t = ix.dtype.type
    x0, y0 = np.floor(ix), np.floor(iy)
    xs = [_pad(x0 + t(i - 1) if forward else (x0 - t(1)) + t(i), size_w, pad, align)
          for i in range(4)]
    ys = [_pad((y0 - t(1)) + t(j), size_h, pad, align) for j in range(4)]
    return xs, ys, ix - x0, iy - y0


# ---- forms --------------------------------------------------------------------------------------
@form("aten.grid_sampler_2d.default")
def _grid_sampler_2d(args: list, kwargs: dict) -> list:
    x, grid, interp, pad, align = _sample_args(args, kwargs, 0)
    N, C, H, W = x.shape
    oh, ow = grid.shape[1], grid.shape[2]
    check_elems(N * C * oh * ow, "grid_sampler_2d")
    gx = grid[..., 0].reshape(N, oh * ow)
    gy = grid[..., 1].reshape(N, oh * ow)
    taps = _Taps(x)
    with fp_quiet():
        if interp == BICUBIC:
            xs, ys, tx, ty = _cubic_taps(_unnormalize(gx, W, align), _unnormalize(gy, H, align),
                                         W, H, pad, align, forward=True)
            cx, cy = _cubic_coeffs(tx), _cubic_coeffs(ty)
            out = None
            for j in range(4):
                r = None
                for i in range(4):
                    term = taps.read(xs[i], ys[j]) * cx[i][:, None, :]
                    r = term if r is None else r + term
                term = r * cy[j][:, None, :]
                out = term if out is None else out + term
        else:
            ix, iy = _source(gx, W, pad, align), _source(gy, H, pad, align)
            if interp == NEAREST:
                out = taps.read(np.rint(ix), np.rint(iy))
            else:
                out = np.zeros((N, C, oh * ow), x.dtype)
                for cx_, cy_, wt in _bilinear_setup(ix, iy)[0]:
                    out = out + taps.read(cx_, cy_) * wt[:, None, :]
    return [np.ascontiguousarray(out.reshape(N, C, oh, ow))]


@form("aten.grid_sampler_2d_backward.default")
def _grid_sampler_2d_backward(args: list, kwargs: dict) -> list:
    g = _float_array(opt(kwargs, args, 0, "grad_output"), "grad_output")
    x, grid, interp, pad, align = _sample_args(args, kwargs, 1)
    N, C, H, W = x.shape
    oh, ow = grid.shape[1], grid.shape[2]
    if g.dtype != x.dtype or g.shape != (N, C, oh, ow):
        raise NoReference(f"grad_output of {g.dtype} {list(g.shape)} (the output is "
                          f"{x.dtype} {[N, C, oh, ow]})")
    mask = opt(kwargs, args, 6, "output_mask", [True, True])
    if not isinstance(mask, list | tuple) or len(mask) != 2 \
            or not all(type(m) is bool for m in mask):
        raise NoReference(f"output_mask {mask!r} (two bools)")
    t = x.dtype.type
    P = oh * ow
    gx = grid[..., 0].reshape(N, P)
    gy = grid[..., 1].reshape(N, P)
    go = g.reshape(N, C, P)
    taps = _Taps(x)
    grad_input = grad_grid = None
    with fp_quiet():
        if x.size == 0 or grid.size == 0 or interp == NEAREST:
            grad_grid = np.zeros(grid.shape, x.dtype)
        if interp == NEAREST:
            if mask[0]:
                ix, iy = _source(gx, W, pad, align), _source(gy, H, pad, align)
                grad_input = taps.scatter([taps.place(np.rint(ix), np.rint(iy))], [go])
        elif interp == BILINEAR:
            ix, mx = _source_grad(gx, W, pad, align)
            iy, my = _source_grad(gy, H, pad, align)
            corners, (e, w, s, n) = _bilinear_setup(ix, iy)
            if mask[0]:
                grad_input = taps.scatter([taps.place(a, b) for a, b, _ in corners],
                                          [wt[:, None, :] * go for _, _, wt in corners])
            if grad_grid is None:
                v = [taps.read(a, b) for a, b, _ in corners]
                gix = np.zeros((N, P), x.dtype)
                giy = np.zeros((N, P), x.dtype)
                for c in range(C):
                    gc = go[:, c]
                    nw, ne, sw, se = (vv[:, c] for vv in v)
                    gix = gix - (nw * s) * gc
                    giy = giy - (nw * e) * gc
                    gix = gix + (ne * s) * gc
                    giy = giy - (ne * w) * gc
                    gix = gix - (sw * n) * gc
                    giy = giy + (sw * e) * gc
                    gix = gix + (se * n) * gc
                    giy = giy + (se * w) * gc
                grad_grid = np.stack([mx * gix, my * giy], axis=-1).reshape(grid.shape)
        else:
            ix, iy = _unnormalize(gx, W, align), _unnormalize(gy, H, align)
            mx, my = _unnormalize_grad(t, W, align), _unnormalize_grad(t, H, align)
            xs, ys, tx, ty = _cubic_taps(ix, iy, W, H, pad, align)
            cx, cy = _cubic_coeffs(tx), _cubic_coeffs(ty)
            dcx, dcy = _cubic_coeffs_grad(tx), _cubic_coeffs_grad(ty)
            pairs = [(i, j) for i in range(4) for j in range(4)]
            if mask[0]:
                grad_input = taps.scatter(
                    [taps.place(xs[i], ys[j]) for i, j in pairs],
                    [(go * cx[i][:, None, :]) * cy[j][:, None, :] for i, j in pairs])
            if grad_grid is None:
                v = {(i, j): taps.read(xs[i], ys[j]) for i, j in pairs}
                gix = np.zeros((N, P), x.dtype)
                giy = np.zeros((N, P), x.dtype)
                for c in range(C):
                    gc = go[:, c]
                    for i, j in pairs:
                        vv = v[i, j][:, c]
                        gix = gix - ((vv * dcx[i]) * cy[j]) * gc
                        giy = giy - ((vv * dcy[j]) * cx[i]) * gc
                grad_grid = np.stack([mx * gix, my * giy], axis=-1).reshape(grid.shape)
    out = []
    if mask[0]:
        out.append(np.ascontiguousarray(grad_input.reshape(x.shape)))
    # (the grid's gradient whatever the mask says: ATen computes and returns it always, a
    # grid that needs none included: the capture holds two outputs there)
    out.append(np.ascontiguousarray(grad_grid))
    return out


def _linspace_from_neg_one(steps: int, align: bool, dt: np.dtype, linspace=None
                           ) -> np.ndarray:
    """ATen's ``linspace_from_neg_one``: ``linspace(-1, 1, steps)`` (the linspace form, or
    ``linspace(args, kwargs)``: ``--explain``'s torch kernel), times ``steps - 1`` then
    divided by ``steps`` without ``align_corners``; 0 for a single step."""
    if steps <= 1:
        return np.zeros(steps, dt)
    r = np.asarray((linspace or (lambda a, k: FORMS["aten.linspace.default"](a, k)[0]))(
        [-1, 1, steps], {"dtype": dt}))
    if not align:
        t = dt.type
        r = (r * t(steps - 1)) / t(steps)
    return r


@form("aten.affine_grid_generator.default")
def _affine_grid_generator(args: list, kwargs: dict) -> list:
    return affine_grid(args, kwargs)


def affine_grid(args: list, kwargs: dict, linspace=None, prod=product) -> list:
    """The base grid ``(x, y, 1)`` of ``_linspace_from_neg_one`` (``linspace``), times
    ``thetaᵀ`` by ``prod`` (the reference product; ``--explain`` hands in torch's kernels)."""
    theta = _float_array(opt(kwargs, args, 0, "theta"), "theta")
    size = opt(kwargs, args, 1, "size")
    align = _bool_arg(opt(kwargs, args, 2, "align_corners"), "align_corners")
    if not isinstance(size, list | tuple) or not all(type(s) is int and s >= 0 for s in size):
        raise NoReference(f"size {size!r} (a list of non-negative ints)")
    if len(size) != 4:
        raise NoReference(f"a {len(size)}-d size (written for 4-d (N, C, H, W); 5-d: "
                          "volumetric, not written)")
    N, _, H, W = size
    if theta.shape != (N, 2, 3):
        raise NoReference(f"theta of shape {list(theta.shape)} for size {list(size)} "
                          f"(wants [{N}, 2, 3])")
    check_elems(N * H * W * 2, "affine_grid_generator")
    dt = theta.dtype
    base = np.empty((N, H, W, 3), dt)
    with fp_quiet():
        base[..., 0] = _linspace_from_neg_one(W, align, dt, linspace)
        base[..., 1] = _linspace_from_neg_one(H, align, dt, linspace)[:, None]
        base[..., 2] = dt.type(1)
        grid = prod(base.reshape(N, H * W, 3), np.swapaxes(theta, 1, 2))
    return [np.ascontiguousarray(grid.reshape(N, H, W, 2), dtype=dt)]
