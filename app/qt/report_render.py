"""Offscreen pictures for reports: the DAG with its parity overlay, the training plots (PNG bytes).

Needs a QApplication (the ``offscreen`` platform is enough); draws with the same canvas and
Training panel the app shows, so a report looks like the window.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import shiboken6
from PySide6.QtCore import QBuffer, QByteArray, QIODevice, QRectF, Qt
from PySide6.QtGui import QColor, QImage, QPainter
from PySide6.QtWidgets import QGraphicsScene

from tapescope.app.report_svg import MAX_H, MAX_W, report_scene
from tapescope.views.graph_canvas import GraphCanvas

_APP = None  # the QApplication the pictures are drawn in (held: it must outlive them)


def offscreen_app(debug: bool = False):
    """The QApplication to draw in: the running one (the window's), else one made now, offscreen
    where there is no display, its platform chatter off (``--debug`` keeps it)."""
    global _APP
    from PySide6.QtWidgets import QApplication

    from tapescope.app.qt.messages import quiet_qt

    if QApplication.instance() is None:
        if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
            os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # pictures need no screen
        quiet_qt(debug)  # no Qt platform chatter on stderr
        _APP = QApplication(sys.argv[:1] or ["tapescope"])
    return QApplication.instance()


def png_bytes(img: QImage, fmt: str = "PNG") -> bytes:
    """Encode a QImage as PNG (or ``fmt``: JPG, BMP, ... as Qt names them)."""
    ba = QByteArray()
    buf = QBuffer(ba)
    buf.open(QIODevice.WriteOnly)
    if not img.save(buf, fmt):
        raise OSError(f"{fmt} encoding failed")
    buf.close()
    return bytes(ba.data())


def render_dag(data: dict) -> bytes:
    """The report's DAG: nodes coloured by worst parity, the first divergence flagged (what it
    shows is ``app.report_svg.report_scene``'s, the SVG's too)."""
    sc = report_scene(data)
    display, lay = sc.display, sc.layout
    canvas = GraphCanvas()
    canvas.set_graph(display, lay)
    canvas.overlay = {it: QColor(v) for it, v in sc.colors.items()}
    if sc.first:
        canvas.first_items = set(sc.first)
    canvas.frames = sc.frames
    scene = QGraphicsScene()
    scene.addItem(canvas)
    r = canvas.boundingRect().adjusted(0, 0, 150, 0)  # room for the "first divergence" flag
    s = min(1.0, MAX_W / max(r.width(), 1.0), MAX_H / max(r.height(), 1.0))
    img = QImage(max(1, int(r.width() * s)), max(1, int(r.height() * s)), QImage.Format_RGB32)
    img.fill(QColor("#f7f8fa"))
    p = QPainter(img)
    p.setRenderHint(QPainter.Antialiasing, True)
    p.setRenderHint(QPainter.TextAntialiasing, True)
    scene.render(p, QRectF(0, 0, img.width(), img.height()), r, Qt.KeepAspectRatio)
    p.end()
    scene.removeItem(canvas)
    return png_bytes(img)


def render_training(data: dict, size: tuple[int, int] = (1116, 560)) -> bytes:
    """Loss curves, the max-ulp timeline and the heatmap, as the Training dock draws them."""
    from tapescope.views.training_view import TrainingPanel

    w = TrainingPanel()
    w.setAttribute(Qt.WA_DontShowOnScreen, True)
    w.resize(*size)
    w.reset(data["reference"], data["candidate"])
    steps = [(s["step"], s["loss_ref"], s["loss_cand"], s["seconds"], s["exact"])
             for s in data["steps"]]
    # per-node columns exist for the last steps only (bounded): the heatmap's range
    cols = [np.array(c) for c in data["heatmap"]["columns"]]
    w.add_steps(steps, cols, data.get("steps_per_s", 0.0),
                worst=[s["max_ulp"] for s in data["steps"]])
    w.show()
    from PySide6.QtCore import QCoreApplication

    # NOTE: drawn now, then laid out: the panel redraws from a timer (at most every 0.5 s),
    # and the heatmap, hidden until its first drawing, needs a layout pass to get its rows;
    # one processEvents grabbed the plots without the nodes × steps heatmap the alt text
    # promises (issue 25)
    w.flush()
    for _ in range(3):
        QCoreApplication.processEvents()
    img = w.grab().toImage()
    w.close()
    # NOTE: deleted now, not with deleteLater(): the CLI runs no event loop afterwards, and a
    # panel whose deferred delete was still queued when the QApplication went away crashed the
    # interpreter at exit (tapescope report ended with rc 139 after writing its files)
    shiboken6.delete(w)
    return png_bytes(img)
