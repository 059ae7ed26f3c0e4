"""Qt widgets, one per model object."""

try:
    from views._pyside_guard import guard_none_refcount
except ImportError:  # pragma: no cover — PySide6 missing: only the Qt-free modules are usable
    pass
else:
    guard_none_refcount()  # before any widget code runs: see views/_pyside_guard.py
