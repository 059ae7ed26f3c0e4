"""Parity table: the model passes QAbstractItemModelTester; sort, filter and selection work."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtTest import QAbstractItemModelTester

from views.graph_model import GraphNode
from views.parity_rows import build_rows
from views.parity_table import ID_ROLE, SORT_ROLE, ParityPanel, ParityTableModel

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


# ---- every column against the row it shows -----------------------------------------------------
# The expected cells are written out from the data fed in (never from ParityRow.cell or the
# model's formatting), one line per node, keyed by header text. A column the model grows (say a
# NaN-payload count) fails test_every_column_is_known until it has expectations here.
CELL_NODES = [GraphNode(0, "param", (), "W", (3, 4)), GraphNode(1, "const", (), None, (2, 3)),
              GraphNode(2, "matmul", (1, 0), "h", (2, 4)), GraphNode(3, "exp", (2,), "e", (2, 4)),
              GraphNode(4, "mean", (3,), "loss", ()), GraphNode(5, "tanh", (3,), "t", (7,))]
# every number differs from its row's other numbers, so a column showing a neighbour's field fails
CELL_COMPARISON = [
    {"id": 0, "grad": {"n_diff": 7, "max_ulp": 0.5}},  # a parameter: only its gradient compared
    {"id": 2, "value": {"n_diff": 0, "max_ulp": 0}, "grad": {"n_diff": 3, "max_ulp": 9}},
    {"id": 3, "value": {"n_diff": 5, "max_ulp": 2.5, "nan_bits_differ": 2},
     "grad": {"n_diff": 1, "max_ulp": 3}},
    {"id": 4, "value": {"n_diff": 1, "max_ulp": 1e20}},  # no gradient side
    {"id": 5, "value": {"n_diff": 4, "max_ulp": 6},
     "grad": {"n_diff": 2, "max_ulp": 11, "nan_bits_differ": 3}},
]
HEADERS = ("id", "op", "name", "shape", "value n_diff", "value max_ulp", "grad n_diff",
           "grad max_ulp")
CELLS = {  # node id -> the text of each column, in HEADERS order
    0: ("0", "param", "W", "3×4", "", "", "7", "0.5"),
    1: ("1", "const", "", "2×3", "", "", "", ""),
    2: ("2", "matmul", "h", "2×4", "0", "0", "3", "9"),
    3: ("3", "exp", "e", "2×4", "5", "2.5", "1", "3"),
    4: ("4", "mean", "loss", "scalar", "1", "1e+20", "", ""),
    5: ("5", "tanh", "t", "7", "4", "6", "2", "11"),
}


def headers(m) -> list[str]:
    return [m.headerData(c, Qt.Horizontal) for c in range(m.columnCount())]


def expected_sort(node: GraphNode, entry: dict | None, header: str):
    """The raw value a column sorts by, straight from the node and its comparison entry."""
    if header in ("id", "op"):
        return getattr(node, header)
    if header == "name":
        return node.name or ""
    if header == "shape":  # shapes sort by total extent
        return sum(node.shape)
    side, key = header.split()
    got = (entry or {}).get(side, {}).get(key)
    return -1 if got is None else got  # empty cells sort first


def check_every_cell(m, comparison: list[dict], cells: dict[int, tuple]) -> None:
    by_id = {e["id"]: e for e in comparison}
    cols = {h: c for c, h in enumerate(headers(m))}
    assert m.rowCount() == len(CELL_NODES)
    for r, node in enumerate(CELL_NODES):
        entry = by_id.get(node.id)
        for h, text in zip(HEADERS, cells[node.id], strict=True):
            idx = m.index(r, cols[h])
            assert m.data(idx) == text, (node.id, h)
            want = expected_sort(node, entry, h)
            got = m.data(idx, SORT_ROLE)
            # strings sort as strings, numbers as numbers (not their text: "11" < "9")
            assert got == want and isinstance(got, str) == isinstance(want, str), \
                (node.id, h, got, want)
            assert m.data(idx, ID_ROLE) == node.id
            # the name's tooltip is the name; an n_diff cell's tooltip counts the NaNs that
            # differ only in sign or payload (equal under the NaN policy), when there are any
            tip = m.data(idx, Qt.ToolTipRole)
            # (its own side's NaNs: the value cell never counts the gradient's)
            nan_bits = ((entry or {}).get(h.split()[0], {}).get("nan_bits_differ", 0)
                        if h.endswith("n_diff") else 0)
            if h == "name":
                assert tip == (node.name or ""), (node.id, h)
            elif h.endswith("n_diff") and nan_bits:
                assert tip.startswith(f"{nan_bits} NaN elements differ only in sign or payload"), \
                    (node.id, h, tip)
            else:
                assert tip is None, (node.id, h, tip)
            # comparison cells are shaded exactly when this side has differing bits
            shaded = m.data(idx, Qt.BackgroundRole) is not None
            assert shaded == (h.split()[-1] in ("n_diff", "max_ulp") and want not in (-1, 0)), \
                (node.id, h)


def test_every_column_is_known():
    m = ParityTableModel(build_rows(CELL_NODES, CELL_COMPARISON))
    assert set(headers(m)) == set(HEADERS), \
        f"untested parity column(s): {sorted(set(headers(m)) - set(HEADERS))}; add them to CELLS"


def test_every_cell_shows_its_own_field():
    m = ParityTableModel(build_rows(CELL_NODES, CELL_COMPARISON))
    check_every_cell(m, CELL_COMPARISON, CELLS)


def test_every_cell_follows_an_in_place_update():
    m = ParityTableModel(build_rows(CELL_NODES))  # a tape without a comparison yet
    blank = {i: (*c[:4], "", "", "", "") for i, c in CELLS.items()}
    check_every_cell(m, [], blank)
    changed = []
    m.dataChanged.connect(lambda a, b: changed.append((a.column(), b.column())))
    assert m.update_rows(build_rows(CELL_NODES, CELL_COMPARISON))
    check_every_cell(m, CELL_COMPARISON, CELLS)
    # the views repaint every comparison column
    cols = {h: c for c, h in enumerate(headers(m))}
    first = min(cols[h] for h in HEADERS if " " in h)
    assert changed and changed[-1][0] <= first and changed[-1][1] == m.columnCount() - 1
    # a second comparison with the value and gradient sides swapped
    swapped = [{"id": e["id"], **({"value": e["grad"]} if "grad" in e else {}),
                **({"grad": e["value"]} if "value" in e else {})} for e in CELL_COMPARISON]
    assert m.update_rows(build_rows(CELL_NODES, swapped))
    check_every_cell(m, swapped, {i: (*c[:4], *c[6:8], *c[4:6]) for i, c in CELLS.items()})


def test_sorting_by_each_column_orders_by_its_own_field(qtbot):
    p = ParityPanel()
    qtbot.addWidget(p)
    p.set_rows(build_rows(CELL_NODES, CELL_COMPARISON))
    by_id = {e["id"]: e for e in CELL_COMPARISON}
    nodes = {n.id: n for n in CELL_NODES}
    for c, h in enumerate(headers(p.model)):
        if h not in HEADERS:
            continue  # test_every_column_is_known names it
        p.table.sortByColumn(c, Qt.DescendingOrder)
        ids = [int(p.proxy.index(r, 0).data()) for r in range(p.proxy.rowCount())]
        keys = [expected_sort(nodes[i], by_id.get(i), h) for i in ids]
        assert keys == sorted(keys, reverse=True), (h, ids)


def test_a_side_with_missing_fields_leaves_those_cells_empty_and_a_bad_side_is_named():
    nodes = CELL_NODES[:2]
    m = ParityTableModel(build_rows(nodes, [{"id": 0, "value": {"n_diff": 3},
                                             "grad": {"max_ulp": 2}}]))
    cols = {h: c for c, h in enumerate(headers(m))}
    got = {h: m.data(m.index(0, cols[h])) for h in HEADERS[4:]}
    assert got == {"value n_diff": "3", "value max_ulp": "", "grad n_diff": "", "grad max_ulp": "2"}
    assert m.data(m.index(0, cols["value max_ulp"]), SORT_ROLE) == -1
    with pytest.raises(ValueError, match=r"comparison for node 1: 'grad' must be a mapping, got "
                                         r"list"):
        build_rows(nodes, [{"id": 1, "grad": [1, 2]}])
    with pytest.raises(ValueError, match=r"comparison for node 0: 'value' must be a mapping, got "
                                         r"float"):
        build_rows(nodes, [{"id": 0, "value": 1.5}])


def test_each_n_diff_tooltip_counts_its_own_sides_nans():
    m = ParityTableModel(build_rows(CELL_NODES[:1], [
        {"id": 0, "value": {"n_diff": 0, "max_ulp": 0, "nan_bits_differ": 1},
         "grad": {"n_diff": 0, "max_ulp": 0, "nan_bits_differ": 4}}]))
    cols = {h: c for c, h in enumerate(headers(m))}
    for h, n in (("value n_diff", 1), ("grad n_diff", 4)):
        assert m.data(m.index(0, cols[h]), Qt.ToolTipRole).startswith(f"{n} NaN elements"), h
