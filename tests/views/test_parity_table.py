"""Parity table: the model passes QAbstractItemModelTester; sort, filter and selection work."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtTest import QAbstractItemModelTester

from tapescope.views.models.graph_model import GraphNode
from tapescope.views.models.parity_rows import COLUMNS as COLUMNS_H
from tapescope.views.models.parity_rows import build_rows
from tapescope.views.parity_table import ID_ROLE, SORT_ROLE, ParityPanel, ParityTableModel

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
    4: ("4", "mean", "loss", "scalar", "1", "1.00e+20", "", ""),  # views.models.numbers' rule
    5: ("5", "tanh", "t", "7", "4", "6", "2", "11"),
}


def headers(m) -> list[str]:
    """The columns' field names (the header shows words: see the test below)."""
    from tapescope.views.parity_table import KEY_ROLE

    return [m.headerData(c, Qt.Horizontal, KEY_ROLE) for c in range(m.columnCount())]


def test_headers_are_words_and_counts_have_thousands_separators():
    m = ParityTableModel()
    shown = [m.headerData(c, Qt.Horizontal) for c in range(m.columnCount())]
    assert shown == ["id", "op", "name", "shape", "value\ndiffering", "value\nmax ulp",
                     "gradient\ndiffering", "gradient\nmax ulp"]
    assert not any("_" in h for h in shown)  # no snake_case field names
    nodes = [GraphNode(0, "exp", (), "e", (100, 100))]
    m.set_rows(build_rows(nodes, [{"id": 0, "value": {"n_diff": 9876, "max_ulp": 23296.0},
                                   "grad": {"n_diff": 1234567, "max_ulp": 2.5}}]))
    assert [m.data(m.index(0, c)) for c in range(4, 8)] == ["9,876", "23,296", "1,234,567",
                                                             "2.5"]


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
            elif h.endswith("max_ulp") and want >= 1e6:  # rounded: every digit on hover
                assert tip == f"{int(want):,} ulp", (node.id, h, tip)
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


# ---- the filter/sort model: one numpy index array over the source rows --------------------------
def big_rows(n: int = 2500):
    """A tape bigger than the debounce threshold, with repeated sort values (ties), a few
    differing rows, entries without a gradient side and nodes without an entry."""
    ops = ("matmul", "exp", "softmax", "add", "param")
    nodes = [GraphNode(i, ops[i % 5], (), f"block{i // 20}/{ops[i % 5]}{i % 3}", (i % 4, 3))
             for i in range(n)]
    comp = [{"id": i, "value": {"n_diff": (i % 7 == 0) * (i % 5), "max_ulp": float(i % 11)},
             **({"grad": {"n_diff": int(i % 13 == 0), "max_ulp": 0.5}} if i % 2 else {})}
            for i in range(n) if i % 4 != 3]
    return nodes, comp


def shown_ids(p) -> list[int]:
    return [int(p.proxy.index(r, 0).data()) for r in range(p.proxy.rowCount())]


def test_sort_keys_equal_each_rows_sort_role():
    nodes, comp = big_rows(300)
    for rows in (build_rows(nodes, comp), list(build_rows(nodes, comp))):  # lazy and plain
        m = ParityTableModel(rows)
        for c in range(m.columnCount()):
            keys = m.sort_keys(c).tolist()
            assert keys == [m.data(m.index(r, c), SORT_ROLE) for r in range(m.rowCount())], c
        assert m.differs().tolist() == [rows[r].differs for r in range(len(rows))]


def test_the_proxy_passes_the_model_tester_while_filtering_and_sorting(qtbot):
    p = ParityPanel()
    qtbot.addWidget(p)
    QAbstractItemModelTester(p.proxy, QAbstractItemModelTester.FailureReportingMode.Fatal)
    nodes, comp = big_rows(200)
    p.set_rows(build_rows(nodes, comp))
    p.filter.setText("soft")
    p.table.sortByColumn(5, Qt.DescendingOrder)
    p.only_diff.setChecked(True)
    p.filter.setText("")
    p.table.sortByColumn(-1, Qt.AscendingOrder)
    p.set_rows(build_rows(nodes[:50]))  # another tape: a reset
    assert shown_ids(p) == []  # only differing, and nothing was compared
    p.only_diff.setChecked(False)
    assert shown_ids(p) == list(range(50))


def test_typing_clicking_a_header_and_selecting_on_a_big_table(qtbot):
    nodes, comp = big_rows()
    rows = build_rows(nodes, comp)
    p = ParityPanel()
    qtbot.addWidget(p)
    p.resize(600, 400)
    p.show()
    p.set_rows(rows)
    qtbot.keyClicks(p.filter, "SOFTMAX1")
    qtbot.waitUntil(lambda: p.filters == 1, timeout=2000)  # debounced: one filter
    want = [n.id for n in nodes if "softmax1" in n.name or "softmax1" in n.op]
    assert want and shown_ids(p) == want
    # a click on "value max_ulp": descending after a second click, ties in id order
    hh = p.table.horizontalHeader()
    col = COLUMNS_H.index("value max_ulp")
    x = hh.sectionViewportPosition(col) + hh.sectionSize(col) // 2
    qtbot.mouseClick(hh.viewport(), Qt.LeftButton, pos=QPoint(x, hh.height() // 2))
    key = {n.id: rows[n.id].cell(col) for n in nodes}
    up = sorted(want, key=lambda i: -1 if key[i] is None else key[i])  # stable: ties by id
    assert shown_ids(p) == up
    qtbot.mouseClick(hh.viewport(), Qt.LeftButton, pos=QPoint(x, hh.height() // 2))
    assert p.proxy.sortOrder() == Qt.DescendingOrder
    assert shown_ids(p) == sorted(want, key=lambda i: -1 if key[i] is None else key[i],
                                  reverse=True)
    # click a row: the node is selected; the selection follows it through a re-sort
    target = shown_ids(p)[3]
    idx = p.proxy.index(3, 1)
    with qtbot.waitSignal(p.node_selected) as sig:
        qtbot.mouseClick(p.table.viewport(), Qt.LeftButton, pos=p.table.visualRect(idx).center())
    assert sig.args == [target]
    p.table.sortByColumn(0, Qt.DescendingOrder)
    assert shown_ids(p) == sorted(want, reverse=True)
    assert int(p.table.currentIndex().siblingAtColumn(0).data()) == target
    # "only differing" ANDs with the text; a hidden row is not selectable from elsewhere
    p.only_diff.setChecked(True)
    diff = [i for i in sorted(want, reverse=True) if rows[i].differs]
    assert diff and shown_ids(p) == diff and len(diff) < len(want)
    hidden = next(i for i in want if not rows[i].differs)
    with qtbot.assertNotEmitted(p.node_selected):
        p.select_node(hidden)
        p.select_node(diff[-1])
    assert int(p.table.currentIndex().siblingAtColumn(0).data()) == diff[-1]
    assert p.table.verticalScrollBar().maximum() <= len(diff)  # the view follows the count
    # backspacing to nothing shows every differing row again, still sorted by id descending
    qtbot.keyClick(p.filter, Qt.Key_A, Qt.ControlModifier)
    qtbot.keyClick(p.filter, Qt.Key_Backspace)
    qtbot.waitUntil(lambda: p.proxy.mask is None, timeout=2000)
    assert shown_ids(p) == [n.id for n in reversed(nodes) if rows[n.id].differs]


def test_a_new_comparison_refilters_and_resorts_in_place(qtbot):
    nodes, comp = big_rows(60)
    p = ParityPanel()
    qtbot.addWidget(p)
    p.set_rows(build_rows(nodes, comp))
    p.only_diff.setChecked(True)
    p.table.sortByColumn(4, Qt.DescendingOrder)  # value n_diff
    first = shown_ids(p)
    p.select_node(first[0])
    resets = []
    p.proxy.modelReset.connect(lambda: resets.append(1))
    # the next step: node first[0] still differs, and now so does node 1 (by more)
    comp2 = [{"id": first[0], "value": {"n_diff": 1, "max_ulp": 1.0}},
             {"id": 1, "value": {"n_diff": 9, "max_ulp": 4.0}}]
    p.set_rows(build_rows(nodes, comp2))
    assert not resets  # an in-place update: no reset, the selection stays
    assert shown_ids(p) == [1, first[0]]
    assert int(p.table.currentIndex().siblingAtColumn(0).data()) == first[0]
