"""The Qt boundary of app/ (napari's ``_qt``): every app module that imports PySide6 or pyqtgraph,
at module level or lazily, lives here (the window, its menus and live panels, the capture
window, dialogs, the report's offscreen renderer). Everything else in app/ is headless;
pyproject's import-linter contracts and tests/test_layers.py hold the line (docs/layers.md)."""
