"""Reference forms of aten's remaining losses and activations: binary cross-entropy (with and
without logits), smooth L1, Huber, log-sigmoid, ELU, Mish, PReLU, xlogy, with their backwards.
Each is torch's written formula, one rounding per operation, no FMA, transcendentals from
refmath, reductions by the tape's serial sum / mean (docs/reference-order.md, "Captured aten
ops")."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from tapescope.core.capture.aten_ref_table import (
    F32,
    M,
    NoReference,
    arr,
    check_elems,
    compute,
    ew,
    form,
    fp_quiet,
    is_float,
    opt,
    recorded_output,
    result_type,
    wide,
)
from tapescope.core.ops import REGISTRY
from tapescope.core.ops.reference import serial_sum


def _k(v: np.ndarray, c: float) -> np.ndarray:
    return np.asarray(c, v.dtype)


def reduce_loss(loss: np.ndarray, reduction: int) -> np.ndarray:
    """none (0): the elements; mean (1): the tape's mean; sum (2): serial_sum."""
    if reduction == 0:
        return loss
    name = "mean" if reduction == 1 else "sum"
    return np.asarray(REGISTRY[name].forward(M, [loss], {"axis": None}))


def _loss(fn, xs: list, reduction: int) -> list:
    """``fn`` elementwise in the compute type, reduced, rounded once to the result type."""
    out = result_type(*[x for x in xs if x is not None])
    with fp_quiet():
        return [ew(lambda *v: reduce_loss(fn(*v), reduction), *xs, out=out)]


def _log_sigmoid(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    z = M.exp(-np.abs(v))
    return np.minimum(v, _k(v, 0)) - M.log1p(z), z


@form("aten.log_sigmoid_forward.default")
def _log_sigmoid_forward(args: list, kwargs: dict) -> list:
    x = args[0]
    out, buf = ew(lambda v: np.stack(_log_sigmoid(v)), x)
    return [out, buf]


@form("aten.log_sigmoid_backward.default")
def _log_sigmoid_backward(args: list, kwargs: dict) -> list:
    def fn(g, v, z):
        neg = v < 0
        md, sg = np.where(neg, _k(v, 1), _k(v, 0)), np.where(neg, _k(v, 1), _k(v, -1))
        return g * (md - (sg * (z / (_k(v, 1) + z))))
    return [ew(fn, *args[:3])]


@form("aten.binary_cross_entropy_with_logits.default")
def _bce_logits(args: list, kwargs: dict) -> list:
    x, t = args[0], args[1]
    w, pw = opt(kwargs, args, 2, "weight"), opt(kwargs, args, 3, "pos_weight")
    red = opt(kwargs, args, 4, "reduction", 1)

    def fn(v, tt, *rest):
        it = iter(rest)
        ww, pww = (next(it) if w is not None else None), (next(it) if pw is not None else None)
        ls = _log_sigmoid(v)[0]
        if pww is not None:
            ls = ls * (((pww - _k(v, 1)) * tt) + _k(v, 1))
        loss = ((_k(v, 1) - tt) * v) - ls
        return loss if ww is None else loss * ww
    return _loss(fn, [x, t] + [a for a in (w, pw) if a is not None], red)


@form("aten.binary_cross_entropy.default")
def _bce(args: list, kwargs: dict) -> list:
    x, t = args[0], args[1]
    w, red = opt(kwargs, args, 2, "weight"), opt(kwargs, args, 3, "reduction", 1)

    def fn(v, tt, *ww):
        lo = _k(v, -100)
        loss = ((tt - _k(v, 1)) * np.maximum(M.log1p(-v), lo)) - (tt * np.maximum(M.log(v), lo))
        return loss * ww[0] if ww else loss
    return _loss(fn, [x, t] + ([w] if w is not None else []), red)


@form("aten.binary_cross_entropy_backward.default")
def _bce_backward(args: list, kwargs: dict) -> list:
    g, x, t = args[:3]
    w, red = opt(kwargs, args, 3, "weight"), opt(kwargs, args, 4, "reduction", 1)
    n = x.size

    def fn(gg, v, tt, *ww):
        den = np.maximum((_k(v, 1) - v) * v, _k(v, 1e-12))
        gx = (gg * (v - tt)) / den
        if ww:
            gx = gx * ww[0]
        return gx / _k(v, n) if red == 1 else gx
    return [ew(fn, g, x, t, *([w] if w is not None else []), out=result_type(x, t))]


@form("aten.smooth_l1_loss.default")
def _smooth_l1(args: list, kwargs: dict) -> list:
    x, t = args[0], args[1]
    red, beta = opt(kwargs, args, 2, "reduction", 1), float(opt(kwargs, args, 3, "beta", 1.0))

    def fn(v, tt):
        z = np.abs(v - tt)
        if beta == 0:
            return z
        b = _k(v, beta)
        return np.where(z < b, ((_k(v, 0.5) * z) * z) / b, z - (_k(v, 0.5) * b))
    return _loss(fn, [x, t], red)


@form("aten.smooth_l1_loss_backward.default")
def _smooth_l1_backward(args: list, kwargs: dict) -> list:
    g, x, t, red, beta = args[:5]
    norm = 1.0 / x.size if red == 1 else 1.0  # float64 on the host, rounded once

    def fn(gg, v, tt):
        d, nm, b = v - tt, _k(v, norm), _k(v, beta)
        inner = ((nm * d) * gg) / b if beta else np.zeros_like(d)
        return np.where(d <= -b, (-nm) * gg, np.where(d >= b, nm * gg, inner))
    return [ew(fn, g, x, t, out=result_type(x, t))]


@form("aten.huber_loss.default")
def _huber(args: list, kwargs: dict) -> list:
    x, t = args[0], args[1]
    red, delta = opt(kwargs, args, 2, "reduction", 1), float(opt(kwargs, args, 3, "delta", 1.0))

    def fn(v, tt):
        z, dl = np.abs(v - tt), _k(v, delta)
        return np.where(z < dl, (_k(v, 0.5) * z) * z, dl * (z - (_k(v, 0.5) * dl)))
    return _loss(fn, [x, t], red)


@form("aten.huber_loss_backward.default")
def _huber_backward(args: list, kwargs: dict) -> list:
    g, x, t, red, delta = args[:5]
    norm = 1.0 / x.size if red == 1 else 1.0

    def fn(gg, v, tt):
        d, nm, dl = v - tt, _k(v, norm), _k(v, delta)
        return np.where(d <= -dl, ((-nm) * gg) * dl,
                        np.where(d >= dl, (nm * gg) * dl, (nm * d) * gg))
    return [ew(fn, g, x, t, out=result_type(x, t))]


def _elu_coefs(args: list, kwargs: dict, i: int) -> tuple[float, float, float]:
    alpha = float(opt(kwargs, args, i, "alpha", 1))
    scale = float(opt(kwargs, args, i + 1, "scale", 1))
    iscale = float(opt(kwargs, args, i + 2, "input_scale", 1))
    return alpha * scale, scale, iscale  # negcoef in float64, as torch's accumulate type


@form("aten.elu.default")
def _elu(args: list, kwargs: dict) -> list:
    neg, pos, ins = _elu_coefs(args, kwargs, 1)

    def fn(v):
        return np.where(v <= 0, M.expm1(v * _k(v, ins)) * _k(v, neg), v * _k(v, pos))
    return [ew(fn, args[0])]


@form("aten.celu.default")
def _celu(args: list, kwargs: dict) -> list:
    """``celu(x, alpha)``: ATen's ``elu(x, alpha, 1, 1 / alpha)`` (1 / alpha in float64)."""
    alpha = float(opt(kwargs, args, 1, "alpha", 1))
    if alpha == 0:
        raise NoReference("celu with alpha 0 (torch raises)")
    return _elu([args[0], alpha, 1.0, 1.0 / alpha], {})


@form("aten.elu_backward.default")
def _elu_backward(args: list, kwargs: dict) -> list:
    g, is_result, y = args[0], bool(args[4]), args[5]
    neg, pos, ins = _elu_coefs(args, kwargs, 1)

    def fn(gg, v):
        a, p, i = _k(v, neg), _k(v, pos), _k(v, ins)
        if is_result:
            return np.where(v <= 0, (gg * i) * (v + a), gg * p)
        return np.where(v <= 0, ((gg * i) * a) * M.exp(v * i), gg * p)
    return [ew(fn, g, y)]


@form("aten.mish.default")
def _mish(args: list, kwargs: dict) -> list:
    return [ew(lambda v: v * M.tanh(M.log1p(M.exp(v))), args[0])]


@form("aten.mish_backward.default")
def _mish_backward(args: list, kwargs: dict) -> list:
    def fn(g, v):
        s = M.sigmoid(v)
        ts = M.tanh(M.log1p(M.exp(v)))
        return g * (ts + ((v * s) * (_k(v, 1) - (ts * ts))))
    return [ew(fn, args[0], args[1])]


def _glu_halves(x: np.ndarray, dim: int) -> tuple[np.ndarray, np.ndarray, int]:
    x = np.asarray(x)
    if x.ndim == 0 or not is_float(x.dtype):
        raise NoReference("glu of a 0-d or non-float tensor")
    d = int(dim) % x.ndim
    if x.shape[d] % 2:
        raise NoReference(f"glu over an odd dimension of {x.shape[d]} (torch raises)")
    a, b = np.split(x, 2, axis=d)
    return a, b, d


@form("aten.glu.default")
def _glu(args: list, kwargs: dict) -> list:
    """``a * sigmoid(b)``, ``a`` and ``b`` the halves along ``dim`` (sigmoid the tape's)."""
    a, b, _ = _glu_halves(args[0], opt(kwargs, args, 1, "dim", -1))
    return [ew(lambda u, v: u * M.sigmoid(v), a, b)]


@form("aten.glu_backward.default")
def _glu_backward(args: list, kwargs: dict) -> list:
    """ATen's: ``s = sigmoid(b)``; the first half ``s * g``, the second ``(((1 - s) * s) * a)
    * g``, side by side along ``dim``."""
    g = args[0]
    a, b, d = _glu_halves(args[1], opt(kwargs, args, 2, "dim", -1))
    if np.shape(g) != a.shape:
        raise NoReference("glu_backward: the gradient is not half the input")
    out = result_type(g, a)
    ga = ew(lambda gg, v: M.sigmoid(v) * gg, g, b, out=out)
    gb = ew(lambda gg, u, v: (((_k(v, 1) - M.sigmoid(v)) * M.sigmoid(v)) * u) * gg, g, a, b,
            out=out)
    return [np.concatenate([ga, gb], axis=d)]


@form("aten._prelu_kernel.default")
def _prelu(args: list, kwargs: dict) -> list:
    return [ew(lambda v, w: np.where(v > 0, v, w * v), args[0], args[1])]


@form("aten._prelu_kernel_backward.default")
def _prelu_backward(args: list, kwargs: dict) -> list:
    g, x, w = args[:3]
    out = result_type(g, x, w)
    gx = ew(lambda gg, v, ww: np.where(v > 0, gg, ww * gg), g, x, w, out=out)
    gw = ew(lambda gg, v: np.where(v > 0, _k(v, 0), v * gg), g, x, out=out)
    return [gx, np.broadcast_to(gw, np.broadcast_shapes(g.shape, x.shape, w.shape)).copy()]


def _x_log(log: Callable) -> Callable:
    """``x * log(y)`` forms (xlogy, xlog1py): NaN where y is, +0.0 where x == 0."""
    def run(args: list, kwargs: dict) -> list:
        a, b = args[0], args[1]
        out = result_type(a, b)

        def fn(x, y):
            return np.where(np.isnan(y), y, np.where(x == 0, _k(x, 0), x * log(y)))
        return [ew(fn, a, b, out=out if is_float(out) else F32)]
    return run


form("aten.xlogy.Tensor", "aten.xlogy.Scalar_Other", "aten.xlogy.Scalar_Self")(_x_log(M.log))
form("aten.special_xlog1py.default", "aten.special_xlog1py.other_scalar",
     "aten.special_xlog1py.self_scalar")(_x_log(M.log1p))


# --- CTC: ATen's LossCTC.cpp (Graves et al. 2006, in log space), one rounding per operation ---

def _ctc_lengths(v, b: int, what: str) -> list[int]:
    """``input_lengths`` / ``target_lengths`` (a list, or a tensor of ``_ctc_loss.Tensor``)."""
    a = np.asarray(v)
    if a.dtype.kind not in "iu" or a.ndim > 1 or a.size != b:
        raise NoReference(f"_ctc_loss: {what} is not {b} integers")
    return [int(x) for x in a.reshape(-1)]


def _ctc_setup(lp, targets, il, tl, blank, alphas: bool = True) -> tuple:
    """The checked geometry: log_probs (T, B, C), per item its expanded target ``l'`` (blank,
    l0, blank, l1, ..., blank) padded with the blank to the longest, and the lengths;
    ``alphas``: the alphas' size checked against the recorded outputs' before allocating (the
    backward's arrive as an argument)."""
    lp = np.asarray(lp)
    if lp.ndim != 3 or lp.dtype not in (F32, np.dtype(np.float64)):
        raise NoReference("_ctc_loss: log_probs is not (T, B, C) float32 or float64")
    t_max, b, c = lp.shape
    il, tl, blank = _ctc_lengths(il, b, "input_lengths"), _ctc_lengths(tl, b, "target_lengths"), \
        int(blank)
    tg = np.asarray(targets)
    if not 0 <= blank < c or tg.dtype.kind not in "iu" or tg.ndim not in (1, 2) \
            or any(not 0 <= n <= t_max for n in il) or any(n < 0 for n in tl):
        raise NoReference("_ctc_loss: a blank, target or length out of range")
    if tg.ndim == 1:
        if tg.size != sum(tl):
            raise NoReference("_ctc_loss: the concatenated targets are not sum(target_lengths)")
        ends = np.cumsum([0] + tl)
        rows = [tg[ends[i]:ends[i + 1]] for i in range(b)]
    else:
        if tg.shape[0] != b or tg.shape[1] < max(tl, default=0):
            raise NoReference("_ctc_loss: the targets are shorter than target_lengths")
        rows = [tg[i, :tl[i]] for i in range(b)]
    s_max = 2 * max(tl, default=0) + 1
    if alphas:
        check_elems(b * t_max * s_max, "_ctc_loss's alphas")
    tp = np.full((b, s_max), blank, np.int64)
    for i, r in enumerate(rows):
        if r.size and (r.min() < 0 or r.max() >= c):
            raise NoReference(f"_ctc_loss: a target label outside 0..{c - 1}")
        tp[i, 1:2 * r.size:2] = r
    return lp, il, tl, tp, blank


def _ctc_lse3(a1, a2, a3, one_more, mth):
    """``log(exp(a1 - m) + exp(a2 - m) + exp(a3 - m)) + m + one_more`` with ``m`` the kernel's
    running maximum (a1, then a2, a3 if greater; -inf gives 0)."""
    m = np.where(a2 > a1, a2, a1)
    m = np.where(a3 > m, a3, m)
    m = np.where(m == -np.inf, m.dtype.type(0), m)
    return (mth.log((mth.exp(a1 - m) + mth.exp(a2 - m)) + mth.exp(a3 - m)) + m) + one_more


def _ctc_prev(row: np.ndarray, k: int, keep: np.ndarray) -> np.ndarray:
    """``row`` shifted ``k`` places along s (toward higher s for k > 0), -inf where it reads
    outside or ``keep`` is false."""
    out = np.full_like(row, -np.inf)
    if k > 0:
        out[:, k:] = row[:, :-k]
    else:
        out[:, :k] = row[:, -k:]
    return np.where(keep, out, out.dtype.type(-np.inf))


@form("aten._ctc_loss.default", "aten._ctc_loss.Tensor")
def _ctc_loss_form(args: list, kwargs: dict) -> list:
    return ctc_loss(args, kwargs, M)


@form("aten._ctc_loss_backward.default", "aten._ctc_loss_backward.Tensor")
def _ctc_loss_backward_form(args: list, kwargs: dict) -> list:
    return ctc_loss_backward(args, kwargs, M)


def ctc_loss(args: list, kwargs: dict, mth) -> list:
    """The loss per item and the log-alphas, exp and log from ``mth`` (refmath; the C
    library's: ``--explain``): row 0 -inf but its first two states, then each ``t`` from
    ``t - 1`` by the three-term log-sum-exp; elements the kernel leaves unwritten (rows past an
    item's input length, states past its target) are the recorded bytes."""
    lp, il, tl, tp, blank = _ctc_setup(args[0], args[1], args[2], args[3],
                                       opt(kwargs, args, 4, "blank", 0))
    t_max, b, _ = lp.shape
    s_max = tp.shape[1]
    dt, ninf = lp.dtype, lp.dtype.type(-np.inf)
    la = np.full((b, t_max, s_max), ninf, dt)
    written = np.zeros(la.shape, bool)
    written[:, 0, :] = True
    bi = np.arange(b)[:, None]
    s_idx = np.arange(s_max)
    skip = np.zeros((b, s_max), bool)
    skip[:, 2:] = tp[:, 2:] != tp[:, :-2]
    tl_a, il_a = np.asarray(tl), np.asarray(il)
    nll = np.zeros(b, dt)
    with fp_quiet():
        run = il_a > 0  # (an item of no input keeps row 0's -inf)
        la[run, 0, 0] = lp[0, run, blank]
        has = run & (tl_a > 0)
        la[has, 0, 1] = lp[0, has, tp[has, 1]]
        row = la[:, 0, :].copy()
        for t in range(1, max(il, default=0)):
            new = _ctc_lse3(row, _ctc_prev(row, 1, s_idx > 0), _ctc_prev(row, 2, skip),
                            lp[t][bi, tp], mth)
            act = (il_a > t)[:, None] & (s_idx[None, :] <= 2 * tl_a[:, None])
            row = np.where(act, new, row)
            la[:, t, :] = np.where(act, new, la[:, t, :])
            written[:, t, :] = act
        for i in range(b):
            if il[i] == 0:
                nll[i] = -(dt.type(0) if tl[i] == 0 else ninf)
            elif tl[i] == 0:
                nll[i] = -la[i, il[i] - 1, 0]
            else:
                l1, l2 = la[i, il[i] - 1, 2 * tl[i]], la[i, il[i] - 1, 2 * tl[i] - 1]
                m = l2 if l1 < l2 else l1  # (std::max)
                m = dt.type(0) if m == ninf else m
                e = mth.exp(np.asarray([l1 - m, l2 - m]))
                nll[i] = -(mth.log(np.asarray(e[0] + e[1])) + m)
    rec = recorded_output(1, la)
    return [nll, np.where(written, la, rec) if rec is not None else la]


def ctc_loss_backward(args: list, kwargs: dict, mth) -> list:
    """The gradient, exp and log from ``mth``: the log-betas from each item's last input back,
    alpha + beta "log-added" into the gradient's (t, label) cells in descending s (the last
    row: two cells assigned), then ``(exp(lp) - exp(g + nll - lp)) * grad`` for the item's
    rows and 0 past them (all of an item whose loss is +inf under ``zero_infinity``)."""
    g_out, lp, tg, il, tl, nll, la = args[:7]
    blank = opt(kwargs, args, 7, "blank", 0)
    zero_inf = bool(opt(kwargs, args, 8, "zero_infinity", False))
    lp, il, tl, tp, blank = _ctc_setup(lp, tg, il, tl, blank, alphas=False)
    t_max, b, c = lp.shape
    s_max = tp.shape[1]
    dt, ninf = lp.dtype, lp.dtype.type(-np.inf)
    la, nll, g_out = np.asarray(la), np.asarray(nll), np.asarray(g_out)
    if la.shape != (b, t_max, s_max) or nll.shape != (b,) or g_out.shape != (b,) \
            or la.dtype != dt or nll.dtype != dt or g_out.dtype != dt:
        raise NoReference("_ctc_loss_backward: the alphas, loss or gradient do not match "
                          "log_probs")
    tl_a, il_a = np.asarray(tl), np.asarray(il)
    bi, bs = np.arange(b), np.arange(b)[:, None]
    s_idx = np.arange(s_max)[None, :]
    two = 2 * tl_a[:, None]
    up1 = s_idx < two
    up2 = np.zeros((b, s_max), bool)
    up2[:, :-2] = (tp[:, 2:] != tp[:, :-2]) & (s_idx[:, :-2] < two - 1)
    beta = np.full((b, t_max, s_max), ninf, dt)
    grad = np.full((t_max, b, c), ninf, dt)
    with fp_quiet():
        last = il_a - 1
        row = np.full((b, s_max), ninf, dt)
        for t in range(t_max - 1, -1, -1):
            new = _ctc_lse3(row, _ctc_prev(row, -1, up1), _ctc_prev(row, -2, up2),
                            lp[t][bs, tp], mth)
            act = (last > t)[:, None] & (s_idx <= two)
            row = np.where(act, new, row)
            start = last == t  # (an item's last input: two states, the rest -inf)
            if start.any():
                ii = bi[start]
                row[ii] = ninf
                row[ii, 2 * tl_a[ii]] = lp[t, ii, blank]
                nb = ii[tl_a[ii] > 0]
                row[nb, 2 * tl_a[nb] - 1] = lp[t, nb, tp[nb, 2 * tl_a[nb] - 1]]
            beta[:, t, :] = row
        # alpha + beta collected per (t, label): the last row's two cells assigned ...
        for i in range(b):
            if il[i] > 0:
                t, s = il[i] - 1, 2 * tl[i]
                grad[t, i, blank] = la[i, t, s] + beta[i, t, s]
                if tl[i] > 0:
                    grad[t, i, tp[i, s - 1]] = la[i, t, s - 1] + beta[i, t, s - 1]
        # ... the other rows "log-added" in descending s
        tt = np.arange(t_max)[:, None]
        for s in range(s_max - 1, -1, -1):
            on = (tt < (il_a - 1)[None, :]) & (s <= 2 * tl_a)[None, :]  # (t, b)
            if not on.any():
                continue
            ts, bs_ = np.nonzero(on)
            cs = tp[bs_, s]
            lab = la[bs_, ts, s] + beta[bs_, ts, s]
            cur = grad[ts, bs_, cs]
            mx = np.where(cur < lab, lab, cur)
            summed = mth.log(mth.exp(cur - mx) + mth.exp(lab - mx)) + mx
            grad[ts, bs_, cs] = np.where(cur == ninf, lab, summed)
        res = (mth.exp(lp) - mth.exp((grad + nll[None, :, None]) - lp)) * g_out[None, :, None]
        keep = np.arange(t_max)[:, None] < il_a[None, :]
        if zero_inf:
            keep &= ~(nll == np.inf)[None, :]
        out = np.where(keep[:, :, None], res, dt.type(0))
    return [out]


# --- nn.Bilinear's _trilinear, logcumsumexp, multi-margin loss ----------------------------------
_TRILINEAR_MAX = 1 << 28  # (summed terms times output elements: the loop's bound)


@form("aten._trilinear.default")
def _trilinear(args: list, kwargs: dict) -> list:
    """``nn.Bilinear``'s op (and its backward's): each input with size-1 dimensions put in at
    its ``expand`` places, the three broadcast together; per output element the terms
    ``(i1 * i2) * i3`` over the ``sumdim`` dimensions added in row-major order from +0.0 (the
    output keeps the other dimensions)."""
    xs = [np.asarray(a) for a in args[:3]]
    expands = [list(a) for a in args[3:6]]
    sumdim = sorted({int(d) for d in args[6]})
    dt = result_type(*xs)
    if not is_float(dt) or any(x.ndim + len(e) != xs[0].ndim + len(expands[0])
                               for x, e in zip(xs, expands, strict=True)):
        raise NoReference("_trilinear of non-float inputs or expansions of other ranks")
    nd = xs[0].ndim + len(expands[0])
    try:
        ex = [np.expand_dims(wide(x, dt), sorted(e)) for x, e in zip(xs, expands, strict=True)]
        full = np.broadcast_shapes(*(x.shape for x in ex))
    except ValueError as e:  # (numpy's AxisError is one)
        raise NoReference(f"_trilinear: shapes that do not broadcast ({e})") from None
    if any(not 0 <= d < nd for d in sumdim):
        raise NoReference("_trilinear: a sum dimension out of range")
    keep = [d for d in range(nd) if d not in sumdim]
    out_shape = tuple(full[d] for d in keep)
    n_sum = math.prod(full[d] for d in sumdim)
    if n_sum * max(math.prod(out_shape), 1) > _TRILINEAR_MAX:
        raise NoReference("_trilinear: more terms than the reference loops over")
    check_elems(math.prod(out_shape), "_trilinear")
    ex = [np.moveaxis(x, sumdim, range(len(keep), nd)) for x in ex]
    acc = np.zeros(out_shape, compute(dt))
    with fp_quiet():
        for idx in np.ndindex(*(full[d] for d in sumdim)):
            a, b, c = (x[(...,) + tuple(i if x.shape[len(keep) + k] > 1 else 0
                                            for k, i in enumerate(idx))] for x in ex)
            acc = acc + ((a * b) * c)
    return [arr(acc, dt)]


def _log_add_exp(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """ATen's ``_log_add_exp_helper(x, y)``: ``min``, ``max`` as std::min / std::max (a NaN
    ``y`` both); ``log1p(exp(min - max)) + max`` unless both are the same infinity (then
    ``x``)."""
    lo = np.where(np.isnan(y), y, np.where(y < x, y, x))
    hi = np.where(np.isnan(y), y, np.where(x < y, y, x))
    same_inf = (lo == hi) & ~np.isfinite(lo)
    return np.where(same_inf, x, M.log1p(M.exp(lo - hi)) + hi)


@form("aten.logcumsumexp.default")
def _logcumsumexp(args: list, kwargs: dict) -> list:
    """Along ``dim`` from ``-inf``: ``acc = _log_add_exp(x[k], acc)``, each ``acc`` the output
    (in the input's type; ATen accumulates float32 in float64: ``--explain``'s
    ``accumulator``)."""
    x = np.asarray(args[0])
    if not is_float(x.dtype):
        raise NoReference("logcumsumexp of a non-float tensor")
    if x.ndim == 0:
        return [x.copy()]
    d = int(opt(kwargs, args, 1, "dim", 0)) % x.ndim
    w = np.moveaxis(wide(x, x.dtype), d, 0)
    out = np.empty_like(w)
    acc = np.full(w.shape[1:], -np.inf, w.dtype)
    with fp_quiet():
        for k in range(w.shape[0]):
            acc = _log_add_exp(w[k], acc).astype(w.dtype)
            out[k] = acc
    return [arr(np.moveaxis(out, 0, d), x.dtype)]


def _margin_args(args: list, kwargs: dict, at: int) -> tuple:
    x, t = np.asarray(args[at]), np.asarray(args[at + 1])
    p = int(opt(kwargs, args, at + 2, "p", 1))
    margin = float(opt(kwargs, args, at + 3, "margin", 1))
    w = opt(kwargs, args, at + 4, "weight")
    red = int(opt(kwargs, args, at + 5, "reduction", 1))
    if not is_float(x.dtype) or x.ndim not in (1, 2) or p not in (1, 2) \
            or t.dtype.kind not in "iu":
        raise NoReference("multi_margin_loss of other than 1-d / 2-d float input, integer "
                          "targets and p 1 or 2")
    x2 = x.reshape(-1, x.shape[-1]) if x.ndim == 2 else x.reshape(1, -1)
    t1 = t.reshape(-1).astype(np.int64)
    if t1.size != x2.shape[0] or (t1.size and (t1.min() < 0 or t1.max() >= x2.shape[1])):
        raise NoReference("multi_margin_loss: a target outside the classes, or not one a row")
    return x, x2, t1, p, margin, None if w is None else np.asarray(w), red


@form("aten.multi_margin_loss.default")
def _multi_margin_loss(args: list, kwargs: dict) -> list:
    """ATen's loop: per row ``z = (margin - x[t]) + x[d]`` for each class ``d != t`` where
    positive, ``h = z`` (p 1) or ``z * z`` (p 2), times ``weight[t]``, added in class order
    from +0.0, then ``/ T(C)``; mean: the rows' sums added in order, ``/ T(N)``; sum: added."""
    x, x2, t, p, margin, w, red = _margin_args(args, kwargs, 0)
    T = x2.dtype.type
    rows = np.arange(x2.shape[0])
    with fp_quiet():
        z = (T(margin) - x2[rows, t][:, None]) + x2
        h = z if p == 1 else z * z
        if w is not None:
            h = h * w.astype(x2.dtype)[t][:, None]
        h = np.where((z > 0) & (np.arange(x2.shape[1])[None, :] != t[:, None]), h, T(0))
        per = serial_sum(h, 1) / T(x2.shape[1])
        if red == 0:
            return [per.reshape(x.shape[:-1]).astype(x.dtype)]
        tot = serial_sum(per, 0)
        return [np.asarray(tot / T(x2.shape[0]) if red == 1 else tot, x.dtype)]


def _multilabel_args(args: list, at: int) -> tuple:
    """(x as (N, C), its shape, targets as (N, C) int64, is_target (N, C) in x's type,
    reduction) of multilabel_margin_loss: each row's targets up to its first -1."""
    x, t = np.asarray(args[at]), np.asarray(args[at + 1])
    red = int(args[at + 2]) if len(args) > at + 2 else 1
    if not is_float(x.dtype) or x.ndim not in (0, 1, 2) or t.dtype.kind not in "iu" \
            or t.shape != x.shape:
        raise NoReference("multilabel_margin_loss of other than a 0-2 d float input and "
                          "integer targets of its shape")
    x2 = x.reshape(1, -1) if x.ndim < 2 else x
    t2 = t.reshape(x2.shape).astype(np.int64)
    n, c = x2.shape
    valid = np.cumprod(t2 >= 0, axis=1).astype(bool)  # (up to each row's first -1)
    if (t2[valid] >= c).any():
        raise NoReference("multilabel_margin_loss: a target outside the classes")
    ist = np.zeros(x2.shape, x.dtype)
    rows = np.nonzero(valid)[0]
    ist[rows, t2[valid]] = 1
    return x2, x.shape, t2, valid, ist, red


def _multilabel_terms(x2: np.ndarray, t2: np.ndarray, valid: np.ndarray, ist: np.ndarray):
    """Per target slot j (in order) the rows' ``z = (1 - x[t_j]) + x[d]`` over the classes,
    and where each counts: the slot valid, ``d`` not a target, ``z > 0``."""
    T = x2.dtype.type
    rows = np.arange(x2.shape[0])
    for j in range(x2.shape[1]):
        if not valid[:, j].any():
            break
        tj = np.where(valid[:, j], t2[:, j], 0)
        z = (T(1) - x2[rows, tj])[:, None] + x2
        yield j, tj, z, valid[:, j][:, None] & (ist == 0) & (z > 0)


@form("aten.multilabel_margin_loss_forward.default")
def _multilabel_margin_loss(args: list, kwargs: dict) -> list:
    """(loss, is_target): per row, for each target in order (up to the first -1) and each
    class d not a target in order, ``z = (1 - x[t]) + x[d]`` added where positive, from +0.0;
    none: each row's ``/ T(C)``; sum: the rows' added in order, ``/ T(C)``; mean: that ``/
    T(N)`` (ATen's order, in the input's type). ``is_target`` 1 at each row's targets."""
    x2, shape, t2, valid, ist, red = _multilabel_args(args, 0)
    T = x2.dtype.type
    n, c = x2.shape
    with fp_quiet():
        acc = np.zeros(n, x2.dtype)
        for _, _, z, use in _multilabel_terms(x2, t2, valid, ist):
            for d in range(c):  # (class order inside each target's run)
                acc = np.where(use[:, d], acc + z[:, d], acc)
        if red == 0 and len(shape) == 2:
            loss = acc / T(c)
        else:
            tot = (serial_sum(acc, 0) if red != 0 else acc.reshape(())) / T(c)
            loss = np.asarray(tot / T(n) if red == 1 else tot, x2.dtype)
    return [loss.astype(x2.dtype), ist.reshape(shape)]


@form("aten.multilabel_margin_loss_backward.default")
def _multilabel_margin_loss_backward(args: list, kwargs: dict) -> list:
    """ATen's loop: ``g = T(1 / (N C))`` (mean) or ``T(1 / C)``; for each target in order
    and each class d not a target where ``z > 0``: the target's gradient ``- g``, d's ``+
    g``, from +0.0 in that order; then times the incoming gradient (each row's, for none)."""
    go = np.asarray(args[0])
    x2, shape, t2, valid, ist, red = _multilabel_args(args, 1)
    given = np.asarray(args[4]) if len(args) > 4 else None
    if given is not None and given.reshape(x2.shape).tolist() != ist.tolist():
        raise NoReference("multilabel_margin_loss_backward: is_target not the targets'")
    T = x2.dtype.type
    n, c = x2.shape
    g = T(1.0 / (n * c)) if red == 1 else T(1.0 / c)
    rows = np.arange(n)
    with fp_quiet():
        gx = np.zeros(x2.shape, x2.dtype)
        for _, tj, _, use in _multilabel_terms(x2, t2, valid, ist):
            for d in range(c):
                u = use[:, d]
                gx[rows, tj] = np.where(u, gx[rows, tj] - g, gx[rows, tj])
                gx[:, d] = np.where(u, gx[:, d] + g, gx[:, d])
        gx = gx * (go.reshape(-1, 1).astype(x2.dtype) if red == 0 and len(shape) == 2
                   else go.astype(x2.dtype).reshape(()))
    return [gx.reshape(shape).astype(x2.dtype)]


@form("aten.soft_margin_loss.default")
def _soft_margin_loss(args: list, kwargs: dict) -> list:
    """``log1p(exp((-x) * t))`` (refmath), reduced (the tape's mean; sum in order)."""
    red = int(opt(kwargs, args, 2, "reduction", 1))
    return _loss(lambda v, tt: M.log1p(M.exp((-v) * tt)), [args[0], args[1]], red)


@form("aten.soft_margin_loss_backward.default")
def _soft_margin_loss_backward(args: list, kwargs: dict) -> list:
    """ATen's formula: ``z = exp((-t) * x)``; ``gx = (((t * z) * T(-norm)) / (z + 1)) * g``,
    ``norm = 1 / numel`` for mean (rounded once from double), else 1."""
    g, x, t = args[:3]
    red = int(opt(kwargs, args, 3, "reduction", 1))
    norm = 1.0 / np.size(x) if red == 1 else 1.0

    def fn(gg, v, tt):
        z = M.exp((-tt) * v)
        return (((tt * z) * _k(v, -norm)) / (z + _k(v, 1))) * gg
    return [ew(fn, g, x, t, out=result_type(x, t))]


@form("aten.multi_margin_loss_backward.default")
def _multi_margin_loss_backward(args: list, kwargs: dict) -> list:
    """ATen's loop: ``g = T(1 / (N * C))`` (mean) or ``T(1 / C)``; per class ``d != t`` where
    ``z > 0`` ``h = g`` (p 1) or ``(2 * g) * z`` (p 2), times ``weight[t]``, the target's
    ``-h`` added in class order from +0.0; 0 elsewhere; then times the incoming gradient."""
    go = np.asarray(args[0])
    x, x2, t, p, margin, w, red = _margin_args(args, kwargs, 1)
    T = x2.dtype.type
    n, c = x2.shape
    g = T(1.0 / (n * c)) if red == 1 else T(1.0 / c)
    rows = np.arange(n)
    with fp_quiet():
        z = (T(margin) - x2[rows, t][:, None]) + x2
        h = np.full_like(z, g) if p == 1 else (T(2) * g) * z
        if w is not None:
            h = h * w.astype(x2.dtype)[t][:, None]
        other = np.arange(c)[None, :] != t[:, None]
        h = np.where((z > 0) & other, h, T(0))
        gx = h.copy()
        gx[rows, t] = T(0) - serial_sum(h, 1)  # (ATen subtracts each from +0.0)
        gx = gx * (go.reshape(-1, 1) if red == 0 else go)
    return [gx.reshape(x.shape).astype(x.dtype)]
