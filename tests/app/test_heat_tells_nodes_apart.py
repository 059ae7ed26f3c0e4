"""Issue 25, item 6: the Training heatmap tells nodes apart. With error flowing down the tape
every cell was the same red unless "introduced only" was ticked; now a cell whose node
introduced its error is drawn in full colour and an inherited one faded (as the graph's
stripes), in the one ulp scale; the graph's legend explains both."""

from __future__ import annotations

import gc

import numpy as np
import pytest
from PySide6.QtGui import QColor, QImage

from tapescope.views.graph_panel import LEGEND
from tapescope.views.models.ulp_scale import FADED, INHERITED, heat_lut, level_color, two_tone_lut
from tapescope.views.training_view import TrainingPanel
from tests.helpers.time_travel import feed


@pytest.fixture(autouse=True)
def _collect_here():
    """Collect these tests' windows now, while no layout job runs (tests/views/test_scale.py:
    left to a later GC they were finalised during another test's layout, a segfault)."""
    yield
    gc.collect()


def pixels(img: QImage) -> np.ndarray:
    img = img.convertToFormat(QImage.Format_RGB32)
    a = np.frombuffer(img.constBits(), dtype=np.uint8).reshape(
        img.height(), img.bytesPerLine() // 4, 4)[:, : img.width(), :3]
    return a[..., ::-1].astype(int)  # RGB


def count(a: np.ndarray, rgb) -> int:
    return int((np.abs(a - np.array(rgb)).max(axis=2) <= 3).sum())


def test_the_two_tones_are_the_one_scale_full_and_faded():
    lut = two_tone_lut()
    assert lut.shape == (512, 4)
    assert np.array_equal(lut[:256], heat_lut())
    red = heat_lut()[254, :3].astype(float)
    assert np.allclose(lut[INHERITED + 254, :3], FADED * red + (1 - FADED) * 255, atol=1)
    assert np.array_equal(lut[INHERITED], heat_lut()[0])  # exact is exact either way


def test_introduced_cells_stand_out_of_inherited_ones(qtbot):
    t = TrainingPanel()
    qtbot.addWidget(t)
    t.resize(700, 420)
    t.show()
    t.add_steps([(1, 1.0, 1.0, 0.1, False), (2, 0.9, 0.9, 0.1, False)],
                [np.full(6, 5000.0)] * 2, 5.0)
    levels = np.full((6, 2), 200.0)  # every node thousands of ulp off, both steps
    inherited = np.ones((6, 2), dtype=bool)
    inherited[2, 1] = False  # node 2 introduced it at step 2; the rest only inherited it
    t.set_heat(levels, [1, 2], now=True, inherited=inherited)
    img = t.heat.image
    assert img[2, 1] == 200 and (np.delete(img.ravel(), 2 * 2 + 1) == 200 + INHERITED).all()
    qtbot.wait(50)
    shown = pixels(t.glw.grab().toImage())
    full = two_tone_lut()[200, :3]
    faded = two_tone_lut()[200 + INHERITED, :3]
    assert count(shown, full) > 20  # the one introduced cell, bright
    assert count(shown, faded) > 5 * count(shown, full)  # eleven faded ones
    assert "faded: inherited" in t.heat_plot.titleLabel.text


def test_a_live_session_heatmap_is_bright_only_where_error_was_introduced(qtbot, tt, episode):
    results, _, _ = episode
    win = tt
    feed(win, results)
    t = win.live.training
    t.flush()
    img = t.heat.image
    assert img.shape[1] == len(results)
    for k, res in enumerate(results):
        intro = {e["node"] for e in res.introduced}
        for i in range(img.shape[0]):
            if img[i, k] == 0:
                continue
            assert (img[i, k] < INHERITED) == (i in intro), (res.step, i, img[i, k])
    assert (img >= INHERITED).any() and ((img > 0) & (img < INHERITED)).any()
    # ticking "introduced only" leaves the bright cells and drops the faded ones
    t.introduced_only.setChecked(True)
    only = t.heat.image
    assert ((only > 0) == ((img > 0) & (img < INHERITED))).all()


def test_the_graph_legend_explains_faded_as_inherited():
    assert "inherited" in LEGEND
    faded = QColor(level_color(254))
    rgb = [round(FADED * c + (1 - FADED) * 255) for c in faded.getRgb()[:3]]
    assert QColor(*rgb).name() in LEGEND
