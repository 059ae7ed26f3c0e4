"""Python source that blocks Qt in a child interpreter (what a machine without PySide6 sees):
the headless modules' import check (tests/test_layers.py) and the report without Qt
(tests/app/test_report_without_qt.py) run code after it."""

QT = ("PySide6", "pyqtgraph", "shiboken6")

BLOCK_QT = f"""import sys
class _BlockQt:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {QT!r}:
            raise ImportError("Qt is blocked: " + name)
sys.meta_path.insert(0, _BlockQt())
"""


def qt_modules(names) -> list[str]:
    """The Qt modules among ``names`` (e.g. ``sys.modules``)."""
    return sorted(n for n in names if n.split(".")[0] in QT)
