"""Tape ops: ``core.ops.relu(x)`` etc. record one node each; ``REGISTRY`` lists every op.

Composites (``mse``, ``add_bias``, ``scale``, ``attention``) record primitives, so only the
primitives carry backward rules and device kernels.
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from tapescope.core.ops import elementwise, linalg, movement, reduce, rowwise  # noqa: F401  (registers)
from tapescope.core.ops.nn import register_nn
from tapescope.core.ops.rowwise import rope_tables
from tapescope.core.optable.registry import REGISTRY, OpDef, ShapeError, register
from tapescope.core.tape import Var

register_nn()  # conv2d, pools, erf, gather: the ops ONNX import records

__all__ = [
    "REGISTRY", "OpDef", "ShapeError", "register", "rope_tables",
    "add", "sub", "mul", "div", "neg", "adds", "muls", "relu", "sigmoid", "tanh", "exp", "log",
    "sqrt", "sum", "mean", "matmul", "bmm", "transpose", "reshape", "softmax", "log_softmax",
    "slice", "concat",
    "mse", "add_bias", "scale", "rms_norm", "silu", "swiglu", "rope", "cross_entropy",
    "attention",
]


def _tape(*xs: Any):
    for x in xs:
        if type(x) is Var:
            return x.tape
    raise TypeError("an op needs at least one tape Var among its inputs")


def _rec(op: str, xs: Sequence[Any], attrs: dict | None = None, name: str | None = None):
    for x in xs:
        if type(x) is not Var:
            break
    else:  # every input a Var already (the common case): nothing to lift
        if xs:
            return xs[0].tape.record(op, xs, attrs, name)
    t = _tape(*xs)
    return t.record(op, [x if type(x) is Var else t._lift(x) for x in xs], attrs, name)


# NOTE: the unary wrappers (neg, relu, sigmoid, tanh, exp, log, sqrt) record a Var input
# straight away and go through _rec only for anything else: _rec's loop over the inputs and its
# keyword call were ~0.2 us of a small tanh node (issue 29); the same record call, the same
# node, the same errors.
def _unary(op: str, x: Any, name: str | None):
    if type(x) is Var:
        return x.tape.record(op, [x], None, name)
    return _rec(op, [x], name=name)


def add(a, b, name=None):
    """a + b with numpy broadcasting."""
    return _rec("add", [a, b], name=name)


def sub(a, b, name=None):
    """a - b with numpy broadcasting."""
    return _rec("sub", [a, b], name=name)


def mul(a, b, name=None):
    """a * b with numpy broadcasting."""
    return _rec("mul", [a, b], name=name)


def div(a, b, name=None):
    """a / b with numpy broadcasting."""
    return _rec("div", [a, b], name=name)


def neg(x, name=None):
    """-x."""
    return _unary("neg", x, name)


def adds(x, s: float, name=None):
    """x + s for a python scalar s."""
    return _rec("adds", [x], {"s": float(s)}, name)


def muls(x, s: float, name=None):
    """x * s for a python scalar s."""
    return _rec("muls", [x], {"s": float(s)}, name)


def relu(x, name=None):
    """max(x, 0), NaN propagating."""
    return _unary("relu", x, name)


def sigmoid(x, name=None):
    """1 / (1 + exp(-x)) through refmath."""
    return _unary("sigmoid", x, name)


def tanh(x, name=None):
    """tanh through refmath."""
    return _unary("tanh", x, name)


def exp(x, name=None):
    """exp through refmath."""
    return _unary("exp", x, name)


def log(x, name=None):
    """log through refmath."""
    return _unary("log", x, name)


def sqrt(x, name=None):
    """IEEE sqrt."""
    return _unary("sqrt", x, name)


def _axis(axis):
    return axis if axis is None or isinstance(axis, int) else tuple(int(a) for a in axis)


def sum(x, axis=None, keepdims: bool = False, name=None):  # noqa: A001
    """Serial row-major sum over ``axis`` (all axes by default)."""
    return _rec("sum", [x], {"axis": _axis(axis), "keepdims": bool(keepdims)}, name)


def mean(x, axis=None, keepdims: bool = False, name=None):
    """sum / n over ``axis``."""
    return _rec("mean", [x], {"axis": _axis(axis), "keepdims": bool(keepdims)}, name)


def matmul(a, b, name=None):
    """[..., M, K] @ [K, N], serial in k."""
    return _rec("matmul", [a, b], name=name)


def bmm(a, b, name=None):
    """[B, M, K] @ [B, K, N], serial in k."""
    return _rec("bmm", [a, b], name=name)


def transpose(x, axes=None, name=None):
    """Permute axes (reverse them by default)."""
    return _rec("transpose", [x], {"axes": None if axes is None else tuple(axes)}, name)


def reshape(x, shape, name=None):
    """Row-major reshape (one -1 allowed)."""
    return _rec("reshape", [x], {"shape": tuple(int(d) for d in shape)}, name)


def softmax(x, axis: int = -1, name=None):
    """Softmax along ``axis``."""
    return _rec("softmax", [x], {"axis": int(axis)}, name)


def log_softmax(x, axis: int = -1, name=None):
    """log(softmax(x)) along ``axis``, as ``(x - max) - log(serial_sum(exp(x - max)))``."""
    return _rec("log_softmax", [x], {"axis": int(axis)}, name)


def slice(x, axis: int, start: int, stop: int, name=None):  # noqa: A001
    """x[start:stop] along ``axis``."""
    return _rec("slice", [x], {"axis": int(axis), "start": int(start), "stop": int(stop)}, name)


def concat(xs: Sequence[Any], axis: int, name=None):
    """Join along ``axis``."""
    return _rec("concat", list(xs), {"axis": int(axis)}, name)


def rms_norm(x, gamma, eps: float = 1e-6, name=None):
    """x / rms(x) * gamma over the last axis."""
    return _rec("rms_norm", [x, gamma], {"eps": float(eps)}, name)


def silu(x, name=None):
    """x * sigmoid(x)."""
    return _rec("silu", [x], name=name)


def swiglu(g, u, name=None):
    """silu(g) * u."""
    return _rec("swiglu", [g, u], name=name)


def rope(x, base: float = 10000.0, name=None):
    """Rotary position embedding over [..., S, D]; positions are the row index on axis -2."""
    return _rec("rope", [x], {"base": float(base)}, name)


def cross_entropy(logits, targets, name=None):
    """Mean NLL of softmax(logits) at integer ``targets`` (an array or a const Var)."""
    t = _tape(logits)
    if not hasattr(targets, "tape"):
        targets = t.const(np.asarray(targets), name="targets")
    return t.record("cross_entropy", [logits, targets], {}, name)


# ---- composites --------------------------------------------------------------------------------
def mse(y, target, name=None):
    """mean((y - target)^2), recorded as sub, mul, mean."""
    d = sub(y, target)
    return mean(mul(d, d), name=name)


def add_bias(x, bias, name=None):
    """x[..., c] + bias[c] (a broadcasting add)."""
    return add(x, bias, name=name)


def scale(x, alpha: float, name=None):
    """x * alpha (muls)."""
    return muls(x, alpha, name=name)


def attention(q, k, v, causal: bool = False, name=None):
    """softmax(q k^T / sqrt(d) [+ causal mask]) v, composed of tape ops (no fused backward).

    2-D operands [S, D] use matmul; 3-D [H, S, D] use bmm. The causal mask adds -inf above the
    diagonal, so masked probabilities are exactly 0.0.
    """
    t = _tape(q, k, v)
    qs = q.shape
    d = qs[-1]
    if len(qs) == 2:
        scores = matmul(q, transpose(k))
    else:
        scores = bmm(q, transpose(k, (0, 2, 1)))
    scores = muls(scores, 1.0 / math.sqrt(d))  # the scalar is rounded once, on the host
    if causal:
        s = scores.shape[-1] if t.ok else 0
        mask = np.triu(np.full((s, s), -np.inf), k=1)
        scores = add(scores, t.const(mask, name="causal_mask"))
    probs = softmax(scores, axis=-1)
    out = matmul(probs, v) if len(qs) == 2 else bmm(probs, v)
    if name is not None and t.ok:
        t._nodes[out.id] = t._nodes[out.id]._replace(name=t._scoped(name))
    return out


def _attr_value(v: Any) -> Any:
    """An attribute as the tape stores it: Python numbers, tuples for sequences."""
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, (list, tuple, np.ndarray)):
        return tuple(_attr_value(e) for e in (v.tolist() if isinstance(v, np.ndarray) else v))
    return v


def _attr_rule(d: OpDef) -> dict[str, Any] | None:
    """The attributes of a generated tape form, name -> type; None: any (the shape rule judges
    them). A row form knows its own (its host scalars, floats; its axis attribute, an int); a C
    form without a scalar has none."""
    if d.row is not None:
        known: dict[str, Any] = {n: float for n, _ in d.row.scalars}
        if d.row.axis is not None:
            known[d.row.axis] = int
        return known
    if d.c is not None and d.c.scalar is None:
        return {}
    return None


def _generated(attr: str, d: OpDef):
    """``ops.<op>(*inputs, name=None, **attrs)``: one node of ``op`` (a variadic op also takes
    its inputs as one list)."""
    rule = _attr_rule(d)

    def record(*xs: Any, name: str | None = None, **attrs: Any) -> Var:
        if d.arity is None and len(xs) == 1 and isinstance(xs[0], (list, tuple)):
            xs = tuple(xs[0])
        if d.arity is not None and len(xs) != d.arity:
            raise TypeError(f"{attr} takes {d.arity} input(s), got {len(xs)}")
        if d.arity is None and not xs:
            raise TypeError(f"{attr} takes at least one input")
        if rule is not None:
            if set(attrs) - set(rule):
                raise TypeError(f"{attr} takes no attribute {sorted(set(attrs) - set(rule))}")
            at = {k: rule[k](v) for k, v in attrs.items()}
        else:
            at = {k: _attr_value(v) for k, v in attrs.items()}
        return _rec(attr, list(xs), at or None, name)

    record.__name__ = record.__qualname__ = attr
    record.__module__ = __name__
    record.__doc__ = f"{attr}(*inputs, name=None, **attrs): one {attr} node. {d.doc}"
    return record


def __getattr__(attr: str):
    """``ops.<op>(*inputs, name=None, **attrs)`` for every op of the table without a wrapper above
    (erf, conv2d, layer_norm, log_sum_exp, and any op added by docs/adding-an-op.md): the op
    table is its tape form too, so a registered op is always callable the way a workload calls
    it (tests/core/test_ops_tape_form.py walks the table). Attributes go by name: a row op's host
    scalars (floats, e.g. ``eps``) and its axis attribute (an int); an op with neither form
    takes its attributes as its samples spell them, and its shape rule judges them."""
    d = REGISTRY.get(attr)
    if d is None or d.kind == "leaf":
        raise AttributeError(f"module 'core.ops' has no attribute {attr!r}")
    return _generated(attr, d)


def __dir__() -> list[str]:
    return sorted(set(globals()) | {n for n, d in REGISTRY.items() if d.kind != "leaf"})


_ = builtins  # sum and slice shadow builtins inside this module on purpose
