"""Issue 25, item 14: the minimap coloured by parity (dots and bands), never grey bars when
nothing is compared; selecting a node that a collapsed group hides unfolds the group."""

from __future__ import annotations

import gc

import numpy as np
import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor

from tapescope.views.graph_canvas import KIND_STYLE
from tapescope.views.graph_panel import GraphPanel
from tapescope.views.minimap import GREY
from tapescope.views.models.graph_model import KIND_OP, KIND_PARAM, GraphModel, GraphNode
from tapescope.views.models.synthetic import transformer_like

GREEN, RED = "#16a34a", "#dc2626"


@pytest.fixture(autouse=True)
def _collect_here():
    yield
    gc.collect()


def model(n: int) -> GraphModel:
    ops, ins, names = transformer_like(n)
    return GraphModel([GraphNode(i, o, tuple(x), nm, (4, 8)) for i, (o, x, nm) in
                       enumerate(zip(ops, ins, names, strict=True))], loss_id=n - 1)


def panel(qtbot, m: GraphModel) -> GraphPanel:
    p = GraphPanel()
    qtbot.addWidget(p)
    p.resize(900, 700)
    p.show()
    p.set_model(m, wait=True)
    qtbot.wait(1)
    return p


def dot_at(ov, item: int) -> str:
    """The minimap's colour at an item's dot."""
    c = ov.view.canvas
    sx, sy = ov._scale()
    r = c.boundingRect()
    x = int((c.layout.x[item] - r.left()) * sx)
    y = int(np.clip((c.layout.y[item] - r.top()) * sy, 0, ov.height() - 1))
    return ov._image.pixelColor(x, y).name()


def test_a_small_graphs_dots_take_their_parity_colour(qtbot):
    # a shallow graph (five ranks): one dot an item
    nodes = [GraphNode(i, "param", (), f"w{i}") for i in range(8)]
    nodes += [GraphNode(8 + i, "add", (2 * i, 2 * i + 1), f"s{i}") for i in range(4)]
    nodes += [GraphNode(12, "mul", (8, 9)), GraphNode(13, "mul", (10, 11)),
              GraphNode(14, "add", (12, 13)), GraphNode(15, "sum", (14,))]
    m = GraphModel(nodes, loss_id=15)
    p = panel(qtbot, m)
    ov = p.overview
    assert not ov.bands
    red = 12
    p.view.set_overlay({i: QColor(RED if i == red else GREEN) for i in range(len(m.nodes))})
    assert dot_at(ov, int(p.view.display.node_item[red])) == RED
    assert dot_at(ov, int(p.view.display.node_item[3])) == GREEN
    p.view.set_overlay(None)  # nothing compared: the kind's colour, as the graph's border
    it = int(p.view.display.node_item[3])
    assert dot_at(ov, it) == KIND_STYLE[int(p.view.display.kinds[it])][1]


def test_a_deep_tape_with_nothing_compared_is_not_grey(qtbot):
    m = model(10_000)
    p = panel(qtbot, m)
    ov = p.overview
    b = ov.band_layout()
    assert b is not None and len(b.spans) > 10
    x = ov.width() // 2
    shown = {ov._image.pixelColor(x, (y0 + y1 - 1) // 2).name() for y0, y1, _ in b.spans}
    kinds = {QColor(KIND_STYLE[k][1]).lighter(115).name() for k in (KIND_OP, KIND_PARAM)}
    assert GREY.name() not in shown and shown <= kinds | {
        QColor(KIND_STYLE[k][1]).lighter(115).name() for k in KIND_STYLE}, shown
    # compared, the same bands show parity: green where exact, red where one node differs
    worst = len(m.nodes) // 2
    p.view.set_overlay({i: QColor(RED if i == worst else GREEN) for i in range(len(m.nodes))})
    band = int(b.band_of[int(p.view.display.node_item[worst])])
    y0, y1, _ = next(s for s in b.spans if s[2] == band)
    assert ov._image.pixelColor(x, (y0 + y1 - 1) // 2).name() == RED
    others = {ov._image.pixelColor(x, (a + c - 1) // 2).name() for a, c, k in b.spans
              if k != band}
    assert others == {GREEN}


def test_selecting_a_hidden_node_unfolds_its_group_and_a_click_on_a_box_does_not(qtbot):
    m = model(300)
    p = panel(qtbot, m)
    v = p.view
    inner = next(nd for nd in m.nodes if nd.name and nd.name.count("/") >= 2)
    scope = inner.name.split("/")[0]
    v.collapse_all(True)
    qtbot.waitUntil(lambda: v.is_ready() and v.display.item_node[
        int(v.display.node_item[inner.id])] < 0, timeout=5000)
    assert scope in m.hidden_in(inner.id)
    # the user finds it (Ctrl+F, its id, Enter), as the table or the stepper would select it
    p.open_search()
    qtbot.keyClicks(p.search.edit, f"#{inner.id}")
    with qtbot.waitSignal(v.layout_ready, timeout=5000):
        qtbot.keyClick(p.search.edit, Qt.Key_Return)
    item = int(v.display.node_item[inner.id])
    assert v.display.item_node[item] == inner.id  # its own box again, not a group's
    assert m.hidden_in(inner.id) == []
    assert v.canvas.selected_item == item
    assert v.visible_scene_rect().contains(v.canvas.item_rect(item).center())
    # a click on a collapsed box selects its first node and leaves it folded
    other = next(g for g in sorted(m.collapsed))
    box = int(v.display.node_item[m.groups[other][0]])
    assert v.display.item_node[box] < 0
    v.centerOn(v.canvas.item_rect(box).center())
    got = []
    v.node_selected.connect(lambda nid: (got.append(nid), v.select_node(nid)))  # as the window
    qtbot.mouseClick(v.viewport(), Qt.LeftButton,
                     pos=v.mapFromScene(v.canvas.item_rect(box).center()))
    assert got == [min(m.groups[other])]
    assert other in m.collapsed and v.display.item_node[box] < 0
