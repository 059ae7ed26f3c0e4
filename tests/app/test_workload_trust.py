"""A tape's ``meta.workload`` never runs a Python file the user did not name.

A ``.tape`` someone sent may say it was recorded from ``/anywhere/evil.py``. Live ▸ Start must not
run that file without asking: a file may name only a built-in workload; a script runs when the user
named it (``--workload PATH``, File ▸ Open of a ``.py``) or confirmed a dialog that shows its path.
"""

from __future__ import annotations

import time

import pytest
from PySide6.QtWidgets import QMessageBox

from tapescope.app.session import Session, unconfirmed_script
from tapescope.core import tapefile, workloads


def _tape_naming(tmp_path, workload: str):
    wl = workloads.get("mlp")
    loss = wl.record(0)
    wl.tape.backward(loss)
    return tapefile.save(wl.tape, tmp_path / "sent.tape", meta={"workload": workload,
                                                               "loss": loss.id})


@pytest.fixture
def evil(tmp_path):
    """(script, marker): importing the script creates the marker."""
    marker = tmp_path / "PWNED"
    script = tmp_path / "evil.py"
    script.write_text(f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n")
    return script, marker


def _answer(monkeypatch, button):
    asked: list[str] = []

    def question(parent, title, text, *args, **kwargs):
        asked.append(f"{title}\n{text}")
        return button

    monkeypatch.setattr(QMessageBox, "question", staticmethod(question))
    return asked


def test_live_start_asks_before_running_a_script_named_by_a_tape(win, tmp_path, evil,
                                                                  monkeypatch, qtbot):
    script, marker = evil
    assert win.open_file(str(_tape_naming(tmp_path, str(script))))
    asked = _answer(monkeypatch, QMessageBox.No)
    win.live.restart()  # Live ▸ Start
    assert len(asked) == 1 and str(script) in asked[0]
    assert win.live.live is None, "a live session started without the user's consent"
    assert win.live.config.workload != str(script)
    qtbot.wait(300)
    assert not marker.exists()


def test_a_confirmed_script_runs(win, tmp_path, evil, monkeypatch, qtbot):
    script, marker = evil
    assert win.open_file(str(_tape_naming(tmp_path, str(script))))
    asked = _answer(monkeypatch, QMessageBox.Yes)
    win.live.restart()
    assert len(asked) == 1 and win.live.live is not None
    qtbot.waitUntil(marker.exists, timeout=30_000)  # the user said yes: it ran


def test_a_built_in_workload_named_by_a_tape_needs_no_question(win, tmp_path, monkeypatch):
    assert win.open_file(str(_tape_naming(tmp_path, "transformer")))
    asked = _answer(monkeypatch, QMessageBox.No)
    assert win.live.toolbar_config().workload == "transformer"
    assert unconfirmed_script(win.session, "transformer") is None
    assert asked == []


def test_only_a_file_named_script_needs_confirmation(tmp_path, evil):
    script, _ = evil
    tape, meta = tapefile.load(_tape_naming(tmp_path, str(script)))
    from_file = Session(tape, None, str(tmp_path / "sent.tape"), meta)
    assert unconfirmed_script(from_file, str(script)) == str(script)
    # the user opened the script (--workload PATH, File ▸ Open of a .py): no question
    opened = Session(tape, None, f"workload:{script}", {"workload": str(script)})
    assert unconfirmed_script(opened, str(script)) is None
    # a script the user chose for the live config, not the one the file names: no question
    assert unconfirmed_script(from_file, str(tmp_path / "mine.py")) is None
    assert unconfirmed_script(from_file, "mlp") is None and unconfirmed_script(None, "x.py") is None


def test_declining_leaves_no_worker_behind(win, tmp_path, evil, monkeypatch):
    script, marker = evil
    assert win.open_file(str(_tape_naming(tmp_path, str(script))))
    _answer(monkeypatch, QMessageBox.No)
    for _ in range(3):  # asking again each time; never running
        win.live.restart()
    time.sleep(0.3)
    assert win.live.live is None and not marker.exists()
