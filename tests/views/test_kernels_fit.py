"""Issue 25, item 8: the Kernels dock's rows and source are not clipped. A kernel's row leaves
out its plan's id (the summary line holds it; the tooltip has the full name), its ulp carries
thousands separators, and a double-click opens the kernel's source in a window of its own with
the selected node's lines marked."""

from __future__ import annotations

import copy
import gc

import pytest
from PySide6.QtCore import Qt

from tapescope.views.kernels_view import KernelsPanel
from tests.helpers.kernels_panel import PLAN


@pytest.fixture(autouse=True)
def _collect_here():
    yield
    gc.collect()


def plan() -> dict:
    p = copy.deepcopy(PLAN)
    p["plan_id"] = "d739bbbcb564"
    for k in p["kernels"]:  # the names emitc gives: prefix, plan id, segment, role, dtype
        k["name"] = f"fzd739bbbcb564_s0_{k['name'][2:]}_f64"
    return p


def test_rows_are_short_and_say_the_rest_on_hover(qtbot):
    w = KernelsPanel()
    qtbot.addWidget(w)
    w.resize(460, 300)  # the dock at 1920x1080
    w.show()
    w.set_plan(plan())
    w.set_parity({"fzd739bbbcb564_s0_fwd_f64": {"worst": 2432.0, "node": 5, "introduced": True}})
    row = w.list.item(0)
    assert row.text().startswith("≠ 2,432 ulp at #5 introduced  ·  s0_fwd_f64  ·  forward")
    assert "d739bbbcb564" not in row.text()
    assert row.toolTip().startswith("fzd739bbbcb564_s0_fwd_f64\n")
    assert w.list.item(1).text().startswith("s0_bwd_f64")  # nothing compared yet: no badge
    other = KernelsPanel()  # a name without its plan's id stays whole
    qtbot.addWidget(other)
    other.set_plan(PLAN)
    assert other.list.item(0).text().startswith("k_fwd")


def test_a_double_click_opens_the_source_large_at_the_nodes_lines(qtbot):
    w = KernelsPanel()
    qtbot.addWidget(w)
    w.resize(460, 300)
    w.show()
    qtbot.waitExposed(w)
    w.set_plan(plan())
    assert w.show_node(5)
    small = w.source.viewport().height()
    qtbot.mouseDClick(w.source.viewport(), Qt.LeftButton)
    big = w.large
    assert big is not None and big.isVisible()
    qtbot.waitExposed(big)
    assert big.text.toPlainText() == w.source.toPlainText()
    assert "fzd739bbbcb564_s0_fwd_f64" in big.windowTitle()
    sel = big.text.extraSelections()
    assert sel and "node 5 exp" in sel[0].cursor.selectedText()
    assert big.text.viewport().height() > 2 * small
    big.close()
    # the list's double-click does the same
    at = w.list.visualItemRect(w.list.item(0)).center()
    qtbot.mouseClick(w.list.viewport(), Qt.LeftButton, pos=at)  # a double-click's first press
    qtbot.mouseDClick(w.list.viewport(), Qt.LeftButton, pos=at)
    assert w.large is not None and w.large is not big
    w.large.close()
    empty = KernelsPanel()
    qtbot.addWidget(empty)
    assert empty.open_source() is None
