"""Big tapes stay usable: one shared substring search, debounced typing, collapsed scopes show
their worst child, and a 10k-node heatmap aggregates by scope into the rows it has."""

from __future__ import annotations

import gc

import numpy as np
import pytest
from PySide6.QtCore import Qt

from tapescope.views.graph_panel import DEBOUNCE_FROM, GraphPanel
from tapescope.views.models.graph_model import GraphModel, GraphNode
from tapescope.views.models.parity_rows import build_rows
from tapescope.views.models.synthetic import transformer_like
from tapescope.views.parity_table import ParityPanel
from tapescope.views.training_view import TrainingPanel


@pytest.fixture(autouse=True)
def _collect_here():
    """Collect these tests' big widgets now, while no layout job runs: left to a later GC they
    were finalised during another test while its layout thread emitted (a segfault, a hang)."""
    yield
    gc.collect()


def model(n: int) -> GraphModel:
    ops, ins, names = transformer_like(n)
    nodes = [GraphNode(i, o, tuple(x), nm, (4, 8)) for i, (o, x, nm) in
             enumerate(zip(ops, ins, names, strict=True))]
    return GraphModel(nodes, loss_id=len(nodes) - 1)


def panel(qtbot, m) -> GraphPanel:
    p = GraphPanel()
    qtbot.addWidget(p)
    p.resize(900, 700)
    p.show()
    p.set_model(m, wait=True)
    return p


def test_partial_op_name_finds_nodes_in_graph_and_table_from_one_index(qtbot):
    m = model(400)
    want = [n.id for n in m.nodes if n.op == "softmax"]
    assert want and m.search("softm") == want and m.search("SOFTM") == want
    g = panel(qtbot, m)
    t = ParityPanel()
    qtbot.addWidget(t)
    t.set_rows(build_rows(m.nodes))
    t.set_search(m.searcher)  # what the main window does: one index for both
    qtbot.keyClicks(g.search.edit, "softm")
    t.filter.setText("softm")
    assert g.search.hits == want
    assert g.view.canvas.search_items == {int(g.view.display.node_item[i]) for i in want}
    shown = sorted(int(t.proxy.index(r, 0).data()) for r in range(t.proxy.rowCount()))
    assert shown == want
    assert t.search is m.searcher  # the table did not build an index of its own


def test_typing_on_a_big_tape_runs_one_search(qtbot):
    m = model(DEBOUNCE_FROM + 100)
    g = panel(qtbot, m)
    t = ParityPanel()
    qtbot.addWidget(t)
    t.set_rows(build_rows(m.nodes))
    t.set_search(m.searcher)
    qtbot.keyClicks(g.search.edit, "block1/mlp")
    qtbot.keyClicks(t.filter, "block1/mlp")
    assert g.search.searches == 0 and t.filters == 0  # nothing yet: still typing
    qtbot.waitUntil(lambda: g.search.searches == 1 and t.filters == 1, timeout=2000)
    assert g.search.hits == m.search("block1/mlp") and len(g.search.hits) > 0
    assert t.proxy.rowCount() == len(g.search.hits)  # block1/mlp, block10/mlp, ... both
    qtbot.wait(300)
    assert g.search.searches == 1 and t.filters == 1
    qtbot.keyClicks(g.search.edit, "/down")
    qtbot.keyClick(g.search.edit, Qt.Key_Return)  # Enter searches at once
    assert g.search.searches == 2 and g.search.hits == m.search("block1/mlp/down")


def test_collapsed_scope_shows_its_worst_child(qtbot):
    m = model(400)
    g = panel(qtbot, m)
    kids = m.groups["block0/attn"]
    colors = {k: "#16a34a" for k in range(len(m.nodes))}  # all exact...
    colors[kids[2]] = "#f5900b"  # ...one amber (few ulp)
    colors[kids[4]] = "#dc000b"  # ...one red (many ulp)
    g.view.set_overlay(colors)
    m.set_collapsed("block0/attn", True)
    g.view.relayout(wait=True)
    item = int(g.view.display.node_item[kids[0]])
    assert g.view.display.item_group[item] == "block0/attn"
    assert g.view.canvas.overlay[item].name() == "#dc000b"
    colors[kids[1]] = "#7c3aed"  # a NaN mismatch is worse than any ulp
    g.view.set_overlay(colors)
    assert g.view.canvas.overlay[item].name() == "#7c3aed"


def test_heatmap_aggregates_10k_nodes_by_scope_into_its_pixel_rows(qtbot):
    m = model(10_000)
    n = len(m.nodes)
    p = TrainingPanel()
    qtbot.addWidget(p)
    p.resize(700, 500)  # not shown: the plot has no pixels yet, so it assumes 300 rows
    p.set_node_names([nd.name for nd in m.nodes])
    bad = m.groups["block100/mlp"][3]
    cols = [np.zeros(n) for _ in range(3)]
    cols[1][bad] = 1e6  # one node, one step, far off: must not vanish in the aggregation
    p.add_steps([(s, 1.0, 1.0, 0.01, s != 2) for s in (1, 2, 3)], cols, 10.0)
    p.flush()
    rows = p.heat.image.shape[0]
    assert rows <= p.heat_rows() == 300
    assert rows < n // 10
    starts = p.heat_row_starts
    row = int(np.searchsorted(starts, bad, side="right") - 1)
    assert p.heat.image[row, 1] > 200 and p.heat.image[:, [0, 2]].max() == 0
    # a row is a whole scope: the one holding the bad node starts at a scope's first node
    top = [(nd.name or "").split("/")[0] if "/" in (nd.name or "") else "" for nd in m.nodes]
    assert all(s == 0 or top[s] != top[s - 1] for s in starts.tolist())
    # clicking that cell opens the worst node of the row at that step
    assert p.row_node(row, 2) == bad  # a click on that cell opens that node
