"""Every test here runs offscreen, with settings kept in a temporary folder."""

from __future__ import annotations

import os

os.environ["QT_QPA_PLATFORM"] = "offscreen"  # before anything imports Qt

import pytest  # noqa: E402


@pytest.fixture
def settings(tmp_path):
    """A QSettings stored under tmp_path, so tests never touch the user's recent files."""
    from PySide6.QtCore import QSettings

    return QSettings(str(tmp_path / "tapescope.ini"), QSettings.IniFormat)


@pytest.fixture
def win(qtbot, settings):
    """A shown main window whose live sessions snapshot quickly (test modules may override)."""
    from tapescope.app.qt.main_window import MainWindow

    w = MainWindow(settings=settings)
    w.live.interval_s = 0.05
    qtbot.addWidget(w)
    w.show()
    yield w
    w.live.close()


@pytest.fixture(scope="module")
def episode():
    """Time travel's steps: (StepResults numbered 1.., arrays[step][node], nodes) of the
    transformer with the platform libm, an exact step 1 in front (tests/helpers/time_travel.py)."""
    from tests.helpers.time_travel import record_episode

    return record_episode()


@pytest.fixture
def tt(qtbot, win, episode):
    """The transformer open in the window, its live session the worker's stand-in that records
    what the window asks (tests/helpers/time_travel.py)."""
    from tests.helpers.time_travel import fake_live

    assert win.open_workload("transformer")
    qtbot.waitUntil(win.graph.view.is_ready)
    fake_live(win)
    return win
