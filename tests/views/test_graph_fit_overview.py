"""Fit (F) shows the model (issue 46 item 4): a graph too big to fit readable is folded to the
finest level of its group tree that fits (runs of ``blockN`` above the 238 blocks of the 10k
tape, then blocks, then attn / mlp), so a fitted tape is labelled boxes, never a one-pixel line;
the legend sits below the graph, never over a node; the first-divergence flag covers no box."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import QRectF

from tapescope.views.graph_panel import GraphPanel
from tapescope.views.graph_view import FIT_READABLE
from tapescope.views.models.graph_model import GraphModel, GraphNode

ROOT = Path(__file__).resolve().parents[2]
READABLE_PX = 8.0  # a label at least this high on screen reads


def panel(qtbot, m, w=1000, h=700):
    p = GraphPanel()
    qtbot.addWidget(p)
    p.resize(w, h)
    p.show()
    with qtbot.waitSignal(p.view.layout_ready, timeout=20000):
        p.set_model(m)
    return p


def press_fit(qtbot, p):
    """View ▸ Fit graph (F), then wait until the folded graph (if any) is laid out and fitted."""
    v = p.view
    fit = next(a for a in v.actions_for_menu() if a.text() == "Fit graph")
    fit.trigger()
    qtbot.waitUntil(lambda: v.is_ready() and v._fit_whole, timeout=20000)
    try:  # a scrollbar shown or hidden by the fit resizes the viewport a moment later, and the
        # view fits again (resizeEvent); under load the first check could land in between
        qtbot.waitUntil(lambda: whole_on_screen(v), timeout=5000)
    except qtbot.TimeoutError:
        pass  # the test's own assertions say what is wrong
    v.canvas.record_labels = True  # (the next frame lists the labels it draws)
    v.viewport().repaint()


def readable_labels(v) -> list[str]:
    """The labels the last frame drew at least READABLE_PX high, inside the viewport."""
    vis = v.visible_scene_rect()
    return [t for t, r, px in v.canvas.drawn_labels if px >= READABLE_PX and vis.intersects(r)]


def tape_model(workload) -> GraphModel:
    workload.record(0)
    return GraphModel.from_tape(workload.tape)


def whole_on_screen(v) -> bool:
    return v.visible_scene_rect().adjusted(-1, -1, 1, 1).contains(v.canvas.boundingRect())


def test_fit_on_the_10k_tape_shows_labelled_groups(qtbot):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from transformer10k import Big
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    m = tape_model(Big())
    assert len(m.nodes) > 10_000
    p = panel(qtbot, m)
    v = p.view
    press_fit(qtbot, p)
    assert whole_on_screen(v) and v.scale_factor() >= FIT_READABLE
    groups = [t for t in readable_labels(v) if t.startswith("▸ ")]
    assert len(groups) > 3, v.canvas.drawn_labels
    assert "▸ block0–29" in groups and "▸ head" in groups
    # the loss node is on screen, clear of the legend
    loss = v.canvas.item_rect(int(v.display.node_item[m.loss_id]))
    on_screen = v.mapFromScene(loss).boundingRect().translated(v.viewport().pos())
    assert v.viewport().geometry().contains(on_screen)
    assert not p.legend.geometry().intersects(on_screen)


def test_a_run_unfolds_into_its_blocks_folded(qtbot):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from transformer10k import Big
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    m = tape_model(Big())
    assert len(m.runs) == 8 and m.runs["block0–29"][:2] == ["block0", "block1"]
    assert m.parent_group("block3") == "block0–29" and m.parent_group("block3/attn") == "block3"
    levels = m.fold_levels()
    m.collapsed = set(levels[0])
    d = m.display()
    assert len(d) < 20 and "block0–29" in d.item_group
    m.set_collapsed("block0–29", False)  # per level: its blocks appear, each folded
    d = m.display()
    assert "block0" in d.item_group and "block29" in d.item_group
    assert "block0/attn" not in d.item_group and "block30–59" in d.item_group
    m.reveal(5000)  # selecting a node unfolds every level above it
    assert m.hidden_in(5000) == [] and m.display().item_node.count(5000) == 1


@pytest.mark.parametrize("which", ["mlp", "transformer", "torch_cnn"])
def test_fit_labels_every_small_model(qtbot, which):
    if which == "torch_cnn":
        from tapescope.core import Tape, ops
        from tapescope.core.onnx import Session as OnnxSession
        from tapescope.core.onnx import default_inputs
        from tapescope.core.onnx.importer import import_to_tape

        sess = OnnxSession(ROOT / "resources/models/torch_cnn.onnx", fold=False)
        tape = Tape(dtype=np.float32)
        imp = import_to_tape(sess, tape, default_inputs(sess, 0))
        out = next(iter(imp.outputs.values()))
        loss = ops.sum(out, name="sum")
        m = GraphModel.from_tape(tape, loss.id)
        assert m.group_onnx(imp.onnx_nodes)
    else:
        from tapescope.core import workloads

        m = tape_model(workloads.get(which))
    p = panel(qtbot, m)
    v = p.view
    press_fit(qtbot, p)
    assert whole_on_screen(v) and v.scale_factor() >= FIT_READABLE
    shown = readable_labels(v)
    assert len(shown) >= min(len(v.display), 4), (which, v.canvas.drawn_labels)
    if which == "torch_cnn":
        assert any(t.startswith("▸ Conv") for t in shown)  # its ops stay folded
    vp = v.viewport().geometry()
    assert not vp.intersects(p.legend.geometry())  # the legend is below, never over a node


def chain(n: int) -> GraphModel:
    nodes = [GraphNode(0, "param", (), "x", (8,))]
    nodes += [GraphNode(i, "exp", (i - 1,), f"e{i}", (8,)) for i in range(1, n)]
    return GraphModel(nodes, loss_id=n - 1)


def test_the_first_divergence_flag_covers_no_box(qtbot):
    # a wide rank (every node reads the param) and a tall chain: neighbours on every side
    nodes = [GraphNode(0, "param", (), "x", (8,))]
    nodes += [GraphNode(i, "exp", (0,), f"a{i}", (8,)) for i in range(1, 6)]
    nodes += [GraphNode(i, "exp", (i - 5,), f"b{i}", (8,)) for i in range(6, 11)]
    p = panel(qtbot, GraphModel(nodes, loss_id=10))
    v = p.view
    c = v.canvas
    for node in (3, 8):
        v.set_marks("first", [node])
        it = int(v.display.node_item[node])
        flag = c.flag_rect(it)
        assert c._fm_op.horizontalAdvance("▼ first divergence") <= flag.width()
        others = [c.item_rect(j) for j in range(len(v.display))]
        assert not any(flag.intersects(r) for r in others), (node, flag)
        assert flag.bottom() <= c.item_rect(it).top() and not flag.intersects(
            QRectF(c.item_rect(it)).adjusted(-4, -4, 4, 4))


def test_in_a_short_dock_a_fitted_label_runs_on_beside_its_box_never_onto_a_box(qtbot):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from transformer10k import Big
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    p = panel(qtbot, tape_model(Big()), 800, 380)  # the window's graph dock at 1280x800
    v = p.view
    press_fit(qtbot, p)
    c = v.canvas
    shown = readable_labels(v)
    assert "▸ block0–29" in shown and "▸ block210–237" in shown, shown  # whole, not "▸ bloc…"
    boxes = [c.item_rect(j) for j in range(len(v.display))]
    for text, r, _ in c.drawn_labels:
        own = [b for b in boxes if b.intersects(r)]
        assert len(own) == 1 and own[0].left() < r.left(), (text, r, own)


def test_a_long_edge_runs_around_the_boxes_in_the_gaps_of_each_rank(qtbot):
    from tapescope.core import workloads

    m = tape_model(workloads.get("transformer"))
    p = panel(qtbot, m)
    v = p.view
    c = v.canvas
    lay = c.layout
    edges = np.arange(c._esrc.size)
    span = lay.rank[c._edst] - lay.rank[c._esrc]
    assert (span >= 2).sum() >= 3  # the residuals, the mask ...
    routes = {k: lanes for k, lanes in c._routes(edges).items() if lanes}
    assert set(routes) == set(np.flatnonzero(span >= 2).tolist())
    boxes = [c.item_rect(j) for j in range(len(v.display))]
    crossed = 0
    for k, lanes in routes.items():
        assert len(lanes) == span[k] - 1
        a, b = lay.x[c._esrc[k]], lay.x[c._edst[k]]
        for gx, top, bottom in lanes:
            lane = QRectF(gx - 0.5, top, 1.0, bottom - top)
            assert not any(lane.intersects(r) for r in boxes), (k, gx, top)
        # the straight line it replaces ran through a box
        for j, r in enumerate(boxes):
            if j not in (c._esrc[k], c._edst[k]):
                t = (r.center().y() - lay.y[c._esrc[k]]) / (lay.y[c._edst[k]] - lay.y[c._esrc[k]])
                crossed += 0 < t < 1 and r.left() <= a + (b - a) * t <= r.right()
    assert crossed  # (so the test sees edges that needed routing)
    v.resetTransform()  # a detailed frame draws them
    v.viewport().repaint()


def test_runs_nest_so_that_no_unfold_shows_hundreds_of_boxes():
    # 300 blocks (a 100k tape has 2,380): 8 runs of ~38, each cut again into runs of ~5
    nodes = [GraphNode(0, "param", (), "x", (4,))]
    for b in range(300):
        nodes += [GraphNode(len(nodes), "exp", (len(nodes) - 1,), f"block{b}/y", (4,))]
    m = GraphModel(nodes, loss_id=len(nodes) - 1)
    top = [r for r in m.runs if m.parent_group(r) is None]
    assert len(top) == 8 and top[0] == "block0–37"
    inner = [r for r in m.runs if m.parent_group(r) == "block0–37"]
    assert len(inner) == 8 and inner[0] == "block0–4" and m.parent_group("block3") == "block0–4"
    m.collapsed = set(m.fold_levels()[0])
    assert len(m.display()) == 1 + 8
    m.set_collapsed("block0–37", False)
    assert len(m.display()) == 1 + 7 + 8
    m.set_collapsed("block0–4", False)
    assert len(m.display()) == 1 + 7 + 7 + 5 and m.hidden_in(3) == ["block2"]  # (folded)
    few = GraphModel(nodes[:31], loss_id=30)  # 30 blocks: no runs
    assert few.runs == {} and few.fold_levels()[0] == {f"block{b}" for b in range(30)}
