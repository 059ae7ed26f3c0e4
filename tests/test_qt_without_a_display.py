"""The suite run by hand on a machine with no display and no ``QT_QPA_PLATFORM`` (the README's
``python -m pytest``): a test that makes a QApplication in its own process outside tests/app and
tests/views (tests/capture's ``test_gui_opens_a_capture_grouped_by_module``) took Qt's xcb
platform, which cannot connect, and Qt's fatal error aborted the whole pytest process (every
test after it unrun, no summary). tests/conftest.py gives such a machine the offscreen
platform before anything imports Qt."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.desktop import NO_DISPLAY_VARS

ROOT = Path(__file__).resolve().parents[1]


def test_a_qapplication_opens_in_the_test_process():
    pytest.importorskip("PySide6")
    from PySide6.QtWidgets import QApplication, QLabel

    app = QApplication.instance() or QApplication([])
    label = QLabel("x")
    label.show()
    assert app.platformName() in ("offscreen", "xcb", "wayland", "minimal")
    label.close()


def test_pytest_by_hand_without_a_display_runs_it():
    pytest.importorskip("PySide6")
    env = {k: v for k, v in os.environ.items() if k not in NO_DISPLAY_VARS}
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "-n", "0", f"{__file__}::test_a_qapplication_opens_in_the_test_process"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and "1 passed" in p.stdout, (p.returncode, p.stdout[-2000:],
                                                          p.stderr[-2000:])
