"""Python's cyclic garbage collected on the GUI thread only, while a window is open.

Python runs a collection on whichever thread's allocation crosses its threshold. Cyclic garbage
that holds Qt objects (a closed dialog's wrappers, a lambda connected to a signal) is then
deleted on that thread, and Qt objects deleted off the GUI thread crash the process (a segfault
"Garbage-collecting" on run_with_progress's load thread, in a full suite run). Threads allocate
all the time while a window is open: a load behind a progress dialog (one abandoned by Cancel
goes on), the live session's reader threads, the worker's log reader.

So while any window holds it (``hold``, from the window's constructor), automatic collection
is off and a timer on the GUI thread does its work instead: every ``TICK_MS`` it compares
``gc.get_count()`` with ``gc.get_threshold()`` and collects the oldest generation past its
threshold, as the interpreter would. The last window's close (``release``) collects once more,
on the GUI thread, and gives automatic collection back as it was.
"""

from __future__ import annotations

import functools
import gc
import time

import shiboken6
from PySide6.QtCore import QCoreApplication, QObject, QTimer

import tapescope.views._pyside_guard  # noqa: F401  (the PySide6 refcount guard, before any Qt call)

__all__ = ["FULL_EVERY_S", "TICK_MS", "collect_due", "hold", "holders", "release"]

TICK_MS = 100
FULL_EVERY_S = 30.0

_holders: set[int] = set()  # id() of each window holding the collector
_timer: QTimer | None = None
_was_enabled = True
_last_full = float("-inf")


def hold(window: QObject) -> None:
    """Collect on the GUI thread only until ``release(window)``; called on the GUI thread."""
    global _timer, _was_enabled
    if not _holders:
        _was_enabled = gc.isenabled()
        gc.disable()
        _timer = QTimer()
        _timer.setInterval(TICK_MS)
        _timer.timeout.connect(collect_due)
        _timer.start()
    _holders.add(id(window))
    # (a window deleted without a close, a child one with its parent: released all the same;
    # the slot holds the number, not the window)
    window.destroyed.connect(functools.partial(_release, id(window)))


def release(window: QObject) -> None:
    """The window is closing: the last one collects everything once more (here, on the GUI
    thread: the windows' own cycles go now) and gives automatic collection back; idempotent."""
    _release(id(window))


def _release(key: int, *_destroyed: object) -> None:
    global _timer
    if key not in _holders:
        return
    _holders.discard(key)
    if _holders:
        return
    timer, _timer = _timer, None
    # (a window deleted as the application ends: the timer may be gone, and nothing is
    # collected then: Qt is tearing its objects down)
    if timer is not None and shiboken6.isValid(timer):
        timer.stop()
        timer.deleteLater()
        if QCoreApplication.instance() is not None:
            gc.collect()
    if _was_enabled:
        gc.enable()


def holders() -> int:
    """How many windows hold it now."""
    return len(_holders)


def collect_due() -> int | None:
    """The collection the interpreter would have started by now, if any: the oldest
    generation whose count is past its threshold (the generation collected, or None). A full
    one at most every ``FULL_EVERY_S`` (the interpreter skips most of them too, while the
    long-lived objects have not grown by a quarter: a count Python does not expose), a
    younger one meanwhile: a full collection walks every object of the process, torch's."""
    global _last_full
    counts, limits = gc.get_count(), gc.get_threshold()
    gen = next((g for g in (2, 1, 0) if limits[g] and counts[g] > limits[g]), None)
    if gen == 2 and time.monotonic() - _last_full < FULL_EVERY_S:
        gen = 1
    if gen is not None:
        if gen == 2:
            _last_full = time.monotonic()
        gc.collect(gen)
    return gen
