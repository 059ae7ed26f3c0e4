"""Every test here runs offscreen, with settings kept in a temporary folder."""

from __future__ import annotations

import os

os.environ["QT_QPA_PLATFORM"] = "offscreen"  # before anything imports Qt

import pytest  # noqa: E402

READY_MS = 240_000  # a hang guard: with an empty kernel cache the worker compiles before "ready"


def wait_ready(qtbot, win) -> None:
    """Wait for the live worker's own "ready" (or its failure), however long its start takes."""
    from tapescope.app.qt.live import FAILED

    qtbot.waitUntil(lambda: win.live.live is not None and (
        win.live.live.info is not None or win.live.live.state == FAILED), timeout=READY_MS)


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
