"""The window's progress dialogs (app.qt.progress_dialog), driven as a user would: the first kernel
compile of a live session on a cold cache shows what is compiled and for how long, and Cancel
ends the worker (the compiler with it) and leaves the window usable; a tape load on a thread
shows its dialog, and Cancel says what it cannot stop and gives the window back at once."""

from __future__ import annotations

import os
import re
import threading
import time

import pytest
from PySide6.QtCore import QCoreApplication, QEvent, Qt
from PySide6.QtWidgets import QProgressDialog, QPushButton

from tapescope.app.qt import progress_dialog as pd
from tapescope.app.qt.live import STOPPED
from tapescope.app.runs import SessionConfig
from tests.helpers.live import READY_MS

SHOTS = os.environ.get("TAPESCOPE_SHOTS")  # a folder: the dialog's pictures are kept there


def _dialog(win, name: str) -> QProgressDialog | None:
    return next((d for d in win.findChildren(QProgressDialog, name) if d.isVisible()), None)


def _click_cancel(qtbot, dlg: QProgressDialog) -> None:
    button = dlg.findChild(QPushButton)
    assert button is not None and button.text() == "Cancel"
    qtbot.mouseClick(button, Qt.LeftButton)


def _cancel_when_shown(qtbot, win, name: str, shot: str):
    """A 50 ms timer that, once dialog ``name`` shows, notes its label and modality in the
    returned dict (and its picture under TAPESCOPE_SHOTS), clicks Cancel and stops."""
    from PySide6.QtCore import QTimer

    seen: dict = {}
    timer = QTimer()

    def press() -> None:
        dlg = _dialog(win, name)
        if dlg is None:
            return
        seen["label"], seen["modal"] = dlg.labelText(), dlg.isModal()
        if SHOTS:
            dlg.grab().save(os.path.join(SHOTS, shot))
        _click_cancel(qtbot, dlg)
        timer.stop()

    timer.setInterval(50)
    timer.timeout.connect(press)
    timer.start()
    return seen, timer


def _group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def test_the_first_compile_shows_progress_and_cancel_ends_it(qtbot, win, tmp_path, monkeypatch):
    from tapescope.core import native

    native.library()  # this process's own build, from the usual cache, before the cold one
    monkeypatch.setenv("TAPESCOPE_CACHE_DIR", str(tmp_path / "cold"))  # the worker compiles
    assert win.open_workload("mlp")
    assert win.live.start(SessionConfig(workload="mlp", device="host"), paused=True)
    live = win.live.live
    qtbot.waitUntil(lambda: _dialog(win, "live_progress") is not None
                    and "compiling" in _dialog(win, "live_progress").labelText(),
                    timeout=READY_MS)
    dlg = _dialog(win, "live_progress")
    assert not dlg.isModal()  # the window stays usable while it compiles
    text = dlg.labelText()
    # refmath's C kernels, then the host kernel library: what, with what, how long so far
    assert " with " in text and "(cached after)" in text and text.endswith(" s")
    assert "opening mlp on host: " in text  # what the compile is part of
    assert dlg.maximum() == 0  # a compile has no "how far": busy, with the seconds so far
    # the toolbar's state says the same, not "live paused · step 0" as if it were ready
    assert win.live.state_label.text().startswith("live starting · compiling ")
    # how long: the seconds count up while it compiles (the dialog redraws on its own timer)
    qtbot.waitUntil(lambda: bool(re.search(r"opening mlp on host: [1-9]", dlg.labelText())),
                    timeout=READY_MS)
    if SHOTS:
        win.grab().save(os.path.join(SHOTS, "compile_window.png"))
        dlg.grab().save(os.path.join(SHOTS, "compile_dialog.png"))
    pgid = live.worker.pgid
    _click_cancel(qtbot, dlg)
    qtbot.waitUntil(lambda: _group_gone(pgid), timeout=10000)  # worker and compiler ended
    assert live.state == STOPPED and live.info is None
    assert _dialog(win, "live_progress") is None and win.live.startup.cancelled
    assert win.statusBar().currentMessage().startswith("cancelled: compiling ")
    assert win.last_error is None  # no "worker ended unexpectedly" box: it was asked to
    # the window is usable: its session is kept, a node can be selected, Start is offered
    assert win.session is not None and len(win.session.tape) > 0
    win.select_node(1)
    assert win.selected == 1
    assert win.live.act_start.isEnabled() and not win.live.act_stop.isEnabled()
    if SHOTS:
        win.grab().save(os.path.join(SHOTS, "after_cancel.png"))
    # the cancelled library was not stored (a temporary a kill leaves is swept, never used);
    # refmath's own native builds (its C kernels, then its Python extension), done before the
    # kernels, may be, as far as the compile had gone when Cancel came
    stored = [p.name for p in (tmp_path / "cold").rglob("*.so")]
    assert all(n.startswith(("refkernels-", "refmath-py-")) for n in stored), stored


def test_the_dialog_goes_when_the_session_is_ready(qtbot, win):
    assert win.live.start(SessionConfig(workload="mlp", device="host"), paused=True)
    startup = win.live.startup
    qtbot.waitUntil(lambda: win.live.live.info is not None, timeout=READY_MS)
    assert startup.finished and not startup.cancelled
    assert _dialog(win, "live_progress") is None  # shown or not (a warm cache), gone now
    qtbot.waitUntil(lambda: win.live.state_label.text().startswith("live paused · step 0"),
                    timeout=READY_MS)


def test_a_tape_load_shows_a_dialog_and_cancel_gives_the_window_back(qtbot, win, monkeypatch):
    from tapescope.resources import example_path

    gate = threading.Event()
    real = pd.open_path

    def slow_open(path):
        gate.wait(30)  # a big tape: the reader is busy until the test lets it go
        return real(path)

    monkeypatch.setattr(pd, "open_path", slow_open)
    before = win.session
    path = str(example_path("mlp"))
    result, timer = _cancel_when_shown(qtbot, win, "load_progress", "tape_dialog.png")
    t0 = time.monotonic()
    assert not win.open_file(path)  # returns as soon as Cancel is pressed
    took = time.monotonic() - t0
    gate.set()
    assert result["label"].startswith("Loading mlp.tape (") and result["modal"]
    assert took < 25  # not held until the reader finished (it waits on the gate for 30 s)
    box = win.last_error
    assert box is not None and "cancelled: Loading mlp.tape" in box.text()
    assert "cannot be stopped midway" in box.text()
    box.close()
    assert win.session is before  # the open session is kept
    # the next open, uncancelled, loads the tape (the dropped result never lands)
    assert win.open_file(path) and win.session.source == path and win.session is not before


@pytest.mark.parametrize("fail", [False, True])
def test_run_with_progress_returns_the_result_or_raises_the_error(qtbot, win, fail):
    def work():
        time.sleep(0.5)  # long enough for the dialog to show (after 0.1 s)
        if fail:
            raise ValueError("bad tape")
        return 42

    if fail:
        with pytest.raises(ValueError, match="bad tape"):
            pd.run_with_progress(win, "t", "working", work, show_after_ms=100)
    else:
        assert pd.run_with_progress(win, "t", "working", work, show_after_ms=100) == 42
    assert _dialog(win, "load_progress") is None


def test_a_cold_native_build_shows_a_dialog_and_cancel_goes_on_without_it(qtbot, win,
                                                                          monkeypatch):
    from tapescope.core import native

    gate, built = threading.Event(), threading.Event()
    lib = native.library()  # the real one, handed out once the "build" below ends

    def slow_build(cc):
        gate.wait(30)  # a cold cache on a busy machine: a minute of gcc
        built.set()
        return "built"

    monkeypatch.setattr(native, "_lib", False)  # not tried yet (restored after the test)
    monkeypatch.setattr(native, "_ext", False)
    monkeypatch.setattr(native, "_build", slow_build)
    monkeypatch.setattr(native.ctypes, "CDLL", lambda path: lib)
    seen, timer = _cancel_when_shown(qtbot, win, "native_progress", "native_dialog.png")
    try:
        assert pd.prepare_native(win, show_after_ms=100) is False
        assert seen["label"].startswith("Compiling refmath's C kernels (first run only")
        assert not built.is_set()  # Cancel did not wait for the build
        assert native.library() is None  # meanwhile numpy's reference, no second build
        assert "numpy's reference" in win.statusBar().currentMessage()
    finally:
        gate.set()
    qtbot.waitUntil(lambda: native.library() is lib, timeout=10000)  # installed when it ends
    assert built.is_set()


def test_the_worker_says_what_opening_takes_before_ready():
    from tapescope.app.live_worker import Stepper

    msgs: list[dict] = []
    st = Stepper(SessionConfig(workload="mlp", device="host"), msgs.append, max_steps=1)
    st.run()
    kinds = [m["type"] for m in msgs]
    assert "ready" in kinds, msgs[-1]
    ready = kinds.index("ready")
    opening = [m for m in msgs[:ready] if m["type"] == "progress"
               and m["what"] == "opening mlp on host"]
    assert [m["event"] for m in opening] == ["start", "end"]
    assert not any(m["type"] == "progress" for m in msgs[ready:])  # only while opening
    # many advances in a burst: at most one progress message per 0.1 s, starts and ends always
    msgs.clear()
    for k in range(50):
        st._progress({"event": "advance", "what": "x", "done": k, "total": 50, "elapsed": 0})
    st._progress({"event": "end", "what": "x", "done": 50, "total": 50, "elapsed": 0})
    assert len(msgs) < 10 and msgs[-1]["event"] == "end"  # (50 asked)


def test_cyclic_garbage_is_collected_on_the_gui_thread_only_while_a_window_is_open(
        qtbot, win, settings):
    """A collection started by a thread's allocations ran on that thread, and deleted the
    window's Qt objects held in cyclic garbage off the GUI thread (a segfault in a full suite
    run). While a window is open no collection starts on another thread (a load behind the
    dialog, a thread of the window's own like the live session's readers); the GUI thread's
    timer collects instead; the last window's close gives automatic collection back."""
    import gc

    from tapescope.app.qt import gui_gc
    from tapescope.app.qt.main_window import MainWindow

    gui = threading.get_ident()
    starts, died = [], []

    def started(phase, _info):
        if phase == "start":
            starts.append(threading.get_ident())

    class Cyclic:
        def __del__(self):
            died.append(threading.get_ident())

    def churn(n=300_000):  # containers: each counts toward a collection's threshold
        junk = [[i] for i in range(n)]
        return len(junk)

    gc.callbacks.append(started)
    try:
        assert gui_gc.holders() and not gc.isenabled()
        c = Cyclic()
        c.me = c  # garbage in a cycle once dropped: only a collection frees it
        del c
        assert pd.run_with_progress(win, "t", "working", churn) == 300_000
        busy = threading.Event()

        def reader():  # a thread of the window's, allocating for as long as it runs
            while not busy.is_set():
                churn(20_000)

        t = threading.Thread(target=reader, daemon=True)
        t.start()
        try:
            qtbot.waitUntil(lambda: bool(died), timeout=10_000)
        finally:
            busy.set()
            t.join()
        assert died == [gui]  # the cycle freed by the GUI thread's timer
        assert starts and set(starts) == {gui}, "a collection started on another thread"
        # a second window holds it too; the last one's close gives it back
        n = gui_gc.holders()  # (this test's window, and any an earlier test left open)
        w2 = MainWindow(settings=settings)
        qtbot.addWidget(w2)
        assert gui_gc.holders() == n + 1
        w2.close()
        assert gui_gc.holders() == n and not gc.isenabled()
        w3 = MainWindow(settings=settings)  # one deleted without a close: released too
        assert gui_gc.holders() == n + 1
        w3.deleteLater()
        QCoreApplication.sendPostedEvents(None, QEvent.DeferredDelete)
        assert gui_gc.holders() == n
        win.close()
        assert gui_gc.holders() == n - 1 and gc.isenabled() == (n == 1)
    finally:
        gc.callbacks.remove(started)
