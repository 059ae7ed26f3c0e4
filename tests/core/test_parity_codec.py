"""The parity types live in core (device-agnostic) and cross files and pipes through one codec."""

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
from tests.helpers.parity import nan_report, planted_pair


def _report() -> ParityReport:
    a = np.array([1.0, 2.0, np.inf, 0.0])
    b = np.array([1.0, 2.0000000000000004, 0.0, -0.0])
    same = compare_arrays(a, a)
    return ParityReport.of([NodeParity(0, "param", "w", same, same),
                            NodeParity(1, "exp", None, compare_arrays(a, b), None)])


def test_report_round_trips_through_strict_json():
    rep = _report()
    assert rep.first_divergence == (1, "value")
    wire = json.loads(json.dumps(strict_json(rep.to_json())))  # "inf" strings on the wire
    back = ParityReport.from_json(wire)
    assert back == rep and back.to_json() == rep.to_json()
    assert [entry_differs(e) for e in wire["nodes"]] == [False, True]
    assert not entry_differs(wire["nodes"][1], "grad")


def test_gpu_parity_re_exports_the_core_types():
    import tapescope.gpu.parity

    assert tapescope.gpu.parity.ParityReport is ParityReport
    assert tapescope.gpu.parity.NodeParity is NodeParity


@pytest.mark.parametrize("bad", [{}, {"n": 1}, {"n": "x", "n_diff": 0, "max_ulp": 0,
                                                 "max_abs": 0, "max_rel": 0}])
def test_tensor_diff_from_json_rejects_what_is_not_a_summary(bad):
    with pytest.raises((KeyError, ValueError)):
        TensorDiff.from_json(bad)


def test_entry_worst_is_the_one_ulp_rule():
    from tapescope.core.parity import entry_worst

    rep = _report()
    wire = [n.to_json() for n in rep.nodes]
    assert entry_worst(wire[0]) == 0.0
    assert entry_worst(wire[1]) == float(wire[1]["value"]["max_ulp"])  # inf vs 0: no NaN
    e = {"value": {"n_diff": 1, "max_ulp": 0, "n_nan": 0}, "grad": None}
    assert entry_worst(e) == 1.0  # a signed zero alone counts 1
    e = {"value": {"n_diff": 2, "max_ulp": 7, "n_nan": 0}, "grad": {"n_diff": 1, "n_nan": 1,
                                                                      "max_ulp": 0}}
    assert entry_worst(e) == -1.0


# ---- the NaN policy's counts and the signed zeros survive files and pipes ------------------------
@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
def test_the_planted_counts_are_the_known_answer(dtype):
    d = compare_arrays(*planted_pair(dtype))
    assert (d.n, d.n_diff, d.n_nan, d.nan_bits_differ, d.n_signed_zero, d.max_ulp,
            d.first_index) == (10, 4, 2, 3, 1, 2, 0)


def _fields(d: TensorDiff) -> tuple:
    return (d.n, d.n_diff, d.max_ulp, d.max_abs, d.max_rel, d.first_index, d.n_nan,
            d.n_signed_zero, d.nan_bits_differ)


def test_every_field_survives_a_file(tmp_path):
    rep = nan_report()
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
    wire = json.loads(json.dumps(strict_json(nan_report().to_json())))
    nodes = wire["nodes"]
    assert wire["exact"] is False
    assert wire["first_divergence"] == {"node": 1, "op": "exp", "which": "value"}
    assert [entry_differs(e) for e in nodes] == [False, True, True]
    assert entry_differs(nodes[1], "grad") and not entry_differs(nodes[2], "grad")
    assert [entry_worst(e) for e in nodes] == [0.0, -1.0, -1.0]  # a NaN against a number
    exact = ParityReport.of([NodeParity(0, "param", None, compare_arrays(np.ones(2),
                                                                         np.ones(2)), None)])
    assert exact.to_json()["first_divergence"] is None and exact.to_json()["exact"] is True


# ---- a summary off a file or the pipe is checked ------------------------------------------------
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
