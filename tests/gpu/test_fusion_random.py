"""Property test: random row-local graphs, fused == unfused == the tape, values and gradients.

Deterministic in CI (tests/conftest.py: derandomize, no example database), with one explicit
example that chains every generator op, so a fused kernel bug in any single op (a dropped write,
say) fails on every run whatever the drawn examples are. Shrinking is off: each candidate
compiles a fused kernel, and shrinking a planted rope bug took 3 minutes, near the 300 s test
timeout; tests/gpu/test_fused_rowlocal.py holds the minimal per-op cases.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from tapescope import gpu
from tapescope.core import Tape, ops
from tapescope.gpu import fusion
from tests.gpu.test_fusion import diff_nodes

UNARY = ["neg", "relu", "sigmoid", "tanh", "exp", "silu"]
OPS = ["matmul", "bias", "scale_col", "div_const", "act_binary", "unary", "adds", "muls",
       "softmax", "rms_norm", "rope", "swiglu", "scalar_const", "layer_norm"]

STEP = st.tuples(st.sampled_from(OPS), st.integers(0, 9), st.integers(1, 6),
                 st.floats(-2, 2, allow_nan=False))
TAIL = ["adds", "muls", "exp", "tanh", "sigmoid", "sqrt_abs", "scale_param", "sub_const", "div",
        "neg", "sum"]
GRAPH = st.tuples(st.integers(2, 5), st.integers(1, 6), st.integers(0, 2**16),
                  st.lists(STEP, min_size=2, max_size=7),
                  st.lists(st.sampled_from(TAIL), max_size=5), st.booleans())


def scalar_tail(t: Tape, y, ops_list: list[str], rng, use_sum: bool):
    """The loss: a reduction of y, then scalar arithmetic (the serial loss tail)."""
    loss = ops.sum(y, keepdims=True) if use_sum else ops.mean(ops.mul(y, y))
    for op in ops_list:
        if op == "adds":
            loss = loss + 0.25
        elif op == "muls":
            loss = loss * -1.5
        elif op == "sqrt_abs":
            loss = ops.sqrt(ops.mul(loss, loss))
        elif op == "scale_param":
            loss = ops.mul(loss, t.param(rng.uniform(0.5, 2.0, (1,)), name="alpha"))
        elif op == "sub_const":
            loss = ops.sub(t.const(np.array(0.5)), loss)
        elif op == "div":
            loss = ops.div(loss, t.param(np.array([1.25]), name="beta"))
        elif op == "sum":
            loss = ops.sum(loss)
        else:
            loss = getattr(ops, op)(loss)
    return loss


def build(rows: int, c0: int, seed: int, steps: list, tail: list[str] = (),
          use_sum: bool = False) -> tuple[Tape, object]:
    """A random graph of row-local ops over [rows, c] activations with leaf operands."""
    rng = np.random.default_rng(seed)
    t = Tape()
    acts = [t.const(rng.uniform(-1, 1, (rows, c0)), name="x")]
    for op, pick, width, s in steps:
        a = acts[-1 - pick % min(2, len(acts))]
        c = a.shape[-1]
        if op == "matmul":
            y = a @ t.param(rng.uniform(-1, 1, (c, width)) / np.sqrt(c), name="W")
        elif op == "bias":
            y = ops.add(a, t.param(rng.uniform(-1, 1, (c,)), name="b"))
        elif op == "scale_col":
            y = ops.mul(t.param(rng.uniform(0.5, 1.5, (1, c)), name="g"), a)
        elif op == "div_const":
            y = ops.div(a, t.const(rng.uniform(1, 2, (c,)) * rng.choice([-1, 1], c)))
        elif op == "scalar_const":
            y = ops.sub(t.const(np.array([s])), a)
        elif op == "act_binary":
            same = [v for v in acts if v.shape == a.shape]
            b = same[pick % len(same)]
            y = [ops.add, ops.sub, ops.mul][pick % 3](a, b)
        elif op == "unary":
            y = getattr(ops, UNARY[pick % len(UNARY)])(a)
        elif op == "adds":
            y = a + s
        elif op == "muls":
            y = a * s
        elif op == "softmax":
            y = ops.softmax(a)
        elif op == "rms_norm":
            y = ops.rms_norm(a, t.param(rng.uniform(0.5, 1.5, (c,)), name="gamma"))
        elif op == "layer_norm":
            y = ops.layer_norm(a, t.param(rng.uniform(0.5, 1.5, (c,)), name="gamma"), eps=1e-5)
        elif op == "rope":
            y = ops.rope(a if c % 2 == 0 else a @ t.param(rng.uniform(-1, 1, (c, 2 * width))))
        else:  # swiglu of two projections of the same activation
            u = a @ t.param(rng.uniform(-1, 1, (c, width)), name="W1")
            y = ops.swiglu(u, a @ t.param(rng.uniform(-1, 1, (c, width)), name="W3"))
        acts.append(y)
    loss = scalar_tail(t, acts[-1], list(tail), rng, use_sum)
    assert t.ok, t.error
    return t, loss


# every op once (and every unary), then the whole scalar tail
EVERY_OP = (3, 4, 7, [*((op, 1, 4, 0.75) for op in OPS), *(("unary", k, 4, 0.5)
                                                           for k in range(len(UNARY)))],
            TAIL, True)


@settings(max_examples=12, deadline=None, phases=(Phase.explicit, Phase.generate),
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(GRAPH)
@example(EVERY_OP)
def test_random_row_local_graphs_fuse_bit_exactly(host, graph):
    rows, c0, seed, steps, tail, use_sum = graph
    with np.errstate(all="ignore"):
        t, loss = build(rows, c0, seed, steps, tail, use_sum)
        t.backward(loss)
    pa = gpu.capture(host, t, loss)
    pb = gpu.capture(host, t, loss)
    p = fusion.apply(pb)
    assert sum(len(s.node_ids) for s in p.segments if s.kind == "row") >= 2
    assert [s.kind for s in p.segments][-1] == "serial"
    assert len(p.segments[-1].node_ids) >= 1 + len(tail) - tail.count("sqrt_abs")
    for prog in (pa, pb):
        prog.forward()
        prog.backward()
    assert diff_nodes(pa, pb) == []
    rep = gpu.parity.compare(t, pb)
    assert rep.exact, (rep.first_divergence, p.describe())
