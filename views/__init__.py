"""Qt widgets, one per model object, and the Qt-free models they show.

This package's ``__init__`` imports nothing, so the Qt-free modules (``views.models``:
``graph_model``, ``array_stats``, ``node_details``, ``layout``, ``parity_rows``, ...) load
no Qt even where PySide6 is installed: the headless worker and CLI read them. Every widget module
imports ``views._pyside_guard`` (the PySide6 refcount workaround, applied on import) before its
first Qt call; tests/test_layers.py holds both
(test_headless_modules_load_no_qt_where_pyside6_is_installed and
test_every_qt_module_applies_the_pyside_guard).
"""
