"""Grad-check: every op's backward against central finite differences, plus exact identities.

Each registry op supplies ``sample`` cases (random shapes, broadcast cases included). The check
builds ``L = sum(y * W)`` for a fixed random W, runs the tape's backward, and compares each input's
gradient with central differences of the op's own forward (float64, refmath).

Half dtypes (``check_op_half``): finite differences mean nothing at 11 (float16) or 8 (bfloat16)
significant bits, so the half tape's gradient is held to the float64 tape's analytic gradient
(which ``check_op`` holds to finite differences) on the same inputs and W, both exactly
representable in the half type, within a tolerance stated per op in units of the type's
epsilon (``HALF_TOL``): a contribution is rounded once (half an epsilon) and a backward that
reads the stored output reads it rounded once, so 1 epsilon bounds every op; data movement and
the ops whose gradient is a copy are exact.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tapescope.core import ops, precision
from tapescope.core.optable.registry import REGISTRY, OpDef
from tapescope.core.tape import Tape

EPS = 1e-6
TOL = 1e-6  # on |analytic - numeric| / max(1, |analytic|, |numeric|)


@dataclass(frozen=True)
class OpCheck:
    """The outcome of checking one op: how many input elements, the worst error, the verdict."""

    op: str
    cases: int
    inputs_checked: int
    max_err: float
    ok: bool


def _loss_of(opdef: OpDef, M, xs: list[np.ndarray], attrs: dict, w: np.ndarray) -> float:
    with np.errstate(all="ignore"):
        return float(np.sum(opdef.forward(M, xs, attrs) * w))


def check_case(opdef: OpDef, xs: list[np.ndarray], attrs: dict, rng: np.random.Generator,
               math: str = "refmath") -> tuple[int, float]:
    """(elements checked, worst error) for one sample case of one op."""
    tape = Tape(np.float64, math=math)
    leaves = [tape.const(x) if k in opdef.nondiff_inputs else tape.param(x)
              for k, x in enumerate(xs)]
    y = tape.record(opdef.name, leaves, attrs)
    if not tape.ok:
        raise AssertionError(f"{opdef.name} sample case poisoned the tape: {tape.error}")
    w = rng.uniform(-1.0, 1.0, y.shape)
    loss = ops.sum(y * tape.const(w))
    tape.backward(loss)
    checked, worst = 0, 0.0
    for k, x in enumerate(xs):
        if k in opdef.nondiff_inputs:
            continue
        analytic = tape.grad(leaves[k])
        analytic = np.zeros_like(x) if analytic is None else analytic
        flat = x.astype(np.float64).ravel()
        for i in range(flat.size):
            hi, lo = flat.copy(), flat.copy()
            hi[i] += EPS
            lo[i] -= EPS
            xs_hi = [*xs[:k], hi.reshape(x.shape), *xs[k + 1:]]
            xs_lo = [*xs[:k], lo.reshape(x.shape), *xs[k + 1:]]
            num = (_loss_of(opdef, tape.M, xs_hi, attrs, w)
                   - _loss_of(opdef, tape.M, xs_lo, attrs, w)) / (2 * EPS)
            a = float(analytic.ravel()[i])
            worst = max(worst, abs(a - num) / max(1.0, abs(a), abs(num)))
            checked += 1
    return checked, worst


def check_op(name: str, seed: int = 0) -> OpCheck:
    """Check every sample case of op ``name``."""
    opdef = REGISTRY[name]
    rng = np.random.default_rng(seed)
    cases = opdef.sample(rng, np.dtype(np.float64))
    checked, worst = 0, 0.0
    for xs, attrs in cases:
        n, e = check_case(opdef, xs, attrs, rng)
        checked += n
        worst = max(worst, e)
    return OpCheck(name, len(cases), checked, worst, worst <= TOL)


# Tolerances of the half-precision check, in epsilons of the half type (float16 2**-10,
# bfloat16 2**-7), on |half - float64| / max(1, |half|, |float64|). Ops not named: 1 epsilon.
HALF_EXACT = ("adds", "clip01", "concat", "neg", "relu", "reshape", "slice", "sum",
              "transpose")
HALF_TOL: dict[str, float] = dict.fromkeys(HALF_EXACT, 0.0)
HALF_TOL_DEFAULT = 1.0


def _grads(opdef: OpDef, xs: list[np.ndarray], attrs: dict, w: np.ndarray,
           dtype: str) -> list[np.ndarray | None]:
    t = Tape(dtype)
    leaves = [t.const(x) if k in opdef.nondiff_inputs else t.param(x)
              for k, x in enumerate(xs)]
    y = t.record(opdef.name, leaves, attrs)
    if not t.ok:
        raise AssertionError(f"{opdef.name} sample case poisoned the tape: {t.error}")
    t.backward(ops.sum(y * t.const(w)))
    out: list[np.ndarray | None] = []
    for k, x in enumerate(xs):
        g = None if k in opdef.nondiff_inputs else t.grad(leaves[k])
        out.append(None if k in opdef.nondiff_inputs else
                   np.zeros(np.shape(x)) if g is None else precision.widen(g).astype(np.float64))
    return out


def check_op_half(name: str, dtype: str, seed: int = 0) -> OpCheck:
    """Check op ``name``'s gradient on a ``dtype`` (float16 / bfloat16) tape against the
    float64 tape's, every sample case; ``max_err`` is in epsilons of ``dtype``."""
    opdef = REGISTRY[name]
    dt = precision.dtype_of(dtype)
    eps = 2.0 ** -10 if dt == precision.FLOAT16 else 2.0 ** -7
    rng = np.random.default_rng(seed)
    cases = opdef.sample(rng, np.dtype(np.float64))
    checked, worst = 0, 0.0
    for xs, attrs in cases:
        # inputs and W representable in both tapes: only the half tape's roundings differ
        xs = [np.asarray(x).astype(dt).astype(np.float64) for x in xs]
        t0 = Tape(np.float64)
        shape = t0.record(name, [t0.const(x) for x in xs], attrs).shape
        w = rng.uniform(-1.0, 1.0, shape).astype(dt).astype(np.float64)
        with np.errstate(all="ignore"):
            gh, g64 = _grads(opdef, xs, attrs, w, dtype), _grads(opdef, xs, attrs, w, "float64")
        for a, b in zip(gh, g64, strict=True):
            if a is None or b is None or not a.size:
                continue
            err = np.abs(a - b) / np.maximum(1.0, np.maximum(np.abs(a), np.abs(b)))
            worst = max(worst, float(np.max(err)) / eps)
            checked += a.size
    tol = HALF_TOL.get(name, HALF_TOL_DEFAULT)
    return OpCheck(name, len(cases), checked, worst, worst <= tol)


def identities() -> list[tuple[str, bool]]:
    """Analytic identities that must hold to the bit."""
    rng = np.random.default_rng(7)
    out = []
    t = Tape()
    x = t.param(rng.standard_normal((4, 5)))
    t.backward(ops.sum(x * x))
    out.append(("d/dx sum(x*x) == 2x", np.array_equal(t.grad(x), 2 * t.value(x))))
    t = Tape()
    x = t.param(rng.standard_normal((3, 3)))
    t.backward(ops.sum(x * x + x * x))
    out.append(("y = x*x + x*x gives 4x", np.array_equal(t.grad(x), 4 * t.value(x))))
    t = Tape()
    x = t.param(rng.standard_normal((2, 6)))
    t.backward(ops.mean(x))
    out.append(("d/dx mean(x) == 1/n", bool(np.all(t.grad(x) == 1.0 / 12.0))))
    out.append(("attention dQ/dK/dV vs finite differences", attention_check() <= 1e-6))
    return out


def attention_check(causal: bool = True) -> float:
    """Worst finite-difference error of attention's dQ, dK, dV end to end."""
    rng = np.random.default_rng(3)
    q0, k0, v0 = (rng.uniform(-1, 1, (4, 3)) for _ in range(3))
    w = rng.uniform(-1, 1, (4, 3))

    def f(q, k, v):
        t = Tape()
        out = ops.attention(t.const(q), t.const(k), t.const(v), causal=causal)
        return float(np.sum(t.value(out) * w))

    t = Tape()
    q, k, v = t.param(q0), t.param(k0), t.param(v0)
    t.backward(ops.sum(ops.attention(q, k, v, causal=causal) * t.const(w)))
    worst = 0.0
    base = [q0, k0, v0]
    for which, var in enumerate((q, k, v)):
        g = t.grad(var)
        for i in range(base[which].size):
            hi = [b.copy() for b in base]
            lo = [b.copy() for b in base]
            hi[which].flat[i] += EPS
            lo[which].flat[i] -= EPS
            num = (f(*hi) - f(*lo)) / (2 * EPS)
            a = float(g.flat[i])
            worst = max(worst, abs(a - num) / max(1.0, abs(a), abs(num)))
    return worst
