"""Issue 46: ``gui --live --steps 20`` ran on past 4,000 steps: ``--steps`` bounded a live
session only with ``--screenshot``. It bounds it in the window too (the session stops there and
its results stay); without ``--steps`` a window's session runs until Stop."""

from __future__ import annotations

import pytest

import tapescope.app.qt.gui as gui
from tapescope.app.cli import main
from tapescope.app.qt.live import STOPPED


def _run(qtbot, monkeypatch, tmp_path, *extra: str) -> dict:
    seen: dict = {}

    def fake_exec(app, win, irq=None):  # the window's event loop, as long as the test needs
        if irq is not None:
            irq.restore()
        live = win.live.live
        seen["max_steps"] = live.max_steps
        if live.max_steps is not None:
            qtbot.waitUntil(lambda: live.state == STOPPED and win.live.last is not None
                            and win.live.last.extra["steps_done"] == live.max_steps,
                            timeout=120000)
            qtbot.wait(300)  # a step past the bound would show up by now
            seen["steps_done"] = live.steps_done
        win.live.close()
        win.close()
        return 0

    monkeypatch.setattr(gui, "exec_until_interrupted", fake_exec)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert main(["gui", "--workload", "mlp", "--live", "--device", "host", *extra]) == 0
    return seen


def test_steps_bounds_a_live_window_without_screenshot(qtbot, monkeypatch, tmp_path):
    seen = _run(qtbot, monkeypatch, tmp_path, "--steps", "4")
    assert seen == {"max_steps": 4, "steps_done": 4}


def test_without_steps_a_live_window_runs_until_stop(qtbot, monkeypatch, tmp_path):
    assert _run(qtbot, monkeypatch, tmp_path) == {"max_steps": None}


@pytest.mark.parametrize("steps", ["0", "-3"])
def test_steps_below_one_is_refused(capsys, steps):
    assert main(["gui", "--live", "--steps", steps]) == 2
    assert "a live session runs at least 1 step" in capsys.readouterr().err
