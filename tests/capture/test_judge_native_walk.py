"""The judge's argument walk in C (core/native/refmath_py.c's ``decode``,
``core.native.walk_entry``) gives ``_decode_ids``' answers: the same arrays (the objects
themselves), the same new lists, the same value ids in the same order, on the chain's values or
the recorded ones; tagged objects, subclasses and odd ids handed to the same Python; the same
refusals (a value without an array, an index out of range, an unhashable id, nesting past the
recursion limit); no reference leaked or dropped; on every native path and under
AddressSanitizer. The judge with and without it gives the same report on a zoo capture."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from tapescope.core import native
from tapescope.core.capture import judge
from tests.helpers.native_ext import ext_or_skip

every_path = pytest.mark.usefixtures("native_isa")


class _Sub(list):
    pass


def _walk_or_skip():
    return ext_or_skip("the Python walk only", native.walk_entry)


ARRAYS = [np.zeros(2), np.ones(3), np.full(2, 2.0), None, np.arange(4)]
CHAIN = {1: np.full(3, 7.0), 2: None}  # (a None on the chain: the recorded array)

CASES = [
    [{"T": 0}, 2, None, "x", 1.5, True, {"T": 1}],
    [[{"T": 2}, [{"T": 1}, 3, []]], {"f": "inf"}, {"c": [1.0, {"f": "-inf"}]}],
    [{"g": [0, 2]}, {"r": "SUM"}, {"T": 4}, {"T": 1}, {"T": 1}],
    [], [[[]]], [(1, 2)], [_Sub([{"T": 0}, 5])], [{"T": -1}], [{"T": True}],
    [{"T": 0, "U": 1}], [{"q": 1}], [{}], [{"T": 3}], [{"T": 9}], [{"T": [1]}], [{"T": 1.0}],
    [1, [2, [{"T": 3}]]],  # (a missing value deep down, after others were read)
]


def _same(x, y) -> bool:
    if type(x) is list:
        return type(y) is list and x is not y and len(x) == len(y) and all(map(_same, x, y))
    return x is y or (type(x) is type(y) and not isinstance(x, np.ndarray) and x == y)


def _run(fn):
    ids: list = []
    try:
        return ("ok", fn(ids), ids)
    except judge._Missing as e:
        return ("missing", e.vid, ids)
    except Exception as e:  # noqa: BLE001 — the two walks must fail alike
        return ("error", type(e), str(e), ids)


@every_path
@pytest.mark.parametrize("chained", [False, True])
def test_the_walk_is_decode_ids(chained):
    walk = _walk_or_skip()
    chain = CHAIN if chained else judge._NO_CHAIN
    checked = 0
    for a in CASES:
        want = _run(lambda ids, a=a: judge._decode_ids(a, ARRAYS, ids, chain))
        got = _run(lambda ids, a=a: walk(a, ARRAYS, ids, chain, judge._other,
                                         judge._raise_missing))
        assert got[0] == want[0], (a, got, want)
        if want[0] == "ok":
            assert _same(want[1], got[1]) and got[2] == want[2], (a, got, want)
        else:
            assert got[1:] == want[1:], (a, got, want)
        checked += 1
    assert checked == len(CASES)
    # the chain's value where it holds one, the recorded array where it holds None
    ids: list = []
    out = walk([{"T": 1}, {"T": 2}], ARRAYS, ids, CHAIN, judge._other, judge._raise_missing)
    assert out[0] is CHAIN[1] and out[1] is ARRAYS[2] and ids == [1, 2]


def test_the_walk_refuses_what_it_cannot_take_and_deep_nesting():
    walk = _walk_or_skip()
    for bad in (((), ARRAYS, [], {}), ([], ARRAYS, (), {}), ([], ARRAYS, [], [])):
        with pytest.raises(TypeError):
            walk(*bad, judge._other, judge._raise_missing)
    with pytest.raises(TypeError):
        walk([], ARRAYS, [], {})
    deep: list = [{"T": 0}]
    for _ in range(sys.getrecursionlimit() + 100):
        deep = [deep]
    for fn in (lambda: judge._decode_ids(deep, ARRAYS, []),
               lambda: walk(deep, ARRAYS, [], {}, judge._other, judge._raise_missing)):
        with pytest.raises(RecursionError):
            fn()
    # a missing() that returns does not let the walk go on with a None
    with pytest.raises(RuntimeError, match="missing"):
        walk([{"T": 3}], ARRAYS, [], {}, judge._other, lambda v: None)


def test_the_walk_keeps_every_reference_count():
    """Many walks, read and refused, leave every array's and id's reference count as it was:
    ids that are objects of their own (large ints, into a mapping of arrays) on each path, a
    value read, on the chain, missing, absent, unhashable (planted: a reference not released
    on an error path, or one released too many, fails it)."""
    walk = _walk_or_skip()
    k_read, k_chain, k_none, k_absent = (10 ** 30 + i for i in range(4))
    arrays = {k_read: np.zeros(2), k_chain: np.ones(2), k_none: None}
    chain = {k_chain: np.full(2, 3.0)}
    cases = [[{"T": k_read}, [{"T": k_chain}, 1.5]], [{"T": k_none}], [{"T": k_absent}],
             [{"T": k_read}, {"T": [k_read]}], [{"T": k_read}, {"q": k_read}],
             [{"T": k_chain}, (k_read,)]]
    objs = [k_read, k_chain, k_none, k_absent, *arrays.values(), *chain.values()]
    objs = [x for x in objs if x is not None]
    before = [sys.getrefcount(x) for x in objs]
    outcomes = set()
    for _ in range(500):
        for a in cases:
            try:
                walk(a, arrays, [], chain, judge._other, judge._raise_missing)
                outcomes.add("ok")
            except Exception as e:  # noqa: BLE001 — the refusals are walked too
                outcomes.add(type(e).__name__)
    assert [sys.getrefcount(x) for x in objs] == before
    assert outcomes >= {"ok", "_Missing", "KeyError", "TypeError"}, outcomes


def test_the_judge_with_and_without_the_walk_gives_one_report(zoo_capture, monkeypatch):
    _walk_or_skip()
    from tapescope.core.capture.file import load

    f, run = zoo_capture(["planted.py", "mlp_pkg/train.py"])
    assert run.returncode == 0, run.stderr
    cap = load(f)
    with_walk = judge.judge(cap)
    monkeypatch.setattr(native, "walk_entry", lambda: None)
    without = judge.judge(cap)
    for r in (with_walk, without):
        r.pop("judge_seconds")
    assert with_walk == without
    assert with_walk["counts"]["introduced"] and with_walk["counts"]["inherited"]


_ASAN_CHILD = """
import numpy as np
from tapescope.core import native
from tapescope.core.capture import judge
assert native.library() is not None and native.sanitize_flags()
assert "libasan" in open("/proc/self/maps").read(), "not the sanitized build"
w = native.walk_entry()
assert w is not None, "no extension"
arrays = [np.zeros(2), np.ones(3), None]
n = 0
for chain in ({}, {1: np.full(3, 7.0), 0: None}):
    for a in ([{"T": 0}, 2, [{"T": 1}, [None, "x"]], {"f": "inf"}, {"T": 1}], [], [{"T": 2}],
              [{"T": 5}], [{"T": [1]}], [{"c": [1.0, {"T": 0}]}], [{"T": 0, "U": 1}]):
        try:
            w(a, arrays, [], chain, judge._other, judge._raise_missing)
        except (judge._Missing, IndexError, TypeError, ValueError):
            pass
        n += 1
print("walked", n)
"""


def test_the_walk_runs_clean_under_asan_and_ubsan():
    """The walk's reads, new lists and refusals under AddressSanitizer and UBSan
    (tests/core/test_native_sanitize.py's build)."""
    from tests.helpers.sanitize import child_runs_clean

    child_runs_clean(_ASAN_CHILD, "walked 14")
