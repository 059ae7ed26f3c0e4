"""The parity table shows the NaN policy's count: NaNs that differ only in sign or payload are
equal (not in n_diff), and the n_diff cells say how many there were."""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import Qt

from tapescope.core.parity import compare_arrays
from tapescope.views.models.graph_model import GraphNode
from tapescope.views.models.parity_rows import build_rows
from tapescope.views.parity_table import ParityTableModel


def test_nan_bits_differ_reaches_the_table():
    ref = np.array([1.0, np.nan, np.nan])
    oth = ref.copy()
    oth[1] = -oth[1]  # a NaN of the other sign
    d = compare_arrays(ref, oth)
    nodes = [GraphNode(0, "exp", (), "e", (3,)), GraphNode(1, "log", (0,), "l", (3,))]
    comp = [{"id": 0, "value": d.to_json(), "grad": compare_arrays(ref, ref).to_json()},
            {"id": 1, "value": compare_arrays(ref, ref).to_json()}]
    rows = build_rows(nodes, comp)
    assert rows[0].nan_bits_differ == 1 and rows[1].nan_bits_differ == 0
    assert not rows[0].differs
    m = ParityTableModel(rows)
    assert m.data(m.index(0, 4)) == "0"
    tip = m.data(m.index(0, 4), Qt.ToolTipRole)
    assert tip.startswith("1 NaN elements differ only in sign or payload")
    assert m.data(m.index(1, 4), Qt.ToolTipRole) is None


def test_the_inspectors_ulp_map_follows_the_nan_policy():
    from tapescope.views.inspector import ulp_map

    ref = np.array([np.nan, np.nan, 1.0, 0.0])
    oth = np.array([-np.nan, np.nan, np.nan, -0.0])
    d = ulp_map(ref, oth)
    assert d[0] == 0 and d[1] == 0  # two NaNs: 0 apart whatever their sign
    assert np.isnan(d[2])  # a NaN against a number: not comparable
    assert d[3] == 0  # ±0: 0 ulp (the bit difference is counted by the summaries)
