"""Noise or bug: is an introduced difference within the rounding bound of SOME order of the same
exact operations (a *valid reordering*), or outside every such bound (a wrong formula, a wrong
precision, a race)? (issue 44, item 3; no gpu, no Qt)

Per element, for the output ``y`` of an op written as sums and products of ``n`` terms, any
evaluation order in floating point with unit roundoff ``u`` (the dtype's: 2**-53, 2**-24, 2**-11
for float16, 2**-8 for bfloat16) stays within ``gamma(n) * sum|terms|`` of the exact value,
``gamma(n) = n*u / (1 - n*u)`` (Higham, *Accuracy and Stability of Numerical Algorithms*, 3.1).
The reference is one such order and the candidate another, so a valid difference obeys

    |cand - ref| <= 2 * E + slack,    E = the per-element bound below, for the candidate's inputs

(``SAFETY`` covers the magnitudes' own rounding; ``slack`` a few of the dtype's smallest normal
numbers per term, so flushing subnormals, ``ftz``, is valid). ``E`` per op (``value_bound``):

================================  ===============================================================
sum, mean                         ``gamma(N) * sum|x|`` (mean: ``gamma(N + 1)``, ``/ N``)
matmul, bmm, conv2d               ``gamma(K) * (|a| @ |b|)``, K the contraction length (conv:
                                  ``C/group * kh * kw``; ``conv2d(|x|, |w|)``)
conv_transpose2d                  ``gamma(C/group + kh*kw) * conv_transpose2d(|x|, |w|)``
avgpool2d                         ``gamma(kh*kw + 1) * avgpool(|x|)``
add, sub, mul, muls, adds         one rounding: ``u * |y|``; div: two (``x * (1/y)``)
movement, relu, maxpool, keep...  exact: 0
a transcendental (exp, log, tanh,  its own bound: ``FUNC_ULP`` ulp of ``y`` (libm, SLEEF's
sigmoid, erf, silu, softplus,     vectorised u10/u35 functions, refmath: a few ulp each; sqrt too:
swiglu, sqrt)                     PyTorch's vectorised CPU sqrt is not correctly rounded)
softmax, log_softmax,             composed from the above: the exp's own bound and its
cross_entropy                     argument's rounding (``3u|x - max|``: online / blocked maxima
                                  included), the row sum's ``gamma(N)``, the division
rms_norm, layer_norm              the sums' ``gamma(N)`` (layer_norm's variance also as
                                  ``E[x^2] - mean^2``, Welford or two-pass), sqrt's bound, the
                                  products
rope                              ``gamma(4) * (|x1 c| + |x2 s|)`` (the tables' rounding included)
================================  ===============================================================

Gradients (``grad_bound``): each consumer's backward contribution bounded the same way (a
matmul's ``gamma(K) * |g| @ |b|^T``, a broadcast's reduction ``gamma(N) * sum|g|``, the row
ops' backward written out), plus ``gamma(C)`` of the ``C`` contributions added. Optimizer
updates (``update_bound``): core.optim's formulas term by term (``m``, ``v``, the step, ``w``),
eps where the reference puts it: PyTorch's Adam (eps added to ``sqrt(v) / sqrt(1 - b2^t)``) is
another formula, and outside wherever eps matters.

A NaN or infinity on one side only, where the bound is finite, is outside (a softmax without the
max shift that overflows). The narrower float32 accumulator of a float64 run is a wrong
precision, outside by this definition; a half episode's half-type accumulator is within the
half type's own bound, valid.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tapescope.core import precision

__all__ = ["FUNC_ULP", "OUTSIDE", "SAFETY", "SHORT", "VALID", "Verdict", "entry_label",
           "fail_on_bug", "gamma", "grad_bound", "judge", "unit_roundoff", "update_bounds",
           "value_bound"]

VALID = "valid reordering"
OUTSIDE = "outside reordering bound"
SHORT = {VALID: "valid", OUTSIDE: "outside"}  # the table's column
FUNC_ULP = 8  # a transcendental's own error, each side, in ulp of its result
SAFETY = 1.0625  # the bound's own arithmetic (the magnitudes are computed in floating point)

_TRANS = {"exp", "log", "tanh", "sigmoid", "erf", "silu", "softplus", "sqrt", "swiglu"}
_ONE_ROUNDING = {"add", "sub", "mul", "muls", "adds"}
_EXACT = {"neg", "relu", "clip01", "keep", "maxpool2d", "maxpool3d", "gather", "slice", "concat",
          "reshape", "transpose"}


def unit_roundoff(dt: Any) -> float:
    """u: half the dtype's machine epsilon (float16: 2**-11, bfloat16: 2**-8)."""
    return float(precision.finfo(np.dtype(dt)).eps) / 2.0


def gamma(n: Any, u: float) -> Any:
    """``n u / (1 - n u)`` (inf where ``n u >= 1``: no bound)."""
    nu = np.asarray(n, dtype=np.float64) * u
    with np.errstate(divide="ignore"):
        out = np.where(nu < 1.0, nu / np.maximum(1.0 - nu, 1e-300), np.inf)
    return float(out) if out.ndim == 0 else out


def _tiny(dt: Any) -> float:
    return float(precision.finfo(np.dtype(dt)).tiny)


@dataclass(frozen=True)
class Verdict:
    """An introduced array's class: ``VALID`` or ``OUTSIDE``, how far the worst element is in
    units of its bound (``ratio``, <= 1 when valid) and how many elements are outside."""

    klass: str
    ratio: float
    n_outside: int

    def to_json(self) -> dict:
        """``{"class", "bound_ratio", "n_outside"}``."""
        r = self.ratio
        return {"class": self.klass, "bound_ratio": r if np.isfinite(r) else None,
                "n_outside": self.n_outside}


def judge(ref: Any, cand: Any, bound: Any) -> Verdict:
    """``cand`` against ``ref`` per element with the allowed ``|cand - ref|`` ``bound``
    (``2 E`` and the slack, as the module doc says): NaN against NaN is equal (the parity NaN
    policy), a NaN or infinity against anything else is outside unless the bound is infinite."""
    r = precision.widen(np.asarray(ref)).astype(np.float64)
    c = precision.widen(np.asarray(cand)).astype(np.float64)
    b = np.broadcast_to(np.asarray(bound, dtype=np.float64), r.shape)
    with np.errstate(all="ignore"):
        same = (r == c) | (np.isnan(r) & np.isnan(c))
        d = np.abs(c - r)
        ok = same | (d <= b) | np.isinf(b)
        bad = ~ok
        ratio = np.where(same, 0.0, np.where(b > 0, d / b, np.inf))
        ratio = np.where(np.isnan(ratio), np.inf, ratio)
    n_bad = int(np.count_nonzero(bad))
    worst = float(np.max(ratio)) if ratio.size else 0.0
    if n_bad == 0:
        worst = min(worst, 1.0)
    return Verdict(OUTSIDE if n_bad else VALID, worst, n_bad)


def _abs(x: Any) -> np.ndarray:
    return np.abs(precision.widen(np.asarray(x)).astype(np.float64))


def _f(x: Any) -> np.ndarray:
    return precision.widen(np.asarray(x)).astype(np.float64)


def _finish(E: Any, shape: tuple, dt: Any, n_terms: float = 1.0) -> np.ndarray:
    """The allowed |cand - ref|: both sides' bound, the safety factor and the subnormal slack."""
    E = np.nan_to_num(np.asarray(E, dtype=np.float64), nan=np.inf, posinf=np.inf)
    slack = 4.0 * _tiny(dt) * (1.0 + float(n_terms))
    return np.broadcast_to(2.0 * SAFETY * E + slack, shape).reshape(shape)


# ---- values ------------------------------------------------------------------------------------
def _exp_rel(xs: np.ndarray, m: np.ndarray, u: float) -> np.ndarray:
    """An exp(x - max)'s relative error in any valid order: its own bound and its argument's
    rounding (x - max, online / blocked maxima: at most 3 roundings of |x - max|)."""
    with np.errstate(all="ignore"):
        z = np.abs(xs - m)
        return 2.0 * FUNC_ULP * u + 3.0 * u * np.where(np.isfinite(z), z, 0.0)


def _softmax_parts(x: np.ndarray, axis: int, u: float) -> tuple:
    """(p, per-element exp relative error, the row sum's relative error) of a softmax row."""
    with np.errstate(all="ignore"):
        m = np.max(x, axis=axis, keepdims=True)
        m = np.where(np.isfinite(m), m, 0.0)
        e = np.exp(x - m)
        s = np.sum(e, axis=axis, keepdims=True)
        p = e / s
        er = _exp_rel(x, m, u)
        n = x.shape[axis] if x.ndim else 1
        ds = gamma(n, u) + np.sum(p * er, axis=axis, keepdims=True)
        return p, er, ds, s, m


def value_bound(op: str, xs: Sequence[Any], at: dict, ref: Any, dt: Any) -> np.ndarray:
    """The allowed ``|cand - ref|`` per element of ``op``'s output (``ref``: the reference
    output on the candidate's inputs ``xs``, in the run's dtype ``dt``)."""
    from tapescope.core.optable.registry import REGISTRY

    dt = np.dtype(dt)
    u = unit_roundoff(dt)
    y = _f(ref)
    shape = y.shape
    ay = np.abs(y)
    at = dict(at)
    with np.errstate(all="ignore"):
        if op in _EXACT or REGISTRY[op].forward is None:
            return _finish(0.0, shape, dt)
        if op in _ONE_ROUNDING:
            return _finish(u * ay, shape, dt, 2)
        if op == "div":
            return _finish(gamma(2, u) * ay, shape, dt, 2)
        if op in _TRANS:
            k = 2.0 * FUNC_ULP + (6.0 if op in ("sigmoid", "silu", "softplus", "swiglu") else 0.0)
            return _finish(k * u * ay, shape, dt)
        fwd = REGISTRY[op].forward
        if op in ("sum", "mean"):
            from tapescope.core.ops.reduce import count

            x = _f(xs[0])
            n = count(x.shape, at)
            M = np.asarray(fwd(None, [np.abs(x)], at), dtype=np.float64)
            if op == "mean":  # the mean of |x|: sum|x| / N
                return _finish(gamma(n + 1, u) * M, shape, dt, n)
            return _finish(gamma(n, u) * M, shape, dt, n)
        if op in ("matmul", "bmm"):
            a, b = _abs(xs[0]), _abs(xs[1])
            k = a.shape[-1]
            M = np.matmul(a, b)
            return _finish(gamma(k, u) * M, shape, dt, k)
        if op in ("conv2d", "conv3d"):
            x, w = _abs(xs[0]), _abs(xs[1])
            k = int(np.prod(w.shape[1:]))
            M = np.asarray(fwd(None, [x, w], at), dtype=np.float64)
            return _finish(gamma(k, u) * M, shape, dt, k)
        if op in ("conv_transpose2d", "conv_transpose3d"):  # a dot over C/group, then the
            x, w = _abs(xs[0]), _abs(xs[1])                  # taps added (col2im)
            k = int(w.shape[0] // int(at.get("group", 1)) + np.prod(w.shape[2:]))
            M = np.asarray(fwd(None, [x, w], at), dtype=np.float64)
            return _finish(gamma(k, u) * M, shape, dt, k)
        if op in ("avgpool2d", "avgpool3d"):
            k = int(np.prod(at["kernel"]))
            M = np.asarray(fwd(None, [_abs(xs[0])], at), dtype=np.float64)
            return _finish(gamma(k + 1, u) * M, shape, dt, k)
        if op == "rope":
            x = _abs(xs[0])
            h = x.shape[-1] // 2
            M1 = x[..., :h] + x[..., h:]  # |x1| |c| + |x2| |s| <= |x1| + |x2|, both halves
            return _finish(gamma(4, u) * np.concatenate([M1, M1], axis=-1), shape, dt, 4)
        if op == "softmax":
            x = _f(xs[0])
            axis = int(at.get("axis", -1))
            p, er, ds, _, _ = _softmax_parts(x, axis, u)
            return _finish(p * (er + ds + 2.0 * u), shape, dt, x.shape[axis])
        if op == "log_softmax":
            x = _f(xs[0])
            axis = int(at.get("axis", -1))
            p, er, ds, s, m = _softmax_parts(x, axis, u)
            ls = np.abs(np.log(s))
            E = u * np.abs(x - m) + ds + 2.0 * FUNC_ULP * u * ls + 2.0 * u * ay
            return _finish(E, shape, dt, x.shape[axis])
        if op == "cross_entropy":
            x = _f(xs[0])
            c = x.shape[-1]
            x2 = x.reshape(-1, c)
            ti = np.asarray(xs[1]).reshape(-1).astype(np.int64)
            p, er, ds, s, m = _softmax_parts(x2, -1, u)
            z_t = np.abs((x2 - m)[np.arange(len(ti)), ti])
            ls = np.abs(np.log(s[:, 0]))
            nll = np.abs(ls - z_t)
            row = ds[:, 0] + 2.0 * FUNC_ULP * u * ls + u * z_t + 2.0 * u * nll
            N = max(len(ti), 1)
            E = np.sum(row) / N + gamma(N + 1, u) * np.sum(nll) / N
            return _finish(E, shape, dt, c)
        if op == "rms_norm":
            x = _f(xs[0])
            n = x.shape[-1]
            dr = _rsqrt_rel(gamma(n + 1, u), u)
            return _finish(ay * (dr + 2.0 * u), shape, dt, n)
        if op == "layer_norm":
            x, gm = _f(xs[0]), _abs(xs[1])
            n = x.shape[-1]
            _, r, A, dd, dr = _ln_parts(x, at, u)
            d = np.abs(x - np.mean(x, -1, keepdims=True))
            E = gm * r * (dd + d * (dr + 2.0 * u))
            return _finish(E, shape, dt, n)
    return _finish(np.inf, shape, dt)  # an op with no bound written: nothing is outside it


def _rsqrt_rel(dms: Any, u: float) -> Any:
    """1/sqrt(ms + eps)'s relative error given ms's (``dms``): half of it, sqrt's own bound
    (or an rsqrt's), the add and the division."""
    return 0.5 * dms + 2.0 * FUNC_ULP * u + 3.0 * u


def _ln_parts(x: np.ndarray, at: dict, u: float) -> tuple:
    """layer_norm's pieces and their error bounds: (d, r, A = |mean's error|, |d's error|,
    r's relative error). The variance's error allows two-pass, Welford and E[x^2] - mean^2."""
    n = x.shape[-1]
    eps = float(at.get("eps", 1e-5))
    with np.errstate(all="ignore"):
        mu = np.mean(x, -1, keepdims=True)
        d = x - mu
        var = np.mean(d * d, -1, keepdims=True)
        r = 1.0 / np.sqrt(var + eps)
        A = gamma(n + 1, u) * np.mean(np.abs(x), -1, keepdims=True)
        dd = A + u * np.abs(d)
        dvar = (gamma(n + 2, u) * (var + np.mean(x * x, -1, keepdims=True) + mu * mu)
                + 2.0 * A * np.mean(np.abs(d), -1, keepdims=True))
        dr = _rsqrt_rel(dvar / (var + eps), u)
    return d, r, A, dd, dr


# ---- gradients ---------------------------------------------------------------------------------
def _unb(c: np.ndarray, shape: tuple) -> np.ndarray:
    """sum over the broadcast axes (magnitudes: no order matters)."""
    c = np.asarray(c, dtype=np.float64)
    while c.ndim > len(shape):
        c = c.sum(axis=0)
    for i, s in enumerate(shape):
        if s == 1 and c.shape[i] != 1:
            c = c.sum(axis=i, keepdims=True)
    return np.broadcast_to(c, shape)


def _contrib_bounds(op: str, g: Any, xs: Sequence[Any], y: Any, at: dict, needs: Sequence[bool],
                    u: float) -> list[tuple[Any, Any] | None]:
    """Per input of a consumer ``op``: ``(E, M)``, the error bound of its backward contribution
    and that contribution's magnitude (None where it pushes none). ``M`` bounds ``|contrib|``
    (the consumers' contributions are then added: ``gamma(C) * sum M``)."""
    from tapescope.core.optable.registry import REGISTRY

    G = _abs(g)
    X = [None if x is None else _f(x) for x in xs]
    AX = [None if x is None else np.abs(x) for x in X]
    Y = _f(y) if y is not None else None
    out: list[tuple[Any, Any] | None] = [None] * len(xs)
    at = dict(at)
    with np.errstate(all="ignore"):
        def put(k: int, E: Any, M: Any) -> None:
            if needs[k]:
                shape = np.shape(xs[k])
                out[k] = (np.broadcast_to(E, shape), np.broadcast_to(M, shape))

        if op in ("add", "sub", "keep", "adds", "neg", "muls", "relu", "clip01"):
            for k in range(len(xs)):
                if not needs[k]:
                    continue
                s = float(abs(at["s"])) if op == "muls" else 1.0
                M = _unb(G * s, np.shape(xs[k]))
                n = max(G.size // max(int(np.prod(np.shape(xs[k]))), 1), 1)
                put(k, gamma(n + 1, u) * M, M)
        elif op == "mul":
            for k in range(2):
                if needs[k]:
                    M = _unb(G * AX[1 - k], np.shape(xs[k]))
                    n = max(G.size // max(int(np.prod(np.shape(xs[k]))), 1), 1)
                    put(k, gamma(n + 1, u) * M, M)
        elif op == "div":
            for k in range(2):
                if needs[k]:
                    c = G / AX[1] if k == 0 else G * np.abs(Y) / AX[1]
                    M = _unb(c, np.shape(xs[k]))
                    n = max(G.size // max(int(np.prod(np.shape(xs[k]))), 1), 1)
                    put(k, gamma(n + 3, u) * M, M)
        elif op in ("sum", "mean"):
            from tapescope.core.ops.reduce import count

            c = count(np.shape(xs[0]), at) if op == "mean" else 1
            M = REGISTRY[op].backward(None, G, [AX[0]], None, at, [True])[0]
            M = np.asarray(M, dtype=np.float64)
            put(0, gamma(2, u) * M, M)
            del c
        elif op in ("matmul", "bmm"):
            a, b = AX
            if op == "matmul":
                a2, g2 = a.reshape(-1, a.shape[-1]), G.reshape(-1, G.shape[-1])
                if needs[0]:
                    M = (g2 @ b.T).reshape(a.shape)
                    put(0, gamma(G.shape[-1], u) * M, M)
                if needs[1]:
                    M = a2.T @ g2
                    put(1, gamma(a2.shape[0], u) * M, M)
            else:
                if needs[0]:
                    M = np.matmul(G, np.swapaxes(b, 1, 2))
                    put(0, gamma(G.shape[-1], u) * M, M)
                if needs[1]:
                    M = np.matmul(np.swapaxes(a, 1, 2), G)
                    put(1, gamma(a.shape[1], u) * M, M)
        elif op in ("conv2d", "conv3d"):
            parts = REGISTRY[op].backward(None, G, AX, None, at, needs)
            w = np.shape(xs[1])
            kx = int(w[0] * np.prod(w[2:]))  # C_out * taps terms per input pixel (at most)
            kw = int(G.shape[0] * np.prod(G.shape[2:]))  # N * Ho * Wo per weight
            for k, n in ((0, kx), (1, kw)):
                if needs[k] and parts[k] is not None:
                    M = np.asarray(parts[k], dtype=np.float64)
                    put(k, gamma(n, u) * M, M)
        elif op in ("conv_transpose2d", "conv_transpose3d"):  # gx = conv(g, w); gw a conv's
            parts = REGISTRY[op].backward(None, G, AX, None, at, needs)
            w = np.shape(xs[1])
            kx = int(w[1] * np.prod(w[2:]))  # Mg * taps terms per input pixel
            kw = int(np.shape(xs[0])[0] * np.prod(np.shape(xs[0])[2:]))  # N * H * W per weight
            for k, n in ((0, kx), (1, kw)):
                if needs[k] and parts[k] is not None:
                    M = np.asarray(parts[k], dtype=np.float64)
                    put(k, gamma(n, u) * M, M)
        elif op in ("avgpool2d", "maxpool2d", "avgpool3d", "maxpool3d", "gather", "slice",
                    "concat", "reshape", "transpose"):
            # the routing (maxpool's argmax, gather's indices) from the real inputs, |g| routed
            ins = [X[0]] + [np.asarray(x) for x in xs[1:]]
            if op == "concat":
                ins = X
            parts = REGISTRY[op].backward(None, G, ins, Y, at, needs)
            n = 1
            if op in ("avgpool2d", "maxpool2d", "avgpool3d", "maxpool3d"):
                n = int(np.prod(at["kernel"])) + 1  # overlapping windows' taps, at most
            elif op == "gather":
                n = int(np.size(xs[1]))  # repeats of one index: at most all of them
            for k, c in enumerate(parts):
                if needs[k] and c is not None:
                    M = np.abs(np.asarray(c, dtype=np.float64))
                    put(k, gamma(n, u) * M, M)
        elif op in _TRANS or op in ("exp", "log", "sqrt"):
            x = X[0]
            if op == "swiglu":
                s = 1.0 / (1.0 + np.exp(-x))
                slope = np.abs(s) * (1.0 + np.abs(x) * (1.0 + np.abs(s)))
                k = 2.0 * FUNC_ULP + 8.0
                if needs[0]:
                    M = G * AX[1] * slope
                    put(0, k * u * M, M)
                if needs[1]:
                    M = G * np.abs(x * s)
                    put(1, k * u * M, M)
            else:
                if op == "tanh":
                    M = G * (1.0 + Y * Y)
                elif op == "sigmoid":
                    M = G * np.abs(Y) * (1.0 + np.abs(Y))
                elif op == "silu":
                    s = 1.0 / (1.0 + np.exp(-x))
                    M = G * np.abs(s) * (1.0 + np.abs(x) * (1.0 + np.abs(s)))
                else:
                    c = REGISTRY[op].backward(_np_math(), _f(g), X, Y, at, needs)[0]
                    M = np.abs(np.asarray(c, dtype=np.float64))
                extra = 2.0 * x * x if op == "erf" else 0.0
                put(0, (2.0 * FUNC_ULP + 8.0 + extra) * u * M, M)
        elif op == "softmax":
            axis = int(at.get("axis", -1))
            n = np.shape(xs[0])[axis]
            p = np.abs(Y)
            M = p * (G + np.sum(G * p, axis=axis, keepdims=True))
            _, er, ds, _, _ = _softmax_parts(X[0], axis, u)
            put(0, (gamma(n + 3, u) + 2.0 * (er + ds)) * M, M)
        elif op == "log_softmax":
            axis = int(at.get("axis", -1))
            n = np.shape(xs[0])[axis]
            p = np.exp(Y)
            M = G + p * np.sum(G, axis=axis, keepdims=True)
            put(0, gamma(n + 2, u) * M + (2.0 * FUNC_ULP * u) * p * np.sum(
                G, axis=axis, keepdims=True), M)
        elif op == "cross_entropy":
            x = X[0]
            c = x.shape[-1]
            x2 = x.reshape(-1, c)
            ti = np.asarray(xs[1]).reshape(-1).astype(np.int64)
            p, er, ds, _, _ = _softmax_parts(x2, -1, u)
            oh = np.zeros_like(p)
            oh[np.arange(len(ti)), ti] = 1.0
            N = max(len(ti), 1)
            gs = float(np.max(G)) / N
            M = (p + oh) * gs
            E = gamma(4, u) * M + gs * p * (er + ds + 2.0 * u)
            put(0, E.reshape(np.shape(xs[0])), M.reshape(np.shape(xs[0])))
        elif op == "rms_norm":
            x, gm = X
            n = x.shape[-1]
            ms = np.mean(x * x, -1, keepdims=True)
            r = 1.0 / np.sqrt(ms + float(at["eps"]))
            dr = _rsqrt_rel(gamma(n + 1, u), u)
            gd = G * AX[1]
            if needs[0]:
                M = gd * r + np.abs(x) * (r ** 3 / n) * np.sum(gd * np.abs(x), -1, keepdims=True)
                put(0, (gamma(n + 6, u) + 3.0 * dr) * M, M)
            if needs[1]:
                M = _unb(G * np.abs(x) * r, np.shape(xs[1]))
                rows = max(G.size // max(n, 1), 1)
                put(1, (gamma(rows + 2, u) + dr) * M, M)
        elif op == "layer_norm":
            x, gm = X
            n = x.shape[-1]
            d, r, A, dd, dr = _ln_parts(x, at, u)
            xh = np.abs(d) * r
            dxh = r * dd + xh * dr
            gd = G * AX[1]
            if needs[0]:
                sgx = np.sum(gd * xh, -1, keepdims=True) / n
                M = r * (gd + np.sum(gd, -1, keepdims=True) / n + xh * sgx)
                E = ((gamma(n + 6, u) + dr) * M
                     + r * (dxh * sgx + xh * np.sum(gd * dxh, -1, keepdims=True) / n))
                put(0, E, M)
            if needs[1]:
                M = _unb(G * xh, np.shape(xs[1]))
                rows = max(G.size // max(n, 1), 1)
                put(1, gamma(rows + 2, u) * M + _unb(G * dxh, np.shape(xs[1])), M)
        elif op == "rope":
            h = G.shape[-1] // 2
            M1 = G[..., :h] + G[..., h:]
            M = np.concatenate([M1, M1], axis=-1)
            put(0, gamma(4, u) * M, M)
        else:
            for k in range(len(xs)):
                if needs[k]:
                    put(k, np.inf, np.inf)  # a rule with no bound written: nothing outside it
    return out


_NPM = None


def _np_math() -> Any:
    global _NPM
    if _NPM is None:
        from tapescope.core import mathlib

        _NPM = mathlib.get("platform")
    return _NPM


def grad_bound(nodes: tuple, j: int, by: Sequence[int], value: Callable, grad: Callable,
               dt: Any) -> np.ndarray:
    """The allowed ``|cand - ref|`` per element of node ``j``'s gradient, made by its consumers
    ``by`` from the candidate's gradients ``grad(i)`` and values ``value(i)`` (as
    ``core.provenance.reference_grad`` makes it)."""
    from tapescope.core.optable.registry import REGISTRY

    dt = np.dtype(dt)
    u = unit_roundoff(dt)
    shape = tuple(nodes[j].shape)
    E = np.zeros(shape)
    M = np.zeros(shape)
    count = 0
    for i in by:
        g = grad(i)
        if g is None:
            continue
        n = nodes[i]
        nd = REGISTRY[n.op].nondiff_inputs
        needs = [nodes[x].requires_grad and k not in nd for k, x in enumerate(n.inputs)]
        needs = [need and x == j for need, x in zip(needs, n.inputs, strict=True)]
        if not any(needs):
            continue
        parts = _contrib_bounds(n.op, g, [value(x) for x in n.inputs], value(i), n.attrs,
                                needs, u)
        for k, part in enumerate(parts):
            if part is None or not needs[k]:
                continue
            e, m = part
            E = E + np.reshape(e, shape)
            M = M + np.reshape(m, shape)
            count += 1
    E = E + gamma(max(count, 1), u) * M
    return _finish(E, shape, dt, max(count, 1))


# ---- optimizer updates -------------------------------------------------------------------------
def update_bounds(opt: Any, p: Any) -> dict[str, np.ndarray]:
    """The allowed ``|cand - ref|`` of one parameter's update (``core.provenance.ParamUpdate``
    under ``OptimizerState`` ``opt``), per part: ``{"param", "m", "v"}`` (m, v: Adam)."""
    dt = np.dtype(np.asarray(p.w).dtype)
    u = unit_roundoff(dt)
    w, g = _f(p.w), _f(p.g)
    with np.errstate(all="ignore"):
        dg = np.zeros_like(g)
        if opt.clip is not None:  # one norm of every gradient: its sum's order, sqrt, scale
            dg = dg + (gamma(max(g.size, 1) * 4, u) + 2.0 * FUNC_ULP * u) * np.abs(g)
        if p.l2:
            g = g + float(p.l2) * w
            dg = dg + gamma(2, u) * (np.abs(g) + abs(float(p.l2)) * np.abs(w))
        if opt.kind == "sgd":
            s = float(opt.lr) * np.abs(g)
            E = u * (np.abs(w) + s) + gamma(2, u) * s + float(opt.lr) * dg
            return {"param": _finish(E, w.shape, dt)}
        import math

        t = opt.t
        b1, b2 = float(opt.b1), float(opt.b2)
        lr_t = opt.lr * math.sqrt(1.0 - b2 ** t) / (1.0 - b1 ** t)
        m0 = np.zeros_like(w) if p.m is None else _f(p.m)
        v0 = np.zeros_like(w) if p.v is None else _f(p.v)
        m = b1 * m0 + (1.0 - b1) * g
        v = b2 * v0 + (1.0 - b2) * g * g
        # m as b1*m + (1-b1)*g or as a lerp m + (g - m)(1 - b1): three roundings of |m|, |g|
        Em = gamma(3, u) * (np.abs(m0) + (1.0 - b1) * np.abs(g)) + (1.0 - b1) * dg
        Ev = gamma(3, u) * (np.abs(v0) + (1.0 - b2) * g * g) + (1.0 - b2) * 2.0 * np.abs(g) * dg
        sv = np.sqrt(np.abs(v))
        den = sv + float(opt.eps)
        dden = (0.5 * np.where(v > 0, Ev / np.abs(v), 0.0) + 2.0 * FUNC_ULP * u) * sv + u * den
        step = lr_t * np.abs(m) / den
        # the step: m's error, the denominator's, the product, the division, lr_t's own rounding
        Es = lr_t * Em / den + step * (dden / den + 6.0 * u)
        Ew = u * (np.abs(w) + step) + Es
        return {"param": _finish(Ew, w.shape, dt), "m": _finish(Em, w.shape, dt),
                "v": _finish(Ev, w.shape, dt)}


# ---- what the CLI prints and returns -----------------------------------------------------------
def entry_label(e: dict) -> str:
    """An introduced entry (``Introduced.to_json``) as the table's cause cell: what it is (the
    value, a gradient and the consumers whose rules made it, an update), its cause, its class:
    ``value: fma · valid``, ``grad by #12: unknown · outside``, ``update: unknown · valid``."""
    which = e.get("which", "value")
    if which == "grad":
        by = e.get("by") or []
        where = "grad by #" + ", #".join(map(str, by)) if by else "grad"
    else:
        where = which
    klass = SHORT.get(e.get("class", ""), "")
    return f"{where}: {e.get('cause', 'introduced')}" + (f" · {klass}" if klass else "")


def fail_on_bug(introduced: Sequence[dict]) -> int:
    """``parity --fail-on bug``'s exit status: 1 when some introduced array is outside every
    reordering bound (or could not be classed: nothing shows it valid), else 0."""
    return 1 if any(e.get("class", OUTSIDE) != VALID for e in introduced) else 0
