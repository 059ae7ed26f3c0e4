"""Opening an ONNX model in the app: a long run shows a progress dialog whose Cancel stops the
executor between loop iterations; the window keeps its session and says "cancelled"."""

from __future__ import annotations

import time

import pytest

from tests.helpers import hostile_models as hm


@pytest.fixture
def spinning_model(tmp_path):
    """Minutes of work within every limit: only Cancel stops it within the test's time."""
    return hm.slow_loop(str(tmp_path))[0]


def _progress(win):
    from PySide6.QtWidgets import QProgressDialog

    return win.findChild(QProgressDialog, "onnx_progress")


def test_cancel_in_the_progress_dialog_stops_a_never_ending_model(qtbot, win, spinning_model):
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QPushButton

    seen = {}

    def press_cancel():
        dlg = _progress(win)
        if dlg is None or not dlg.isVisible():
            QTimer.singleShot(50, press_cancel)  # not shown yet
            return
        seen["label"] = dlg.labelText()
        dlg.findChild(QPushButton).click()  # what the user does

    QTimer.singleShot(100, press_cancel)
    t0 = time.perf_counter()
    assert win.open_file(spinning_model) is False
    assert time.perf_counter() - t0 < 30
    assert "Running slow.onnx" in seen["label"]
    assert win.session is None
    assert "cancelled" in win.last_error.text()
    assert "Traceback" not in win.last_error.text()


def test_a_model_over_a_limit_says_which_flag_raises_it(qtbot, win, tmp_path):
    path, _ = hm.tile_huge(str(tmp_path))
    assert win.open_file(path) is False
    text = win.last_error.text()
    assert "'tile' (Tile)" in text and "--max-elements" in text


def test_a_quick_model_opens_without_waiting_for_the_dialog(qtbot, win, tmp_path):
    path, _ = hm._loop_model(str(tmp_path), "short", 3)
    assert win.open_file(path) is True
    assert win.session is not None and win.session.source == path
    dlg = _progress(win)
    assert dlg is None or not dlg.isVisible()


def test_limits_given_to_the_open_reach_the_executor(qtbot, win, tmp_path):
    from tapescope.app.qt.onnx_open import open_onnx_with_progress
    from tapescope.app.session import SessionError
    from tapescope.core.onnx import Limits

    path, _ = hm._loop_model(str(tmp_path), "ten", 10)
    with pytest.raises(SessionError, match="more than 9 loop iterations"):
        open_onnx_with_progress(win, path, limits=Limits(max_loop_iterations=9))
    assert open_onnx_with_progress(win, path, limits=Limits(max_loop_iterations=10)).tape
