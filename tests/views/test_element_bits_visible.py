"""Issue 46, "bits visible": the Elements table's reference and candidate cells show each number
with its hex bits below it at the Inspector's default width (two lines of the monospace font: a
row sized by the default font lost the bits and elided the number), the columns can be resized,
and a cell's tooltip has the full value."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QFontMetrics
from PySide6.QtWidgets import QHeaderView, QVBoxLayout, QWidget

from tapescope.views.element_view import ElementView, bits_text, mono_font, number_text

DOCK_WIDTH = 470  # the Inspector dock's default width (app.qt.main_window)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_every_number_has_its_hex_bits_in_view(qtbot, dtype):
    rng = np.random.default_rng(1)
    ref = rng.standard_normal((6, 9)).astype(dtype)
    cand = ref.copy()
    flat = cand.reshape(-1)
    flat[::4] = np.nextafter(flat[::4], dtype(9))
    flat[5] = -flat[5] * dtype(1.5)
    host = QWidget()
    lay = QVBoxLayout(host)
    ev = ElementView(host)
    lay.addWidget(ev)
    qtbot.addWidget(host)
    host.resize(DOCK_WIDTH, 700)
    host.show()
    ev.set_pair(ref, cand, "#35 softmax value at step 3")
    qtbot.waitExposed(host)
    t, m = ev.table, ev.model
    fm = QFontMetrics(mono_font().resolve(t.font()))  # the cells' font, as drawn
    hdr = t.horizontalHeader()
    for col in range(m.columnCount()):
        if not t.isColumnHidden(col):  # resizable by the user
            assert hdr.sectionResizeMode(col) == QHeaderView.Interactive
    assert m.rowCount() > 0
    for row in range(m.rowCount()):
        # two lines of the monospace font fit the row: the bits are not cut off below
        assert t.rowHeight(row) >= 2 * fm.lineSpacing()
        for col in (1, 2):
            text = m.data(m.index(row, col), Qt.DisplayRole)
            number, bits = text.split("\n")
            v = m.rows[row][1 if col == 1 else 2]
            assert bits == bits_text(v, m.dtype) and bits.startswith("0x")
            assert number == number_text(float(v), m.dtype)
            # both lines whole in the column's width: never elided
            room = t.columnWidth(col) - 2 * t.style().pixelMetric(
                t.style().PixelMetric.PM_FocusFrameHMargin, None, t)
            for line in (number, bits):
                assert fm.elidedText(line, Qt.ElideRight, room) == line, (line, room)
            tip = m.data(m.index(row, col), Qt.ToolTipRole)
            assert number in tip and bits in tip and str(m.dtype) in tip
    tip = m.data(m.index(0, 5), Qt.ToolTipRole)
    assert "ulp apart" in tip and "relative error" in tip
    # the user widens the reference column
    w = t.columnWidth(1)
    hdr.resizeSection(1, w + 60)
    assert t.columnWidth(1) == w + 60
