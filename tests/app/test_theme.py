"""Issue 25, item 15: a dark theme that follows the system palette, plots included. The test
gives the application a dark palette, as a dark desktop theme does, and builds the window."""

from __future__ import annotations

import gc

import pytest
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QApplication

from tapescope.app.qt.style import apply_style
from tapescope.views import theme


@pytest.fixture
def app_state(monkeypatch):
    """The application's palette and sheet put back after the test (one app per worker)."""
    app = QApplication.instance()
    pal, sheet, style = QPalette(app.palette()), app.styleSheet(), app.style().name()
    monkeypatch.delenv("TAPESCOPE_THEME", raising=False)
    yield app
    app.setStyle(style)
    app.setPalette(pal)
    app.setStyleSheet(sheet)
    theme.reset()
    gc.collect()


def window(qtbot, settings):
    from tapescope.app.qt.main_window import MainWindow

    w = MainWindow(settings=settings)
    qtbot.addWidget(w)
    w.resize(1280, 800)
    w.show()
    qtbot.waitExposed(w)
    return w


def test_a_dark_system_palette_makes_the_window_and_its_plots_dark(qtbot, settings, app_state):
    app = app_state
    app.setPalette(theme.dark_palette())  # what a dark GNOME / KDE theme hands the app
    apply_style(app)
    assert theme.current().dark
    assert theme.is_dark_palette(app.palette())
    assert "#2b3039" in app.styleSheet() and "#e9ecf1" not in app.styleSheet()
    w = window(qtbot, settings)
    with qtbot.waitSignal(w.graph.view.layout_ready, timeout=10000):
        assert w.open_workload("mlp")
    w.wait_until_ready()
    bg = w.graph.view.backgroundBrush().color()
    assert bg.lightness() < 60, bg.name()
    glw = w.live.training.glw
    assert glw.backgroundBrush().color().lightness() < 60
    assert w.inspector.value_view.image_plot.backgroundBrush().color().lightness() < 60
    img = w.grab().toImage()
    corner = w.graph.view.mapTo(w, w.graph.view.viewport().rect().topLeft())
    assert QColor(img.pixel(corner.x() + 3, corner.y() + 3)).lightness() < 60  # seen dark
    # the parity colours stay what they are (data): exact is the same green in both themes
    from tapescope.views.models.ulp_scale import level_color
    assert level_color(0) == "#16a34a"
    # words on the background are light; chips keep dark words
    legend = w.graph.legend.text()
    assert f"color:{theme.DARK.on_background}" in legend and "color:#1f2937" in legend
    w.close()


def test_a_light_system_stays_light_and_the_variable_can_force_either(qtbot, settings,
                                                                      app_state, monkeypatch):
    app = app_state
    apply_style(app)  # the offscreen platform's palette is light
    assert not theme.current().dark
    w = window(qtbot, settings)
    assert w.graph.view.backgroundBrush().color().name() == theme.LIGHT.graph_bg
    w.close()
    monkeypatch.setenv("TAPESCOPE_THEME", "dark")
    apply_style(app)
    assert theme.current().dark and theme.is_dark_palette(app.palette())
    app.setPalette(theme.dark_palette())
    monkeypatch.setenv("TAPESCOPE_THEME", "light")
    assert not theme.system_wants_dark(app)  # forced light on a dark palette


def test_the_faded_tone_fades_toward_the_plots_background():
    from tapescope.views.models.ulp_scale import INHERITED, heat_lut, two_tone_lut

    dark = two_tone_lut((34, 38, 46))
    light = two_tone_lut()
    red = heat_lut()[254]
    assert dark[INHERITED + 254, :3].sum() < red[:3].sum() < light[INHERITED + 254, :3].sum()
