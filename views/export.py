"""Export what the window shows: the graph as PNG or SVG, a panel's table as CSV.

The graph is exported whole (as Netron does), drawn by the same canvas that paints the view, so
the picture holds the parity stripes, outlines and marks on screen. A PNG is drawn at full size
(labels readable) unless that exceeds ``MAX_SIDE`` / ``MAX_PIXELS``; then it is scaled down to
fit, so a 100,000-node tape costs a bounded image, never an allocation sized by the tape. An SVG
is vector: scene units, every item.

A panel's CSV is the table it shows, rows in the order and filter on screen; a panel that draws
plots instead (Training) gives its series through ``csv_table()``. Numbers are written as
numbers: the thousands separators the table shows (``23,296``) are taken out. Every file is
written whole or not at all (``core.atomic``).
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Sequence

from PySide6.QtCore import QBuffer, QIODevice, QRectF, QSize, Qt
from PySide6.QtGui import QColor, QImage, QPainter
from PySide6.QtWidgets import QAbstractItemView, QWidget

import tapescope.views._pyside_guard  # noqa: F401  (the PySide6 refcount guard, before any Qt call)
from tapescope.views.models.graph_model import shape_text

MAX_SIDE = 16_384  # pixels: QImage and most viewers refuse larger
MAX_PIXELS = 64_000_000  # 256 MB of ARGB32
MARGIN = 24.0  # scene units around the graph
BACKGROUND = QColor("#ffffff")
_GROUPED = re.compile(r"-?\d{1,3}(,\d{3})+(\.\d+)?")
_NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?|[-+]?inf|nan")
_FORMULA = ("=", "+", "-", "@", "\t", "\r")


class ExportError(ValueError):
    """Nothing to export, or the file could not be written (the message says which)."""


def _source(view) -> QRectF:
    r = view.canvas.boundingRect()
    if view.display is None or r.isEmpty():
        raise ExportError("no graph to export: open a tape or a model first")
    return r.adjusted(-MARGIN, -MARGIN, MARGIN, MARGIN)


def png_scale(width: float, height: float) -> float:
    """The scale a graph of ``width`` x ``height`` scene units is drawn at: 1 (full size),
    less where that would exceed MAX_SIDE on a side or MAX_PIXELS in all."""
    s = min(1.0, MAX_SIDE / max(width, 1.0), MAX_SIDE / max(height, 1.0))
    area = width * height * s * s
    if area > MAX_PIXELS:
        s *= (MAX_PIXELS / area) ** 0.5
    return s


def graph_image(view) -> QImage:
    """The whole graph of ``view`` (a GraphView) as an image, at most MAX_SIDE on a side."""
    src = _source(view)
    s = png_scale(src.width(), src.height())
    size = QSize(max(1, int(src.width() * s)), max(1, int(src.height() * s)))
    img = QImage(size, QImage.Format_ARGB32_Premultiplied)
    if img.isNull():
        raise ExportError(f"cannot allocate a {size.width()}x{size.height()} image")
    img.fill(BACKGROUND)
    p = QPainter(img)
    p.setRenderHint(QPainter.Antialiasing, True)
    p.setRenderHint(QPainter.TextAntialiasing, True)
    view.scene().render(p, QRectF(0, 0, size.width(), size.height()), src,
                        Qt.KeepAspectRatio)
    p.end()
    return img


def _write(path: str, data, kind: str) -> None:
    """Whole or not at all (core.atomic, as every file tapescope writes)."""
    from tapescope.core.atomic import write_atomic

    try:
        write_atomic(path, data)
    except OSError as e:
        raise ExportError(f"{path}: cannot write the {kind} ({e.strerror or e})") from e


def _encoded(write) -> bytes:
    buf = QBuffer()
    buf.open(QIODevice.WriteOnly)
    write(buf)
    buf.close()
    return bytes(buf.data())


def save_graph_png(view, path: str) -> QSize:
    """Write the whole graph as a PNG; returns its size in pixels."""
    img = graph_image(view)
    _write(path, _encoded(lambda buf: img.save(buf, "PNG")), "PNG")
    return img.size()


def save_graph_svg(view, path: str, title: str = "tapescope graph") -> QSize:
    """Write the whole graph as an SVG (scene units, every item); returns its size."""
    from PySide6.QtSvg import QSvgGenerator

    src = _source(view)
    size = QSize(int(src.width()), int(src.height()))

    def draw(buf) -> None:
        gen = QSvgGenerator()
        gen.setOutputDevice(buf)
        gen.setSize(size)
        gen.setResolution(96)  # the CSS pixel: a browser shows it at the PNG's size
        gen.setViewBox(QRectF(0, 0, size.width(), size.height()))
        gen.setTitle(title)
        gen.setDescription("exported by tapescope")
        p = QPainter(gen)
        p.fillRect(QRectF(0, 0, size.width(), size.height()), BACKGROUND)
        view.scene().render(p, QRectF(0, 0, size.width(), size.height()), src,
                            Qt.KeepAspectRatio)
        p.end()

    _write(path, _encoded(draw), "SVG")
    return size


# ---- tables -----------------------------------------------------------------------------------
def csv_cell(text) -> str:
    """The one guard for every CSV cell tapescope writes (OWASP's rule for CSV injection): text
    a spreadsheet would run as a formula (starting with ``=``, ``+``, ``-``, ``@``, a tab or a
    carriage return: a node name from a file such as ``=cmd|' /C calc'!A0``) gets a leading
    ``'``; a number (``-1.5``, ``+3``, ``-inf``) stays a number."""
    t = "" if text is None else str(text)
    if t[:1] in _FORMULA and not _NUMBER.fullmatch(t):
        return "'" + t
    return t


def _plain(text) -> str:
    """A cell as CSV holds it: ``23,296`` → ``23296``; anything else as shown, guarded by
    ``csv_cell``."""
    t = "" if text is None else str(text)
    if _GROUPED.fullmatch(t):
        return t.replace(",", "")
    return csv_cell(t)


def model_table(model) -> tuple[list[str], list[list[str]]]:
    """Headers and rows of a Qt item model, as shown (a proxy's filter and order)."""
    cols = model.columnCount()
    heads = []
    for c in range(cols):
        h = model.headerData(c, Qt.Horizontal, Qt.DisplayRole)
        heads.append(" ".join(str(h).split()) if h is not None else f"column {c + 1}")
    rows = [[_plain(model.data(model.index(r, c), Qt.DisplayRole)) for c in range(cols)]
            for r in range(model.rowCount())]
    return heads, rows


def _visible_views(w: QWidget) -> list[QAbstractItemView]:
    return [v for v in w.findChildren(QAbstractItemView)
            if v.isVisibleTo(w) and v.model() is not None and v.model().columnCount() > 0]


def panel_table(panel: QWidget, focus: QWidget | None = None
                ) -> tuple[list[str], list[list[str]]] | None:
    """The table ``panel`` shows (the one holding ``focus`` when it shows several), or its
    ``csv_table()`` (plots), or None when it shows none."""
    for w in (focus, panel):
        while w is not None and w is not panel.parentWidget():
            if hasattr(w, "csv_table"):
                got = w.csv_table()
                if got is not None:
                    return got
            if w is panel:
                break
            w = w.parentWidget()
    views = _visible_views(panel)
    if not views:
        return None
    held = [v for v in views if focus is not None and (v is focus or v.isAncestorOf(focus))]
    return model_table((held or views)[0].model())


def graph_table(model) -> tuple[list[str], list[list[str]]]:
    """The graph's nodes as a table: id, op, name, shape, dtype, inputs."""
    rows = [[str(n.id), n.op, n.name or "", shape_text(n.shape), n.dtype,
             " ".join(str(i) for i in n.inputs)] for n in model.nodes]
    return ["id", "op", "name", "shape", "dtype", "inputs"], rows


def write_csv(path: str, headers: Sequence[str], rows: Sequence[Sequence[str]]) -> int:
    """Write a table as CSV (UTF-8, one header line); returns the rows written. Every cell,
    headers included, goes through ``csv_cell`` (whatever table it came from: the graph's
    nodes, a panel, a plot's series)."""
    out = io.StringIO(newline="")
    w = csv.writer(out)
    w.writerow([csv_cell(h) for h in headers])
    w.writerows([csv_cell(c) for c in row] for row in rows)
    _write(path, out.getvalue(), "CSV")
    return len(rows)
