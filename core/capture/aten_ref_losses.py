"""Reference forms of aten's remaining losses and activations: binary cross-entropy (with and
without logits), smooth L1, Huber, log-sigmoid, ELU, Mish, PReLU, xlogy, with their backwards.
Each is torch's written formula, one rounding per operation, no FMA, transcendentals from
refmath, reductions by the tape's serial sum / mean (docs/reference-order.md, "Captured aten
ops")."""

from __future__ import annotations

import numpy as np

from tapescope.core.capture.aten_ref_table import (
    F32,
    M,
    NoReference,
    ew,
    form,
    fp_quiet,
    is_float,
    opt,
    result_type,
)
from tapescope.core.ops import REGISTRY


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


@form("aten.xlogy.Tensor", "aten.xlogy.Scalar_Other", "aten.xlogy.Scalar_Self")
def _xlogy(args: list, kwargs: dict) -> list:
    a, b = args[0], args[1]
    out = result_type(a, b)

    def fn(x, y):  # NaN y: NaN; x == 0: +0.0; else x * log(y)
        return np.where(np.isnan(y), y, np.where(x == 0, _k(x, 0), x * M.log(y)))
    return [ew(fn, a, b, out=out if is_float(out) else F32)]
