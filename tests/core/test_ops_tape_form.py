"""Every op of the table is callable as a workload calls it: ``core.ops.<name>(...)`` on a tape,
forward and backward (issue 47 item 3).

Each op's grad-check samples go through ``getattr(core.ops, name)`` — the hand-written wrapper
where one exists, else the form ``core.ops.__getattr__`` generates from the table — and the
recorded node must be that op with those attributes, its value the table's forward and the
parameters' gradients its backward, bit for bit. An op registered without any way to reach it
from a workload (the AttributeError a workload once met while every op test passed) fails here.
"""

from __future__ import annotations

import numpy as np
import pytest

from tapescope.core import Tape, mathlib, ops
from tapescope.core.optable.registry import REGISTRY, CForm, OpDef
from tapescope.core.optable.rows import RowForm, RowPass, Step

OPS = sorted(n for n, d in REGISTRY.items() if d.kind != "leaf")


def _call(name: str, t: Tape, xs: list, attrs: dict):
    d = REGISTRY[name]
    ins = [t.const(x) if k in d.nondiff_inputs else t.param(x) for k, x in enumerate(xs)]
    fn = getattr(ops, name)
    y = fn(ins, **attrs) if d.arity is None else fn(*ins, **attrs)
    return ins, y


@pytest.mark.parametrize("name", OPS)
def test_every_op_records_through_core_ops_forward_and_backward(name):
    d = REGISTRY[name]
    M = mathlib.get("refmath")
    for k, (xs, attrs) in enumerate(d.sample(np.random.default_rng(11), np.dtype(np.float64))):
        t = Tape()
        ins, y = _call(name, t, xs, attrs)
        assert t.ok, f"{name} sample {k}: the tape was poisoned"
        node = t.node(y)
        assert node.op == name, f"{name} sample {k}: recorded {node.op}"
        with np.errstate(all="ignore"):
            want = np.asarray(d.forward(M, xs, node.attrs))
        np.testing.assert_array_equal(y.value, want, err_msg=f"{name} sample {k}: forward")
        t.backward(ops.sum(y))
        with np.errstate(all="ignore"):
            g = np.ones_like(want)
            needs = [k not in d.nondiff_inputs for k in range(len(xs))]
            gw = d.backward(M, g, xs, want, node.attrs, needs)
        for i, v in enumerate(ins):
            if i in d.nondiff_inputs:
                assert v.grad is None, f"{name} sample {k}: a target got a gradient"
                continue
            assert v.grad is not None, f"{name} sample {k}: input {i} got no gradient"
            np.testing.assert_array_equal(v.grad, np.asarray(gw[i]).reshape(v.shape),
                                          err_msg=f"{name} sample {k}: gradient of input {i}")


def _rowmax_bwd(M, g, xs, y, at, nd):
    ax = at.get("axis", -1)
    return [np.where(xs[0] == np.expand_dims(y, ax), np.expand_dims(g, ax), 0.0)]


# two ops added to the table by a test: a reduction with one value per row (a row form,
# out="row", over any axis) and an elementwise op (a C form); neither has a wrapper
ROWMAX = OpDef(
    "t_rowmax", 1, "reduce", "none",
    lambda sh, at: tuple(d for k, d in enumerate(sh[0]) if k != at.get("axis", -1) % len(sh[0])),
    forward=lambda M, xs, at: np.max(xs[0], axis=at.get("axis", -1)), backward=_rowmax_bwd,
    sample=lambda rng, dt: [([rng.uniform(-1, 1, (2, 3)).astype(dt)], {"axis": 0})],
    doc="row max",
    row=RowForm(ins=(("x", "row"),), axis="axis", out="row",
                fwd=RowPass(("{m}",), steps=(Step("m", "max", "{x}"),)),
                bwd=(RowPass(("{x} == {y} ? {g} : (real_t)0",)),)))
TWICE = OpDef("t_twice", 1, "unary", "row_local", lambda sh, at: sh[0],
              forward=lambda M, xs, at: xs[0] + xs[0],
              backward=lambda M, g, xs, y, at, nd: [g + g], sample=None, doc="x + x",
              c=CForm("ADD({x}, {x})", ("ADD({g}, {g})",)))


@pytest.fixture
def added(monkeypatch):
    for d in (ROWMAX, TWICE):
        monkeypatch.setitem(REGISTRY, d.name, d)


def test_an_op_added_to_the_table_is_a_tape_op_with_no_wrapper(added):
    """What docs/adding-an-op.md promises: registering is enough for ``ops.<name>``."""
    t = Tape()
    x = t.param(np.array([[1.0, 3.0, 2.0], [0.5, -1.0, 0.0]]))
    m = ops.t_rowmax(x)
    assert m.value.tolist() == [3.0, 0.5] and t.node(m).op == "t_rowmax"
    t.backward(ops.sum(ops.t_twice(m)))
    assert x.grad.tolist() == [[0.0, 2.0, 0.0], [2.0, 0.0, 0.0]]


def test_the_generated_form_names_attributes_and_refuses_others(added):
    t = Tape()
    x = t.param(np.arange(6.0).reshape(2, 3))
    y = ops.t_rowmax(x, axis=np.int64(0), name="mx")  # a row form's axis: an int
    assert t.node(y).attrs == {"axis": 0} and type(t.node(y).attrs["axis"]) is int
    assert t.node(y).name == "mx" and y.value.tolist() == [3.0, 4.0, 5.0]
    g = t.param(np.ones(3))
    n = ops.layer_norm(x, g, eps=1)  # a row form's host scalar: a float
    assert t.node(n).attrs == {"eps": 1.0} and type(t.node(n).attrs["eps"]) is float
    with pytest.raises(TypeError, match=r"t_rowmax takes no attribute \['keepdims'\]"):
        ops.t_rowmax(x, keepdims=True)
    with pytest.raises(TypeError, match="t_twice takes no attribute"):
        ops.t_twice(x, s=2.0)
    with pytest.raises(TypeError, match="takes 1 input"):
        ops.t_rowmax(x, x)
    with pytest.raises(AttributeError, match="no_such_op"):
        ops.no_such_op  # noqa: B018
    assert {"t_rowmax", "conv2d", "layer_norm"} <= set(dir(ops)) and "param" not in dir(ops)
    # an op with neither form takes its attributes as given (lists as tuples)
    img = t.param(np.ones((1, 1, 3, 3)))
    w = t.param(np.ones((1, 1, 2, 2)))
    c = ops.conv2d(img, w, strides=[1, 1], pads=np.array([0, 0, 0, 0]))
    assert t.node(c).attrs == {"strides": (1, 1), "pads": (0, 0, 0, 0)} and c.shape == (1, 1, 2, 2)
