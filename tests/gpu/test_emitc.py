"""emitc: a scalar tape's emitted C, built by gcc -ffp-contract=off, is the tape bit for bit."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tapescope.core import Tape, ops
from tapescope.gpu import emitc
from tapescope.gpu.emitc import EmitError, emit, literal
from tests.helpers.emitc import (
    BINARY,
    SHAPES,
    UNARY,
    build,
    compile_all,
    emit_traced,
    run_traced,
    same,
    usable,
)

OPS = usable(UNARY) + usable(BINARY)

# values: ordinary ones, plus the signed zeros and sizes where rounding order shows
VALUES = st.one_of(
    st.floats(-3.0, 3.0, allow_nan=False, width=64),
    st.sampled_from([0.0, -0.0, 1.0, -1.0, 1e-300, 3e38, 0.1, 2.5e-8]),
)
LEAF = st.tuples(st.sampled_from(["param", "param", "bound", "const"]), VALUES,
                 st.integers(0, len(SHAPES) - 1))
STEP = st.tuples(st.sampled_from(OPS), st.integers(0, 99), st.integers(0, 99), VALUES,
                 st.integers(0, len(SHAPES) - 1))
TAPE = st.tuples(st.lists(LEAF, min_size=1, max_size=4), st.lists(STEP, min_size=1, max_size=10))


def _check_batch(dtype, specs) -> None:
    tapes, sources = [], []
    for k, (leaves, steps) in enumerate(specs):
        with np.errstate(all="ignore"):  # inf and NaN are data here, as on the tape
            tape, loss, bind = build(dtype, leaves, steps)
            tape.backward(loss)
        tapes.append((tape, loss, bind))
        sources.append(emit_traced(tape, loss, bind, f"grad_{k}"))
    with tempfile.TemporaryDirectory(prefix="emitc-test-") as td:
        lib = compile_all(Path(td), sources)
        for k, (tape, loss, bind) in enumerate(tapes):
            g0 = np.zeros(len(tape.params()))
            y, g, tv, tg = run_traced(lib, f"grad_{k}", tape, bind, g0)
            where = f"tape {k}:\n{sources[k]}"
            assert same(np.array([y]), tape.value(loss)), where
            for node in tape.nodes[: loss.id + 1]:
                i = node.id
                if i in emitc._cone(tape, loss.id):
                    assert same(tv[i], tape.value(i)), f"value {i} {where}"
                grad = tape.grad(i)
                if grad is not None and node.requires_grad:
                    assert same(tg[i], grad), f"grad {i} {where}"
            for j, p in enumerate(tape.params()):
                want = np.zeros(1, tape.dtype) if p.grad is None else \
                    tape.dtype.type(0) + p.grad.reshape(1)
                assert same(g[j], want), f"param {j} {where}"


@settings(max_examples=14, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(TAPE, min_size=1, max_size=8))
def test_random_scalar_tapes_float64_bit_exact(specs):
    _check_batch(np.float64, specs)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(TAPE, min_size=1, max_size=8))
def test_random_scalar_tapes_float32_bit_exact(specs):
    _check_batch(np.float32, specs)


def _small():
    t = Tape()
    w = t.param(np.array([0.5]), name="w")
    b = t.param(np.array(0.25), name="b")
    x = t.const(np.array([2.0]), name="x")
    k = ops.exp(t.const(np.array([0.3]), name="k"))  # a const-only branch
    h = ops.relu(w * x + b)
    loss = ops.mean(ops.mul(h - k, h - k))
    return t, loss, w, b, x, k


def test_golden_snippets():
    t, loss, w, b, x, k = _small()
    src = emit(t, loss, {"x": "xs[i]"}, args="const double* xs, long long i")
    sig = "__device__ double grad(const double* p, double* g, const double* xs, long long i)"
    assert sig in src
    assert f"const double t{w.id} = p[0];" in src
    assert f"const double t{x.id} = (xs[i]);" in src
    r = next(n for n in t.nodes if n.op == "relu")
    a = r.inputs[0]
    # relu mirrors the reference (NaN propagates), the op table's one C spelling; seeds and
    # accumulates as the tape does
    assert f"((t{a} > (double)0 || t{a} != t{a}) ? t{a} : (double)0)" in src
    assert f"double g{loss.id} = ((double)(1.0));" in src
    assert f"g[0] = __dadd_rn(g[0], g{w.id});" in src
    assert "ts_exp(" in src  # the const-only branch is still computed forward ...
    assert f"g{k.id}" not in src  # ... but emits no backward code
    body = src.split("{", 1)[1]
    assert "fma" not in body and " * " not in body and " + " not in body  # intrinsics only


def test_float32_uses_the_stock_substitution():
    t = Tape(dtype=np.float32)
    w = t.param(np.array([0.1]), name="w")
    loss = ops.sqrt(ops.muls(w, 0.1))
    src = emit(t, loss)
    assert "__fmul_rn(t0, ((float)(0.10000000149011612)))" in src
    assert "__fsqrt_rn" in src and "double" not in src


def test_literals_are_exact():
    assert literal(-0.0, np.float64) == "((double)(-0.0))"
    assert literal(np.inf, np.float64) == "__longlong_as_double(9218868437227405312LL)"
    assert literal(np.nan, np.float32) == "__int_as_float(2143289344)"
    assert float(literal(0.1, np.float32).strip("()").split(")(")[-1]) == float(np.float32(0.1))


def test_gradient_is_added_into_g_and_leaves_bind_by_id(tmp_path):
    t, loss, w, b, x, k = _small()
    t.backward(loss)
    src = emit_traced(t, loss, {x.id: "x[0]"}, "grad_acc")
    lib = compile_all(tmp_path, [src])
    g0 = np.array([1.5, -2.0])
    _, g, _, _ = run_traced(lib, "grad_acc", t, {x.id: "x[0]"}, g0)
    assert g[0] == 1.5 + float(w.grad[0]) and g[1] == -2.0 + float(b.grad)


@pytest.mark.parametrize("leaves, msg", [
    ({"nope": "v"}, "no leaf named 'nope'"),
    ({"w": "v"}, "not a data leaf"),
    ({"x": " "}, "needs a C expression"),
    ({3.5: "v"}, "is not a Var"),
])
def test_bad_bindings_are_named(leaves, msg):
    t, loss, *_ = _small()
    with pytest.raises(EmitError, match=msg):
        emit(t, loss, leaves)


def test_non_scalar_node_is_refused_with_its_id():
    t = Tape()
    w = t.param(np.ones((2, 2)), name="W")
    loss = ops.sum(w)
    with pytest.raises(EmitError, match=r"node 0 param W has shape \(2, 2\)"):
        emit(t, loss)


def test_ambiguous_name_and_bad_function_name():
    t = Tape()
    a = t.const(np.ones(1), name="x")
    b = t.const(np.ones(1), name="x")
    w = t.param(np.ones(1))
    loss = (a + b) * w
    with pytest.raises(EmitError, match="2 leaves are named 'x'"):
        emit(t, loss, {"x": "v"})
    with pytest.raises(EmitError, match="not a C identifier"):
        emit(t, loss, name="grad()")


def test_missing_refmath_twin_is_a_clear_error(monkeypatch):
    from tapescope.core import refmath

    t = Tape()
    loss = ops.exp(t.param(np.ones(1)))
    assert emitc.needed_math(t, loss) == {"exp"}
    monkeypatch.setattr(refmath, "FUNCTIONS", tuple(f for f in refmath.FUNCTIONS if f != "exp"))
    with pytest.raises(EmitError, match="has no exp"):
        emit(t, loss)
