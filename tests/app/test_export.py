"""File ▸ Export (issue 25, item 12): the graph as PNG and SVG, the current panel as CSV, driven
through the menu entries with the save dialog answered as a user would."""

from __future__ import annotations

import csv
import gc
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QImage
from PySide6.QtWidgets import QFileDialog

from tapescope.app.qt.export_menu import export_csv
from tapescope.app.qt.main_window import MainWindow
from tapescope.views import export
from tapescope.views.models.ulp_scale import level_color


@pytest.fixture(autouse=True)
def _collect_here():
    """Collect these tests' windows now, while no layout job runs (tests/views/test_scale.py:
    left to a later GC they were finalised during another test's layout, a segfault)."""
    yield
    gc.collect()


@pytest.fixture
def win(qtbot, settings):
    w = MainWindow(settings=settings)
    qtbot.addWidget(w)
    w.resize(1280, 800)
    w.show()
    qtbot.waitExposed(w)
    with qtbot.waitSignal(w.graph.view.layout_ready, timeout=10000):
        assert w.open_workload("mlp")
    w.wait_until_ready()
    yield w
    w.live.close()


def answer_dialog(monkeypatch, path) -> list[str]:
    """The save dialog returns ``path`` (as if typed there); the captions asked are kept."""
    asked = []

    def fake(parent, caption, start, filt):
        asked.append(caption)
        return str(path), filt

    monkeypatch.setattr(QFileDialog, "getSaveFileName", staticmethod(fake))
    return asked


def compare_some(win) -> int:
    """A comparison where one matmul differs by 4 ulp (its stripe drawn in the ulp scale)."""
    mm = next(n.id for n in win.session.tape.nodes if n.op == "matmul")
    win.set_comparison([{"id": i, "value": {"n_diff": 0, "max_ulp": 0}}
                        for i in range(len(win.session.tape))
                        if i != mm] + [{"id": mm, "value": {"n_diff": 12345, "max_ulp": 4}}])
    return mm


def export_menu(win):
    return next(a.menu() for a in win.menuBar().actions()[0].menu().actions()
                if a.menu() is not None and a.text() == "&Export")


def has_colour(img: QImage, color: str, tol: int = 8) -> bool:
    """Does ``img`` hold pixels of ``color``?"""
    img = img.convertToFormat(QImage.Format_RGB32)
    a = np.frombuffer(img.constBits(), dtype=np.uint8).reshape(
        img.height(), img.bytesPerLine() // 4, 4)[:, : img.width(), :3].astype(int)
    c = QColor(color)
    want = np.array([c.blue(), c.green(), c.red()])
    return bool((np.abs(a - want).max(axis=2) <= tol).any())


def test_graph_as_png_holds_the_whole_graph_and_its_parity_colours(qtbot, win, tmp_path,
                                                                  monkeypatch):
    compare_some(win)
    out = tmp_path / "graph"  # no suffix typed: .png is added
    asked = answer_dialog(monkeypatch, out)
    win.act_export_png.trigger()
    assert asked == ["Export graph as PNG"]
    img = QImage(str(out) + ".png")
    assert not img.isNull()
    r = win.graph.view.canvas.boundingRect()
    # the whole graph at full size (the mlp is small), not the part on screen
    assert img.width() == int(r.width() + 2 * export.MARGIN)
    assert img.height() == int(r.height() + 2 * export.MARGIN)
    assert has_colour(img, win.graph.view.canvas.overlay[
        win.graph.view.display.node_item[compare_some(win)]].name())
    assert has_colour(img, level_color(0))  # the exact stripes
    assert "graph written to" in win.statusBar().currentMessage()


def test_graph_as_svg_has_every_node_label(qtbot, win, tmp_path, monkeypatch):
    out = tmp_path / "g.svg"
    answer_dialog(monkeypatch, out)
    win.act_export_svg.trigger()
    root = ET.parse(out).getroot()
    texts = " ".join(t.text or "" for t in root.iter() if t.tag.endswith("text"))
    ops = {n.op for n in win.session.tape.nodes}
    assert ops and all(op in texts for op in ops), (ops, texts[:300])
    assert root.get("viewBox")


def test_a_large_graph_png_is_scaled_to_the_limits():
    assert export.png_scale(800, 600) == 1.0
    s = export.png_scale(600, 200_000)  # a deep tape: the side limit
    assert 600 * s <= export.MAX_SIDE and 200_000 * s <= export.MAX_SIDE + 1e-6
    s = export.png_scale(12_000, 12_000)  # both sides fit, the area does not
    assert 12_000 * 12_000 * s * s <= export.MAX_PIXELS * (1 + 1e-9)


def test_the_current_panel_as_csv_is_the_filtered_table(qtbot, win, tmp_path, monkeypatch):
    mm = compare_some(win)
    table = win.parity.table
    qtbot.keyClicks(win.parity.filter, "matmul")  # the user filters the table ...
    qtbot.mouseClick(table.viewport(), Qt.LeftButton, pos=table.visualRect(
        win.parity.proxy.index(0, 0)).center())  # ... and clicks a row: the current panel
    menu = export_menu(win)
    menu.aboutToShow.emit()
    assert win.act_export_csv.text() == "Parity table as &CSV…"
    out = tmp_path / "rows.csv"
    answer_dialog(monkeypatch, out)
    win.act_export_csv.trigger()
    rows = list(csv.reader(out.open(encoding="utf-8")))
    assert rows[0][:4] == ["id", "op", "name", "shape"]
    assert "value differing" in rows[0]  # the header's words on one line
    body = rows[1:]
    shown = win.parity.proxy.rowCount()
    assert len(body) == shown and all(r[1] == "matmul" for r in body)
    assert shown < len(win.session.tape)  # filtered, not every node
    col = rows[0].index("value differing")
    mine = next(r for r in body if r[0] == str(mm))
    assert mine[col] == "12345"  # a number, not the table's "12,345"


def test_the_graph_panel_exports_its_nodes(qtbot, win, tmp_path, monkeypatch):
    win.graph.view.setFocus()
    export_menu(win).aboutToShow.emit()
    assert win.act_export_csv.text() == "Graph nodes as &CSV…"
    out = tmp_path / "nodes.csv"
    answer_dialog(monkeypatch, out)
    assert export_csv(win)
    rows = list(csv.reader(out.open(encoding="utf-8")))
    assert rows[0] == ["id", "op", "name", "shape", "dtype", "inputs"]
    assert len(rows) == len(win.session.tape) + 1
    last = win.session.tape.nodes[-1]
    assert rows[-1][1] == last.op and rows[-1][5] == " ".join(map(str, last.inputs))


def test_a_formula_in_a_name_is_not_a_formula_in_the_csv():
    assert export._plain("=HYPERLINK(1)") == "'=HYPERLINK(1)"
    assert export._plain("-0.5") == "-0.5" and export._plain("23,296") == "23296"
    assert export._plain("-inf") == "-inf" and export._plain("attn/q") == "attn/q"


def test_an_unwritable_place_says_so_and_keeps_the_window(qtbot, win, tmp_path, monkeypatch):
    answer_dialog(monkeypatch, tmp_path / "no" / "such" / "g.png")
    win.act_export_png.trigger()
    assert "cannot write the PNG" in win.last_error.text()
    win.graph.view.setFocus()
    assert not export_csv(win, str(tmp_path / "missing" / "x.csv"))
    assert "cannot write the CSV" in win.last_error.text()
