"""The parity types live in core (device-agnostic) and cross files and pipes through one codec."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tapescope.core.parity import (
    NodeParity,
    ParityReport,
    TensorDiff,
    compare_arrays,
    entry_differs,
    strict_json,
)


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
