"""core.provenance's update check on the reference's own arrays (issue 29, target 2).

Where the candidate's inputs to an update (w, g, m, v, L2, the optimizer's settings) are the
reference run's own bits (``same_inputs``), the reference's after-update arrays are what the
rerun would compute, so ``OptimizerState.reference`` stands in for it. Each test plants a
difference with a known verdict: in the update's output only (introduced, skip or not), or
in an input (``same_inputs`` says no: the rerun judges, as before).
"""

from __future__ import annotations

import numpy as np
import pytest

from tapescope.core import Tape, ops, optim, precision
from tapescope.core.provenance import (
    OptimizerState,
    ParamUpdate,
    StepState,
    provenance,
    same_inputs,
)
from tests.helpers.provenance import optimizer_state


def _flip(a: np.ndarray) -> np.ndarray:
    """``a`` with element 0's lowest bit flipped (a copy), any float dtype."""
    out = np.array(a, copy=True)
    u = {8: np.uint64, 4: np.uint32, 2: np.uint16}[out.dtype.itemsize]
    out.reshape(-1).view(u)[0] ^= 1
    return out


def _episode(kind="adam", dtype="float64", clip=None, steps=2):
    """A two-parameter tape stepped ``steps - 1`` times, then one more backward: the moment
    before an update, with Adam's moments already set. (tape, optimizer, [a, b])."""
    t = Tape(dtype)
    dt = precision.dtype_of(dtype) if isinstance(dtype, str) else np.dtype(dtype)
    rng = np.random.default_rng(3)
    a = t.param(rng.normal(size=(3, 4)).astype(dt))
    b = t.param(rng.normal(size=4).astype(dt))
    o = (optim.SGD(t, 0.1, clip=clip) if kind == "sgd"
         else optim.Adam(t, 0.01, clip=clip))
    o.add(a, l2=0.01)
    o.add(b)
    for _ in range(steps):
        t.backward(ops.sum(ops.mul(ops.tanh(ops.add(a, b)), ops.muls(a, 3.0))))
        if _ < steps - 1:
            o.step()
    return t, o, [a, b]


def _around(t, o, kind):
    """(candidate before, reference before, the reference's after arrays): the candidate a copy
    of the reference's state; the reference's optimizer then steps."""
    cand, ref = optimizer_state(o, t, kind), optimizer_state(o, t, kind)
    o.step()
    after = []
    for p in ref.params:
        slot = next(s for s in o.slots if s.var.id == p.node)
        m = None if getattr(slot, "m", None) is None else np.array(slot.m)
        v = None if getattr(slot, "v", None) is None else np.array(slot.v)
        after.append((np.array(t.value(p.node)), m, v))
    for p, (w, m, v) in zip(cand.params, after, strict=True):
        p.w_after, p.m_after, p.v_after = (np.array(w), None if m is None else np.array(m),
                                           None if v is None else np.array(v))
    return cand, ref, after


def _judged(t, opt):
    """The update entries of provenance on ``opt`` (the tape's nodes: only the update read)."""
    return [(e.node, e.part) for e in
            provenance(StepState(1, t.nodes, len(t.nodes) - 1, t.value, t.grad,
                                 update=opt)).introduced if e.which == "update"]


def _with(opt, reference):
    return OptimizerState(opt.kind, opt.lr, opt.t, opt.params, opt.clip, opt.b1, opt.b2,
                          opt.eps, reference)


@pytest.mark.parametrize("kind", ["sgd", "adam"])
@pytest.mark.parametrize("dtype", ["float64", "float32", "float16", "bfloat16"])
def test_equal_inputs_skip_the_rerun_and_keep_every_verdict(kind, dtype):
    t, o, _ = _episode(kind, dtype)
    cand, ref, after = _around(t, o, kind)
    assert same_inputs(cand, ref) == [True, True]
    skip = _with(cand, after)
    assert _judged(t, skip) == _judged(t, cand) == []
    # a planted difference in the update's output only (its inputs equal): introduced, with or
    # without the skip, at the first state that differs
    parts = ("param", "w_after") if kind == "sgd" else ("v", "v_after")
    p = cand.params[1]
    setattr(p, parts[1], _flip(getattr(p, parts[1])))
    assert _judged(t, skip) == _judged(t, cand) == [(p.node, parts[0])]


def test_the_skip_judges_against_the_reference_entry_not_a_rerun():
    """The entry is what is judged: one that differs from the rerun's result flags the
    candidate's (right) update; entries of None are rerun."""
    t, o, _ = _episode()
    cand, ref, after = _around(t, o, "adam")
    wrong = [(_flip(w), m, v) for w, m, v in after]
    assert _judged(t, _with(cand, [wrong[0], None])) == [(cand.params[0].node, "param")]
    assert _judged(t, _with(cand, [None, None])) == []


@pytest.mark.parametrize("part", ["w", "g", "m", "v"])
def test_a_planted_input_difference_is_judged_by_the_rerun(part):
    t, o, _ = _episode()
    cand, ref, after = _around(t, o, "adam")
    p = cand.params[0]
    planted = np.array(getattr(p, part), copy=True)
    planted.reshape(-1)[0] = planted.reshape(-1)[0] * 1.5 + 1.0  # moves every output
    setattr(p, part, planted)
    same = same_inputs(cand, ref)
    assert same == [False, True]  # no clip: the other parameter's update is its own
    refs = [a if s else None for a, s in zip(after, same, strict=True)]
    # the reference's outputs came from other inputs: the rerun on the candidate's own inputs
    # judges the (reference-equal) outputs as introduced, as it did before the skip existed
    assert _judged(t, _with(cand, refs)) == _judged(t, cand) == [(p.node, "param")]


def test_with_clipping_one_differing_gradient_reruns_every_parameter():
    t, o, _ = _episode(clip=0.05)
    cand, ref, after = _around(t, o, "adam")
    assert same_inputs(cand, ref) == [True, True]
    cand.params[1].g = _flip(cand.params[1].g)
    assert same_inputs(cand, ref) == [False, False]  # one norm of every gradient


def test_with_clipping_a_partial_reference_reruns_all_not_a_subset():
    """A subset rerun would clip by the subset's norm: the full rerun (or all entries) only."""
    t, o, _ = _episode(clip=0.05)
    cand, ref, after = _around(t, o, "adam")
    assert _judged(t, _with(cand, [after[0], None])) == []
    assert _judged(t, _with(cand, [None, after[1]])) == []


@pytest.mark.parametrize("field,value", [("kind", "sgd"), ("lr", 0.02), ("t", 9),
                                         ("clip", 1.0), ("b1", 0.8), ("b2", 0.99),
                                         ("eps", 1e-7)])
def test_other_settings_are_other_inputs(field, value):
    t, o, _ = _episode()
    cand, ref, _ = _around(t, o, "adam")
    setattr(ref, field, value)
    assert same_inputs(cand, ref) == [False, False]


def test_other_parameters_or_order_or_l2_are_other_inputs():
    t, o, _ = _episode()
    cand, ref, _ = _around(t, o, "adam")
    ref.params.reverse()
    assert same_inputs(cand, ref) == [False, False]
    ref.params.reverse()
    ref.params.pop()
    assert same_inputs(cand, ref) == [False, False]
    cand2, ref2, _ = _around(*_episode()[:2], "adam")
    ref2.params[1].l2 = 0.5
    assert same_inputs(cand2, ref2) == [True, False]


def test_bits_not_values_decide_nan_payload_and_zero_sign():
    w = np.array([np.nan, 0.0, 1.0])
    other_nan = w.copy()
    other_nan.view(np.uint64)[0] ^= 1  # still a NaN, another payload
    neg_zero = w.copy()
    neg_zero[1] = -0.0

    def opt(arr, m=None):
        return OptimizerState("sgd", 0.1, 1, [ParamUpdate(0, 0.0, arr, np.ones(3), None, m)])

    assert same_inputs(opt(w), opt(w.copy())) == [True]  # the same NaN bits
    assert same_inputs(opt(w), opt(other_nan)) == [False]
    assert same_inputs(opt(w), opt(neg_zero)) == [False]
    assert same_inputs(opt(w), opt(w.astype(np.float32))) == [False]  # another dtype
    assert same_inputs(opt(w), opt(w[:2])) == [False]  # another shape
    assert same_inputs(opt(w, np.zeros(3)), opt(w)) == [False]  # a moment against none
    assert same_inputs(opt(w), opt(w, np.zeros(3))) == [False]


def test_an_entry_missing_what_its_judge_reads_is_rerun():
    t, o, _ = _episode()
    cand, ref, after = _around(t, o, "adam")
    p = cand.params[0]
    p.m_after = _flip(p.m_after)
    w, m, v = after[0]
    for bad in [(w, None, v), (w, m, None), (None, m, v), (w.reshape(-1), m, v),
                (w.astype(np.float32), m, v)]:
        # a missing or mis-shaped array would judge nothing: the rerun finds the planted m
        assert _judged(t, _with(cand, [bad, None])) == [(p.node, "m")]
    # SGD has no moments: its entry needs only w
    t, o, _ = _episode("sgd")
    cand, ref, after = _around(t, o, "sgd")
    cand.params[0].w_after = _flip(cand.params[0].w_after)
    assert _judged(t, _with(cand, [(after[0][0], None, None), None])) == [
        (cand.params[0].node, "param")]


def test_an_sgd_entry_is_its_weight_alone_and_it_is_what_is_judged():
    t, o, _ = _episode("sgd")
    cand, ref, after = _around(t, o, "sgd")
    assert same_inputs(cand, ref) == [True, True]
    wrong = (_flip(after[0][0]), None, None)  # no moments: the entry is used, not rerun
    assert _judged(t, _with(cand, [wrong, after[1]])) == [(cand.params[0].node, "param")]


def test_the_rerun_keeps_the_optimizers_own_eps():
    t = Tape(np.float64)
    w = t.param(np.array([1e-3, -2e-3, 0.5]))
    t.backward(ops.sum(ops.mul(w, w)))
    o = optim.Adam(t, 0.1, eps=1e-2)  # large enough to move every update
    o.add(w)
    cand, ref, after = _around(t, o, "adam")
    assert cand.eps == 1e-2
    assert _judged(t, _with(cand, [None])) == []  # the rerun with eps 1e-8 would differ


def test_an_sgd_candidate_reporting_moments_has_none_judged():
    t, o, _ = _episode("sgd")
    cand, ref, after = _around(t, o, "sgd")
    for p in cand.params:
        p.m_after = p.v_after = np.full_like(p.w, np.nan)  # no reference moments to hold
    assert _judged(t, cand) == _judged(t, _with(cand, after)) == []


def test_a_reference_list_of_another_length_is_refused():
    t, o, _ = _episode()
    cand, ref, after = _around(t, o, "adam")
    with pytest.raises(ValueError):
        _judged(t, _with(cand, after[:1]))


@pytest.mark.parametrize("part", ["w", "g", "m", "v"])
def test_w_and_g_known_equal_are_not_read_again_m_and_v_always_are(part):
    """``known``: the parity compare found this step's w / g the reference's bits already; a
    planted difference in a known array is not seen (it is not read again: the caller's
    promise), one in m, v or an array not known is (each pair of its own node only)."""
    t, o, _ = _episode()
    cand, ref, _ = _around(t, o, "adam")
    a, b = (p.node for p in cand.params)
    p = cand.params[0]
    setattr(p, part, _flip(getattr(p, part)))
    known = {(a, "value"), (a, "grad")}
    assert same_inputs(cand, ref, known) == ([True, True] if part in "wg" else [False, True])
    which = {"w": "value", "g": "grad"}.get(part)
    if which is not None:  # known for the other array, or for the other node: read, seen
        other = "grad" if which == "value" else "value"
        assert same_inputs(cand, ref, {(a, other), (b, which), (b, other)}) == [False, True]
    assert same_inputs(cand, ref) == [False, True]
