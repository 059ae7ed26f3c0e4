"""The tape: values, gradients, fan-out, mark/reset, poisoning, read-only views."""

import numpy as np
import pytest

from tapescope.core import Tape, TapeError, ops


def test_public_example_runs_and_matches_hand_gradient():
    rng = np.random.default_rng(0)
    w0 = rng.standard_normal((3, 4))
    tape = Tape(dtype=np.float64)
    W = tape.param(w0, name="W1")
    x = tape.const(np.ones((2, 3)), name="x")
    h = ops.relu(x @ W)
    loss = ops.mean(h * h)
    tape.backward(loss)
    pre = np.ones((2, 3)) @ w0
    expect = np.ones((2, 3)).T @ (2 * np.maximum(pre, 0) * (pre > 0) / 8)
    np.testing.assert_allclose(tape.grad(W), expect, rtol=1e-12)
    assert tape.grad(x) is None  # consts never receive a gradient
    assert tape.nodes[W.id].name == "W1" and tape.nodes[h.id].op == "relu"


def test_values_and_grads_are_read_only_copies():
    a = np.arange(6.0).reshape(2, 3)
    tape = Tape()
    p = tape.param(a)
    a[0, 0] = 99.0  # the tape copied the array in
    assert tape.value(p)[0, 0] == 0.0
    with pytest.raises(ValueError):
        tape.value(p)[0, 0] = 1.0
    tape.backward(ops.sum(p * p))
    with pytest.raises(ValueError):
        tape.grad(p)[0, 0] = 1.0


def test_fan_out_sums_every_use():
    tape = Tape()
    x = tape.param(np.array([1.5, -2.0, 3.25]))
    tape.backward(ops.sum(x * x + x * x))
    assert np.array_equal(tape.grad(x), 4 * tape.value(x))


def test_backward_steps_accumulate_like_backward_bit_for_bit():
    rng = np.random.default_rng(1)
    tape = Tape()
    x = tape.param(rng.standard_normal((4, 3)))
    w = tape.param(rng.standard_normal((3, 3)))
    h = ops.tanh(x @ w)
    loss = ops.mean(ops.mul(h, x) + h)
    steps = list(tape.backward_steps(loss))
    stepped = {v.id: np.array(tape.grad(v)) for v in (x, w, h)}
    tape.backward(loss)
    for v in (x, w, h):
        assert np.array_equal(stepped[v.id], tape.grad(v))
    assert [s.node.id for s in steps] == sorted((s.node.id for s in steps), reverse=True)
    # fan-out: h feeds mul and add, so two contributions land on it, before/after add up
    to_h = [c for s in steps for c in s.contributions if c.input_id == h.id]
    assert len(to_h) == 2 and to_h[0].before is None
    assert np.array_equal(to_h[1].after, to_h[1].before + to_h[1].value)


def test_a_stepped_backward_leaves_numpys_errors_to_its_consumer_between_steps():
    """The sweep ignores numpy's floating-point errors (inf and NaN are data), but only while
    it works: the window's stepper holds the generator between steps, and a suspended sweep
    once kept every numpy error in the process ignored until it ended."""
    tape = Tape()
    x = tape.param(np.array([1.0, 0.0, -2.0]))
    loss = ops.sum(ops.log(x * x))  # (a log of 0: -inf, its gradient a division by zero)
    with np.errstate(all="warn"):
        it = tape.backward_steps(loss)
        seen = 0
        for _ in it:
            seen += 1
            assert np.geterr()["divide"] == "warn" and np.geterr()["invalid"] == "warn"
        assert seen >= 2 and np.geterr()["divide"] == "warn"
        assert not np.isfinite(tape.grad(x)[1])  # (the sweep's own arithmetic still quiet)
        it2 = tape.backward_steps(loss)
        next(it2)  # (left suspended, then dropped)
        assert np.geterr()["over"] == "warn"
        it2.close()
        assert np.geterr()["over"] == "warn"


def test_mark_and_reset_keep_params_and_capacity():
    tape = Tape()
    w = tape.param(np.ones(3), name="w")
    m = tape.mark()
    for _ in range(3):
        tape.reset_to(m)
        x = tape.const(np.arange(3.0), name="x")
        loss = ops.sum(x * w)
        tape.backward(loss)
        assert len(tape) == 4
        assert np.array_equal(tape.grad(w), np.arange(3.0))
    tape.reset_to(m)
    assert len(tape) == 1 and [p.id for p in tape.params()] == [w.id]
    with pytest.raises(TapeError, match="does not exist"):
        tape.value(loss)


def test_shape_mismatch_poisons_and_backward_names_the_node():
    tape = Tape()
    a = tape.param(np.ones((3, 4)))
    b = tape.param(np.ones((4, 3)))
    m = tape.mark()
    c = a + b
    assert not tape.ok
    assert tape.error == "node 2 add: shapes (3, 4) and (4, 3) do not broadcast"
    n = len(tape)
    d = ops.relu(c)  # later ops return without computing
    assert len(tape) == n and d.id < 0
    with pytest.raises(TapeError, match="node 2 add"):
        tape.backward(a)
    tape.reset_to(m)  # the poison came after the mark: the tape is usable again
    assert tape.ok and tape.error is None


def test_scalar_operators_record_the_documented_ops():
    tape = Tape()
    x = tape.param(np.array([2.0, 4.0]))
    assert (x + 1).op == "adds" and (x - 1).node.attrs["s"] == -1.0
    assert (x * 3).op == "muls" and (x / 2).op == "div" and (2 / x).op == "div"
    y = 1 - x
    assert y.op == "adds" and tape.nodes[y.node.inputs[0]].op == "neg"
    np.testing.assert_array_equal(y.value, [-1.0, -3.0])


def test_float32_tape_stays_float32():
    tape = Tape(dtype=np.float32)
    x = tape.param(np.ones((2, 2)))
    y = ops.sigmoid(x @ x)
    assert y.value.dtype == np.float32
    tape.backward(ops.mean(y))
    assert tape.grad(x).dtype == np.float32


def test_scopes_prefix_names():
    tape = Tape()
    with tape.scope("block0"), tape.scope("attn"):
        q = tape.param(np.ones(2), name="q")
    assert q.name == "block0/attn/q"


def test_bad_leaf_and_foreign_var_errors():
    t1, t2 = Tape(), Tape()
    v = t1.param(np.ones(2))
    with pytest.raises(TapeError, match="another tape"):
        t2.value(v)
    with pytest.raises(TapeError, match="dtype"):
        t1.const(np.array(["a", "b"]))
    with pytest.raises(TapeError, match="scalar loss"):
        t1.backward(v)
