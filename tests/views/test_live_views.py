"""The Training and Kernels docks on plain data: bounded history, colour levels, highlighting."""

from __future__ import annotations

import numpy as np
from PySide6.QtGui import QColor, QTextDocument

from tapescope.views.kernels_view import CudaHighlighter, KernelsPanel
from tapescope.views.training_view import HEAT_STEPS, TrainingPanel, heat_levels, heat_lut


def test_heat_levels_exact_ulp_scale_and_nan():
    lv = heat_levels(np.array([0.0, 1.0, 2.0 ** 10, 2.0 ** 20, 2.0 ** 40, -1.0]))
    assert lv[0] == 0 and lv[-1] == 255  # exact green, NaN purple
    assert 1 <= lv[1] < lv[2] < lv[3] == lv[4] == 254  # log scale, saturating at 2**20
    lut = heat_lut()
    assert tuple(lut[0][:3]) == (22, 163, 74) and tuple(lut[255][:3]) == (124, 58, 237)


def test_training_history_is_bounded(qtbot):
    w = TrainingPanel()
    qtbot.addWidget(w)
    n = 7
    steps = [(k, 1.0 / (k + 1), 1.0 / (k + 1), 0.01, k % 2 == 0) for k in range(HEAT_STEPS + 50)]
    cols = [np.full(n, float(k % 3)) for k in range(len(steps))]
    w.add_steps(steps[:100], cols[:100], 10.0)
    w.add_steps(steps[100:], cols[100:], 12.0)
    assert len(w.columns) == HEAT_STEPS and w.col_steps[0] == 50
    assert w.total_steps == len(steps) and w.exact_steps == (len(steps) + 1) // 2
    w.flush()
    assert w.heat.image.shape == (n, HEAT_STEPS)
    assert w.ref_curve.getData()[0].size == len(steps)
    assert "12.0 steps/s" in w.rate.text()
    w.reset()
    assert w.total_steps == 0 and not w.columns and w.steps.size == 0


def test_kernel_selection_highlights_its_segment(qtbot):
    w = KernelsPanel()
    qtbot.addWidget(w)
    plan = {"plan_id": "p", "dtype": "float64", "math": "refmath",
            "segments": [{"index": 0, "node_ids": [4, 5, 6], "kind": "row", "rows": 8}],
            "kernels": [{"name": "k_fwd", "role": "forward", "segment": 0, "source": "A",
                         "grid": 8, "block": 32},
                        {"name": "k_adam", "role": "optimizer", "segment": None,
                         "source": "B", "grid": 0, "block": 128}],
            "launches_before": {"forward": 5, "backward": 9, "optimizer": 3, "episode": 17},
            "launches_after": {"forward": 3, "backward": 7, "optimizer": 1, "episode": 11}}
    w.set_plan(plan)
    assert "17 → 11" in w.summary.text()
    with qtbot.waitSignal(w.nodes_highlighted) as sig:
        w.select_kernel("k_fwd")
    assert sig.args == [[4, 5, 6]] and w.source.toPlainText() == "A"
    with qtbot.waitSignal(w.nodes_highlighted) as sig:
        w.select_kernel("k_adam")
    assert sig.args == [[]]


def test_highlighter_colours_keywords_intrinsics_and_multiline_comments(qtbot):
    doc = QTextDocument()
    h = CudaHighlighter(doc)
    doc.setPlainText("double x = ADD(a, 1.0); /* start\nstill comment */ return x;")
    h.rehighlight()

    def colour(block: int, col: int) -> str:
        b = doc.findBlockByNumber(block)
        for r in b.layout().formats():
            if r.start <= col < r.start + r.length:
                return r.format.foreground().color().name()
        return ""

    assert colour(0, 0) == QColor("#7c3aed").name()  # double
    assert colour(0, 11) == QColor("#b45309").name()  # ADD
    assert colour(0, 24) == QColor("#6b7280").name()  # /* start
    assert colour(1, 0) == QColor("#6b7280").name()  # still comment (next line)
    assert colour(1, 18) == QColor("#7c3aed").name()  # return, after the comment closed


def test_parameter_rows_update_in_place_and_a_click_opens_the_first_step(qtbot):
    from PySide6.QtCore import Qt

    p = TrainingPanel()
    qtbot.addWidget(p)
    p.resize(600, 400)
    p.show()
    p.tabs.setCurrentWidget(p.params)
    p.set_cursor(7)
    rows = [(i, f"w{i}", None) for i in range(0, 300, 3)]
    p.set_params(rows)
    m = p.params.model()
    assert m.rowCount() == 100 and m.index(2, 0).data() == "#6 w6"
    assert m.index(2, 1).data() == "—" and m.index(2, 1).data(Qt.UserRole) == -1
    changed = []
    m.dataChanged.connect(lambda a, b: changed.append((a.row(), b.row())))
    reset = []
    m.modelReset.connect(lambda: reset.append(1))
    rows[2] = (6, "w6", 4)
    p.set_params(rows)  # one parameter first differs: that row changes, no reset
    assert changed == [(2, 2)] and not reset
    assert m.index(2, 1).data() == "4" and "step 4" in m.index(2, 0).data(Qt.ToolTipRole)
    got = []
    p.cell_clicked.connect(lambda nid, step: got.append((nid, step)))
    for row, want in ((2, (6, 4)), (0, (0, 7))):  # never differed: the step shown now
        rect = p.params.visualRect(m.index(row, 0))
        qtbot.mouseClick(p.params.viewport(), Qt.LeftButton, pos=rect.center())
        assert got[-1] == want
    p.set_params(rows[:10])  # other parameters: a new list
    assert reset and m.rowCount() == 10
