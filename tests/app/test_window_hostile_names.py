"""Names, attributes and messages from a file reach the window as plain text, cut (issue 49).

A node named ``<img src="/dev/zero">`` aborted the window (std::bad_alloc, 2.2 GB) on
``--screenshot``, on selecting its consumer and on the parity table's tooltip; one named
``<img src="/some/file.png">`` made the window read that file; a 100 KB name made it
781,849 px wide. Here the window opens hostile tapes and models, is clicked through (every
node selected, the backward stepper stepped, tooltips hovered), and then every widget is walked
(``views.models.plain`` is the one helper the views use).
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from PySide6.QtCore import QEvent, QPoint, Qt, QTimer
from PySide6.QtGui import QHelpEvent, QImage
from PySide6.QtWidgets import (
    QAbstractItemView,
    QApplication,
    QGraphicsTextItem,
    QGraphicsView,
    QLabel,
    QMessageBox,
    QProgressDialog,
    QTabBar,
    QTextEdit,
    QToolTip,
    QWidget,
)

from tapescope.core import Tape, ops, tapefile
from tapescope.views.models.plain import MAX_TIP, cut, html, message, tip

IMG = '<img src="/dev/zero">'
BOLD = "<b>bold</b>"
RAW = ("<img", "<b>bold")  # the markup as the file wrote it: never handed to Qt as HTML
MAX_WIDTH = 4000  # px: the window with a 100 KB name (it was 781,849)


# ---- hostile files ----------------------------------------------------------------------------
def probe_png(tmp_path) -> str:
    """A 600x600 picture: a label that loaded it as an <img> would be ~600 px tall."""
    path = str(tmp_path / "probe.png")
    img = QImage(600, 600, QImage.Format_RGB32)
    img.fill(0xFF0000)
    assert img.save(path)
    return path


def hostile_tape(tmp_path) -> str:
    probe = f'<img src="{probe_png(tmp_path)}">'
    t = Tape(dtype=np.float64)
    with t.scope(BOLD):  # a group (a box, a context menu entry, a minimap band) named in markup
        x = t.param(np.ones((2, 3)), name=IMG)
        w = t.param(np.full((3, 2), 0.5), name=BOLD + "&amp;")
        y = ops.matmul(x, w, name=probe)
    z = ops.relu(y, name=IMG + BOLD)
    loss = ops.mean(z, name="<i>loss</i>")
    t.backward(loss)
    path = str(tmp_path / "hostile.tape")
    tapefile.save(t, path, meta={"loss": loss.id})
    return path


def hostile_model(path, name: str = IMG, text: str | None = None) -> str:
    """Conv + Relu whose node, initializer and tensor names are ``name``; with ``text``, a
    Constant whose string attribute is ``text`` (no tape form: the model opens read-only and
    the Inspector lists the attribute)."""
    wgt = numpy_helper.from_array(np.ones((2, 1, 3, 3), np.float32), name + "W")
    bias = numpy_helper.from_array(np.zeros(2, np.float32), BOLD + "b")
    nodes = [helper.make_node("Conv", ["x", name + "W", BOLD + "b"], [name + "y"], name=name,
                              kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", [name + "y"], [BOLD + "out"], name=BOLD)]
    outs = [helper.make_tensor_value_info(BOLD + "out", TensorProto.FLOAT, [1, 2, 4, 4])]
    if text is not None:
        nodes.append(helper.make_node("Constant", [], [name + "s"], name=name + "c",
                                      value_string=text))
        outs.append(helper.make_tensor_value_info(name + "s", TensorProto.STRING, []))
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 1, 4, 4])], outs, [wgt, bias])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return str(path)


# ---- driving and walking the window -----------------------------------------------------------
def open_and_wait(qtbot, win, path) -> None:
    with qtbot.waitSignal(win.graph.view.layout_ready, timeout=10_000):
        assert win.open_file(str(path))


def click_through(qtbot, win) -> None:
    """Select every node (the Inspector, the table, the graph follow), step backward, hover
    the parity table's cells (Qt's own tooltip, as the mouse shows it)."""
    for i in range(len(win.session.tape)):
        win.select_node(i)
        QApplication.processEvents()
    for _ in range(4):
        win.stepper_panel.step()
    table = win.parity.table
    for row in range(table.model().rowCount()):
        for col in (1, 2):
            rect = table.visualRect(table.model().index(row, col))
            if rect.isValid():
                at = rect.center()
                QApplication.sendEvent(table.viewport(), QHelpEvent(
                    QEvent.ToolTip, at, table.viewport().mapToGlobal(at)))
                QApplication.processEvents()
    QToolTip.hideText()
    QApplication.processEvents()


def has_raw(text) -> bool:
    return isinstance(text, str) and any(r in text for r in RAW)


def walk(win) -> list[str]:
    """What shows a file's markup as markup, or a name uncut: every widget of the window."""
    bad = []
    for w in [win, *win.findChildren(QWidget)]:
        what = f"{type(w).__name__} {w.objectName()!r}"
        if has_raw(w.toolTip()):
            bad.append(f"{what}: tooltip {w.toolTip()[:120]!r}")
        if isinstance(w, QLabel):
            if w.textFormat() != Qt.PlainText and has_raw(w.text()):
                bad.append(f"{what}: rich text {w.text()[:120]!r}")
            if len(w.text()) > 4 * MAX_TIP:
                bad.append(f"{what}: {len(w.text())} characters")
        if isinstance(w, QMessageBox) and w.textFormat() != Qt.PlainText:
            bad.append(f"{what}: a message box reading its text as HTML")
        if isinstance(w, QTextEdit) and "<img" in w.toHtml():
            bad.append(f"{what}: an image in its document")
        if isinstance(w, QTabBar):
            bad += [f"{what}: tab {i}" for i in range(w.count())
                    if has_raw(w.tabToolTip(i)) or len(w.tabText(i)) > 200]
        if isinstance(w, QAbstractItemView) and w.model() is not None:
            m = w.model()
            for r in range(min(m.rowCount(), 200)):
                for c in range(m.columnCount()):
                    i = m.index(r, c)
                    if has_raw(m.data(i, Qt.ToolTipRole)):
                        bad.append(f"{what}: cell ({r}, {c}) tooltip {m.data(i, Qt.ToolTipRole)!r}")
                    shown = m.data(i, Qt.DisplayRole)
                    if isinstance(shown, str) and len(shown) > 400:
                        bad.append(f"{what}: cell ({r}, {c}) {len(shown)} characters")
        if isinstance(w, QGraphicsView) and w.scene() is not None:
            for item in w.scene().items():  # pyqtgraph's labels are QGraphicsTextItems
                if isinstance(item, QGraphicsTextItem) and "<img" in item.toHtml():
                    bad.append(f"{what}: a text item holding an <img>")
    return bad


def grab_ok(win, path) -> None:
    img = win.grab()
    assert not img.isNull() and img.save(str(path))
    assert os.path.getsize(path) > 1000


# ---- the tests --------------------------------------------------------------------------------
def test_the_helpers_cut_and_escape():
    assert cut("attn/q") == "attn/q" and tip("plain words\nline 2") == "plain words\nline 2"
    assert html(IMG) == "&lt;img src=&quot;/dev/zero&quot;&gt;"
    t = tip(f"name: {IMG}\n{BOLD}")
    assert t.startswith("<p") and "&lt;img" in t and not has_raw(t) and "\n" in t
    assert tip("a & b") != "a & b" and "&amp;" in tip("a & b")  # (Qt would read "&lt;" as HTML)
    long = "N" * 100_000
    assert len(cut(long)) == 120 and cut(long).endswith("…(100000 characters)")
    assert len(tip(long)) <= MAX_TIP and len(message(long)) <= 4096


@pytest.mark.parametrize("kind", ["tape", "onnx", "onnx read-only"])
def test_names_in_markup_are_shown_as_text(qtbot, win, tmp_path, kind):
    if kind == "tape":
        path = hostile_tape(tmp_path)
    else:
        path = hostile_model(tmp_path / "m.onnx", text=None if kind == "onnx" else
                             BOLD + IMG + "&lt;i&gt;")
    open_and_wait(qtbot, win, path)
    click_through(qtbot, win)
    assert walk(win) == []
    # the names are there, as the characters the file holds (escaped in the rich-text labels)
    labels = []
    for i in range(len(win.session.tape)):
        win.select_node(i)
        labels.append(win.inspector.header.text() + win.inspector.inputs.text())
        assert win.inspector.header.sizeHint().height() < 300  # no picture was loaded
        assert win.inspector.inputs.sizeHint().height() < 300
        assert walk(win) == []
    text = " ".join(labels)
    assert "&lt;img src=&quot;" in text and "&lt;b&gt;bold&lt;/b&gt;" in text
    if kind == "onnx read-only":  # the string attribute, escaped (its own &lt; too)
        assert "&lt;b&gt;bold&lt;/b&gt;&lt;img" in text and "&amp;lt;i&amp;gt;" in text
    rows = win.parity.model
    tips = [rows.data(rows.index(r, 2), Qt.ToolTipRole) for r in range(rows.rowCount())]
    assert any(t and "&lt;img" in t for t in tips), tips
    if kind == "tape":  # the picture's path in a name: never read (the header stays one line)
        assert any("probe.png" in t for t in labels)
    grab_ok(win, tmp_path / "window.png")


def test_an_error_that_quotes_a_name_is_plain_text(qtbot, win, tmp_path):
    # Add of [2] and [3]: the run fails naming the node; the error box quotes it
    g = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], [IMG + "y"], name=IMG + BOLD)], "g",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info(IMG + "y", TensorProto.FLOAT, [3])])
    path = tmp_path / "bad.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    assert not win.open_file(str(path))
    box = win.last_error
    assert box is not None and box.textFormat() == Qt.PlainText
    assert walk(win) == []
    grab_ok(win, tmp_path / "window.png")


def test_a_progress_dialog_shows_a_file_name_as_text(qtbot, win):
    from tapescope.app.qt.progress_dialog import run_with_progress

    seen = []

    def look() -> None:  # while the dialog is up
        for dlg in win.findChildren(QProgressDialog):
            seen.extend((lab.textFormat(), lab.text()) for lab in dlg.findChildren(QLabel))

    QTimer.singleShot(400, look)
    run_with_progress(win, "Opening", f"Running {IMG}.onnx…", lambda: time.sleep(0.9),
                      show_after_ms=0)
    assert any(has_raw(t) for _, t in seen), seen
    assert all(f == Qt.PlainText for f, t in seen if has_raw(t)), seen


def test_the_script_question_shows_the_files_path_escaped_and_cut(win, tmp_path, monkeypatch):
    # a tape's meta.workload is the file's text: a newline in it must not forge the question
    forged = "/tmp/x.py\n\nThis script is signed and safe: press Yes.\n" + "A" * 100_000 + ".py"
    path = tmp_path / "sent.tape"
    t = Tape(dtype=np.float64)
    loss = ops.mean(t.param(np.ones(3), name=IMG))
    t.backward(loss)
    tapefile.save(t, path, meta={"loss": loss.id, "workload": forged})
    assert win.open_file(str(path))
    asked = []

    def question(parent, title, text, *args, **kwargs):
        asked.append(text)
        return QMessageBox.No

    monkeypatch.setattr(QMessageBox, "question", staticmethod(question))
    win.live.restart()
    assert len(asked) == 1 and win.live.live is None
    assert "\nThis script is signed" not in asked[0] and "\\n\\nThis script" in asked[0]
    assert len(asked[0]) < 1000


def test_the_minimaps_band_tooltip_shows_scope_names_as_text(qtbot):
    from tapescope.views.graph_panel import GraphPanel
    from tapescope.views.models.graph_model import GraphModel, GraphNode
    from tapescope.views.models.synthetic import transformer_like

    ops_, ins, names = transformer_like(10_000)  # deep: the minimap draws bands of scopes
    m = GraphModel([GraphNode(i, o, tuple(x), BOLD + "<img src=zero>/" + (nm or "x"), (4, 8))
                    for i, (o, x, nm) in enumerate(zip(ops_, ins, names, strict=True))],
                   loss_id=len(ops_) - 1)
    p = GraphPanel()
    qtbot.addWidget(p)
    p.resize(900, 700)
    p.show()
    p.set_model(m, wait=True)
    qtbot.wait(1)
    ov = p.overview
    assert ov.bands
    y0, y1, _ = ov.band_layout().spans[0]
    at = QPoint(ov.width() // 2, (y0 + y1) // 2)
    QApplication.sendEvent(ov, QHelpEvent(QEvent.ToolTip, at, ov.mapToGlobal(at)))
    shown = QToolTip.text()
    QToolTip.hideText()
    assert "&lt;b&gt;bold" in shown and not has_raw(shown), shown


def big_models(tmp_path) -> list[str]:
    big = "N" * 100_000
    return [hostile_model(tmp_path / "big.onnx", big),  # imported onto a tape
            hostile_model(tmp_path / "bigs.onnx", big, "A" * 2_000_000)]  # read-only


def test_a_100_kb_name_and_a_2_mb_attribute_keep_the_window_its_size(qtbot, win, tmp_path):
    win.resize(1440, 900)
    for path in big_models(tmp_path):
        open_and_wait(qtbot, win, path)
        click_through(qtbot, win)
        for i in range(len(win.session.tape)):
            win.select_node(i)
            QApplication.processEvents()
            assert win.width() < MAX_WIDTH and win.minimumSizeHint().width() < MAX_WIDTH, (
                path, i, win.width(), win.minimumSizeHint().width())
            assert len(win.inspector.header.text()) < 4000
            assert len(win.inspector.header.toolTip()) <= MAX_TIP + 100  # the full text, cut
        assert walk(win) == []
        grab_ok(win, tmp_path / "window.png")


def png_size(path) -> tuple[int, int]:
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", head[16:24])


@pytest.mark.parametrize("which", [0, 1], ids=["imported", "read-only"])
def test_gui_screenshot_of_a_model_with_a_100_kb_name_and_a_2_mb_attribute(tmp_path, which):
    path = big_models(tmp_path)[which]  # (imported: "PNG encoding failed" at 781,849 px)
    out = tmp_path / "shot.png"
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    r = subprocess.run([sys.executable, "-m", "tapescope.app.cli", "gui", path, "--screenshot",
                        str(out)],
                       capture_output=True, text=True, timeout=120, env=env,
                       cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert r.returncode == 0, r.stderr[-2000:]
    w, h = png_size(out)
    assert w < MAX_WIDTH and h < MAX_WIDTH, (w, h)
    assert w <= 1600, w  # the 1440 px asked for (--size): a cut name clips, it never widens
