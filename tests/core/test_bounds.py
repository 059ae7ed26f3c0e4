"""core.bounds (issue 44, item 3): noise or bug. Every variant of the reference order that
core.explain tries is a *valid reordering* (within 2 gamma(n) sum|terms| of the reference, or
an op's own few-ulp bound); planted wrong formulas (a GELU with a wrong constant, an Adam with
eps in the wrong place, a softmax without the max shift that overflows) are *outside*; a half
episode's bound is in the half type's own epsilon."""

from __future__ import annotations

import math
from collections import namedtuple

import numpy as np
import pytest

from tapescope.core import mathlib, ops, precision
from tapescope.core.bounds import (
    OUTSIDE,
    VALID,
    entry_label,
    fail_on_bug,
    gamma,
    judge,
    unit_roundoff,
    value_bound,
)
from tapescope.core.explain import FORMULAS, explain, variants_for
from tapescope.core.optable.registry import REGISTRY
from tapescope.core.provenance import (
    OptimizerState,
    ParamUpdate,
    StepState,
    provenance,
    reference_update,
    reference_value,
)
from tapescope.core.tape import Tape

Node = namedtuple("Node", "op attrs shape")
DTYPES = [np.dtype(np.float64), np.dtype(np.float32), *precision.HALF]
ids = [d.name for d in DTYPES]


def _inputs(op: str, dt: np.dtype, rng) -> list[tuple[list, dict]]:
    """The op table's samples plus a longer case (sums long enough to reorder)."""
    cases = list(REGISTRY[op].sample(rng, np.dtype(np.float32) if dt in precision.HALF else dt))
    r = rng.standard_normal
    big = {"sum": ([r((6, 300))], {"axis": -1, "keepdims": False}),
           "mean": ([r((6, 300))], {"axis": -1, "keepdims": False}),
           "softmax": ([3 * r((8, 200))], {"axis": -1}),
           "matmul": ([r((9, 130)), r((130, 7))], {}),
           "bmm": ([r((2, 9, 70)), r((2, 70, 5))], {}),
           "rms_norm": ([r((5, 256)), r(256)], {"eps": 1e-6}),
           "div": ([r((4, 50)), r((4, 50)) + 3.0], {})}
    if op in big:
        cases.append(big[op])
    if op == "cross_entropy":
        x = 2 * r((16, 40))
        cases.append(([x, rng.integers(0, 40, 16).astype(np.float64)], {}))
    return [([np.asarray(x).astype(dt) for x in xs], at) for xs, at in cases]


def _is_wrong_precision(v, dt) -> bool:
    """float32's accumulator in a float64 run, or TF32 inputs (a 10-bit mantissa) in a
    float32 one: a wrong precision, outside by definition (test_tf32_inputs_are_outside)."""
    return v.cause == "accumulator" and (
        ("narrower accumulator (float32)" in v.label and dt == np.float64)
        or v.label.startswith("TF32"))


@pytest.mark.parametrize("dt", DTYPES, ids=ids)
@pytest.mark.parametrize("op", sorted(FORMULAS))
def test_every_variant_is_a_valid_reordering(op, dt):
    rng = np.random.default_rng(440)
    seen = 0
    for xs, at in _inputs(op, dt, rng):
        ref = REGISTRY[op].forward(mathlib.get("refmath"), [precision.widen(x) for x in xs], at)
        node = Node(op, at, np.shape(ref))
        ref = reference_value(node, xs, dt)
        for v in variants_for(op, dt):
            try:
                y = v.run(node, xs, dt)
            except (ValueError, TypeError):
                continue
            b = value_bound(op, xs, at, ref, dt)
            got = judge(ref, y, b)
            if _is_wrong_precision(v, dt):
                if not np.array_equal(y, ref):
                    assert got.klass == OUTSIDE, (op, v.label)
                continue
            assert got.klass == VALID, (op, dt, v.cause, v.label, got)
            seen += 1
    assert seen


@pytest.mark.parametrize("dt", DTYPES, ids=ids)
@pytest.mark.parametrize("op", sorted(o for o, d in REGISTRY.items() if d.transcendental
                                      and o not in FORMULAS))
def test_libm_and_ftz_on_every_transcendental_are_valid(op, dt):
    rng = np.random.default_rng(441)
    for xs, at in _inputs(op, dt, rng):
        y0 = REGISTRY[op].forward(mathlib.get("refmath"), [precision.widen(x) for x in xs], at)
        node = Node(op, at, np.shape(y0))
        ref = reference_value(node, xs, dt)
        for v in variants_for(op, dt):
            y = v.run(node, xs, dt)
            got = judge(ref, y, value_bound(op, xs, at, ref, dt))
            assert got.klass == VALID, (op, dt, v.label, got)


def test_flushed_subnormals_are_valid():
    a = np.array([3 * 2.0 ** -1070, 1.0, -5 * 2.0 ** -1065])
    b = np.array([2.0, 4.0, 2.0])
    ref = a / b
    cand = np.array([0.0, 0.25, -0.0])
    assert explain(Node("div", {}, (3,)), [a, b], cand).cause == "ftz"
    assert judge(ref, cand, value_bound("div", [a, b], {}, ref, np.float64)).klass == VALID


# ---- planted wrong formulas: outside -----------------------------------------------------------
def _gelu_tape(dt, kappa: float):
    """tanh-GELU in tape ops: 0.5 x (1 + tanh(c (x + kappa x^3)))."""
    rng = np.random.default_rng(442)
    t = Tape(dt)
    x = t.param(rng.standard_normal((8, 32)).astype(dt))
    x3 = ops.mul(ops.mul(x, x), x)
    inner = ops.muls(ops.add(x, ops.muls(x3, kappa)), math.sqrt(2.0 / math.pi))
    y = ops.mul(ops.muls(x, 0.5), ops.adds(ops.tanh(inner), 1.0))
    loss = ops.sum(y)
    return t, loss


@pytest.mark.parametrize("dt", [np.float64, np.float32])
def test_a_gelu_with_the_wrong_constant_is_outside(dt):
    """The candidate's GELU uses 0.0447 for 0.044715 (one node: the muls by kappa); every node
    after it only inherits. Introduced there, outside every reordering bound."""
    t, loss = _gelu_tape(dt, 0.044715)
    bad, _ = _gelu_tape(dt, 0.0447)  # the same tape, the candidate's constant
    vals = {n.id: bad.value(n.id) for n in bad.nodes}
    st = StepState(1, t.nodes, loss.id, vals.get, lambda i: None)
    intro = provenance(st, explain=True).introduced
    assert intro and all(e.op == "muls" for e in intro)
    (e,) = intro
    assert e.verdict.klass == OUTSIDE and e.to_json()["class"] == OUTSIDE
    assert e.verdict.ratio > 100
    assert "outside reordering bound" in e.cause.text()
    assert fail_on_bug([{**e.to_json(), "step": 1}]) == 1


def _adam_opt(dt, n=64):
    rng = np.random.default_rng(443)
    w = rng.standard_normal(n).astype(dt)
    g = (rng.standard_normal(n) * 1e-6).astype(dt)  # small gradients: eps matters
    m = (rng.standard_normal(n) * 1e-6).astype(dt)
    v = (rng.random(n) * 1e-12).astype(dt)
    p = ParamUpdate(0, 0.0, w, g, None, m, v)
    return OptimizerState("adam", 1e-3, 3, [p]), p


def _torch_adam(opt, p):
    """PyTorch's Adam formula (eps added to sqrt(v) / sqrt(1 - b2^t)): the same m and v, the
    step lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)."""
    T = p.w.dtype.type
    b1, b2, t = opt.b1, opt.b2, opt.t
    m = T(b1) * p.m + T(1 - b1) * p.g
    v = T(b2) * p.v + T(1 - b2) * (p.g * p.g)
    den = np.sqrt(v) / T(math.sqrt(1 - b2 ** t)) + T(opt.eps)
    w = p.w - T(opt.lr / (1 - b1 ** t)) * (m / den)
    return w.astype(p.w.dtype), m, v


@pytest.mark.parametrize("dt", [np.float64, np.float32])
def test_an_adam_with_eps_in_the_wrong_place_is_outside(dt):
    nodes = (namedtuple("Nd", "id op inputs shape attrs requires_grad name")(
        0, "param", (), (64,), {}, True, "w"),)
    opt, p = _adam_opt(dt)
    p.w_after, p.m_after, p.v_after = _torch_adam(opt, p)
    st = StepState(1, nodes, 0, {0: p.w}.get, {0: p.g}.get, None, None, None, opt)
    (e,) = [x for x in provenance(st, explain=True).introduced if x.which == "update"]
    assert e.verdict.klass == OUTSIDE, e.verdict
    # the reference's own formula with m written as a lerp (another order): valid
    opt2, p2 = _adam_opt(dt)
    (w, m, v), = reference_update(opt2)
    T = dt.type if isinstance(dt, np.dtype) else np.dtype(dt).type
    lerp = p2.m + (p2.g - p2.m) * T(1 - opt2.b1)
    p2.w_after, p2.m_after, p2.v_after = w, lerp, v
    st2 = StepState(1, nodes, 0, {0: p2.w}.get, {0: p2.g}.get, None, None, None, opt2)
    got = [x for x in provenance(st2, explain=True).introduced if x.which == "update"]
    assert all(x.verdict.klass == VALID for x in got), got


@pytest.mark.parametrize("dt", [np.float64, np.float32])
def test_a_softmax_without_the_max_shift_that_overflows_is_outside(dt):
    rng = np.random.default_rng(444)
    big = 800.0 if dt == np.float64 else 100.0
    x = (big + 5 * rng.standard_normal((4, 16))).astype(dt)
    with np.errstate(all="ignore"):
        e = np.exp(x)
        cand = e / e.sum(-1, keepdims=True)  # inf / inf: NaN
    node = Node("softmax", {"axis": -1}, x.shape)
    ref = reference_value(node, [x], dt)
    assert np.isnan(cand).all() and np.isfinite(ref).all()
    assert judge(ref, cand, value_bound("softmax", [x], {"axis": -1}, ref, dt)).klass == OUTSIDE
    # the same unshifted formula where nothing overflows: exp(x) / sum is a valid reordering
    small = rng.standard_normal((4, 16)).astype(dt)
    e = np.exp(small)
    ok = e / e.sum(-1, keepdims=True)
    ref = reference_value(node, [small], dt)
    assert judge(ref, ok, value_bound("softmax", [small], {"axis": -1}, ref, dt)).klass == VALID


def test_a_float32_accumulator_in_a_float64_run_is_a_wrong_precision():
    rng = np.random.default_rng(445)
    a, b = rng.standard_normal((8, 200)), rng.standard_normal((200, 6))
    cand = (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float64)
    ref = reference_value(Node("matmul", {}, (8, 6)), [a, b], np.float64)
    assert judge(ref, cand, value_bound("matmul", [a, b], {}, ref, np.float64)).klass == OUTSIDE


# ---- half precision: the half type's epsilon ---------------------------------------------------
def test_unit_roundoff_is_the_types_own():
    assert unit_roundoff(np.float64) == 2.0 ** -53
    assert unit_roundoff(np.float32) == 2.0 ** -24
    assert unit_roundoff(precision.FLOAT16) == 2.0 ** -11
    assert unit_roundoff(precision.BFLOAT16) == 2.0 ** -8
    assert gamma(3, 2.0 ** -11) == pytest.approx(3 * 2.0 ** -11 / (1 - 3 * 2.0 ** -11))
    assert gamma(2 ** 12, 2.0 ** -11) == float("inf")  # n u >= 1: no bound


@pytest.mark.parametrize("dt", precision.HALF, ids=lambda d: d.name)
def test_a_half_accumulator_is_valid_in_the_half_types_epsilon(dt):
    """A matmul accumulated in the half type itself (every add rounded to it): valid with the
    half type's u, and far outside what float32's u would allow: the bound is the half one."""
    rng = np.random.default_rng(446)
    a = rng.standard_normal((6, 64)).astype(dt)
    b = rng.standard_normal((64, 5)).astype(dt)
    acc = np.zeros((6, 5), dtype=dt)
    for k in range(64):
        acc = acc + a[:, k, None] * b[None, k, :]
    node = Node("matmul", {}, (6, 5))
    ref = reference_value(node, [a, b], dt)
    assert not np.array_equal(acc, ref)
    assert judge(ref, acc, value_bound("matmul", [a, b], {}, ref, dt)).klass == VALID
    # judged with float32's u instead, the same difference would be outside
    tight = value_bound("matmul", [a, b], {}, ref, np.float32)
    assert judge(ref, acc, tight).klass == OUTSIDE


def test_a_gradient_made_by_a_contracted_product_is_valid():
    from tapescope.core.explain import _mm_fma

    rng = np.random.default_rng(447)
    t = Tape(np.float64)
    a = t.param(rng.standard_normal((4, 40)))
    b = t.param(rng.standard_normal((40, 6)))
    y = ops.matmul(a, b)
    loss = ops.sum(ops.mul(y, t.const(rng.standard_normal((4, 6)))))
    t.backward(loss)
    g_y = t.grad(y)
    grads = {n.id: t.grad(n.id) for n in t.nodes}
    grads[a.id] = _mm_fma(g_y, np.ascontiguousarray(t.value(b).T))
    grads[b.id] = _mm_fma(np.ascontiguousarray(t.value(a).T), g_y)
    st = StepState(1, t.nodes, loss.id, t.value, grads.get)
    intro = provenance(st, explain=True).introduced
    assert intro and all(e.which == "grad" for e in intro)
    assert all(e.verdict.klass == VALID for e in intro), intro
    # and a gradient 1e-9 relative off (a wrong formula's size) is outside
    grads[a.id] = grads[a.id] * (1 + 1e-9)
    st = StepState(1, t.nodes, loss.id, t.value, grads.get)
    got = {e.node: e.verdict.klass for e in provenance(st, explain=True).introduced}
    assert got[a.id] == OUTSIDE


def test_entry_label_names_value_gradient_update_and_class():
    assert entry_label({"which": "value", "cause": "fma", "class": VALID}) == "value: fma · valid"
    assert entry_label({"which": "grad", "by": [12], "cause": "unknown", "class": OUTSIDE}) \
        == "grad by #12: unknown · outside"
    assert entry_label({"which": "update", "cause": "unknown"}) == "update: unknown"
    assert fail_on_bug([{"class": VALID}, {"class": VALID}]) == 0
    assert fail_on_bug([{"class": VALID}, {"class": OUTSIDE}]) == 1
    assert fail_on_bug([]) == 0
