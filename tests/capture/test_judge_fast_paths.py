"""The judge's shortcuts give the answers of the paths they stand in for: ``_diff``'s
same-bytes test (the comparison's own numbers on exact, ±0, NaN-payload and one-ulp-off
outputs, every float type the judge compares), the reference table's dtype rule on its common
cases (``result_type``), an in-place form's fresh output (``_into``), the twin forms'
resolution (``_resolve``, cached per op) and the value ids an op's arguments name
(``_inputs``)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tapescope.core import precision
from tapescope.core.capture import aten_ref, aten_ref_table, judge
from tapescope.core.capture.aten_ref_table import NoReference, result_type
from tapescope.core.capture.judge import _diff, _float_diff_numpy, _inputs

DTYPES = [np.dtype(np.float64), np.dtype(np.float32), precision.FLOAT16, precision.BFLOAT16]
_U = {8: np.uint64, 4: np.uint32, 2: np.uint16}


def _from_bits(dt: np.dtype, bits: np.ndarray) -> np.ndarray:
    return np.asarray(bits, dtype=_U[dt.itemsize]).view(dt)


def _cases(dt: np.dtype) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """(reference, recorded) pairs: the same bits (with a NaN among them), ±0, NaNs of other
    payloads, one ulp apart (within a sign and across zero)."""
    u = _U[dt.itemsize]
    w = dt.itemsize * 8
    top = u(1 << (w - 1))
    x = np.linspace(-3, 3, 37).astype(np.float32).astype(dt)
    bits = x.view(u).copy()
    nan = np.array([np.nan], np.float32).astype(dt).view(u)[0]
    with_nan = bits.copy()
    with_nan[5] = nan | u(1)
    zeros = np.zeros(8, u)
    signed = zeros.copy()
    signed[[1, 6]] = top
    payload = with_nan.copy()
    payload[5] = nan | u(2)
    ulp = bits.copy()
    ulp[[3, 30]] += u(1)
    cross = np.array([0, 1, 0, 1], u)  # +0 vs -0 and the smallest denormal vs its negation
    return {
        "exact": (x, x.copy()),
        "exact-with-nan": (_from_bits(dt, with_nan), _from_bits(dt, with_nan.copy())),
        "signed-zeros": (_from_bits(dt, zeros), _from_bits(dt, signed)),
        "nan-payloads": (_from_bits(dt, with_nan), _from_bits(dt, payload)),
        "one-ulp": (x, _from_bits(dt, ulp)),
        "one-ulp-across-zero": (_from_bits(dt, cross), _from_bits(dt, cross | top)),
    }


@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: d.name)
def test_same_bytes_shortcut_gives_the_comparisons_numbers(dt):
    for case, (ref, rec) in _cases(dt).items():
        for full in (True, False):
            with np.errstate(all="ignore"):  # (a signalling NaN's isnan in compare_arrays)
                got = _diff(ref, rec, full)
                want = _float_diff_numpy(ref, rec, full)  # no shortcut: the blocks' numbers
            assert got == want, (case, full, got, want)
        # the NaN policy (compare_arrays): NaNs of other payloads are no difference, counted
        assert (got["n_diff"] == 0) == (case.startswith("exact") or case == "nan-payloads")
        assert got["nan_bits_differ"] == (case == "nan-payloads"), case
        if case == "signed-zeros":  # never bytes-equal: their count comes back
            assert _diff(ref, rec)["n_signed_zero"] == 2


def _operands() -> list:
    dts = [np.dtype(np.float64), np.dtype(np.float32), precision.FLOAT16, precision.BFLOAT16,
           np.dtype(np.int64), np.dtype(np.int32), np.dtype(np.uint8), np.dtype(np.bool_)]
    arrays = [np.ones(n, dt) if n else np.ones((), dt) for dt in dts for n in (0, 3)]
    return arrays + [np.float32(1), True, 3, 2.5, None]


class _Sub(np.ndarray):
    """An ndarray subclass: ``result_type`` takes its general path for it (same dtype)."""


def _general(x):
    return x.view(_Sub) if type(x) is np.ndarray else x


def _answer(xs) -> object:
    try:
        return result_type(*xs)
    except NoReference as e:
        return str(e)


def test_result_type_common_cases_give_the_general_rule():
    ops = _operands()
    n = 0
    for k in (1, 2, 3):
        for xs in itertools.product(ops, repeat=k):
            got = _answer(xs)
            want = _answer([_general(x) for x in xs])
            assert got == want and type(got) is type(want), (xs, got, want)
            n += 1
    assert n > 5000


def test_result_type_follows_torch_where_it_is_installed():
    torch = pytest.importorskip("torch")
    t = {np.dtype(np.float64): torch.float64, np.dtype(np.float32): torch.float32,
         precision.FLOAT16: torch.float16, precision.BFLOAT16: torch.bfloat16,
         np.dtype(np.int64): torch.int64, np.dtype(np.int32): torch.int32,
         np.dtype(np.uint8): torch.uint8, np.dtype(np.bool_): torch.bool}

    def tensor(x):
        return torch.ones(x.shape, dtype=t[x.dtype]) if isinstance(x, np.ndarray) else x

    ops = [x for x in _operands() if isinstance(x, np.ndarray) or type(x) in (bool, int, float)]
    for a, b in itertools.product(ops, repeat=2):
        if not isinstance(a, np.ndarray) and not isinstance(b, np.ndarray):
            continue
        want = torch.result_type(tensor(a), tensor(b))
        assert t[result_type(a, b)] == want, (a, b)


def test_into_copies_an_argument_and_keeps_a_fresh_output():
    """_into hands out a form's own new array as the written target and copies anything
    else: an argument, an entry of a list argument, a keyword's value, out='s target, a
    read-only or non-owning array, another dtype or shape."""
    a, b = np.zeros(3, np.float32), np.ones(3, np.float32)
    target = np.zeros(3, np.float32)
    (got,) = aten_ref._into([a], [target], [a, 2.0])  # an argument itself: copied
    assert got is not a and np.array_equal(got, a)
    (got,) = aten_ref._into([b], [target], [[a, b], 1])  # an entry of a list argument
    assert got is not b
    (got,) = aten_ref._into([b], [target], [a, (b,)])  # of a tuple argument
    assert got is not b
    fresh = a + b
    (got,) = aten_ref._into([fresh], [target], [a, [b]])  # the form's own: itself
    assert got is fresh
    (got,) = aten_ref._into([fresh], [np.zeros(3, np.float64)], [a])  # another dtype: cast
    assert got is not fresh and got.dtype == np.float64
    # one output (an in-place or out= op: the path without the id set) and several (a
    # foreach's): an argument in any of the lists (a keyword's value, out='s target) is copied
    for n in (1, 3):
        for lists in (([a], {"other": fresh}.values()), ([a], [fresh], {}.values()),
                      ([a], [[b, fresh]])):
            got = aten_ref._into([fresh] * n, [target] * n, *lists)
            assert len(got) == n and all(g is not fresh and np.array_equal(g, fresh)
                                         for g in got), lists
        assert aten_ref._into([fresh] * n, [target] * n, [a], {}.values()) == [fresh] * n
        ro = a + b
        ro.setflags(write=False)  # (a stored value is read only: never handed out as fresh)
        view = (a + b)[::1]  # not owning its memory
        for v in (ro, view):
            got = aten_ref._into([v] * n, [target] * n, [a])
            assert all(g is not v and np.array_equal(g, v) for g in got)
        got = aten_ref._into([b[:1]] * n, [target] * n, [a])  # broadcast to the target's shape
        assert all(g.shape == (3,) and np.array_equal(g, np.ones(3)) for g in got)


def test_resolve_is_cached_per_op_and_follows_new_forms(monkeypatch):
    op = "aten._foreach_tapescope_test_.List"
    assert aten_ref._resolve(op) == ("foreach", None)
    monkeypatch.setitem(aten_ref_table.FORMS, "aten.tapescope_test.List", lambda a, k: [])
    assert aten_ref._resolve(op) == ("foreach", "aten.tapescope_test.List")
    assert aten_ref._resolve("aten.tapescope_test_.List") == ("inplace",
                                                               "aten.tapescope_test.List")
    monkeypatch.delitem(aten_ref_table.FORMS, "aten.tapescope_test.List")
    assert aten_ref._resolve(op) == ("foreach", None)
    assert aten_ref._resolve("aten.add_.Tensor") == ("inplace", "aten.add.Tensor")
    assert aten_ref._resolve("aten.add.Tensor") == ("direct", "aten.add.Tensor")
    assert aten_ref._resolve("aten.add.out") == ("out", "aten.add.Tensor")


def _inputs_recursive(a) -> list[int]:  # the walk _inputs stands in for (one call per entry)
    if isinstance(a, list):
        return [i for x in a for i in _inputs_recursive(x)]
    if isinstance(a, dict):
        return [a["T"]] if "T" in a else []
    return []


def test_inputs_names_the_values_at_any_depth_and_no_others():
    args = [{"T": 1}, 2, [3, {"T": 4}, [[{"T": 5}], {"f": "nan"}]], {"c": [{"T": 6}, 1.0]},
            {"g": [0, 2]}, "x", None, [[[]]], {"T": 7, "x": 0}]
    assert sorted(_inputs(args)) == sorted(_inputs_recursive(args)) == [1, 4, 5, 7]
    for a in ({"T": 9}, {"f": "inf"}, 3, None, [], [[{"T": 2}], {"T": 2}]):
        assert sorted(_inputs(a)) == sorted(_inputs_recursive(a))


def _div_by_zero() -> np.ndarray:
    """A form whose arithmetic divides by zero and overflows (a warning outside errstate)."""
    one, zero = np.array([1.0, 3e38], np.float32), np.array([0.0, 0.1], np.float32)
    return aten_ref.reference("aten.div.Tensor", [one, zero], {})[0]


def test_forms_are_quiet_inside_and_outside_the_judges_one_errstate():
    """A form's inf is a value, never a warning: called alone (its own errstate), inside
    ``quiet_all`` (the judge's one errstate: the form skips its own), after it (its own
    again), and on another thread while this one holds it (that thread's numpy state is its
    own: a flag global to the process would skip the thread's errstate and warn there)."""
    import threading
    import warnings

    want = np.array([np.inf, np.inf], np.float32)
    # numpy's own default (warn) whatever an earlier test in this worker left: the block must
    # restore what was there before it
    with warnings.catch_warnings(), np.errstate(all="warn"):
        warnings.simplefilter("error")
        np.testing.assert_array_equal(_div_by_zero(), want)
        assert isinstance(aten_ref_table.fp_quiet(), np.errstate)
        seen = []
        with aten_ref_table.quiet_all():
            assert np.geterr() == {"divide": "ignore", "over": "ignore", "under": "ignore",
                                   "invalid": "ignore"}
            assert not isinstance(aten_ref_table.fp_quiet(), np.errstate)  # held: skipped
            np.testing.assert_array_equal(_div_by_zero(), want)

            def other() -> None:
                with warnings.catch_warnings():
                    warnings.simplefilter("error")
                    try:
                        seen.append(_div_by_zero())
                    except Exception as e:  # noqa: BLE001 — reported below
                        seen.append(e)
            t = threading.Thread(target=other)
            t.start()
            t.join()
        assert len(seen) == 1 and isinstance(seen[0], np.ndarray), seen
        np.testing.assert_array_equal(seen[0], want)
        assert isinstance(aten_ref_table.fp_quiet(), np.errstate)  # reset after the block
        assert np.geterr()["divide"] == "warn"
        np.testing.assert_array_equal(_div_by_zero(), want)


def test_decode_gives_the_recursive_walks_values():
    """``_decode``'s inline entries (plain values and ``{"T": id}`` in a list) give the plain
    recursive definition's arguments: the recorded arrays themselves, nested lists, tagged
    floats, complex numbers, a collective's group; a value over the size budget raises
    ``_Missing`` naming it at any depth; an unrecorded type ``_NoRef``."""
    arrays = {1: np.zeros(2), 2: np.ones(3), 3: None}
    get = arrays.get

    def walk(a):
        if isinstance(a, list):
            return [walk(x) for x in a]
        if isinstance(a, dict):
            (k, v), = a.items()
            if k == "T":
                if get(v) is None:
                    raise judge._Missing(v)
                return get(v)
            if k == "f":
                return float(v)
            if k == "c":
                return complex(walk(v[0]), walk(v[1]))
            if k in ("g", "r"):
                return a
            raise judge._NoRef(k)
        return a

    def same(x, y) -> bool:
        if isinstance(x, list):
            return type(y) is list and len(x) == len(y) and all(map(same, x, y))
        return x is y if isinstance(x, np.ndarray | dict) else repr(x) == repr(y)

    cases = [[{"T": 1}, 2, None, "x", 1.5, True, {"T": 2}], [[{"T": 2}, [{"T": 1}, 3]],
             {"f": "inf"}], [{"c": [1.0, {"f": "-0.0"}]}], [{"g": 5}, {"r": "sum"}], [],
             [[[]]], {"T": 2}, 7, [{"T": 1}, {"T": 1}]]
    for c in cases:
        assert same(walk(c), judge._decode(c, get)), c
    for c in ([{"T": 1}, {"T": 3}], [[{"T": 3}]], {"T": 3}, [1, [2, [{"T": 3}]]]):
        with pytest.raises(judge._Missing) as e:
            judge._decode(c, get)
        assert e.value.vid == 3
    for c in ([{"x": 1}], [[{"T": 1}, {"q": 2}]]):
        with pytest.raises(judge._NoRef):
            judge._decode(c, get)
