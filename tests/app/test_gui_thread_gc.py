"""The desktop app's event loop collects garbage on the GUI thread only (app/commands/gui.py):
automatic collection is off while the loop runs, a GUI-thread timer collects, and the previous
setting comes back after."""

from __future__ import annotations

import gc
import threading

from app.commands.gui import gui_thread_gc


def test_collection_runs_on_the_gui_thread_while_the_loop_runs(qtbot):
    assert gc.isenabled()
    seen: list = []
    gc.callbacks.append(lambda phase, info: phase == "start" and seen.append(
        threading.current_thread() is threading.main_thread()))
    try:
        col = gui_thread_gc()
        try:
            assert not gc.isenabled()  # no thread triggers a collection by allocating
            junk = []
            for _ in range(5000):  # cycles enough to pass generation 0's threshold
                a: list = []
                a.append(a)
                junk.append(a)
            del junk, a
            seen.clear()
            qtbot.wait(1300)  # the timer's check (every second) collects them
            assert seen and all(seen)
            worker_saw: list = []
            t = threading.Thread(target=lambda: worker_saw.append(gc.isenabled()))
            t.start()
            t.join()
            assert worker_saw == [False]
        finally:
            col.stop()
    finally:
        gc.callbacks.pop()
    assert gc.isenabled()
