"""Issue 25, item 8: the Inspector's statistics fit the dock. Arrays are columns, statistics
rows, so a live node's four arrays (both sides, value and gradient) and their NaN / inf counts
are on screen in a 460 px Inspector (its width at 1920x1080) with no horizontal scroll bar;
counts carry thousands separators."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from tapescope.views.inspector import InspectorPanel
from tapescope.views.models.node_details import NodeDetails


@pytest.fixture(autouse=True)
def _collect_here():
    yield
    gc.collect()


def live_details() -> NodeDetails:
    rng = np.random.default_rng(1)
    v = rng.standard_normal((40, 64)) * 2.59797e-4  # numbers as wide as they come
    g = -v * 1.23456789
    cand = v.copy()
    cand.ravel()[:1234] = np.nan  # 1,234 NaN on the candidate
    return NodeDetails(35, "softmax", "block0/attn/", v.shape, "float64", v, g, [],
                       device_value=cand, device_grad=g.copy(),
                       sides=("CPU float64 refmath", "device fused float64 platform"))


def test_four_arrays_and_their_nan_counts_fit_a_460_px_inspector(qtbot):
    p = InspectorPanel()
    qtbot.addWidget(p)
    p.resize(460, 700)
    p.show()
    qtbot.waitExposed(p)
    p.show_details(live_details())
    qtbot.wait(20)
    t = p.stats
    assert [t.horizontalHeaderItem(c).text() for c in range(t.columnCount())] == [
        "ref value", "ref grad", "cand value", "cand grad"]
    assert [t.verticalHeaderItem(r).text() for r in range(t.rowCount())] == [
        "min", "max", "mean", "std", "NaN / inf"]
    assert t.horizontalScrollBar().maximum() == 0  # nothing behind a scroll bar
    right = t.verticalHeader().width() + sum(t.columnWidth(c) for c in range(t.columnCount()))
    assert right <= t.viewport().width() + t.verticalHeader().width()
    assert t.item(4, 2).text() == "1,234 / 0"  # the candidate's NaN, with its separator
    assert t.item(4, 2).foreground().color().name() == "#7c3aed"  # violet: a NaN
    assert t.item(4, 0).text() == "0 / 0"
    # every row on screen: the table is as tall as its rows
    assert t.height() >= t.horizontalHeader().height() + 5 * t.rowHeight(0)
