"""core.provenance, line by line: each verdict here is one a mutation run found no test for
(issue 31). Planted differences with a known answer: the node, the array, the element count.

The small chain used throughout scales by 2.0 (exact in binary), so a one-ulp fault planted in
``a`` is exactly a one-ulp difference in ``b = 2a`` and in ``x``'s gradient ``2 * grad(a)``.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from core import Tape, ops
from core.provenance import (
    Introduced,
    OptimizerState,
    ParamUpdate,
    Provenance,
    StepState,
    consumers,
    provenance,
    reference_grad,
    reference_update,
)
from tests.core.test_provenance import Planted, flip

X = np.array([0.3, -1.7, 2.5])
C = np.array([0.5, 1.5, -2.0])
X_, A, B, C_, M, LOSS = range(6)  # the chain's node ids


def chain(plant: tuple[int, str] | None = None) -> Tape:
    """x param (0) -> a = 2x (1) -> b = 2a (2); c const (3); m = b*c (4); loss = sum(m) (5)."""
    t = Tape(np.float64)
    node, which = plant if plant else (None, "value")
    p = Planted(t, node, which)
    x = t.param(X)
    b = ops.muls(ops.muls(x, 2.0), 2.0)
    loss = ops.sum(ops.mul(b, t.const(C)))
    p.backward(loss)
    assert loss.id == LOSS
    return t


def state(t: Tape, loss: int = LOSS, **kw) -> StepState:
    leaves = {n.id: np.array(t.value(n.id)) for n in t.nodes if not n.inputs}
    return StepState(1, t.nodes[: loss + 1], loss, t.value, t.grad, leaves.get, **kw)


def where(p: Provenance) -> list[tuple[int, str]]:
    return [(e.node, e.which) for e in p.introduced]


def test_the_clean_chain_introduces_nothing_and_checks_every_array():
    t = chain()
    p = provenance(state(t))
    assert p.introduced == [] and p.step == 1
    n_grads = sum(t.grad(i) is not None for i in range(6))
    assert n_grads == 5  # the const has none
    assert p.checked == 6 + n_grads  # every value (leaves given) and every gradient


# ---- the NaN policy ---------------------------------------------------------------------------
def _nan_with_payload(dtype, payload: int) -> np.floating:
    u = np.uint64 if dtype == np.float64 else np.uint32
    bits = np.array([np.nan], dtype).view(u)
    bits[0] = (bits[0] & ~u(0xFFFF)) | u(payload)
    return bits.view(dtype)[0]


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
def test_a_nan_payload_only_difference_is_never_introduced(dtype):
    """sqrt(-1) is a NaN; a candidate holding a NaN of another payload (as another platform
    makes) agrees under the NaN policy, and so does everything computed from it."""
    t = Tape(dtype)
    x = t.param(np.array([-1.0, 4.0, 9.0]))
    with np.errstate(invalid="ignore"):
        y = ops.sqrt(x)
    loss = ops.sum(ops.mul(y, t.const(np.array([0.5, 1.5, -2.0]))))
    t.backward(loss)
    vals = {n.id: np.array(t.value(n.id)) for n in t.nodes}
    grads = {n.id: None if t.grad(n.id) is None else np.array(t.grad(n.id)) for n in t.nodes}
    other = _nan_with_payload(dtype, 0x1234)
    assert np.isnan(vals[y.id][0]) and vals[y.id].view(np.uint8).tobytes() != np.array(
        [other, 2.0, 3.0], dtype).view(np.uint8).tobytes()
    vals[y.id][0] = other
    vals[loss.id] = np.array(_nan_with_payload(dtype, 0x4321), dtype)
    grads[x.id][0] = _nan_with_payload(dtype, 0x55)
    leaves = {x.id: vals[x.id], 2: vals[2]}
    st = StepState(1, t.nodes, loss.id, vals.get, grads.get, leaves.get)
    assert provenance(st).introduced == []
    st.kernels = [{"kernel": "k", "role": "forward", "segment": 0, "node_ids": [y.id]}]
    assert provenance(st).kernels[0]["introduced"] is False
    vals[y.id][1] = np.nextafter(vals[y.id][1], dtype(9))  # a real difference is still one
    got = provenance(st).introduced  # (and what reads it, not propagated here)
    assert (got[0].node, got[0].which, got[0].diff.n_diff, got[0].diff.first_index) == (
        y.id, "value", 1, 1)


def test_a_nan_against_a_number_is_introduced_and_counted_as_such():
    t = chain()
    vals = {n.id: np.array(t.value(n.id)) for n in t.nodes}
    vals[A][2] = np.nan
    st = StepState(1, t.nodes, LOSS, vals.get, t.grad)
    (e,) = [e for e in provenance(st).introduced if e.node == A]
    assert (e.diff.n_diff, e.diff.n_nan, e.diff.first_index) == (1, 1, 2)
    assert e.to_json()["n_nan"] == 1


# ---- gradients --------------------------------------------------------------------------------
def _fan(dangling_highest: bool, plant: tuple[int, str] | None = None):
    """x feeds tanh(x), 3x and a dangling exp(x) no loss reaches (so it has no gradient)."""
    t = Tape(np.float64)
    node, which = plant if plant else (None, "value")
    p = Planted(t, node, which)
    x = t.param(X)
    if dangling_highest:
        a, b, z = ops.tanh(x), ops.muls(x, 3.0), ops.exp(x)
    else:
        a, z, b = ops.tanh(x), ops.exp(x), ops.muls(x, 3.0)
    loss = ops.sum(ops.add(a, b))
    p.backward(loss)
    assert t.grad(z) is None and z.id < loss.id
    assert sorted(consumers(t.nodes[: loss.id + 1], loss.id)[x.id]) == sorted([a.id, b.id, z.id])
    return t, loss.id, x.id


@pytest.mark.parametrize("dangling_highest", [False, True], ids=["middle", "highest"])
def test_a_consumer_without_a_gradient_does_not_end_the_walk(dangling_highest):
    t, loss, x = _fan(dangling_highest)
    assert provenance(state(t, loss)).introduced == []  # not a false "introduced" at x
    r = reference_grad(t.nodes[: loss + 1], x, loss, consumers(t.nodes, loss)[x], t.value,
                       t.grad, np.float64)
    assert np.array_equal(r.view(np.uint64), t.grad(x).view(np.uint64))
    t2, loss2, x2 = _fan(dangling_highest, plant=(0, "grad"))  # and a real fault there is seen
    got = provenance(state(t2, loss2)).introduced
    assert [(e.node, e.which, e.diff.n_diff) for e in got] == [(x2, "grad", 1)]


def test_the_loss_seed_gradient_is_judged():
    t = chain()
    grads = {n.id: t.grad(n.id) for n in t.nodes}
    grads[LOSS] = np.array(2.0)  # a device that seeds backward with 2
    st = StepState(1, t.nodes, LOSS, t.value, grads.get)
    got = provenance(st).introduced
    assert got[0].node == LOSS and got[0].which == "grad" and got[0].by == ()
    assert (got[0].diff.n_diff, got[0].diff.first_index) == (1, 0)
    assert reference_grad(t.nodes, LOSS, LOSS, [], t.value, t.grad, np.float32).dtype == \
        np.float32


def test_a_gradient_not_reached_is_not_judged():
    t = chain()
    grads = {n.id: t.grad(n.id) for n in t.nodes}
    grads[A] = None
    p = provenance(StepState(1, t.nodes, LOSS, t.value, grads.get))
    assert A not in [e.node for e in p.introduced]
    assert p.checked == 4 + 4  # op values (no leaf getter: leaves skipped), grads but a's


# ---- fused kernels ------------------------------------------------------------------------------
def _kernels(**roles) -> list[dict]:
    return [{"kernel": name, "role": role, "segment": seg, "node_ids": ids}
            for seg, (name, (role, ids)) in enumerate(roles.items())]


def test_a_fused_forward_kernel_is_judged_on_recomputed_intermediates():
    t = chain(plant=(A, "value"))
    st = state(t, kernels=_kernels(ab=("forward", [B, A]), b=("forward", [B]),
                                   bm=("forward", [B, M]), bwd=("backward", [A, B])))
    p = provenance(st)
    assert where(p) == [(A, "value")]
    k = {k["kernel"]: k for k in p.kernels}
    # a differs by 1 ulp at element 0, and so does b = 2a when a is recomputed, not read back:
    # the kernel's own error is the two arrays' differences added, not the last one's
    assert (k["ab"]["introduced"], k["ab"]["n_diff"], k["ab"]["max_ulp"],
            k["ab"]["first_node"]) == (True, 2, 1, A)
    assert k["ab"]["nodes"] == [A, B] and k["ab"]["segment"] == 0 and k["ab"]["role"] == "forward"
    for name in ("b", "bm", "bwd"):  # they only inherit
        assert (k[name]["introduced"], k[name]["n_diff"], k[name]["max_ulp"],
                k[name]["first_node"]) == (False, 0, 0, None), name


def test_a_fused_backward_kernel_is_judged_from_the_gradients_flowing_into_it():
    t = chain(plant=(A, "grad"))
    st = state(t, kernels=_kernels(ab=("backward", [A, B]), b=("backward", [B]),
                                   m=("backward", [M]), fwd=("forward", [A, B])))
    p = provenance(st)
    assert where(p) == [(A, "grad")]
    k = {k["kernel"]: k for k in p.kernels}
    # grad(a) = 2 grad(b) is 1 ulp off; grad(x) = 2 grad(a), recomputed from the recomputed
    # grad(a), is then 1 ulp off too; the kernel goes wrong first at a (backward: decreasing id)
    assert (k["ab"]["introduced"], k["ab"]["n_diff"], k["ab"]["max_ulp"],
            k["ab"]["first_node"]) == (True, 2, 1, A)
    assert (k["b"]["introduced"], k["b"]["n_diff"], k["b"]["first_node"]) == (True, 1, A)
    for name in ("m", "fwd"):
        assert (k[name]["introduced"], k[name]["n_diff"], k[name]["first_node"]) == (
            False, 0, None), name


def test_a_backward_kernel_with_a_planted_input_gradient_is_introduced_at_the_lowest():
    t = chain(plant=(X_, "grad"))
    st = state(t, kernels=_kernels(ab=("backward", [A, B])))
    p = provenance(st)
    assert where(p) == [(X_, "grad")]
    (k,) = p.kernels
    assert (k["introduced"], k["n_diff"], k["max_ulp"], k["first_node"]) == (True, 1, 1, X_)


# ---- updates ----------------------------------------------------------------------------------
def _adam_state():
    t = Tape(np.float64)
    w = t.param(np.array([0.5, -1.0, 2.0]))
    loss = ops.sum(ops.mul(w, w))
    t.backward(loss)
    p = ParamUpdate(w.id, 0.0, np.array(t.value(w)), np.array(t.grad(w)), w_after=None,
                    m=np.full(3, 0.1), v=np.full(3, 0.2))
    opt = OptimizerState("adam", 0.01, 2, [p])
    (p.w_after, p.m_after, p.v_after), = reference_update(opt)
    return t, loss, w, p, opt


def test_an_update_reports_its_first_differing_state_once():
    t, loss, w, p, opt = _adam_state()
    full = StepState(1, t.nodes, loss.id, t.value, t.grad, update=opt)
    clean = provenance(full)
    assert clean.introduced == [] and clean.checked == 3 + 2 + 1  # values, grads, one param
    p.m_after, p.v_after = flip(p.m_after), flip(p.v_after)
    got = provenance(full).introduced
    assert [(e.node, e.which, e.part, e.op) for e in got] == [(w.id, "update", "m", "param")]
    p.w_after = flip(p.w_after)
    got = provenance(full).introduced
    assert [(e.node, e.part) for e in got] == [(w.id, "param")]


def test_sgd_updates_have_no_moments_to_judge():
    t, loss, w, _, _ = _adam_state()
    p = ParamUpdate(w.id, 0.0, np.array(t.value(w)), np.array(t.grad(w)), w_after=None)
    opt = OptimizerState("sgd", 0.1, 1, [p])
    (w1, m1, v1), = reference_update(opt)
    assert m1 is None and v1 is None
    p.w_after = w1
    assert provenance(StepState(1, t.nodes, loss.id, t.value, t.grad, update=opt)).introduced \
        == []
    assert reference_update(OptimizerState("sgd", 0.1, 1, [])) == []


# ---- results as data --------------------------------------------------------------------------
def test_to_json_carries_every_field_and_survives_json():
    t = chain(plant=(A, "value"))
    tg = chain(plant=(A, "grad"))
    _, loss, w, p, opt = _adam_state()
    p.v_after = flip(p.v_after)
    upd = provenance(StepState(1, _adam_state()[0].nodes, loss.id, _adam_state()[0].value,
                               _adam_state()[0].grad, update=opt)).introduced
    v = provenance(state(t, kernels=_kernels(ab=("forward", [A, B]))))
    g = provenance(state(tg)).introduced
    assert v.to_json()["introduced"] == [{
        "node": A, "op": "muls", "which": "value", "n_diff": 1, "max_ulp": 1,
        "max_abs": v.introduced[0].diff.max_abs, "first_index": 0, "n_nan": 0}]
    assert v.introduced[0].diff.max_abs > 0
    assert g[0].to_json()["by"] == [B] and "part" not in g[0].to_json()
    assert upd[0].to_json()["part"] == "v" and "by" not in upd[0].to_json()
    d = v.to_json()
    assert set(d) == {"step", "introduced", "kernels", "checked"}
    assert d["step"] == 1 and d["checked"] == v.checked
    assert d["kernels"] == [{"kernel": "ab", "role": "forward", "segment": 0, "nodes": [A, B],
                             "introduced": True, "n_diff": 2, "max_ulp": 1, "first_node": A}]
    assert json.loads(json.dumps(d)) == d  # plain data: ints, floats, lists
    d["kernels"][0]["n_diff"] = 99  # a copy: the result is not changed through it
    assert v.kernels[0]["n_diff"] == 2


def test_flags_mark_what_each_node_introduced():
    e = Introduced
    t = chain()
    some = t.value(A)
    from core.parity import compare_arrays

    d = compare_arrays(some, flip(some))
    p = Provenance(1, [e(0, "param", "value", d), e(2, "muls", "grad", d),
                       e(2, "muls", "update", d, part="m"), e(7, "x", "value", d),
                       e(-1, "x", "grad", d)], [], 5)
    f = p.flags(3)
    assert f == [{"value": True, "grad": False, "update": False},
                 {"value": False, "grad": False, "update": False},
                 {"value": False, "grad": True, "update": True}]
    assert p.flags(0) == []
    assert len(p.flags(8)) == 8 and p.flags(8)[7]["value"]


def test_a_snapshot_outlives_the_step_it_copies():
    t = chain(plant=(A, "value"))
    vals = {n.id: np.array(t.value(n.id)) for n in t.nodes}
    grads = {n.id: None if t.grad(n.id) is None else np.array(t.grad(n.id)) for n in t.nodes}
    leaves = {X_: np.array(X), C_: np.array(C), A: np.zeros(3)}  # a: not a leaf, never read
    ev, eg = [True, False, False, True, False, False], [False] * 6
    ks = _kernels(ab=("forward", [A, B]))
    upd = OptimizerState("sgd", 0.1, 1, [])
    live = StepState(4, t.nodes, LOSS, vals.get, grads.get, leaves.get, ev, eg, update=upd,
                     kernels=ks)
    snap = live.snapshot()
    before = provenance(live).to_json()
    for a in list(vals.values()) + [g for g in grads.values() if g is not None] + list(
            leaves.values()):
        a[...] = 7.0  # the step's buffers are reused by the next step
    ev[1] = eg[1] = True
    ks[0]["node_ids"] = [M]
    assert provenance(snap).to_json() == before
    assert snap.step == 4 and snap.loss == LOSS and snap.nodes == t.nodes
    assert snap.update is upd  # the optimizer state was captured around the update already
    assert snap.leaf(A) is None and snap.leaf(X_) is not None
    assert snap.value(A) is not vals[A] and snap.grad(C_) is None
    bare = StepState(1, t.nodes, LOSS, t.value, t.grad).snapshot()
    assert bare.leaf is None and bare.exact_value is None and bare.exact_grad is None
    assert bare.kernels == [] and bare.update is None


def test_no_weight_decay_adds_nothing_not_even_zero_times_an_infinite_weight():
    t, loss, w, _, _ = _adam_state()
    p = ParamUpdate(w.id, 0.0, np.array([np.inf, 1.0, -2.0]), np.array([1.0, 1.0, 1.0]),
                    w_after=None)
    (w1, _, _), = reference_update(OptimizerState("sgd", 0.5, 1, [p]))
    assert w1.tolist() == [np.inf, 0.5, -2.5]  # g + 0 * inf would be NaN, and so w
