"""Qt widgets, one per model object."""

from views._pyside_guard import guard_none_refcount

try:
    guard_none_refcount()  # before any widget code runs: see views/_pyside_guard.py
except ImportError:  # PySide6 missing or blocked: only the Qt-free modules are usable
    pass
