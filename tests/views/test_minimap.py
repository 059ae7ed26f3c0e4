"""The minimap of a deep tape: bands by scope (the heatmap's runs), each coloured by its worst
node; a click on a band goes to that node; the view's frame stays visible however thin."""

from __future__ import annotations

import gc
import random

import numpy as np
import pytest
from PySide6.QtCore import QEvent, QPoint, Qt
from PySide6.QtGui import QColor, QHelpEvent
from PySide6.QtWidgets import QApplication, QToolTip

from tapescope.views.graph_panel import GraphPanel
from tapescope.views.minimap import BAND_PX, FRAME, GREY
from tapescope.views.models.graph_model import GraphModel, GraphNode
from tapescope.views.models.scope_runs import run_label, scope_runs
from tapescope.views.models.synthetic import transformer_like
from tapescope.views.training_view import TrainingPanel

GREEN, AMBER, RED, VIOLET = "#16a34a", "#f59e0b", "#dc2626", "#7c3aed"


@pytest.fixture(autouse=True)
def _collect_here():
    yield
    gc.collect()  # big widgets go now, not during another test's layout (see test_scale.py)


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


def top_scope(name: str | None) -> str:
    return name.split("/")[0] if name and "/" in name else ""


def former_row_starts(names, n: int, budget: int):
    """The heatmap's Python spelling before the runs were shared (split and join per level):
    the oracle of the numpy one."""
    if n <= budget:
        return None
    even = np.unique(np.arange(budget) * n // budget)
    split = [(nm or "").split("/")[:-1] for nm in names]
    if all(not "/".join(p) for p in split):
        return even  # no scope anywhere (it was one run, or a NameError)
    cand = None
    for depth in range(max(len(p) for p in split), 0, -1):
        ks = np.array(["/".join(p[:depth]) for p in split])
        cand = np.flatnonzero(np.r_[True, ks[1:] != ks[:-1]])
        if cand.size <= budget:
            return cand
    return np.unique(cand[np.searchsorted(cand, even, side="right") - 1])


def test_scope_runs_match_the_former_spelling_on_random_names():
    rng = random.Random(0)
    parts = ["a", "b", "blk", ""]
    for _ in range(3000):
        n = rng.randint(1, 50)
        names = ["/".join(rng.choice(parts) for _ in range(k)) if k else rng.choice(["x", None])
                 for k in (rng.randint(0, 4) for _ in range(n))]
        if rng.random() < 0.5:
            names.sort(key=lambda s: s or "")  # scopes in runs, as on a tape
        budget = rng.randint(1, 30)
        want, got = former_row_starts(names, n, budget), scope_runs(names, n, budget)
        assert (want is None and got is None) or np.array_equal(want, got), (names, budget)


def test_run_labels_name_the_scopes():
    names = ["block3/attn/q", "block3/attn/k", "block3/res1", "block9/res2", "x"]
    assert run_label(names, 0, 2) == "block3/attn"
    assert run_label(names, 0, 3) == "block3"
    assert run_label(names, 0, 4) == "block3 … block9"
    assert run_label(names, 4, 5) == "x"


def test_the_minimap_draws_a_deep_tape_as_bands_of_whole_scopes_like_the_heatmap(qtbot):
    m = model(10_000)
    p = panel(qtbot, m)
    ov = p.overview
    assert ov.bands
    b = ov.band_layout()
    names = [nd.name for nd in m.nodes]  # nothing collapsed: one item per node, tape order
    budget = ov.height() // BAND_PX
    assert np.array_equal(b.starts, scope_runs(names, len(names), budget))
    assert 10 <= b.starts.size <= budget  # a few dozen bands, not 10,000 stripes
    # every band is whole top-level scopes: it starts where a scope starts
    assert all(s == 0 or top_scope(names[s]) != top_scope(names[s - 1])
               for s in b.starts.tolist())
    # the heatmap's rows over the same names and budget are the same runs
    t = TrainingPanel()
    qtbot.addWidget(t)
    t.set_node_names(names)
    assert np.array_equal(t._row_starts(len(names), budget), b.starts)
    # the bands tile the minimap top to bottom, in tape order
    spans = b.spans
    assert spans[0][0] == 0 and spans[-1][1] == ov.height()
    assert all(a[1] == c[0] for a, c in zip(spans, spans[1:], strict=False))
    assert [s[2] for s in spans] == sorted(s[2] for s in spans)
    # hovering a band names its scopes ("block63 … block71") and counts its nodes
    y0, y1, band = spans[len(spans) // 2]
    at = QPoint(ov.width() // 2, (y0 + y1) // 2)
    QApplication.sendEvent(ov, QHelpEvent(QEvent.ToolTip, at, ov.mapToGlobal(at)))
    lo, hi = int(b.starts[band]), int(b.starts[band + 1])
    want = f"{top_scope(names[lo])} … {top_scope(names[hi - 1])}\n{hi - lo:,} nodes"
    assert QToolTip.text().startswith(want), (QToolTip.text(), want)


def test_a_band_shows_its_worst_node_and_a_click_goes_there(qtbot):
    m = model(10_000)
    p = panel(qtbot, m)
    v, ov = p.view, p.overview
    b = ov.band_layout()
    n = len(m.nodes)
    colors = {i: GREEN for i in range(n)}
    mid = b.starts.size // 2
    lo, hi = int(b.starts[mid]), int(b.starts[mid + 1])
    colors[lo + 5] = AMBER
    worst = hi - 7
    colors[worst] = RED  # a band's colour is its worst node, wherever it sits in the band
    nan_band = b.starts.size - 3
    colors[int(b.starts[nan_band]) + 2] = VIOLET  # a NaN mismatch beats any ulp
    for i in range(int(b.starts[1]), int(b.starts[2])):
        del colors[i]  # a band with nothing compared
    v.set_overlay({k: QColor(c) for k, c in colors.items()})
    img = ov._image
    x = ov.width() // 2

    def band_pixel(band: int) -> str:
        y0, y1, _ = next(s for s in b.spans if s[2] == band)
        return img.pixelColor(x, (y0 + y1 - 1) // 2).name()

    assert band_pixel(mid) == RED
    assert band_pixel(nan_band) == VIOLET
    assert band_pixel(1) == GREY.name()
    assert band_pixel(0) == GREEN
    assert "bits differ" in ov.band_tip(mid) and "nothing compared" in ov.band_tip(1)
    # click the red band: the view goes to its red node
    y0, y1, _ = next(s for s in b.spans if s[2] == mid)
    v.centerOn(v.canvas.item_rect(0).center())
    qtbot.mouseClick(ov, Qt.LeftButton, pos=QPoint(x, (y0 + y1) // 2))
    item = int(v.display.node_item[worst])
    assert v.visible_scene_rect().contains(v.canvas.item_rect(item).center())
    # a green band is plain navigation: the view centres where the click lands
    y0, y1, _ = next(s for s in b.spans if s[2] == 0)
    qtbot.mouseClick(ov, Qt.LeftButton, pos=QPoint(x, (y0 + y1) // 2))
    r, (_, sy) = v.canvas.boundingRect(), ov._scale()
    assert abs(v.visible_scene_rect().center().y() - (r.top() + (y0 + y1) // 2 / sy)) < 1 / sy


def test_the_frame_is_visible_on_a_100k_tape(qtbot):
    m = model(100_000)
    p = panel(qtbot, m)
    v, ov = p.view, p.overview
    v.set_overlay({i: QColor(GREEN) for i in range(len(m.nodes))})
    v.centerOn(v.canvas.boundingRect().center())
    qtbot.wait(1)
    f = ov.frame_rect()
    assert f.height() < 0.5  # the visible area is a fraction of a pixel here...
    img = ov.grab().toImage()
    cy = int(f.center().y())
    blue = {(x, y) for x in range(ov.width()) for y in range(cy - 6, cy + 7)
            if img.pixelColor(x, y).name() == FRAME.name()}
    # ...but it is drawn as a box at least 6 px tall, edge to edge, with a notch at each side
    rows = sorted({y for _, y in blue})
    assert rows[-1] - rows[0] >= 6
    assert sum(1 for _, y in blue if y == rows[0]) > ov.width() // 2
    assert img.pixelColor(1, cy).name() == FRAME.name()
    assert img.pixelColor(ov.width() - 2, cy).name() == FRAME.name()


def test_the_shared_runs_and_the_table_rows_import_without_qt():
    import subprocess
    import sys
    from pathlib import Path

    code = """
import importlib, sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("PySide6", "shiboken6", "pyqtgraph"):
            raise ImportError("Qt is blocked: " + name)
sys.meta_path.insert(0, Block())
for m in ("views.models.scope_runs", "views.models.parity_rows", "views.models.search"):
    importlib.import_module(m)
print("ok")
"""
    r = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[2],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-3000:]


def test_collapsed_scopes_are_counted_by_their_nodes_and_colour_their_band(qtbot):
    m = model(10_000)
    p = panel(qtbot, m)
    v, ov = p.view, p.overview
    m.collapsed = {g for g in m.groups if g.count("/") == 1}  # every block's attn and mlp
    v.relayout(wait=True)
    v.fit(readable=True)  # the top of the tape: the frame sits at the minimap's top edge
    b = ov.band_layout()
    assert b is not None and len(v.display) < len(m.nodes) // 5
    assert sum(b.size(k) for k in range(b.starts.size)) == len(m.nodes)
    bad = m.groups["block150/mlp"][2]
    v.set_overlay({i: QColor(RED if i == bad else GREEN) for i in range(len(m.nodes))})
    item = int(v.display.node_item[bad])
    assert v.display.item_group[item] == "block150/mlp"
    band = int(b.band_of[item])
    y0, y1, _ = next(s for s in b.spans if s[2] == band)
    assert ov._image.pixelColor(ov.width() // 2, (y0 + y1 - 1) // 2).name() == RED
    assert {s[2] for s in b.spans if ov._image.pixelColor(
        ov.width() // 2, (s[0] + s[1] - 1) // 2).name() == RED} == {band}
    # the frame is drawn whole at the top: its top line below the border, not clipped
    img = ov.grab().toImage()
    rows = [y for y in range(ov.height()) if img.pixelColor(ov.width() // 2, y).name()
            == FRAME.name()]
    assert rows and rows[0] >= 1 and rows[-1] - rows[0] >= 6
