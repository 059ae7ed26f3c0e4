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
from tapescope.gpu import fusion
from tests.helpers.fusion import UNARY, build, diff_nodes

OPS = ["matmul", "bias", "scale_col", "div_const", "act_binary", "unary", "adds", "muls",
       "softmax", "rms_norm", "rope", "swiglu", "scalar_const", "layer_norm"]

STEP = st.tuples(st.sampled_from(OPS), st.integers(0, 9), st.integers(1, 6),
                 st.floats(-2, 2, allow_nan=False))
TAIL = ["adds", "muls", "exp", "tanh", "sigmoid", "sqrt_abs", "scale_param", "sub_const", "div",
        "neg", "sum"]
GRAPH = st.tuples(st.integers(2, 5), st.integers(1, 6), st.integers(0, 2**16),
                  st.lists(STEP, min_size=2, max_size=7),
                  st.lists(st.sampled_from(TAIL), max_size=5), st.booleans())


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
