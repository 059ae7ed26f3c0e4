"""core.provenance, one rule of a verdict at a time: the NaN policy, the gradients' walk, fused
kernels, updates, results as data, explanations, dtypes and hints. Planted differences with a
known answer: the node, the array, the element count.

The small chain used throughout scales by 2.0 (exact in binary), so a one-ulp fault planted in
``a`` is exactly a one-ulp difference in ``b = 2a`` and in ``x``'s gradient ``2 * grad(a)``.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from tapescope.core import Tape, ops
from tapescope.core.provenance import (
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
from tests.helpers.provenance import Planted, flip

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
    from tapescope.core.parity import compare_arrays

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


# ---- explanations, dtypes, hints, half updates and the walk past what is missing -----------------
def test_explained_entries_carry_their_cause_value_and_gradient():
    """explain=True: a value made with the platform's exp is ``libm``; a gradient made with a
    contracted product (matmul's rule) is ``fma``, one made with the platform's sigmoid
    (softplus's rule) ``libm``; the cause travels in to_json, and not without explain."""
    from tapescope.core import mathlib
    from tapescope.core.explain import _mm_fma

    rng = np.random.default_rng(31)
    pl = mathlib.get("platform")
    t = Tape(np.float64)
    x = t.param(rng.uniform(-4, 4, 400))
    e = ops.exp(x)  # the last node: nothing reads the candidate's exp
    vals = {x.id: t.value(x), e.id: pl.exp(t.value(x))}
    st = StepState(1, t.nodes, e.id, vals.get, lambda i: None)
    (v,) = provenance(st, explain=True).introduced
    assert (v.node, v.which, v.to_json()["cause"]) == (e.id, "value", "libm")
    assert v.to_json()["explain"] == {"cause": "libm",
                                      "variant": "the platform's (numpy's) transcendentals",
                                      "class": "valid reordering"}  # issue 44: within libm's
    assert "cause" not in provenance(st).introduced[0].to_json()
    assert "explain" not in provenance(st).introduced[0].to_json()

    t = Tape(np.float64)
    a, b = t.param(rng.standard_normal((4, 40))), t.param(rng.standard_normal((40, 6)))
    x = t.param(rng.uniform(-4, 4, 400))
    y, s = ops.matmul(a, b), ops.softplus(x)
    loss = ops.add(ops.sum(ops.mul(y, t.const(rng.standard_normal((4, 6))))),
                   ops.sum(ops.mul(s, t.const(rng.standard_normal(400)))))
    t.backward(loss)
    grads = {n.id: t.grad(n.id) for n in t.nodes}
    grads[a.id] = _mm_fma(t.grad(y), np.ascontiguousarray(t.value(b).T))
    grads[x.id] = t.grad(s) * pl.sigmoid(t.value(x))
    st = StepState(1, t.nodes, loss.id, t.value, grads.get)
    got = {(i.node, i.which): i.to_json() for i in provenance(st, explain=True).introduced}
    assert set(got) == {(a.id, "grad"), (x.id, "grad")}, sorted(got)
    assert got[(a.id, "grad")]["cause"] == "fma" and got[(a.id, "grad")]["by"] == [y.id]
    assert got[(a.id, "grad")]["explain"]["cause"] == "fma"
    assert got[(x.id, "grad")]["cause"] == "libm", got[(x.id, "grad")]
    plain = provenance(st).introduced  # without explain: no cause looked for
    assert len(plain) == 2 and all(i.cause is None and "cause" not in i.to_json() for i in plain)


def test_a_zero_of_the_other_sign_is_explained_as_signed_zero_value_and_gradient():
    from tapescope.core.explain import SIGNED_ZERO

    t = Tape(np.float64)
    x = t.param(np.array([1.0, 2.0, 3.0]))
    m = ops.mul(x, t.const(np.array([0.0, 1.0, 2.0])))  # m[0] = +0.0, x's gradient[0] = +0.0
    loss = ops.sum(m)  # its sum starts at +0.0: -0.0 there changes nothing below
    t.backward(loss)
    vals = {n.id: np.array(t.value(n.id)) for n in t.nodes}
    grads = {n.id: None if t.grad(n.id) is None else np.array(t.grad(n.id)) for n in t.nodes}
    assert vals[m.id][0] == 0 and not np.signbit(vals[m.id][0]) and grads[x.id][0] == 0
    vals[m.id][0], grads[x.id][0] = -0.0, -0.0
    st = StepState(1, t.nodes, loss.id, vals.get, grads.get)
    got = {(i.node, i.which): i.cause for i in provenance(st, explain=True).introduced}
    assert set(got) == {(m.id, "value"), (x.id, "grad")}
    assert got[(m.id, "value")].cause == SIGNED_ZERO and got[(x.id, "grad")].cause == SIGNED_ZERO


def test_the_reference_is_refmath_whatever_ran_first(monkeypatch):
    """The refmath namespace is looked up once and kept; from a cold start it is refmath, not
    the platform's (their exp differs in the last bit on some of these)."""
    import tapescope.core.provenance as prov
    from tapescope.core import mathlib
    from tapescope.core.provenance import reference_value

    monkeypatch.setattr(prov, "_M", None)
    x = np.random.default_rng(4).uniform(-5, 5, 400)
    node = Tape(np.float64)
    v = ops.exp(node.param(x)).node
    got = reference_value(v, [x], np.float64)
    want = mathlib.get("refmath").exp(x)
    assert not np.array_equal(want, mathlib.get("platform").exp(x)), "needs a libm difference"
    assert np.array_equal(got.view(np.uint64), want.view(np.uint64))
    assert prov._M is mathlib.get("refmath")
    assert np.array_equal(reference_value(v, [x], np.float64), got)  # the kept one, again


def test_reference_value_is_in_the_dtype_asked_for():
    """On float64 inputs asked in float32 the result is float32, rounded once."""
    from tapescope.core.provenance import reference_value

    x = np.array([0.1, 1.0 / 3.0, 2.5])
    t = Tape(np.float64)
    n = ops.muls(t.param(x), 3.0).node
    got = reference_value(n, [x], np.float32)
    assert got.dtype == np.float32 and got.shape == (3,)
    assert np.array_equal(got, (x * 3.0).astype(np.float32))


def test_inf_and_nan_are_data_not_warnings():
    """exp overflowing, 0 * inf and an overflowing clip norm: provenance and the reference
    update run with every floating-point warning an error and say nothing."""
    import warnings

    t = Tape(np.float64)
    x = t.param(np.array([1000.0, 1.0, -1.0]))
    with np.errstate(all="ignore"):
        y = ops.exp(x)
        loss = ops.sum(ops.mul(y, t.const(np.array([0.0, 1.0, 2.0]))))
        t.backward(loss)
    assert np.isinf(t.value(y)[0]) and np.isnan(t.grad(x)[0])
    big = ParamUpdate(x.id, 0.0, np.array([1.0, 2.0, 3.0]), np.array([1e200, 1.0, 1.0]),
                      w_after=None)
    opt = OptimizerState("sgd", 0.1, 1, [big], clip=1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with np.errstate(all="warn"):
            st = StepState(1, t.nodes, loss.id, t.value, t.grad)
            assert provenance(st).introduced == []
            (w1, _, _), = reference_update(opt)
    assert w1.tolist() == [1.0, 2.0, 3.0]  # the norm is inf: every gradient scaled to 0


def test_consumers_are_what_backward_reaches_no_more():
    """A node recorded after the loss and a param in a non-differentiable input (keep's mask)
    are not consumers: backward never pushes a contribution through them."""
    t = Tape(np.float64)
    x = t.param(np.array([1.0, -2.0, 3.0]))
    mask = t.param(np.array([1.0, 0.0, 1.0]))
    k = ops.keep(x, mask)
    u = ops.mul(mask, t.const(np.array([2.0, 2.0, 2.0])))
    loss = ops.sum(ops.add(k, u))
    after = ops.muls(x, 5.0)  # a metric recorded after the loss
    cons = consumers(t.nodes, loss.id)
    assert cons[x.id] == [k.id] and after.id == loss.id + 1
    assert cons[mask.id] == [u.id]
    t.backward(loss)
    grads = {n.id: t.grad(n.id) for n in t.nodes}
    grads[mask.id] = flip(t.grad(mask))
    got = provenance(StepState(1, t.nodes, loss.id, t.value, grads.get)).introduced
    assert [(e.node, e.which, e.by) for e in got] == [(mask.id, "grad", (u.id,))]


def test_a_snapshot_keeps_the_skip_hints():
    t = chain()
    n = len(t.nodes)
    live = state(t, exact_value=[True] * n, exact_grad=[True] * n)
    snap = live.snapshot()
    assert snap.exact_value == [True] * n and snap.exact_grad == [True] * n
    assert provenance(snap).checked == provenance(live).checked == 1  # the param leaf only


def test_a_forward_kernel_of_one_member_that_introduced_is_introduced():
    t = chain(plant=(A, "value"))
    p = provenance(state(t, kernels=_kernels(a=("forward", [A]))))
    (k,) = p.kernels
    assert (k["introduced"], k["n_diff"], k["max_ulp"], k["first_node"]) == (True, 1, 1, A)


def test_a_float32_backward_kernel_is_judged_in_float32():
    """tanh's rule rounds differently in float64: the kernel's one wrong element is found, not
    every element a float64 recomputation would differ in."""
    t = Tape(np.float32)
    x = t.param(np.linspace(-1.3, 1.7, 64, dtype=np.float32))
    p = Planted(t, x.id, "grad")
    h = ops.tanh(x)
    loss = ops.sum(ops.mul(h, t.const(np.linspace(0.5, 1.5, 64, dtype=np.float32))))
    p.backward(loss)
    st = StepState(1, t.nodes, loss.id, t.value, t.grad,
                   kernels=_kernels(th=("backward", [h.id])))
    pr = provenance(st)
    assert [(e.node, e.which, e.diff.n_diff) for e in pr.introduced] == [(x.id, "grad", 1)]
    (k,) = pr.kernels
    assert (k["introduced"], k["n_diff"], k["max_ulp"], k["first_node"]) == (True, 1, 1, x.id)


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
def test_adams_numpy_lines_are_its_c_pass_bit_for_bit(dtype, monkeypatch):
    """Without the native module the reference Adam step runs its numpy lines: the same bits,
    and no moments (a first step) the same as zero moments."""
    from tapescope.core import native

    rng = np.random.default_rng(5)

    def opt(zero_moments: bool) -> OptimizerState:
        w, g = rng.standard_normal(50).astype(dtype), rng.standard_normal(50).astype(dtype)
        m = np.zeros(50, dtype) if zero_moments else None
        return OptimizerState("adam", 0.01, 1, [ParamUpdate(0, 0.0, w, g, None, m, m)])

    rng = np.random.default_rng(5)
    first = reference_update(opt(True))
    rng = np.random.default_rng(5)
    fresh = reference_update(opt(False))
    monkeypatch.setattr(native, "adam", lambda *a, **k: None)
    rng = np.random.default_rng(5)
    slow = reference_update(opt(True))
    rng = np.random.default_rng(5)
    slow_fresh = reference_update(opt(False))
    assert first[0][0] is not None and first[0][0].dtype == dtype
    for r in (fresh, slow, slow_fresh):
        for got, want in zip(r[0], first[0], strict=True):
            assert got.dtype == dtype
            assert np.array_equal(got.view(np.uint8), want.view(np.uint8))
    w0 = opt(True).params[0]  # and it moved: not the weights handed back
    assert not np.array_equal(first[0][0], w0.w)


@pytest.mark.parametrize("kind", ["sgd", "adam"])
@pytest.mark.parametrize("dtname", ["float16", "bfloat16"])
def test_a_half_update_is_core_optims_rounded_once(kind, dtname):
    from tapescope.core import optim, precision
    from tests.helpers.provenance import optimizer_state

    dt = precision.dtype_of(dtname)
    t = Tape(dtname)
    w = t.param(np.array([0.5, -1.25, 2.0, 3.0]).astype(dt))
    loss = ops.sum(ops.mul(ops.tanh(w), w))
    o = optim.SGD(t, 0.1, clip=0.5) if kind == "sgd" else optim.Adam(t, 0.01, clip=0.5)
    o.add(w)
    for _ in range(2):
        t.backward(loss)
        st = optimizer_state(o, t, kind)
        o.step()
        (w1, m1, v1), = reference_update(st)
        assert w1.dtype == dt
        assert np.array_equal(w1.view(np.uint16), np.asarray(t.value(w)).view(np.uint16))
        if kind == "adam":
            slot = o.slots[0]
            assert m1.dtype == v1.dtype == dt
            assert np.array_equal(m1.view(np.uint16), slot.m.view(np.uint16))
            assert np.array_equal(v1.view(np.uint16), slot.v.view(np.uint16))
        else:
            assert m1 is None and v1 is None
        loss = ops.sum(ops.mul(ops.tanh(w), w))


def _flip_half(a: np.ndarray) -> np.ndarray:
    out = np.array(a, copy=True)
    out.reshape(-1).view(np.uint16)[0] ^= 1
    return out


@pytest.mark.parametrize("dtname", ["float16", "bfloat16"])
def test_a_half_tape_is_judged_in_its_own_type(dtname):
    """A half tape computes in float32 and rounds once: recomputed that way, the clean tape
    introduces nothing (a float32 result left unrounded would differ nearly everywhere), and a
    planted one-ulp value or gradient is one element at the node planted."""
    from tapescope.core import precision

    dt = precision.dtype_of(dtname)
    t = Tape(dtname)
    x = t.param(np.linspace(-1.3, 1.7, 32).astype(dt))
    h = ops.tanh(x)
    s = ops.muls(h, 3.0)
    loss = ops.sum(ops.mul(s, t.const(np.linspace(0.5, 1.5, 32).astype(dt))))
    t.backward(loss)
    vals = {n.id: np.array(t.value(n.id)) for n in t.nodes}
    grads = {n.id: None if t.grad(n.id) is None else np.array(t.grad(n.id)) for n in t.nodes}
    st = StepState(1, t.nodes, loss.id, vals.get, grads.get)
    assert provenance(st).introduced == []
    vals[loss.id] = np.array(vals[loss.id])  # (the loss's value: not read below)
    grads[x.id] = _flip_half(grads[x.id])
    got = provenance(st).introduced
    assert [(e.node, e.which, e.diff.n_diff) for e in got] == [(x.id, "grad", 1)]
    grads[x.id] = np.array(t.grad(x))
    vals[loss.id] = _flip_half(vals[loss.id])
    got = provenance(st).introduced
    assert [(e.node, e.which, e.diff.n_diff) for e in got] == [(loss.id, "value", 1)]


def test_reference_grad_is_in_the_dtype_asked_for():
    t = chain()
    r = reference_grad(t.nodes, A, LOSS, [B], t.value, t.grad, np.float32)
    assert r.dtype == np.float32 and r.shape == (3,)
    assert np.array_equal(r, (2.0 * t.grad(B)).astype(np.float32))


def test_an_adam_step_without_its_moments_is_judged_on_the_weights():
    """A candidate that reports the parameter after Adam but not its moments: m and v are not
    judged (nothing to compare), the parameter is."""
    t, loss, w, p, opt = _adam_state()
    p.m_after = p.v_after = None
    full = StepState(1, t.nodes, loss.id, t.value, t.grad, update=opt)
    assert provenance(full).introduced == []
    p.w_after = flip(p.w_after)
    assert [(e.node, e.part) for e in provenance(full).introduced] == [(w.id, "param")]


def test_a_leaf_is_judged_in_the_tapes_dtype_not_the_data_given():
    """float64 data given to a float32 tape: the leaf holds it rounded to float32, as given."""
    data = np.array([0.1, 0.2, 1.0 / 3.0])
    t = Tape(np.float32)
    x = t.param(data)
    loss = ops.sum(ops.muls(x, 2.0))
    t.backward(loss)
    st = StepState(1, t.nodes, loss.id, t.value, t.grad, {x.id: data}.get)
    assert provenance(st).introduced == []
    st.leaf = {x.id: flip(data.astype(np.float32))}.get
    assert [(e.node, e.which) for e in provenance(st).introduced] == [(x.id, "value")]


def test_a_node_without_a_value_does_not_end_the_walk():
    t, loss, x = _fan(False, plant=(None, "value"))  # x, tanh, exp (dangling), 3x, add, sum
    z = next(n.id for n in t.nodes if n.op == "exp")
    b = next(n.id for n in t.nodes if n.op == "muls")
    vals = {n.id: t.value(n.id) for n in t.nodes}
    vals[z] = None  # a node the device never read back
    vals[b] = flip(vals[b])  # (what reads b read the clean one: only b differs)
    st = StepState(1, t.nodes[: loss + 1], loss, vals.get, t.grad)
    got = provenance(st).introduced
    assert (b, "value") in [(e.node, e.which) for e in got] and z < b


def _hinted(grads: dict, t: Tape) -> StepState:
    """Hints as a comparison with the clean tape gives them: bit-equal arrays are exact."""
    clean = chain()
    ev = [True] * 6
    eg = [grads[i] is None or np.array_equal(grads[i], clean.grad(i)) for i in range(6)]
    return state(t, exact_value=ev, exact_grad=eg)


def test_value_hints_without_gradient_hints_skip_no_gradient():
    t = chain(plant=(A, "grad"))
    st = state(t, exact_value=[True] * 6)
    assert [(e.node, e.which) for e in provenance(st).introduced] == [(A, "grad")]


def test_a_gradient_equal_to_the_reference_but_not_from_its_consumer_is_introduced():
    """b's gradient is 1 ulp off and a's equals the clean run's: a's rule, run on b's gradient,
    does not give a's; every value exact, a's gradient exact, yet a introduced (it compensated)."""
    t = chain()
    grads = {n.id: None if t.grad(n.id) is None else np.array(t.grad(n.id)) for n in t.nodes}
    grads[B] = flip(grads[B])
    st = _hinted(grads, t)
    st.grad = grads.get
    assert st.exact_grad[A] and not st.exact_grad[B]
    got = [(e.node, e.which) for e in provenance(st).introduced]
    assert got == [(B, "grad"), (A, "grad")]


def test_a_skipped_gradient_does_not_end_the_walk():
    t = chain(plant=(X_, "grad"))
    grads = {n.id: t.grad(n.id) for n in t.nodes}
    st = _hinted(grads, t)
    assert st.exact_grad[LOSS] and st.exact_grad[A] and not st.exact_grad[X_]
    assert [(e.node, e.which) for e in provenance(st).introduced] == [(X_, "grad")]


def test_an_explained_update_is_unknown_with_nothing_closer():
    """A flipped bit of w no optimizer variant makes (core.explain.UPDATE_VARIANTS: another
    square root) is exactly 'unknown', with no variant and no closest one; ``tried`` counts
    the variants that could run here (MKL's sqrt only where MKL is)."""
    from tapescope.core.explain import _vml_lib

    t, loss, w, p, opt = _adam_state()
    p.w_after = flip(p.w_after)
    got = provenance(StepState(1, t.nodes, loss.id, t.value, t.grad, update=opt),
                     explain=True).introduced
    (e,) = got
    assert e.which == "update" and e.to_json()["cause"] == "unknown"
    want = {"cause": "unknown", "variant": "", "closest": None, "max_ulp": 0, "n_diff": 0,
            "class": "valid reordering"}  # one ulp of w: in bound
    if _vml_lib() is not None:
        want["tried"] = 1
    assert e.to_json()["explain"] == want


def test_a_float32_gradient_is_explained_in_float32():
    from tapescope.core.explain import _mm_fma

    rng = np.random.default_rng(32)
    t = Tape(np.float32)
    a = t.param(rng.standard_normal((4, 40)).astype(np.float32))
    b = t.param(rng.standard_normal((40, 6)).astype(np.float32))
    y = ops.matmul(a, b)
    loss = ops.sum(ops.mul(y, t.const(rng.standard_normal((4, 6)).astype(np.float32))))
    t.backward(loss)
    grads = {n.id: t.grad(n.id) for n in t.nodes}
    grads[a.id] = _mm_fma(t.grad(y), np.ascontiguousarray(t.value(b).T))
    assert grads[a.id].dtype == np.float32
    st = StepState(1, t.nodes, loss.id, t.value, grads.get)
    (e,) = provenance(st, explain=True).introduced
    assert (e.node, e.which, e.cause.cause) == (a.id, "grad", "fma")
