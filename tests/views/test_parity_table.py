"""Parity table: the model passes QAbstractItemModelTester; sort, filter and selection work."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtTest import QAbstractItemModelTester

from views.graph_model import GraphNode
from views.parity_rows import build_rows
from views.parity_table import ParityPanel, ParityTableModel

NODES = [GraphNode(0, "param", (), "W", (3, 4)), GraphNode(1, "const", (), "x", (2, 3)),
         GraphNode(2, "matmul", (1, 0), "h", (2, 4)), GraphNode(3, "exp", (2,), "e", (2, 4)),
         GraphNode(4, "mean", (3,), "loss", ())]
COMPARISON = [{"id": 2, "value": {"n_diff": 0, "max_ulp": 0}, "grad": {"n_diff": 0, "max_ulp": 0}},
              {"id": 3, "value": {"n_diff": 5, "max_ulp": 2}, "grad": {"n_diff": 1, "max_ulp": 1}},
              {"id": 4, "value": {"n_diff": 1, "max_ulp": 7}}]


def test_model_tester_and_rows():
    rows = build_rows(NODES, COMPARISON)
    m = ParityTableModel(rows)
    QAbstractItemModelTester(m, QAbstractItemModelTester.FailureReportingMode.Fatal)
    m.set_rows(build_rows(NODES))  # a reset is checked by the tester too
    assert m.rowCount() == 5 and m.columnCount() == 8
    assert m.data(m.index(3, 4)) == ""  # no comparison: empty cells
    m.set_rows(rows)
    assert m.data(m.index(3, 4)) == "5" and m.data(m.index(3, 3)) == "2×4"
    assert m.data(m.index(4, 3)) == "scalar"


def test_bad_comparison_is_named():
    with pytest.raises(ValueError, match="comparison entry 0"):
        build_rows(NODES, [{"value": {}}])
    with pytest.raises(ValueError, match=r"not on the tape: \[9\]"):
        build_rows(NODES, [{"id": 9}])


def test_sort_filter_and_select(qtbot):
    p = ParityPanel()
    qtbot.addWidget(p)
    p.set_rows(build_rows(NODES, COMPARISON))
    p.table.sortByColumn(5, Qt.DescendingOrder)  # value max_ulp
    ids = [p.proxy.index(r, 0).data() for r in range(p.proxy.rowCount())]
    assert ids[:3] == ["4", "3", "2"]
    p.filter.setText("EXP")
    assert p.proxy.rowCount() == 1 and p.proxy.index(0, 1).data() == "exp"
    p.filter.setText("")
    p.only_diff.setChecked(True)
    assert sorted(p.proxy.index(r, 0).data() for r in range(p.proxy.rowCount())) == ["3", "4"]
    with qtbot.waitSignal(p.node_selected) as sig:
        qtbot.mouseClick(p.table.viewport(), Qt.LeftButton,
                         pos=p.table.visualRect(p.proxy.index(1, 1)).center())
    assert sig.args[0] == int(p.proxy.index(1, 0).data())
    with qtbot.assertNotEmitted(p.node_selected):
        p.select_node(4)  # selection from elsewhere does not echo back
    assert p.table.currentIndex().siblingAtColumn(0).data() == "4"
