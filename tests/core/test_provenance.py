"""core.provenance: a planted one-bit fault is introduced exactly where it was planted.

The candidate here is the CPU tape itself, run with a fault planted the way the device's
``--inject`` plants one: the lowest mantissa bit of element 0 of one node's value flipped right
after the tape records it (so every later op reads the flipped value), or of its gradient right
after backward completes it (so every contribution below reads it). The tape's own forward and
backward sweep — not core.provenance's recomputation — produce the candidate arrays.
"""

from __future__ import annotations

import numpy as np
import pytest

from tapescope.core import Tape, ops, optim, workloads
from tapescope.core.ops import REGISTRY
from tapescope.core.provenance import (
    StepState,
    consumers,
    provenance,
    reference_update,
)
from tests.helpers.provenance import Planted, flip, optimizer_state

OPS = sorted(n for n, d in REGISTRY.items() if d.kind != "leaf" and d.sample is not None)
DTYPES = (np.float64, np.float32)


def state_of(tape: Tape, loss_id: int, leaves: dict) -> StepState:
    return StepState(1, tape.nodes[: loss_id + 1], loss_id, tape.value, tape.grad, leaves.get)


def build(name: str, xs: list[np.ndarray], attrs: dict, dtype, plant=None):
    """leaves → op → mul by a const → sum: the op's node has a consumer and a gradient."""
    t = Tape(dtype)
    node, which = plant if plant else (None, "value")
    p = Planted(t, node, which)
    nd = REGISTRY[name].nondiff_inputs
    leaves = [t.const(x) if k in nd else t.param(x) for k, x in enumerate(xs)]
    if which == "value" and node is not None and node < len(leaves):
        t._values[node] = flip(t._values[node])  # a leaf holding other bits than it was given
    y = t.record(name, leaves, attrs)
    c = t.const(np.linspace(0.5, 1.5, max(y.node.size, 1)).reshape(y.shape))
    loss = ops.sum(ops.mul(y, c))
    p.backward(loss)
    given = {v.id: np.asarray(x, dtype=dtype) for v, x in zip(leaves, xs, strict=True)}
    return t, loss.id, y.id, given


def _cases(name, dtype):
    return REGISTRY[name].sample(np.random.default_rng(3), np.dtype(dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@pytest.mark.parametrize("name", OPS)
def test_a_planted_fault_is_introduced_exactly_where_planted(name, dtype):
    for xs, attrs in _cases(name, dtype)[:2]:
        t, loss, y, given = build(name, xs, attrs, dtype)
        clean = provenance(state_of(t, loss, given))
        assert clean.introduced == [], (name, [e.to_json() for e in clean.introduced])
        targets = [(y, "value"), (y, "grad")]
        # integer data (targets, indices) stays integer: only the float leaves are flipped
        targets += [(i, "value") for i in given if t.nodes[i].op == "param"]
        targets += [(i, "grad") for i in given if t.grad(i) is not None]
        for node, which in targets:
            t2, loss2, _, given2 = build(name, xs, attrs, dtype, plant=(node, which))
            got = provenance(state_of(t2, loss2, given2)).introduced
            assert [(e.node, e.which) for e in got] == [(node, which)], (name, node, which)
            e = got[0]
            assert (e.diff.n_diff, e.diff.first_index, e.diff.max_ulp) == (1, 0, 1)
            assert e.op == t2.nodes[node].op


def _workload_run(name: str, dtype):
    wl = workloads.get(name, dtype=dtype)
    loss = wl.record(0)
    wl.tape.backward(loss)
    t = wl.tape
    given = {n.id: np.array(t.value(n.id)) for n in t.nodes if not n.inputs}
    return t, loss.id, given


@pytest.mark.parametrize("name", ["mlp", "transformer"])
def test_every_node_of_a_workload_fault_attributed_with_fan_out(name):
    """Every op node of a built-in workload (residual fan-out, shared weights): a value or a
    gradient fault planted there, and only there, is introduced; all else inherits."""
    dtype = np.float32
    t0, loss, given = _workload_run(name, dtype)
    assert provenance(state_of(t0, loss, given)).introduced == []
    fan_out = [j for j, c in enumerate(consumers(t0.nodes[: loss + 1], loss)) if len(c) > 1]
    # the transformer's residual stream fans out; the mlp's mse squares d as mul(d, d)
    assert fan_out or name == "mlp", "the transformer should have fan-out"
    op_nodes = [n.id for n in t0.nodes[: loss + 1] if n.inputs]
    for node in op_nodes:
        for which in ("value", "grad"):
            if which == "grad" and (t0.grad(node) is None or node == loss):
                continue
            wl = workloads.get(name, dtype=dtype)
            p = Planted(wl.tape, node, which)
            lv = wl.record(0)
            p.backward(lv)
            got = provenance(state_of(wl.tape, lv.id, given)).introduced
            assert [(e.node, e.which) for e in got] == [(node, which)], (node, which)


def test_a_leaf_holding_other_data_than_given_is_introduced():
    t = Tape(np.float64)
    w = t.param(np.arange(1.0, 5.0))
    loss = ops.sum(ops.mul(w, w))
    t.backward(loss)
    st = state_of(t, loss.id, {w.id: flip(np.arange(1.0, 5.0))})
    got = provenance(st).introduced
    assert [(e.node, e.which, e.op) for e in got] == [(w.id, "value", "param")]


def test_hints_skip_exact_nodes_and_change_no_verdict():
    t, loss, y, given = build("exp", [np.linspace(-1, 1, 6).reshape(2, 3)], {}, np.float64,
                              plant=None)
    n = len(t.nodes[: loss + 1])
    st = state_of(t, loss, given)
    st.exact_value, st.exact_grad = [True] * n, [True] * n
    assert provenance(st).checked == 1  # only the param leaf: a param is always judged
    t2, loss2, y2, given2 = build("exp", [np.linspace(-1, 1, 6).reshape(2, 3)], {}, np.float64,
                                  plant=(3, "value"))
    hinted = state_of(t2, loss2, given2)
    # the hints a comparison with the clean tape gives: the planted node and what follows differ
    hinted.exact_value = [i < 3 for i in range(n)]
    hinted.exact_grad = [i < 0 for i in range(n)]
    assert [(e.node, e.which) for e in provenance(hinted).introduced] == [(3, "value")]


@pytest.mark.parametrize("kind", ["sgd", "adam"])
@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
def test_reference_update_is_core_optim_bit_for_bit(kind, dtype):
    t = Tape(dtype)
    rng = np.random.default_rng(1)
    a, b, u = t.param(rng.normal(size=(3, 4))), t.param(rng.normal(size=4)), t.param([1.0])
    loss = ops.sum(ops.mul(ops.tanh(ops.add(a, b)), ops.muls(a, 3.0)))
    opt = optim.SGD(t, 0.1, clip=0.5) if kind == "sgd" else optim.Adam(t, 0.01, clip=0.5)
    opt.add(a, l2=0.01)
    opt.add(b)
    opt.add(u)  # never reached: skipped by both
    for _ in range(3):
        t.backward(loss)
        st = optimizer_state(opt, t, kind)
        assert [p.node for p in st.params] == [a.id, b.id]
        opt.step()
        for p, (w, m, v) in zip(st.params, reference_update(st), strict=True):
            assert np.array_equal(w.view(np.uint8), np.asarray(t.value(p.node)).view(np.uint8))
            if kind == "adam":
                slot = next(s for s in opt.slots if s.var.id == p.node)
                assert np.array_equal(m.view(np.uint8), slot.m.view(np.uint8))
                assert np.array_equal(v.view(np.uint8), slot.v.view(np.uint8))
        loss = ops.sum(ops.mul(ops.tanh(ops.add(a, b)), ops.muls(a, 3.0)))


def test_a_wrong_update_is_introduced_at_its_parameter():
    t = Tape(np.float64)
    w = t.param(np.array([0.5, -1.0, 2.0]))
    loss = ops.sum(ops.mul(w, w))
    t.backward(loss)
    opt = optim.Adam(t, 0.01)
    opt.add_all()
    st = optimizer_state(opt, t, "adam")
    (w1, m1, v1), = reference_update(st)
    p = st.params[0]
    p.w_after, p.m_after, p.v_after = w1, m1, v1
    full = StepState(1, t.nodes, loss.id, t.value, t.grad, update=st)
    assert provenance(full).introduced == []
    p.v_after = flip(v1)
    got = provenance(full).introduced
    assert [(e.node, e.which, e.part) for e in got] == [(w.id, "update", "v")]


def test_fused_kernel_judged_whole():
    t, loss, y, given = build("tanh", [np.linspace(-1, 1, 6).reshape(2, 3)], {}, np.float64,
                              plant=(3, "value"))
    st = state_of(t, loss, given)
    st.kernels = [{"kernel": "k_fwd", "role": "forward", "segment": 0, "node_ids": [1, 3]},
                  {"kernel": "k_tail", "role": "forward", "segment": 1, "node_ids": [4]},
                  {"kernel": "k_bwd", "role": "backward", "segment": 0, "node_ids": [1, 3]}]
    ks = {k["kernel"]: k for k in provenance(st).kernels}
    assert ks["k_fwd"]["introduced"] and ks["k_fwd"]["first_node"] == 3
    assert not ks["k_tail"]["introduced"]
    assert not ks["k_bwd"]["introduced"]
