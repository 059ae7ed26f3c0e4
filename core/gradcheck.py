"""Grad-check: every op's backward against central finite differences, plus exact identities.

Each registry op supplies ``sample`` cases (random shapes, broadcast cases included). The check
builds ``L = sum(y * W)`` for a fixed random W, runs the tape's backward, and compares each input's
gradient with central differences of the op's own forward (float64, refmath).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core import ops
from core.optable.registry import REGISTRY, OpDef
from core.tape import Tape

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
