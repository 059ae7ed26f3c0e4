"""The aten table's short cuts (``aten_ref_table.FAST``: an optimizer's tiny per-tensor ops on
float32/64 arrays and Python scalars) give ``reference``'s answer without them, bit for bit:
the same dtype, shape and bytes, on random values and on NaNs with payloads of both signs,
±inf, ±0 and denormals; in-place and functional overloads; scalars as ints, floats, bools and
0-d arrays; shapes that broadcast (an in-place op's target never does: the short cut leaves
them to the form and ``_into``); the scalar in a keyword or an argument; other dtypes and
keywords the short cut leaves to the form. Each short cut is taken on the common case (so the
comparison is of two paths), and quiet with numpy's errstate set to raise; their native
elementwise ops (``ew_c``) on every native path."""

from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest

from tapescope.core import native
from tapescope.core.capture import aten_ref_table
from tapescope.core.capture.aten_ref import has_reference, reference
from tapescope.core.capture.aten_ref_table import FAST, quiet_all

_U = {8: np.uint64, 4: np.uint32}


def _values(dt: np.dtype, shape: tuple, rng: np.random.Generator) -> np.ndarray:
    """Random values with the hostile ones among them (NaNs with payloads, ±inf, ±0,
    a denormal), read-only as a capture's arrays are."""
    x = rng.standard_normal(shape).astype(dt)
    flat = x.reshape(-1)
    if dt.itemsize not in _U:  # (a half type: no short cut takes it)
        x.setflags(write=False)
        return x
    w = dt.itemsize * 8
    ebits = 11 if w == 64 else 8
    inf = ((1 << ebits) - 1) << (w - 1 - ebits)
    top = 1 << (w - 1)
    special = np.array([inf | 1, inf | 5 | top, inf | (1 << (w - 2 - ebits)), inf, inf | top,
                        0, top, 1, 3 | top], dtype=_U[dt.itemsize]).view(dt)
    if flat.size >= 16:
        pick = rng.choice(flat.size, size=min(flat.size // 3, special.size), replace=False)
        flat[pick] = special[:pick.size]
    x.setflags(write=False)
    return x


def _calls(rng: np.random.Generator):
    """(op, args, kwargs) for every short cut: the optimizer's case and its neighbours."""
    for dt, shape in itertools.product((np.dtype(np.float32), np.dtype(np.float64),
                                        np.dtype(np.float16), np.dtype(np.int64)),
                                       ((), (16,), (3, 5))):
        def v(s=shape, d=dt):
            if d.kind != "f":
                return rng.integers(-5, 5, s).astype(d)
            return _values(d, s, rng)
        a, b, c = v(), v(), v()
        with np.errstate(all="ignore"):  # (a signalling NaN among them)
            small = (a * dt.type(1e-6)) if dt.kind == "f" else a
        other = np.dtype(np.float64) if dt == np.float32 else np.dtype(np.float32)
        mixed = _values(other, shape, rng) if other.kind == "f" else b
        row = v((5,)) if shape == (3, 5) else v()
        wide = v((2,) + shape)
        scalars = [0.999, 1e-8, 1, 0, -3, True, 1e39, np.asarray(0.5, dt)]
        for name in ("add", "mul", "div"):
            for ovl, inplace in (("Tensor", False), ("Tensor", True), ("Scalar", False),
                                 ("Scalar", True)):
                op = f"aten.{name}{'_' if inplace else ''}.{ovl}"
                for other_arg in [b, mixed, row, wide] + scalars:
                    yield op, [a, other_arg], {}
                yield op, [a, b], {"alpha": 2} if name == "add" else {"rounding_mode": "trunc"}
                yield op, [a, 0.5, 2] if name == "add" else [a, 0.5], {}
        for op in ("aten.sqrt.default", "aten.sqrt_.default"):
            yield op, [a], {}
            yield op, [np.abs(a)], {}
        for name in ("addcmul", "addcdiv"):
            for inplace in (False, True):
                op = f"aten.{name}{'_' if inplace else ''}.default"
                for value in (0.0010000000000000009, -0.0118, 0.3, 1, 2, True, np.float32(0.5)):
                    yield op, [a, b, c], {"value": value}
                    yield op, [a, b, c, value], {}
                    # a zero-ish target: the product's own rounding shows in the sum
                    yield op, [small, b, c], {"value": value}
                yield op, [a, b, c], {}
                yield op, [a, b, b], {"value": 0.001}
                yield op, [a, mixed, c], {"value": 0.001}
                yield op, [a, row, c], {"value": 0.001}
                yield op, [a, b, wide], {"value": 0.001}
                yield op, [a, b, c], {"value": 0.001, "out": None}
        with np.errstate(all="ignore"):  # (the hostile values cast)
            likes = (a, a.astype(np.float16), a.astype(ml_dtypes.bfloat16), a.astype(bool))
        for x in likes:
            for kw in ({}, {"pin_memory": False, "memory_format": "torch.preserve_format"},
                       {"dtype": None}, {"dtype": "torch.float64"}):
                yield "aten.zeros_like.default", [x], kw
        m = v((7, 5)) if shape == (3, 5) else v((4, 1))
        for x in (m, m.T, v((1, 9)), v((0, 4)), v((2, 3, 4)), a):
            for dims, rest, kw in (([0], [True], {}), ([0], [], {}), ([-2], [False], {}),
                                   ([0], [], {"keepdim": True}), ([1], [], {}), ([0, 1], [], {}),
                                   ((0,), [], {}), ([False], [], {}), ([0], [None], {}),
                                   ([0], [], {"dtype": "torch.float64"})):
                yield "aten.sum.dim_IntList", [x, dims, *rest], kw
        for inplace in (False, True):
            op = f"aten.lerp{'_' if inplace else ''}.Scalar"
            for w in (0.09999999999999998, 0.7, -0.6, 0.5, 1, 0, True, np.asarray(0.25, dt)):
                yield op, [a, b, w], {}
            yield op, [a, mixed, 0.1], {}
            yield op, [a, row, 0.1], {}
            yield op, [a, wide, 0.1], {}
            yield op, [a, b], {"weight": 0.1}


def _run(op: str, args: list, kwargs: dict):
    try:
        return reference(op, list(args), dict(kwargs))
    except Exception as e:  # noqa: BLE001 — the two paths must fail alike too
        return type(e)


def _same(got, want) -> bool:
    if isinstance(want, type) or isinstance(got, type):
        return got is want
    return len(got) == len(want) and all(
        type(g) is np.ndarray and g.dtype == w.dtype and g.shape == w.shape
        and g.tobytes() == w.tobytes() for g, w in zip(got, want, strict=True))


def test_every_short_cut_has_a_form():
    assert FAST, "no short cuts registered"
    for op in FAST:
        assert has_reference(op), op


@pytest.mark.usefixtures("native_isa")  # (their native ops, aten_ref_table.ew_c, on each path)
@pytest.mark.parametrize("quiet", [False, True])
def test_short_cuts_give_the_forms_answer(quiet, monkeypatch):
    rng = np.random.default_rng(42)
    taken = dict.fromkeys(FAST, 0)
    checked = 0
    with np.errstate(all="raise"):  # (a short cut outside the judge's block is quiet too)
        for op, args, kwargs in _calls(rng):
            short = FAST[op]
            with monkeypatch.context() as m:
                m.delitem(FAST, op)  # the form itself
                with quiet_all() if quiet else np.errstate(all="raise"):
                    want = _run(op, args, kwargs)
            with quiet_all() if quiet else np.errstate(all="raise"):
                got = _run(op, args, kwargs)
                with np.errstate(all="ignore"):
                    taken[op] += short(list(args), dict(kwargs)) is not None
            assert _same(got, want), (op, [getattr(x, "dtype", x) for x in args],
                                      [np.shape(x) for x in args], kwargs, got, want)
            checked += 1
    assert checked > 1000
    # every short cut taken; without native code (TAPESCOPE_NO_NATIVE, no gcc) the one that
    # is native.colsum itself (a bias gradient's sum) declines: the form answers, checked above
    native_only = set() if native.library() is not None else {"aten.sum.dim_IntList"}
    assert all(n for op, n in taken.items() if op not in native_only), \
        [op for op, n in taken.items() if not n]


def test_an_in_place_short_cut_returns_a_new_array_of_its_targets_shape():
    """What ``_into`` keeps as it is: a new writeable array owning its memory, none of the
    arguments, of the target's dtype and shape (a 0-d target's too: numpy gives a scalar)."""
    rng = np.random.default_rng(1)
    for shape in ((), (16,)):
        a, b = _values(np.dtype(np.float32), shape, rng), _values(np.dtype(np.float32), shape,
                                                                  rng)
        for op, args in (("aten.add_.Tensor", [a, 1]), ("aten.mul_.Tensor", [a, b]),
                         ("aten.addcdiv_.default", [a, b, b]), ("aten.lerp_.Scalar", [a, b, .1])):
            (y,) = FAST[op](args, {})
            assert type(y) is np.ndarray and y.shape == a.shape and y.dtype == a.dtype
            assert y.flags.owndata and y.flags.writeable and all(y is not x for x in args)


def test_float_operands_takes_only_one_float_dtype_and_python_numbers():
    f32 = np.zeros(3, np.float32)
    fo = aten_ref_table.float_operands
    assert fo([f32, 1.5, 2, f32], True) == np.float32
    assert fo([f32, np.zeros(1, np.float32)], False) == np.float32
    assert fo([f32, np.zeros(1, np.float32)], True) is None  # broadcast into an in-place target
    assert fo([f32, np.zeros(3, np.float64)], False) is None
    assert fo([f32, True], False) is None  # a bool scalar: the form's dtype rule
    assert fo([f32, np.float32(1)], False) is None
    assert fo([np.zeros(3, np.float16), 1.0], False) is None
    assert fo([1.0, f32], False) is None
    assert fo([f32.astype(">f4"), 1.0], False) is None  # not the native dtype object


@pytest.mark.parametrize("dt", [np.float32, np.float64], ids=lambda d: np.dtype(d).name)
def test_a_products_bias_is_added_into_its_new_array_with_the_same_bits(dt):
    """addmm, linear and baddbmm add the bias into the product's own new array (no fresh
    output): the bits of ``alpha * (a @ b) + beta * bias`` as separate roundings, for a bias of
    every shape that broadcasts (row, column, full, 0-d, batched), NaNs and infinities among the
    values, and the arguments (read-only, as a capture's arrays are) left as they were."""
    from tapescope.core.capture.aten_ref_nn import product

    rng = np.random.default_rng(7)
    a, b = _values(np.dtype(dt), (9, 6), rng), _values(np.dtype(dt), (6, 5), rng)
    ab = product(a, b)
    t = np.dtype(dt).type
    with np.errstate(all="ignore"):
        for bias in (_values(np.dtype(dt), (5,), rng), _values(np.dtype(dt), (9, 1), rng),
                     _values(np.dtype(dt), (9, 5), rng), np.asarray(t(1.5))):
            for beta, alpha in ((1, 1), (0.5, 1), (1, 3), (0, 2)):
                args = [bias, a, b]
                before = [x.tobytes() for x in args]
                got = reference("aten.addmm.default", args, {"beta": beta, "alpha": alpha})[0]
                scaled = t(alpha) * ab if alpha != 1 else ab
                want = scaled if beta == 0 else scaled + (bias if beta == 1 else t(beta) * bias)
                assert got.dtype == want.dtype and got.shape == want.shape
                assert got.tobytes() == want.tobytes()
                assert [x.tobytes() for x in args] == before
        bias = _values(np.dtype(dt), (5,), rng)
        got = reference("aten.linear.default", [a, b.T.copy(), bias], {})[0]
        assert got.tobytes() == (ab + bias).tobytes()
        x, y = _values(np.dtype(dt), (3, 4, 6), rng), _values(np.dtype(dt), (3, 6, 2), rng)
        bias = _values(np.dtype(dt), (4, 1), rng)
        got = reference("aten.baddbmm.default", [bias, x, y], {})[0]
        assert got.tobytes() == (product(x, y) + bias).tobytes()
