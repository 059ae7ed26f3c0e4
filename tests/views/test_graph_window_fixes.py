"""Graph fixes from issue 13: Fit graph fits a tall graph, the overlays stay on screen and the
selection survives a resize, labels start right of the parity stripe, inherited error is
drawn faded and introduced error outlined."""

from __future__ import annotations

from PySide6.QtCore import QRect
from PySide6.QtGui import QColor

from tapescope.views.graph_canvas import MUTED_ALPHA, STRIPE_W
from tapescope.views.graph_panel import GraphPanel
from tapescope.views.models.graph_model import GraphModel, GraphNode


def chain(n: int) -> GraphModel:
    """A tall tape: one long chain (every node one rank below the last)."""
    nodes = [GraphNode(0, "param", (), "x", (8, 8, 8))]
    nodes += [GraphNode(i, "exp", (i - 1,), f"e{i}", (8, 8, 8)) for i in range(1, n)]
    return GraphModel(nodes, loss_id=n - 1)


def panel(qtbot, m, w=900, h=600):
    p = GraphPanel()
    qtbot.addWidget(p)
    p.resize(w, h)
    p.show()
    with qtbot.waitSignal(p.view.layout_ready, timeout=5000):
        p.set_model(m)
    return p


def test_fit_graph_shows_all_of_a_tall_graph(qtbot):
    p = panel(qtbot, chain(300))
    v = p.view
    whole = v.canvas.boundingRect()
    assert not v.visible_scene_rect().contains(whole)  # opened readable: the top only
    fit = next(a for a in v.actions_for_menu() if a.text() == "Fit graph")
    fit.trigger()
    vis = v.visible_scene_rect().adjusted(-1, -1, 1, 1)
    assert vis.contains(whole), (vis, whole)


def test_a_resize_keeps_the_overlays_on_screen_and_the_selection(qtbot):
    p = panel(qtbot, chain(60), 1000, 700)
    v = p.view
    v.select_node(40)
    for w, h in ((640, 420), (1200, 800), (500, 360)):
        p.resize(w, h)
        qtbot.waitUntil(lambda w=w, h=h: p.size().width() == w and p.size().height() == h)
        qtbot.waitUntil(lambda: v.rect().contains(p.legend.geometry()) and not
                        v.viewport().geometry().intersects(p.legend.geometry()))  # (its strip)
        vp = v.viewport().geometry()
        assert p.overview.isVisible() and vp.contains(p.overview.geometry())
        # the legend: on screen, in its strip below the graph, never over it (issue 46)
        lg = p.legend.geometry()
        assert p.legend.isVisible() and v.rect().contains(lg), (w, h, lg, v.rect())
        assert not vp.intersects(lg) and lg.top() >= vp.bottom(), (w, h, lg, vp)
        assert v.selected_node == 40 and v.canvas.selected_item == int(v.display.node_item[40])
        assert v.visible_scene_rect().contains(v.canvas.item_rect(v.canvas.selected_item))


def grab_item(qtbot, p, node: int):
    v = p.view
    r = v.canvas.item_rect(int(v.display.node_item[node]))
    v.centerOn(r.center())
    qtbot.wait(1)
    img = v.viewport().grab().toImage()
    tl = v.mapFromScene(r.topLeft())
    br = v.mapFromScene(r.bottomRight())
    return img, QRect(tl, br), v.scale_factor()


def test_labels_start_right_of_the_stripe_and_inherited_error_is_faded(qtbot):
    p = panel(qtbot, chain(6), 900, 600)
    v = p.view
    red = QColor("#dc2626")
    v.set_overlay({2: red, 3: red}, muted={3}, introduced={2})
    img, box, s = grab_item(qtbot, p, 2)
    stripe = int(STRIPE_W * s)
    # inside the stripe every pixel is the stripe's colour: no label text drawn over it
    ys = range(box.top() + 3, box.bottom() - 3)
    xs = range(box.left() + int(3 * s) + 1, box.left() + stripe - 1)
    colours = {img.pixelColor(x, y).name() for x in xs for y in ys}
    assert colours == {red.name()}, colours
    # the label is there, right of the stripe (dark text pixels)
    dark = [(x, y) for x in range(box.left() + stripe, box.right() - 4) for y in ys
            if img.pixelColor(x, y).lightness() < 90]
    assert dark and min(x for x, _ in dark) >= box.left() + stripe
    # an inherited node's stripe is the same colour, faded
    img3, box3, _ = grab_item(qtbot, p, 3)
    c = img3.pixelColor(box3.left() + stripe // 2, box3.center().y())
    assert c.name() != red.name() and c.red() > c.green()  # still reddish, lighter
    assert 0.15 < MUTED_ALPHA < 0.6
    # the introduced one is outlined in its colour
    edge = img.pixelColor(box.right() - 2, box.center().y())
    assert edge.name() == red.name(), edge.name()


def test_the_minimap_of_a_deep_tape_shows_where_it_differs_not_barcode(qtbot):
    from tapescope.views.models.synthetic import transformer_like

    ops, ins, names = transformer_like(10_000)
    m = GraphModel([GraphNode(i, o, tuple(x), nm, (4, 8)) for i, (o, x, nm) in
                    enumerate(zip(ops, ins, names, strict=True))], loss_id=9_999)
    p = panel(qtbot, m)
    ov = p.overview
    assert ov.bands  # 10,000 nodes deep: bands, not one dot per node
    red = QColor("#dc2626")
    v = p.view
    v.set_overlay({i: (red if 6000 <= i < 6100 else QColor("#16a34a")) for i in range(10_000)})
    v.set_marks("first", [6000])
    img = ov._image
    sx, sy = ov._scale()
    top = v.canvas.boundingRect().top()
    y_bad = int((v.canvas.layout.y[int(v.display.node_item[6050])] - top) * sy)
    y_ok = int((v.canvas.layout.y[int(v.display.node_item[2000])] - top) * sy)
    mid = img.width() // 2
    assert img.pixelColor(mid, y_bad).name() == red.name()
    assert img.pixelColor(mid, y_ok).name() == "#16a34a"
    y_first = int((v.canvas.layout.y[int(v.display.node_item[6000])] - top) * sy)
    assert img.pixelColor(1, y_first).name() == "#111827"  # the first divergence: a line
