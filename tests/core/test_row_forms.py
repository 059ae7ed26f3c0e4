"""Each row op's numpy reference is held to its one C spelling (``OpDef.row``) bit for bit.

The form is evaluated token by token in numpy (tests/core/rowform_numpy.py) over the op's own
grad-check samples, float64 and float32, refmath and platform math, and compared with the
``OpDef``'s forward and backward: a numpy line that rounds differently from the form (the form
every device target is rendered from) fails here, naming the op, the pass and the sample. The
docs row of each op is the form rendered (``rows.doc_row``).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from tapescope.core import mathlib
from tapescope.core.ops import REGISTRY, OpDef, register
from tapescope.core.optable.rows import RowForm, RowPass, Step, check, doc_row, infix
from tests.core.rowform_numpy import evaluate, run

ROW_OPS = [n for n, d in REGISTRY.items() if d.row is not None]
DOCS = Path(__file__).resolve().parents[2] / "docs"


def _bits(a) -> np.ndarray:
    a = np.ascontiguousarray(np.asarray(a))
    return a.view(np.uint64 if a.dtype == np.float64 else np.uint32)


def _cases(op: str, dt):
    d = REGISTRY[op]
    rng = np.random.default_rng(sorted(REGISTRY).index(op))
    return d.sample(rng, np.dtype(dt))


def test_the_row_ops_are_the_table_s():
    assert {"softmax", "rms_norm", "rope", "cross_entropy"} <= set(ROW_OPS)


@pytest.mark.parametrize("math", ["refmath", "platform"])
@pytest.mark.parametrize("dt", [np.float64, np.float32])
@pytest.mark.parametrize("op", ROW_OPS)
def test_numpy_reference_is_the_row_form_bit_for_bit(op, dt, math):
    d = REGISTRY[op]
    M = mathlib.get(math)
    for k, (xs, attrs) in enumerate(_cases(op, dt)):
        with np.errstate(all="ignore"):
            y = d.forward(M, xs, attrs)
            g = np.random.default_rng(k).uniform(-1, 1, np.shape(y)).astype(dt)
            want = d.backward(M, g, xs, y, attrs, [True] * len(xs))
            got_y, got = run(d.row, xs, attrs, M, g=g, y=y)
        assert got_y.shape == np.shape(y), (op, k)
        assert np.array_equal(_bits(got_y), _bits(y)), f"{op} sample {k}: forward"
        for i, (a, b) in enumerate(zip(got, want, strict=True)):
            if i in d.nondiff_inputs:
                continue
            assert a is not None and b is not None, (op, k, i)
            assert np.array_equal(_bits(a), _bits(np.asarray(b, dtype=dt))), \
                f"{op} sample {k}: gradient of input {i}"


def test_the_oracle_sees_a_reordered_rounding():
    """A form that rounds in another order than the reference fails the comparison above."""
    x = np.array([[0.1, 0.2, 0.3, 1e16]])
    M = mathlib.get("refmath")
    fwd = RowPass(("{s}",), steps=(Step("s", "sum", "{x}"),))
    y, _ = run(RowForm(ins=(("x", "row"),), fwd=fwd, bwd=(RowPass(("{g}",)),)), [x], {}, M)
    assert y[0, 0] == ((0.1 + 0.2) + 0.3) + 1e16
    assert evaluate("ADD(MUL({a}, {b}), (real_t)1)", {"a": 3.0, "b": 0.5}, M, np.float64) == 2.5
    assert evaluate("{c} > (real_t)0 ? {c} : -{c}", {"c": np.array([-2.0, 3.0])}, M,
                    np.float64).tolist() == [2.0, 3.0]


def test_forms_that_no_renderer_takes_are_refused_at_registration():
    ok = RowPass(("{x}",))
    with pytest.raises(ValueError, match="uses"):
        check("bad", RowForm(ins=(("x", "row"),), fwd=RowPass(("{nope}",)), bwd=(ok,)), 1)
    with pytest.raises(ValueError, match="backward pass per input"):
        check("bad", RowForm(ins=(("x", "row"),), fwd=ok, bwd=()), 1)
    with pytest.raises(ValueError, match="kept"):
        check("bad", RowForm(ins=(("x", "row"),), fwd=ok, bwd=(ok,), keep=("r",)), 1)
    with pytest.raises(ValueError, match="index input"):
        check("bad", RowForm(ins=(("x", "row"), ("t", "index")), fwd=ok, bwd=(ok, ok)), 2)
    # one output per row (out="row"): the forward's term is a row value, never a column's
    red = RowPass(("{m}",), steps=(Step("m", "max", "{x}"),))
    check("ok", RowForm(ins=(("x", "row"),), axis="axis", out="row", fwd=red,
                        bwd=(RowPass(("MUL({g}, {x})",)),)), 1)
    with pytest.raises(ValueError, match=r"uses \['x'\]"):
        check("bad", RowForm(ins=(("x", "row"),), out="row", fwd=RowPass(
            ("ADD({m}, {x})",), steps=red.steps), bwd=(ok,)), 1)
    with pytest.raises(ValueError, match="no pair, total or col"):
        check("bad", RowForm(ins=(("x", "row"),), out="row", total=True, fwd=red, bwd=(ok,)), 1)
    with pytest.raises(ValueError, match="out 'col'"):
        check("bad", RowForm(ins=(("x", "row"),), out="col", fwd=red, bwd=(ok,)), 1)
    with pytest.raises(ValueError, match="each pass with steps"):  # a per-element op over any axis
        check("bad", RowForm(ins=(("x", "row"),), axis="axis", fwd=ok, bwd=(ok,)), 1)
    fused = OpDef("t_fused_rowmax", 1, "reduce", "row_local", lambda sh, at: sh[0][:-1], None,
                  None, None, row=RowForm(ins=(("x", "row"),), out="row", fwd=red, bwd=(ok,)))
    with pytest.raises(ValueError, match='has fusion="none"'):  # fusion keeps one shape
        register(fused)
    assert "t_fused_rowmax" not in REGISTRY


def _doc_rows() -> dict[str, list[str]]:
    rows = {}
    for page in ("reference-order.md", "reference-order-nn.md"):
        for line in (DOCS / page).read_text().splitlines():
            m = re.match(r"\| ([a-z_0-9]+)[ (|]", line)
            if m:
                rows[m.group(1)] = [c.strip() for c in line.strip().strip("|").split(" | ")]
    return rows


@pytest.mark.parametrize("op", ROW_OPS)
def test_the_docs_row_is_the_form_rendered(op):
    rows = _doc_rows()
    assert op in rows, f"{op}: no row in docs/reference-order*.md"
    fwd, bwd = doc_row(op, REGISTRY[op].row)
    assert rows[op][1:] == [fwd, bwd], f"{op}: the docs row should read\n| {op} | {fwd} | {bwd} |"


def test_infix_spelling():
    assert infix("MUL(ADD({x}, (real_t)1), {r})") == "(x + 1) * r"
    assert infix("DIV((real_t)1, SQRT(ADD({a}, {b})))") == "1 / sqrt(a + b)"
    assert infix("EXP(SUB({x}, {m}))") == "exp(x - m)"
