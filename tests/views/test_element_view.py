"""Element view, step scrubber and Kernels dock on plain data: values, bits, follow, lines."""

from __future__ import annotations

import struct

import numpy as np
from PySide6.QtCore import Qt
from PySide6.QtTest import QAbstractItemModelTester

from tapescope.views.element_view import (
    WORST_COLUMNS,
    ElementView,
    WorstElementsModel,
    worst_elements,
)
from tapescope.views.kernels_view import KernelsPanel
from tapescope.views.step_scrubber import StepScrubber
from tests.helpers.kernels_panel import PLAN, SOURCE


def hex64(v: float) -> str:
    return "0x" + struct.pack(">d", v).hex()


def hex32(v: float) -> str:
    return "0x" + struct.pack(">f", v).hex()


def test_worst_elements_table_shows_values_bits_ulp_and_relative_error(qtbot):
    ref = np.array([[1.0, 2.0, 3.0], [-7.25265e-05, 0.0, np.nan]])
    cand = ref.copy()
    cand[0, 1] = np.nextafter(2.0, 3.0)  # 1 ulp
    cand[1, 0] = np.nextafter(np.nextafter(ref[1, 0], 0), 0)  # 2 ulp toward zero
    cand[1, 1] = -0.0  # bits differ, no ulp distance
    cand[0, 2] = np.nan  # a NaN against a number
    w = ElementView()
    qtbot.addWidget(w)
    w.set_pair(ref, cand, "#3 exp value at step 2")
    m = w.model
    QAbstractItemModelTester(m, QAbstractItemModelTester.FailureReportingMode.Fatal)
    assert [m.headerData(c, Qt.Horizontal).split("\n")[0] for c in range(m.columnCount())] == list(
        WORST_COLUMNS)
    # shown two lines a row: each number over its bits, the ulp over the relative error
    assert m.data(m.index(0, 1)) == f"{m.cell_text(0, 1)}\n{m.cell_text(0, 3)}"
    assert m.data(m.index(0, 5)) == f"{m.cell_text(0, 5)}\n{m.cell_text(0, 6)}"
    rows = {m.cell_text(r, 0): [m.cell_text(r, c) for c in range(m.columnCount())]
            for r in range(m.rowCount())}
    assert m.cell_text(0, 0) == "[0, 2]"  # the NaN mismatch is the worst: listed first
    assert rows["[0, 2]"][2] == "nan" and rows["[0, 2]"][5] == "NaN vs number"
    assert rows["[0, 1]"] == ["[0, 1]", "2", repr(float(cand[0, 1])), hex64(2.0),
                              hex64(cand[0, 1]), "1", f"{(cand[0, 1] - 2.0) / 2.0:.6g}"]
    small = rows["[1, 0]"]
    # never cut: -7.25265e-05 round-trips, and its bits are beside it
    assert float(small[1]) == ref[1, 0] and small[3] == hex64(ref[1, 0]) and small[5] == "2"
    assert rows["[1, 1]"][3] == hex64(0.0) and rows["[1, 1]"][4] == hex64(-0.0)
    assert "[1, 2]" not in rows  # NaN on both sides: equal under the NaN policy
    assert "4 of 6 elements differ" in w.summary.text()
    assert w.repro.isEnabled()
    # drawn in the window's one ulp scale: exact 0, 1 ulp amber (1), NaN ≠ violet (255)
    from tapescope.views.element_view import ulp_level_image
    from tapescope.views.models.ulp_scale import heat_levels

    lv = ulp_level_image(ref, cand)
    assert np.array_equal(w.image.image, lv)
    assert lv[0, 0] == 0 and lv[0, 1] == 1 and lv[0, 2] == 255
    assert lv[1, 0] == heat_levels(np.array([2.0]))[0]


def test_float32_bits_and_a_float64_reference_compared_in_float32():
    ref = np.array([1.0, 1.0 + 2.0 ** -30], dtype=np.float64)  # rounds to 1.0f
    cand = np.array([np.nextafter(np.float32(1), np.float32(2)), np.float32(1)])
    rows = worst_elements(ref, cand)
    assert len(rows) == 1 and rows[0][0] == (0,) and rows[0][3] == 1.0
    m = WorstElementsModel()
    m.set_rows(rows, np.float32)
    assert m.cell_text(0, 3) == hex32(1.0) and m.cell_text(0, 4) == hex32(cand[0])
    assert m.cell_text(0, 2) == f"{float(cand[0]):.9g}"


def test_nothing_to_compare_disables_repro(qtbot):
    w = ElementView()
    qtbot.addWidget(w)
    w.set_pair(np.ones(3), None, "x")
    assert not w.repro.isEnabled() and w.model.rowCount() == 0
    w.set_pair(np.ones(3), np.ones(3), "x")
    assert "all 3 elements bit-identical" in w.summary.text() and w.model.rowCount() == 0


def test_scrubber_follows_until_moved_and_emits_each_step_once(qtbot):
    s = StepScrubber()
    qtbot.addWidget(s)
    got = []
    s.step_changed.connect(got.append)
    s.set_steps([1, 2, 3])
    assert got == [3] and s.follow
    s.previous()
    assert got == [3, 2] and not s.follow
    s.set_steps([1, 2, 3, 4])  # a new step arrives: the user's step stays
    assert got == [3, 2] and s.spin.value() == 2 and s.total.text() == "of 4"
    s.slider.setValue(0)  # dragged to the start
    assert got[-1] == 1
    s.spin.setValue(3)
    assert got[-1] == 3
    s.latest()
    assert got[-1] == 4 and s.follow
    s.set_steps([1, 2, 3, 4, 5])
    assert got[-1] == 5
    s.show_step(3)
    s.set_steps([1, 5, 9])  # thinned: the nearest stored step
    assert s.current in (1, 5) and s.spin.value() == s.current
    s.set_steps([])
    assert not s.isEnabled()


def test_a_node_opens_its_lines_in_the_kernel_and_kernels_show_their_parity(qtbot):
    w = KernelsPanel()
    qtbot.addWidget(w)
    w.set_plan(PLAN)
    highlighted = []
    w.nodes_highlighted.connect(highlighted.append)
    assert w.show_node(5)
    assert w.list.currentItem().data(Qt.UserRole) == "k_fwd"
    lines = SOURCE.split("\n")
    first, last = w.node_lines
    assert lines[first - 1].strip() == "/* node 5 exp */" and "EXP(v4[c])" in lines[last - 1]
    assert last == first + 1
    es = w.source.extraSelections()[0]
    sel = es.cursor.selectedText()
    assert "node 5 exp" in sel and "node 6" not in sel and "node 4" not in sel
    assert highlighted == []  # following a node does not re-select the kernel's nodes
    assert w.show_node(4) and w.node_lines == (3, 6)  # up to its barrier
    assert "v4[c] = acc" in lines[4] and lines[6].strip() == "__syncthreads();"
    assert not w.show_node(9) and w.node_lines is None
    w.set_parity({"k_fwd": {"worst": 69.0, "node": 5, "introduced": True},
                  "k_bwd": {"worst": 0.0, "node": None, "introduced": None}})
    texts = [w.list.item(r).text() for r in range(w.list.count())]
    assert texts[0].startswith("≠ 69 ulp at #5 introduced") and texts[1].startswith("✓ exact")
    assert w.list.item(0).foreground().color().name() == "#b91c1c"


def test_stats_are_never_cut_to_another_number(qtbot):
    from tapescope.views.inspector import StatsTable

    t = StatsTable()
    qtbot.addWidget(t)
    t.resize(260, 120)  # a narrow dock
    t.show()
    t.set_rows({"value": np.array([-7.25265e-05, 3.0, 1234567.0])})
    fm = t.fontMetrics()
    for r in range(t.rowCount()):
        it = t.item(r, 0)
        # the whole text fits its column: "-7.2526…" would read as another number
        assert fm.horizontalAdvance(it.text()) <= t.columnWidth(0), (it.text(), t.columnWidth(0))
    assert t.item(0, 0).text() == "-7.25265e-05"


def test_the_element_view_example_renders(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    from PySide6.QtGui import QImage

    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    r = subprocess.run([sys.executable, "-m", "tapescope.views.examples", "elements", "--save",
                        str(tmp_path)], cwd=root, env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    img = QImage(str(tmp_path / "elements.png")).scaled(90, 60)
    assert len({img.pixel(x, y) for x in range(90) for y in range(60)}) > 10
