"""Issue 25, item 5: the Compare tab's reference / candidate maps get room. Their row and the
ulp map share a splitter, and a double-click opens any drawing in a window of its own, with the
same array, colour scale and slice."""

from __future__ import annotations

import gc

import numpy as np
import pytest
from PySide6.QtCore import Qt

from tapescope.views.inspector import DeviceCompareView


@pytest.fixture(autouse=True)
def _collect_here():
    yield
    gc.collect()


def compare_view(qtbot) -> DeviceCompareView:
    v = DeviceCompareView()
    qtbot.addWidget(v)
    v.resize(560, 330)  # a live Inspector's Compare tab at 1280x800
    v.show()
    qtbot.waitExposed(v)
    ref = np.arange(3 * 8 * 8, dtype=np.float64).reshape(3, 8, 8)
    cand = ref.copy()
    cand[1, 2, 3] = np.nextafter(cand[1, 2, 3], np.inf)  # one element, 1 ulp off
    v.set_titles("CPU refmath", "device fused")
    v.set_pairs((ref, cand), (None, None))
    return v


def double_click(qtbot, view) -> None:
    w = view.image_plot
    qtbot.mouseDClick(w.viewport(), Qt.LeftButton, pos=w.viewport().rect().center())


def test_a_double_click_opens_the_map_large_at_the_same_slice(qtbot):
    v = compare_view(qtbot)
    v.spins[0].setValue(1)  # the user picks the slice holding the differing element
    small = v.cpu_view.image_plot.height()
    double_click(qtbot, v.cpu_view)
    big = v.cpu_view.large
    assert big is not None and big.isVisible()
    qtbot.waitExposed(big)
    assert "CPU refmath" in big.windowTitle() and "3×8×8" in big.windowTitle()
    assert np.array_equal(big.view.current_slice(), v.cpu_view.current_slice())
    assert big.view.current_slice()[0, 0] == 64.0  # slice 1, not slice 0
    assert big.view.image_plot.height() > 3 * small, (small, big.view.image_plot.height())
    # the ulp map opens in the one ulp scale, its one differing element where it was
    double_click(qtbot, v.ulp_view)
    u = v.ulp_view.large
    assert u.view.ulp_scale
    assert np.array_equal(u.view.image.image, v.ulp_view.image.image)
    assert (u.view.image.image > 0).sum() == 1
    big.close()
    u.close()


def test_the_maps_and_the_ulp_map_share_a_splitter(qtbot):
    v = compare_view(qtbot)
    top = v.split.widget(0)
    assert v.split.indexOf(v.ulp_view) == 1 and top.isAncestorOf(v.cpu_view)
    before = v.cpu_view.height()
    total = sum(v.split.sizes())
    v.split.setSizes([total - 60, 60])  # as a drag of the handle down does
    qtbot.wait(20)
    assert v.cpu_view.height() > before + 40


def test_an_empty_view_opens_nothing(qtbot):
    v = DeviceCompareView()
    qtbot.addWidget(v)
    assert v.cpu_view.open_large() is None
