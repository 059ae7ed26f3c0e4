"""Elementwise ops: binary with numpy broadcasting, scalar variants and unaries.

Forward: exactly one IEEE operation per element as the formula is written. Backward: the
contribution for a broadcast input is reduced with ``unbroadcast`` (serial, row-major).
"""

from __future__ import annotations

import numpy as np

from tapescope.core import precision
from tapescope.core.ops.reference import unbroadcast
from tapescope.core.optable.registry import CForm, OpDef, broadcast_shape, register

BINARY_SHAPES = [((3, 4), (3, 4)), ((3, 4), (4,)), ((2, 3, 4), (3, 1)), ((3, 1), (1, 4)),
                 ((4,), (2, 3, 4)), ((5,), ())]


def _binary_shape(shapes, attrs):
    return broadcast_shape(shapes[0], shapes[1])


def _same_shape(shapes, attrs):
    return shapes[0]


def _binary_sample(lo: float = -2.0, hi: float = 2.0, b_away: float = 0.0):
    def sample(rng, dtype):
        cases = []
        for sa, sb in BINARY_SHAPES:
            a = rng.uniform(lo, hi, sa).astype(dtype)
            b = rng.uniform(lo, hi, sb).astype(dtype)
            if b_away:
                b = (np.sign(b) + (b == 0)) * (np.abs(b) + b_away)
            cases.append(([a, b], {}))
        return cases
    return sample


def _unary_sample(lo: float = -2.0, hi: float = 2.0, away: float = 0.0, **attrs):
    def sample(rng, dtype):
        out = []
        for shape in [(3, 4), (5,), (2, 3, 2)]:
            x = rng.uniform(lo, hi, shape)
            if away:  # keep finite differences off a kink
                x = np.where(np.abs(x) < away, x + np.sign(x + 1e-9) * away, x)
            out.append(([x.astype(dtype)], dict(attrs)))
        return out
    return sample


def _ub(c, x):
    return unbroadcast(c, x.shape)


_F64, _F32, _ZERO, _ONE = precision.F64, precision.F32, precision.ZERO, precision.ONE

# NOTE: a constant operand of float64/float32 is a 0-d array of that dtype, not a numpy scalar:
# a ufunc (or np.where) converts a numpy scalar to an array on every call, ~1-4 us of a small
# op's cost (issue 29). The same value, the same dtype, the same loop: the same bits. Other
# dtypes (a half array passed by a caller outside the tape) keep the scalar.


def _zero(x):
    dt = x.dtype
    return _ZERO[dt] if dt is _F64 or dt is _F32 else dt.type(0)


# ---- binary ------------------------------------------------------------------------------------
register(OpDef(
    "add", 2, "elementwise", "row_local", _binary_shape,
    forward=lambda M, xs, at: xs[0] + xs[1],
    backward=lambda M, g, xs, y, at, needs: [_ub(g, xs[0]) if needs[0] else None,
                                         _ub(g, xs[1]) if needs[1] else None],
    sample=_binary_sample(), doc="y = a + b; ga = unb(g); gb = unb(g)",
    c=CForm("ADD({a}, {b})", ("{g}", "{g}")), onnx=("Add",)))

register(OpDef(
    "sub", 2, "elementwise", "row_local", _binary_shape,
    forward=lambda M, xs, at: xs[0] - xs[1],
    backward=lambda M, g, xs, y, at, needs: [_ub(g, xs[0]) if needs[0] else None,
                                         _ub(-g, xs[1]) if needs[1] else None],
    sample=_binary_sample(), doc="y = a - b; ga = unb(g); gb = unb(-g)",
    c=CForm("SUB({a}, {b})", ("{g}", "-{g}")), onnx=("Sub",)))


def _mul_bwd(M, g, xs, y, at, needs):
    a, b = xs
    if a is b and needs[0] and needs[1]:  # x * x (mse's d * d): g * x once, the same bits for both
        c = _ub(g * a, a)
        return [c, c]
    return [_ub(g * b, a) if needs[0] else None, _ub(g * a, b) if needs[1] else None]


register(OpDef(
    "mul", 2, "elementwise", "row_local", _binary_shape,
    forward=lambda M, xs, at: xs[0] * xs[1], backward=_mul_bwd,
    sample=_binary_sample(), doc="y = a * b; ga = unb(g * b); gb = unb(g * a)",
    c=CForm("MUL({a}, {b})", ("MUL({g}, {b})", "MUL({g}, {a})")), onnx=("Mul",)))


def _div_bwd(M, g, xs, y, at, needs):
    a, b = xs
    ga = _ub(g / b, a) if needs[0] else None
    # NOTE: gb = -((g * y) / b), not -g*a/(b*b): reuses y and rounds in this exact order
    gb = _ub(-((g * y) / b), b) if needs[1] else None
    return [ga, gb]


register(OpDef(
    "div", 2, "elementwise", "row_local", _binary_shape,
    forward=lambda M, xs, at: xs[0] / xs[1], backward=_div_bwd,
    sample=_binary_sample(b_away=0.5), doc="y = a / b; ga = unb(g / b); gb = unb(-((g*y)/b))",
    c=CForm("DIV({a}, {b})", ("DIV({g}, {b})", "-(DIV(MUL({g}, {y}), {b}))")), onnx=("Div",)))

# ---- scalar variants and unaries ---------------------------------------------------------------


def _s(x, at):
    # the scalar rounded once to the tape dtype (np.array and dt.type round alike: C's cast)
    dt = x.dtype
    return np.array(at["s"], dt) if dt is _F64 or dt is _F32 else dt.type(at["s"])


def _attr_s(at):
    return at["s"]


register(OpDef(
    "neg", 1, "unary", "row_local", _same_shape,
    forward=lambda M, xs, at: -xs[0],
    backward=lambda M, g, xs, y, at, needs: [-g],
    sample=_unary_sample(), doc="y = -a (exact); ga = -g",
    c=CForm("-{x}", ("-{g}",)), onnx=("Neg",)))

register(OpDef(
    "adds", 1, "unary", "row_local", _same_shape,
    forward=lambda M, xs, at: xs[0] + _s(xs[0], at),
    backward=lambda M, g, xs, y, at, needs: [g],
    sample=_unary_sample(s=0.75), doc="y = a + s; ga = g",
    c=CForm("ADD({x}, {s})", ("{g}",), scalar=_attr_s)))

register(OpDef(
    "muls", 1, "unary", "row_local", _same_shape,
    forward=lambda M, xs, at: xs[0] * _s(xs[0], at),
    backward=lambda M, g, xs, y, at, needs: [g * _s(g, at)],
    sample=_unary_sample(s=-1.25), doc="y = a * s; ga = g * s",
    c=CForm("MUL({x}, {s})", ("MUL({g}, {s})",), scalar=_attr_s)))


def _relu(M, xs, at):
    x = xs[0]
    # NaN propagates (a debugger must not hide it); -0.0 and negatives become +0.0. NOTE: one
    # comparison: x <= 0 is false for NaN, so this is exactly (x > 0 || x != x) ? x : 0
    z = _zero(x)
    return np.where(x <= z, z, x)


def _relu_bwd(M, g, xs, y, at, needs):
    z = _zero(g)
    return [np.where(xs[0] > z, g, z)]


register(OpDef(
    "relu", 1, "unary", "row_local", _same_shape, forward=_relu, backward=_relu_bwd,
    sample=_unary_sample(away=0.05),
    doc="y = (a > 0 || a != a) ? a : 0; ga = a > 0 ? g : 0",
    c=CForm("({x} > (real_t)0 || {x} != {x}) ? {x} : (real_t)0",
            ("{x} > (real_t)0 ? {g} : (real_t)0",)), onnx=("Relu",)))


def _one(x):
    dt = x.dtype
    return _ONE[dt] if dt is _F64 or dt is _F32 else dt.type(1)


register(OpDef(
    "sigmoid", 1, "unary", "row_local", _same_shape,
    forward=lambda M, xs, at: M.sigmoid(xs[0]),
    # NOTE: y * (1 - y), not y - y*y: the kernel must round the same way
    backward=lambda M, g, xs, y, at, needs: [g * (y * (_one(y) - y))],
    sample=_unary_sample(), transcendental=True,
    doc="y = sigmoid(a) [refmath]; ga = g * (y * (1 - y))",
    c=CForm("SIGMOID({x})", ("MUL({g}, MUL({y}, SUB((real_t)1, {y})))",)), onnx=("Sigmoid",)))

# the native extension's tanh_grad(g, y) (core/native/refmath_py.c); False until looked up, None
# where it cannot be built (no compiler or Python.h, TAPESCOPE_NO_NATIVE)
_TANH_GRAD = False


def _tanh_grad_fn():
    global _TANH_GRAD
    if _TANH_GRAD is False:
        from tapescope.core import native

        _TANH_GRAD = getattr(native.refmath_ext(), "tanh_grad", None)
    return _TANH_GRAD


def _tanh_bwd(M, g, xs, y, at, needs):
    # NOTE: g * (1 - y * y) is three ufuncs and two temporaries in numpy, ~1 us on a tape's small
    # vectors; the extension's tanh_grad computes the same three roundings in the same order in
    # one call, its result allocated in C (~0.3 us, issue 29). It takes only C-contiguous
    # float64/float32 ndarrays of one dtype and shape and refuses the rest (TypeError,
    # ValueError), and those take the numpy spelling: numpy's promotion and broadcasting, and
    # its numpy scalar for a 0-d y.
    fn = _TANH_GRAD if _TANH_GRAD is not False else _tanh_grad_fn()
    if fn is not None and type(y) is np.ndarray and y.ndim:
        try:
            return [fn(g, y)]
        except (TypeError, ValueError):
            pass
    return [g * (_one(y) - y * y)]


register(OpDef(
    "tanh", 1, "unary", "row_local", _same_shape,
    forward=lambda M, xs, at: M.tanh(xs[0]), backward=_tanh_bwd,
    sample=_unary_sample(), transcendental=True,
    doc="y = tanh(a) [refmath]; ga = g * (1 - y * y)",
    c=CForm("TANH({x})", ("MUL({g}, SUB((real_t)1, MUL({y}, {y})))",)), onnx=("Tanh",)))

register(OpDef(
    "exp", 1, "unary", "row_local", _same_shape,
    forward=lambda M, xs, at: M.exp(xs[0]),
    backward=lambda M, g, xs, y, at, needs: [g * y],
    sample=_unary_sample(), transcendental=True, doc="y = exp(a) [refmath]; ga = g * y",
    c=CForm("EXP({x})", ("MUL({g}, {y})",)), onnx=("Exp",)))

register(OpDef(
    "log", 1, "unary", "row_local", _same_shape,
    forward=lambda M, xs, at: M.log(xs[0]),
    backward=lambda M, g, xs, y, at, needs: [g / xs[0]],
    sample=_unary_sample(0.2, 3.0), transcendental=True,
    doc="y = log(a) [refmath]; ga = g / a",
    c=CForm("LOG({x})", ("DIV({g}, {x})",)), onnx=("Log",)))

register(OpDef(
    "sqrt", 1, "unary", "row_local", _same_shape,
    forward=lambda M, xs, at: np.sqrt(xs[0]),  # IEEE sqrt is correctly rounded everywhere
    backward=lambda M, g, xs, y, at, needs: [g / (y + y)],
    sample=_unary_sample(0.2, 3.0), doc="y = sqrt(a) (IEEE); ga = g / (y + y)",
    c=CForm("SQRT({x})", ("DIV({g}, ADD({y}, {y}))",)), onnx=("Sqrt",)))


def _softplus(M, xs, at):
    x = xs[0]
    zero = x.dtype.type(0)
    # NOTE: max(x, 0) + log1p(exp(-|x|)), -|x| as (x > 0 ? -x : x): the C form's exact order
    return np.where(x > 0, x, zero) + M.log1p(M.exp(np.where(x > 0, -x, x)))


register(OpDef(
    "softplus", 1, "unary", "row_local", _same_shape, forward=_softplus,
    backward=lambda M, g, xs, y, at, needs: [g * M.sigmoid(xs[0])],
    sample=_unary_sample(-4.0, 4.0), transcendental=True,
    doc="y = max(a, 0) + log1p(exp(-|a|)) [refmath]; ga = g * sigmoid(a)",
    c=CForm("ADD(({x} > (real_t)0 ? {x} : (real_t)0), LOG1P(EXP({nx})))",
            ("MUL({g}, SIGMOID({x}))",),
            lets=(("nx", "{x} > (real_t)0 ? -{x} : {x}"),))))


# ---- the ONNX exporters' clamps and masks (docs/onnx-coverage.md) -----------------------------
def _clip01(M, xs, at):
    x = xs[0]
    # NOTE: x <= 0 first, then x >= 1: a NaN takes neither branch and propagates (as np.clip)
    return np.where(x <= 0, x.dtype.type(0), np.where(x >= 1, _one(x), x))


register(OpDef(
    "clip01", 1, "unary", "row_local", _same_shape, forward=_clip01,
    backward=lambda M, g, xs, y, at, needs: [
        np.where((xs[0] > 0) & (xs[0] < 1), g, g.dtype.type(0))],
    sample=_unary_sample(-0.5, 1.5, away=0.05),
    doc="y = (a <= 0) ? +0.0 : ((a >= 1) ? 1 : a) (exact); ga = (0 < a < 1) ? g : +0.0",
    c=CForm("({x} <= (real_t)0) ? (real_t)0 : (({x} >= (real_t)1) ? (real_t)1 : {x})",
            ("({x} > (real_t)0 && {x} < (real_t)1) ? {g} : (real_t)0",))))


def _keep_sample(rng, dtype):
    cases = []
    for sa, sm in [((3, 4), (3, 4)), ((2, 3, 4), (3, 1)), ((3, 4), (4,)), ((1, 4), (3, 4))]:
        a = rng.uniform(-2, 2, sa).astype(dtype)
        m = (rng.uniform(0, 1, sm) > 0.4).astype(dtype)
        cases.append(([a, m], {}))
    return cases


def _keep_bwd(M, g, xs, y, at, needs):
    a, m = xs
    return [_ub(np.where(m != 0, g, g.dtype.type(0)), a) if needs[0] else None, None]


register(OpDef(
    "keep", 2, "elementwise", "row_local", _binary_shape,
    # NOTE: -0.0 where masked out, so keep(a, m) + keep(b, !m) (ONNX Where) is a or b exactly,
    # -0.0 and NaN included: x + (-0.0) == x for every x
    forward=lambda M, xs, at: np.where(xs[1] != 0, xs[0], xs[0].dtype.type(-0.0)),
    backward=_keep_bwd, sample=_keep_sample, nondiff_inputs=(1,),
    doc="y = (m != 0) ? a : -0.0 (exact); ga = unb((m != 0) ? g : +0.0); m gets none",
    c=CForm("({b} != (real_t)0) ? {a} : -(real_t)0",
            ("({b} != (real_t)0) ? {g} : (real_t)0", "(real_t)0"))))
