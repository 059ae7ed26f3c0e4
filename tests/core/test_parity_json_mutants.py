"""core.parity's JSON codec keeps every field (issue 31): the NaN policy's counts (``n_nan``,
``nan_bits_differ``) and the signed zeros survive files and the worker pipe, which a mutation
run showed no test held (every round-tripped summary had them at 0)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from tapescope.core.parity import (
    NodeParity,
    ParityReport,
    TensorDiff,
    compare_arrays,
    entry_differs,
    entry_worst,
    strict_json,
)


def _nan(dtype, payload: int):
    u = np.uint64 if np.dtype(dtype) == np.float64 else np.uint32
    b = np.array([np.nan], dtype).view(u)
    b[0] |= u(payload)
    return b.view(dtype)[0]


def planted(dtype=np.float64) -> tuple[np.ndarray, np.ndarray]:
    """ref/other with a known answer: 2 NaN-vs-number, 3 NaN-payload-only, 1 signed zero,
    1 two-ulp difference, 2 equal elements."""
    ref = np.array([1.0, np.nan, 2.0, np.nan, np.nan, np.nan, 0.0, 4.0, 5.0, 6.0], dtype)
    oth = ref.copy()
    oth[0] = np.nan  # NaN against a number, both ways
    ref[2] = np.nan
    oth[2] = 2.0
    for i, p in ((1, 0x11), (3, 0x22), (4, 0x33)):  # both NaN, other payloads
        oth[i] = _nan(dtype, p)
    oth[6] = -0.0
    oth[7] = np.nextafter(np.nextafter(ref[7], dtype(9)), dtype(9))
    return ref, oth


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
def test_the_planted_counts_are_the_known_answer(dtype):
    d = compare_arrays(*planted(dtype))
    assert (d.n, d.n_diff, d.n_nan, d.nan_bits_differ, d.n_signed_zero, d.max_ulp,
            d.first_index) == (10, 4, 2, 3, 1, 2, 0)


def _report() -> ParityReport:
    d = compare_arrays(*planted())
    only_nan_bits = compare_arrays(np.array([np.nan]), np.array([_nan(np.float64, 5)]))
    assert only_nan_bits.n_diff == 0 and only_nan_bits.nan_bits_differ == 1
    return ParityReport.of([NodeParity(0, "param", "w", only_nan_bits, only_nan_bits),
                            NodeParity(1, "exp", None, d, d), NodeParity(2, "sum", "l", d, None)])


def _fields(d: TensorDiff) -> tuple:
    return (d.n, d.n_diff, d.max_ulp, d.max_abs, d.max_rel, d.first_index, d.n_nan,
            d.n_signed_zero, d.nan_bits_differ)


def test_every_field_survives_a_file(tmp_path):
    rep = _report()
    f = tmp_path / "parity.json"
    f.write_text(json.dumps(strict_json(rep.to_json()), allow_nan=False))
    back = ParityReport.from_json(json.loads(f.read_text()))
    assert back == rep
    for a, b in zip(rep.nodes, back.nodes, strict=True):
        assert _fields(a.value) == _fields(b.value)
        assert (a.grad is None) == (b.grad is None)
        if a.grad is not None:
            assert _fields(a.grad) == _fields(b.grad)
    e = json.loads(f.read_text())["nodes"][1]["value"]
    assert (e["n_nan"], e["nan_bits_differ"], e["n_signed_zero"]) == (2, 3, 1)
    assert back.first_divergence == (1, "value") and back.nodes[0].exact


def test_a_summary_from_an_older_file_reads_the_nan_counts_as_zero():
    d = compare_arrays(np.array([1.0]), np.array([2.0])).to_json()
    for k in ("n_nan", "n_signed_zero", "nan_bits_differ"):
        del d[k]
    old = TensorDiff.from_json(d)
    assert (old.n_nan, old.n_signed_zero, old.nan_bits_differ, old.first_index) == (0, 0, 0, 0)


def test_strict_json_spells_non_finite_floats_and_from_json_reads_them():
    d = TensorDiff(3, 1, 0, math.inf, math.inf, 2, 1, 0, 0)
    s = strict_json({"d": d.to_json(), "t": (1, np.float64(-math.inf)), 4: np.int64(7),
                     "nan": float("nan")})
    assert s == {"d": {**d.to_json(), "max_abs": "inf", "max_rel": "inf"}, "t": [1, "-inf"],
                 "4": 7, "nan": "nan"}
    assert type(s["4"]) is int
    assert TensorDiff.from_json(s["d"]) == d
    json.dumps(s, allow_nan=False)  # strict JSON indeed


def test_entry_helpers_read_the_round_tripped_counts():
    wire = json.loads(json.dumps(strict_json(_report().to_json())))
    nodes = wire["nodes"]
    assert wire["exact"] is False
    assert wire["first_divergence"] == {"node": 1, "op": "exp", "which": "value"}
    assert [entry_differs(e) for e in nodes] == [False, True, True]
    assert entry_differs(nodes[1], "grad") and not entry_differs(nodes[2], "grad")
    assert [entry_worst(e) for e in nodes] == [0.0, -1.0, -1.0]  # a NaN against a number
    exact = ParityReport.of([NodeParity(0, "param", None, compare_arrays(np.ones(2),
                                                                         np.ones(2)), None)])
    assert exact.to_json()["first_divergence"] is None and exact.to_json()["exact"] is True


# ---- from the mutation run's survivors: a summary off a file or the pipe is checked ----------
def _summary(**kw) -> dict:
    return {**compare_arrays(np.array([1.0, 2.0, 3.0]), np.array([1.0, 2.5, 3.0])).to_json(),
            **kw}


@pytest.mark.parametrize("kw,says", [
    ({"n_diff": 4}, "'n_diff' is 4, not in 0..3"),
    ({"first_index": 3}, "'first_index' is 3, not in 0..2"),
    ({"n_nan": 2}, "'n_nan' is 2, not in 0..1"),
    ({"n_signed_zero": 2}, "'n_signed_zero' is 2, not in 0..1"),
    ({"nan_bits_differ": 4}, "'nan_bits_differ' is 4, not in 0..3"),
    ({"max_ulp": -1}, "'max_ulp' is -1, not in 0.."),
    ({"n": -1}, "'n' is -1, not in 0.."),
    ({"first_index": None}, "first_index None with n_diff 1"),
    ({"n_diff": 0}, "first_index 1 with n_diff 0"),
    ({"n": 2.0}, "'n' must be a whole number, not '2.0'"),
    ({"n_nan": True}, "'n_nan' must be a whole number, not 'True'"),
    ({"max_abs": -0.5}, "'max_abs' must be a number >= 0, not '-0.5'"),
    ({"max_abs": "1.5"}, "'max_abs' must be a number >= 0, not '1.5'"),
    ({"max_rel": True}, "'max_rel' must be a number >= 0, not 'True'"),
    ({"max_rel": None}, "'max_rel' must be a number >= 0, not 'None'"),
])
def test_a_summary_out_of_range_is_refused_naming_the_field(kw, says):
    with pytest.raises(ValueError) as ei:
        TensorDiff.from_json(_summary(**kw))
    assert str(ei.value).endswith(says), str(ei.value)


def test_a_summary_at_its_bounds_is_read():
    d = TensorDiff.from_json(_summary(n_diff=3, first_index=2, n_nan=3, n_signed_zero=3,
                                      nan_bits_differ=3, max_abs="nan", max_rel="inf"))
    assert (d.n_diff, d.first_index, d.n_nan, d.n_signed_zero, d.nan_bits_differ) == (3, 2, 3, 3, 3)
    assert math.isnan(d.max_abs) and d.max_rel == math.inf
    missing = _summary()
    del missing["max_ulp"]
    with pytest.raises(ValueError, match="'max_ulp' is missing"):
        TensorDiff.from_json(missing)
    with pytest.raises(ValueError, match="a tensor summary must be an object, not list"):
        TensorDiff.from_json([1])


def test_the_first_divergence_in_the_gradients_is_the_highest_differing_one():
    same = compare_arrays(np.ones(2), np.ones(2))
    off = compare_arrays(np.ones(2), np.array([1.0, 2.0]))
    rep = ParityReport.of([NodeParity(0, "param", None, same, off),
                           NodeParity(1, "exp", None, same, off),
                           NodeParity(2, "sum", None, same, same)])
    assert rep.first_divergence == (1, "grad")
    assert rep.to_json()["first_divergence"] == {"node": 1, "op": "exp", "which": "grad"}
    e = rep.to_json()["nodes"][0]
    assert entry_differs(e) and entry_differs(e, "grad") and not entry_differs(e, "value")


def test_the_worst_of_an_entry_is_over_both_sides():
    e = {"value": {"n_diff": 1, "max_ulp": 7, "n_nan": 0},
         "grad": {"n_diff": 1, "max_ulp": 2, "n_nan": 0}}
    assert entry_worst(e) == 7.0
    e["grad"]["max_ulp"] = 9
    assert entry_worst(e) == 9.0
