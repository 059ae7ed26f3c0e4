"""Graph view: layout off the GUI thread, clicks select, culling, collapse, search, zoom."""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QPointF, QRectF, Qt

from tapescope.views.graph_panel import GraphPanel
from tapescope.views.models.graph_model import GraphModel, GraphNode
from tapescope.views.models.synthetic import transformer_like


def model(n: int = 400) -> GraphModel:
    ops, ins, names = transformer_like(n)
    nodes = [GraphNode(i, o, tuple(x), nm, (4, 8)) for i, (o, x, nm) in
             enumerate(zip(ops, ins, names, strict=True))]
    return GraphModel(nodes, loss_id=len(nodes) - 1)


def panel(qtbot, m):
    p = GraphPanel()
    qtbot.addWidget(p)
    p.resize(900, 700)
    p.show()
    with qtbot.waitSignal(p.view.layout_ready, timeout=5000):
        p.set_model(m)  # computed in the thread pool
    return p


def click_node(qtbot, view, node_id: int) -> None:
    item = int(view.display.node_item[node_id])
    r = view.canvas.item_rect(item)
    view.centerOn(r.center())
    qtbot.mouseClick(view.viewport(), Qt.LeftButton, pos=view.mapFromScene(r.center()))


def test_clicking_a_node_selects_it(qtbot):
    m = model()
    p = panel(qtbot, m)
    v = p.view
    assert v.is_ready() and len(v.display) == len(m.nodes)
    for nid in (7, 123):
        with qtbot.waitSignal(p.node_selected) as sig:
            click_node(qtbot, v, nid)
        assert sig.args == [nid] and v.selected_node == nid
        assert v.canvas.selected_item == int(v.display.node_item[nid])
    # a click on empty background selects nothing
    with qtbot.assertNotEmitted(p.node_selected):
        qtbot.mouseClick(v.viewport(), Qt.LeftButton,
                         pos=v.mapFromScene(QPointF(-30, -30)))


def test_culling_matches_brute_force(qtbot):
    p = panel(qtbot, model(600))
    c = p.view.canvas
    lay = c.layout
    for r in (QRectF(0, 0, 500, 400), QRectF(200, 3000, 900, 2500), QRectF(-100, -100, 5, 5)):
        got = set(c.visible_items(r).tolist())
        hit = ((lay.x + 85 >= r.left()) & (lay.x - 85 <= r.right())
               & (lay.y + 23 >= r.top()) & (lay.y - 23 <= r.bottom()))
        assert got == set(np.flatnonzero(hit).tolist())


def test_zoom_fit_and_paint_at_every_level(qtbot):
    p = panel(qtbot, model(300))
    v = p.view
    v.fit()
    s0 = v.scale_factor()
    v.zoom(2.0)
    assert abs(v.scale_factor() - 2 * s0) < 1e-9
    for s in (0.01, 0.2, 0.5, 1.5):  # every level-of-detail branch paints without error
        v.resetTransform()
        v.scale(s, s)
        before = v.canvas.frames_painted
        v.viewport().repaint()
        assert v.canvas.frames_painted > before


def test_collapse_and_expand_a_scope(qtbot):
    m = model(200)
    p = panel(qtbot, m)
    v = p.view
    n_full = len(v.display)
    with qtbot.waitSignal(v.layout_ready, timeout=5000):
        v.toggle_group("block0", True)
    assert len(v.display) == n_full - len(m.groups["block0"]) + 1
    g = v.display.item_group.index("block0")
    with qtbot.waitSignal(v.layout_ready, timeout=5000):
        r = v.canvas.item_rect(g)
        v.centerOn(r.center())
        qtbot.mouseDClick(v.viewport(), Qt.LeftButton, pos=v.mapFromScene(r.center()))
    assert len(v.display) == n_full and not m.collapsed


def test_search_bar_finds_and_selects(qtbot):
    m = model(300)
    p = panel(qtbot, m)
    p.open_search()
    assert p.search.isVisible()
    qtbot.keyClicks(p.search.edit, "block1/mlp/down")
    assert p.search.hits == m.search("block1/mlp/down") and len(p.search.hits) == 1
    assert p.view.canvas.search_items == {int(p.view.display.node_item[p.search.hits[0]])}
    with qtbot.waitSignal(p.node_selected) as sig:
        qtbot.keyClick(p.search.edit, Qt.Key_Return)
    assert sig.args == [p.search.hits[0]] and p.view.selected_node == p.search.hits[0]


def test_edge_culling_matches_brute_force(qtbot):
    p = panel(qtbot, model(600))
    c = p.view.canvas
    x, y = c.layout.x, c.layout.y
    s, d = c._esrc, c._edst
    for r in (QRectF(0, 0, 500, 400), QRectF(200, 3000, 900, 2500), QRectF(0, 9000, 300, 50)):
        got = set(c.visible_edges(r).tolist())
        y0, y1 = np.minimum(y[s], y[d]), np.maximum(y[s], y[d])
        x0, x1 = np.minimum(x[s], x[d]), np.maximum(x[s], x[d])
        hit = ((y0 <= r.bottom() + 46) & (y1 >= r.top() - 46) & (x1 >= r.left())
               & (x0 <= r.right()))
        assert got == set(np.flatnonzero(hit).tolist())


def test_same_structure_keeps_the_view_and_hits_the_cache(qtbot):
    from tapescope.views.models.layout import CACHE

    p = panel(qtbot, model(300))
    v = p.view
    v.zoom(1.7)
    v.centerOn(400, 2500)
    qtbot.wait(20)  # let the scroll bars settle first
    t0, c0 = v.transform(), v.visible_scene_rect().center()
    hits = CACHE.hits
    with qtbot.waitSignal(v.layout_ready, timeout=5000):
        v.set_model(model(300))  # the next episode: same structure, new values
    assert CACHE.hits == hits + 1
    assert v.transform() == t0 and (v.visible_scene_rect().center() - c0).manhattanLength() < 2


def test_extra_groups_collapse_like_scopes():
    m = model(120)
    m.set_extra_groups({"fused/k0": [3, 4, 5]})
    m.set_collapsed("fused/k0", True)
    d = m.display()
    assert d.node_item[3] == d.node_item[4] == d.node_item[5]
    assert d.labels[int(d.node_item[3])][1] == "fused/k0"
    m.set_extra_groups({})
    assert "fused/k0" not in m.groups and "fused/k0" not in m.collapsed
    import pytest

    with pytest.raises(ValueError, match="not on the tape"):
        m.set_extra_groups({"bad": [10**6]})


def test_overview_click_moves_the_view(qtbot):
    p = panel(qtbot, model(400))
    v, ov = p.view, p.overview
    assert ov._image is not None and ov.isVisible()
    before = v.visible_scene_rect().center().y()
    qtbot.mouseClick(ov, Qt.LeftButton, pos=ov.rect().center())
    r = v.canvas.boundingRect()
    after = v.visible_scene_rect().center().y()
    assert after != before and abs(after - r.center().y()) < v.visible_scene_rect().height()


def test_overlay_takes_each_boxs_worst_colour_as_the_per_node_loop_did(qtbot):
    from PySide6.QtGui import QColor

    from tapescope.views.graph_view import severity

    m = model(300)
    m.collapsed = {g for g in m.groups if g.endswith("/attn")}
    p = panel(qtbot, m)
    v = p.view
    rng = np.random.default_rng(4)
    # exact green, two ambers of the same green (equal severity: the first given wins), red,
    # NaN violet; some as QColors; ids off the tape are ignored
    pal = ["#16a34a", "#f59e0b", "#e09e0b", "#dc000b", "#7c3aed"]
    colors = {int(i): (pal[k] if k % 2 else QColor(pal[k])) for i, k in zip(
        rng.permutation(len(m.nodes))[:250].tolist(), rng.integers(0, 5, 250).tolist(),
        strict=True)}
    colors[10**6] = "#dc000b"
    v.set_overlay(colors)
    want: dict[int, str] = {}  # the former loop
    ni = v.display.node_item
    for k, c in colors.items():
        if 0 <= k < len(ni):
            name = c if isinstance(c, str) else c.name(QColor.HexArgb)
            it, cur = int(ni[k]), want.get(int(ni[k]))
            if cur is None or severity(QColor(name)) > severity(QColor(cur)):
                want[it] = name
    got = {it: q.name(QColor.HexArgb) for it, q in v.canvas.overlay.items()}
    assert got == {it: QColor(c).name(QColor.HexArgb) for it, c in want.items()}
    assert any(v.display.item_node[it] < 0 for it in got)  # folded boxes took a child's colour


def test_a_window_in_a_cycle_outlives_its_test_body_until_teardown(qtbot, monkeypatch):
    """pytest-qt holds a test's widgets weakly; a window kept only by its own cycles was freed by
    whichever collection came next, once inside its own minimap's event handler during
    pytest-qt's processEvents (a deleted receiver, then a segfault in full runs). The conftest
    holds what a test gives qtbot until its teardown: a collection inside a child's handler,
    after the test has let go of the window, frees nothing there."""
    import gc
    import weakref

    from PySide6.QtCore import QEvent
    from PySide6.QtWidgets import QApplication

    from tapescope.views.minimap import Overview

    collected_in_handler: list[int] = []
    handler = Overview.event

    def collecting(self, ev):  # noqa: ANN001
        if ev.type() == QEvent.User:
            collected_in_handler.append(gc.collect())
        return handler(self, ev)

    monkeypatch.setattr(Overview, "event", collecting)
    p = panel(qtbot, model(200))
    alive = weakref.ref(p)
    gc.disable()  # no collection before the handler's own
    try:
        QApplication.postEvent(p.overview, QEvent(QEvent.User))
        del p
        assert alive() is not None  # its cycles keep it (so only a collection frees it)
    finally:
        gc.enable()
    QApplication.instance().processEvents()  # an exception in the handler fails this test
    assert collected_in_handler and alive() is not None and alive().overview.isVisible()
