"""Unary and binary-broadcast families: one numpy expression per element, as written.

Ops the tape also has (Add, Sub, Mul, Div, Neg, Relu, Sigmoid, Tanh, Exp, Log, Sqrt) are one
IEEE operation per element or a ``ctx.k`` transcendental, so they round exactly as the tape does.
"""

from __future__ import annotations

import numpy as np

from tapescope.core.onnx.registry import op


def _same(x: np.ndarray, y) -> np.ndarray:
    """Keep the input's dtype (numpy promotes python scalars / int ops)."""
    return np.asarray(y).astype(x.dtype, copy=False)


# ---- unary family -------------------------------------------------------------------------

_NUMPY_UNARY = {
    "Abs": np.abs, "Neg": np.negative, "Sqrt": np.sqrt, "Ceil": np.ceil, "Floor": np.floor,
    "Sin": np.sin, "Cos": np.cos, "Tan": np.tan, "Asin": np.arcsin, "Acos": np.arccos,
    "Atan": np.arctan, "Sinh": np.sinh, "Cosh": np.cosh, "Asinh": np.arcsinh,
    "Acosh": np.arccosh, "Atanh": np.arctanh, "Sign": np.sign, "Round": np.round,
    "IsNaN": np.isnan, "Not": np.logical_not, "BitwiseNot": np.invert,
}


def _numpy_unary(fn):
    def kernel(ctx, x):
        y = fn(x)
        return y if y.dtype == bool else _same(x, y)
    return kernel


for _name, _fn in _NUMPY_UNARY.items():
    op(_name)(_numpy_unary(_fn))


@op("Exp", "Log", "Tanh", "Sigmoid", "Erf")
def transcendental(ctx, x):
    """Through the kernel set (core.refmath in reference mode)."""
    f = getattr(ctx.k, ctx.node.op_type.lower())
    return _same(x, f(x)) if x.dtype.kind == "f" else _same(x, f(x.astype(np.float64)))


@op("Reciprocal")
def reciprocal(ctx, x):
    return _same(x, x.dtype.type(1) / x)


@op("Relu")
def relu(ctx, x):
    # the tape's relu: NaN propagates, -0.0 and negatives become +0.0 (x <= 0 is false for NaN)
    return np.where(x <= 0, x.dtype.type(0), x)


@op("LeakyRelu")
def leaky_relu(ctx, x, alpha=0.01):
    return np.where(x < 0, x * x.dtype.type(alpha), x).astype(x.dtype)


@op("Elu")
def elu(ctx, x, alpha=1.0):
    return np.where(x < 0, x.dtype.type(alpha) * ctx.k.expm1(x), x).astype(x.dtype)


@op("Selu")
def selu(ctx, x, alpha=1.67326319217681884765625, gamma=1.05070102214813232421875):
    a, g = x.dtype.type(alpha), x.dtype.type(gamma)
    return np.where(x <= 0, g * (a * ctx.k.exp(x) - a), g * x).astype(x.dtype)


@op("Celu")
def celu(ctx, x, alpha=1.0):
    a = x.dtype.type(alpha)
    return (np.maximum(0, x) + np.minimum(0, a * ctx.k.expm1(x / a))).astype(x.dtype)


@op("ThresholdedRelu")
def thresholded_relu(ctx, x, alpha=1.0):
    return np.where(x > alpha, x, 0).astype(x.dtype)


@op("HardSigmoid")
def hard_sigmoid(ctx, x, alpha=0.2, beta=0.5):
    return np.clip(x * x.dtype.type(alpha) + x.dtype.type(beta), 0, 1).astype(x.dtype)


@op("HardSwish")
def hard_swish(ctx, x):
    return (x * np.clip(x * x.dtype.type(1 / 6) + x.dtype.type(0.5), 0, 1)).astype(x.dtype)


@op("Softplus")
def softplus(ctx, x):
    return _same(x, ctx.k.log1p(ctx.k.exp(x)))


@op("Softsign")
def softsign(ctx, x):
    return _same(x, x / (x.dtype.type(1) + np.abs(x)))


@op("Mish")
def mish(ctx, x):
    return _same(x, x * ctx.k.tanh(ctx.k.log1p(ctx.k.exp(x))))


@op("Swish")
def swish(ctx, x, alpha=1.0):
    return _same(x, x * ctx.k.sigmoid(x * x.dtype.type(alpha)))


@op("Gelu")
def gelu(ctx, x, approximate="none"):
    t = x.dtype.type
    if approximate == "tanh":
        inner = t(np.sqrt(2 / np.pi)) * (x + t(0.044715) * x * x * x)
        return _same(x, t(0.5) * x * (t(1) + ctx.k.tanh(inner)))
    return _same(x, t(0.5) * x * (t(1) + ctx.k.erf(x / t(np.sqrt(2)))))


@op("Shrink")
def shrink(ctx, x, bias=0.0, lambd=0.5):
    return np.where(x < -lambd, x + bias, np.where(x > lambd, x - bias, 0)).astype(x.dtype)


@op("IsInf")
def is_inf(ctx, x, detect_negative=1, detect_positive=1):
    return (np.isposinf(x) & bool(detect_positive)) | (np.isneginf(x) & bool(detect_negative))


@op("PRelu")
def prelu(ctx, x, slope, consumed_inputs=None):
    if ctx.opset < 7 and slope.ndim == 1 and x.ndim > 2 and slope.size == x.shape[1]:
        slope = slope.reshape((-1,) + (1,) * (x.ndim - 2))  # per channel, pre-numpy rules
    return np.where(x < 0, x * slope, x).astype(x.dtype)


@op("Clip")
def clip(ctx, x, lo=None, hi=None, min=None, max=None):  # noqa: A002 - ONNX attribute names
    if ctx.opset < 11:  # min/max were attributes before opset 11
        lo, hi = min, max
    y = x
    if lo is not None and np.asarray(lo).size:
        y = np.maximum(y, np.asarray(lo).astype(x.dtype))
    if hi is not None and np.asarray(hi).size:
        y = np.minimum(y, np.asarray(hi).astype(x.dtype))
    return np.asarray(y, dtype=x.dtype)


# ---- binary-broadcast family --------------------------------------------------------------

_ARITH = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply}


def _legacy_broadcast(ctx, a, b, broadcast=0, axis=None):
    """Before opset 7, B broadcast only with ``broadcast=1``, aligned at ``axis``."""
    if ctx.opset >= 7 or not broadcast or b.ndim == a.ndim:
        return b
    ax = a.ndim - b.ndim if axis is None else axis % a.ndim
    return b.reshape(b.shape + (1,) * (a.ndim - ax - b.ndim))


def _arith(fn):
    def kernel(ctx, a, b, broadcast=0, axis=None, consumed_inputs=None):
        b = _legacy_broadcast(ctx, a, b, broadcast, axis)
        return _same(a, fn(a, b))
    return kernel


for _name, _fn in _ARITH.items():
    op(_name)(_arith(_fn))


@op("Div")
def div(ctx, a, b, broadcast=0, axis=None, consumed_inputs=None):
    b = _legacy_broadcast(ctx, a, b, broadcast, axis)
    if a.dtype.kind in "iu":  # integer division truncates toward zero
        q = np.trunc(a.astype(np.float64) / b.astype(np.float64))
        return q.astype(a.dtype)
    return _same(a, a / b)


@op("Pow")
def pow_(ctx, a, b, broadcast=0, axis=None):
    b = _legacy_broadcast(ctx, a, b, broadcast, axis)
    if a.dtype.kind in "iu" and b.dtype.kind == "f":
        return np.power(a.astype(np.float64), b).astype(a.dtype)
    if a.dtype.kind in "iu":
        return np.power(a.astype(np.int64), b.astype(np.int64)).astype(a.dtype)
    return _same(a, np.power(a, b.astype(a.dtype)))


@op("Mod")
def mod(ctx, a, b, fmod=0):
    if fmod:
        return _same(a, np.fmod(a, b))
    return _same(a, np.mod(a, b))


@op("BitShift")
def bit_shift(ctx, a, b, direction="LEFT"):
    f = np.left_shift if direction == "LEFT" else np.right_shift
    return _same(a, f(a, b.astype(a.dtype)))


_LOGIC = {
    "And": np.logical_and, "Or": np.logical_or, "Xor": np.logical_xor,
    "Equal": np.equal, "Less": np.less, "Greater": np.greater, "LessOrEqual": np.less_equal,
    "GreaterOrEqual": np.greater_equal,
}
_BITWISE = {"BitwiseAnd": np.bitwise_and, "BitwiseOr": np.bitwise_or,
            "BitwiseXor": np.bitwise_xor}


def _logic(fn):
    def kernel(ctx, a, b, broadcast=0, axis=None):
        return fn(a, _legacy_broadcast(ctx, a, b, broadcast, axis))
    return kernel


for _name, _fn in _LOGIC.items():
    op(_name)(_logic(_fn))
for _name, _fn in _BITWISE.items():
    op(_name)(_arith(_fn))


# ---- variadic family ----------------------------------------------------------------------

def _fold(fn, xs):
    acc = xs[0]
    for x in xs[1:]:  # left to right, one rounding per pairwise step
        acc = fn(acc, x)
    return acc


@op("Sum")
def sum_(ctx, *xs, consumed_inputs=None):
    return _same(xs[0], _fold(np.add, xs))


@op("Max")
def max_(ctx, *xs, consumed_inputs=None):
    return _same(xs[0], _fold(np.maximum, xs))


@op("Min")
def min_(ctx, *xs, consumed_inputs=None):
    return _same(xs[0], _fold(np.minimum, xs))


@op("Mean")
def mean_(ctx, *xs, consumed_inputs=None):
    # sum then divide by n, like the tape's mean
    return _same(xs[0], _fold(np.add, xs) / xs[0].dtype.type(len(xs)))


@op("Where")
def where(ctx, c, a, b):
    return np.where(c, a, b).astype(np.result_type(a, b))
