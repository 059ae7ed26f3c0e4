"""The live controller reaches the window only through ``LIVE_WINDOW_API``.

Statically (every ``win.<name>`` in the live modules is in the API, and the API exists on
MainWindow) and by driving a session through a window that has nothing but that interface.
"""

from __future__ import annotations

import ast
from pathlib import Path

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QMenu, QToolBar, QWidget

from tapescope.app.qt.live import FAILED, STOPPED
from tapescope.app.qt.live_controller import LiveController
from tapescope.app.qt.main_window import LIVE_WINDOW_API, MainWindow
from tapescope.app.runs import SessionConfig
from tapescope.app.session import open_workload
from tests.helpers.live import READY_MS

APP = Path(__file__).resolve().parents[2] / "app"
LIVE_MODULES = ("qt/live_controller.py", "qt/time_travel.py", "qt/live_toolbar.py",
                "step_rerun.py", "qt/progress_dialog.py", "qt/live_stepper.py")


def window_uses(path: Path) -> set[str]:
    """Names read off the window: ``self.win.X``, ``ctl.win.X``, and ``win.X``/``w.X`` where
    ``win``/``w`` is a local bound to the window."""
    tree = ast.parse(path.read_text())
    aliases = {"win"}
    for node in ast.walk(tree):  # w = self.win
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Attribute)
                and node.value.attr == "win"):
            aliases |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    used = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        v = node.value
        if (isinstance(v, ast.Attribute) and v.attr == "win") or (
                isinstance(v, ast.Name) and v.id in aliases):
            used.add(node.attr)
    return used


def test_the_live_modules_use_only_the_window_interface():
    for name in LIVE_MODULES:
        extra = window_uses(APP / name) - LIVE_WINDOW_API
        assert not extra, f"app/{name} reaches into the window: {sorted(extra)}"


def test_the_window_interface_exists_on_the_main_window(qtbot, settings):
    w = MainWindow(settings=settings)
    qtbot.addWidget(w)
    missing = [n for n in LIVE_WINDOW_API if not hasattr(w, n)]
    assert not missing
    w.live.close()


class FakeWindow(QWidget):
    """Only LIVE_WINDOW_API (a QWidget: the controller's dialogs and docks need a parent);
    every call is recorded."""

    node_selected = Signal(int)
    session_changed = Signal()
    repro_requested = Signal()

    def __init__(self) -> None:
        super().__init__()
        self.session = None
        self.selected = -1
        self.calls: list[tuple[str, tuple]] = []
        self._row = QToolBar("Main", self)

    def _rec(self, name: str, *args) -> None:
        self.calls.append((name, args))

    def called(self, name: str) -> list[tuple]:
        return [a for n, a in self.calls if n == name]

    def open_workload(self, spec):
        self.session = open_workload(spec)
        self._rec("open_workload", spec)
        return True

    def show_error(self, title, text, details=None):
        self._rec("show_error", title, text)

    def set_status(self, text, ms=5000):
        self._rec("set_status", text)

    def select_node(self, node_id):
        self.selected = node_id
        self._rec("select_node", node_id)
        self.node_selected.emit(node_id)

    def set_comparison(self, comparison, overlay=True):
        self._rec("set_comparison", comparison, overlay)

    def place_live_docks(self, training, kernels):
        for w in (training, kernels):
            w.setParent(self)

    def dock_toggle(self, title):
        return QMenu(self).addAction(title)

    def add_menu(self, title):
        return QMenu(title, self)

    def add_toolbar(self, toolbar, new_row=False):
        toolbar.setParent(self)

    def tool_row(self):
        return self._row

    def add_status_widget(self, widget):
        widget.setParent(self)

    def set_graph_groups(self, groups):
        self._rec("set_graph_groups", groups)

    def set_graph_overlay(self, colors, muted=(), introduced=()):
        self._rec("set_graph_overlay", colors)

    def set_graph_marks(self, kind, ids):
        self._rec("set_graph_marks", kind, list(ids))

    def show_details(self, details):
        self._rec("show_details", details)

    def show_own_details(self):
        self._rec("show_own_details")

    def set_inspector_note(self, text):
        self._rec("set_inspector_note", text)

    def set_inspector_action(self, text="", tip="", fn=None):
        self._rec("set_inspector_action", text)

    def inspector_shows(self):
        self._rec("inspector_shows")
        return None

    def walk_backward(self, tape, loss_id):
        self._rec("walk_backward", tape, loss_id)
        return True

    def set_stepper_walks(self, text):
        self._rec("set_stepper_walks", text)


def test_fake_window_lists_exactly_the_interface():
    own = {n for n in vars(FakeWindow) if not n.startswith("_")
           and n not in ("called", "staticMetaObject")}
    assert own | {"session", "selected"} == set(LIVE_WINDOW_API)


def test_start_snapshots_inspect_and_stop_through_the_interface_only(qtbot):
    w = FakeWindow()
    qtbot.addWidget(w)
    ctl = LiveController(w, interval_s=0.05)
    try:
        assert ctl.start(SessionConfig(workload="mlp", device="host"), paused=True)
        assert w.called("open_workload") == [("mlp",)]
        qtbot.waitUntil(lambda: ctl.live.info is not None or ctl.live.state == FAILED,
                        timeout=READY_MS)
        assert ctl.live.state != FAILED, w.called("show_error")
        assert any(t.startswith("live: ") for (t,) in w.called("set_status"))  # ready
        ctl.single_step()
        qtbot.waitUntil(lambda: ctl.last is not None and ctl.live.steps_done >= 1,
                        timeout=10000)
        # snapshot routing: the shown step's comparison, colours and marks go to the window
        qtbot.waitUntil(lambda: bool(w.called("set_comparison")), timeout=10000)
        comp = w.called("set_comparison")[-1][0]
        assert len(comp) == len(w.session.tape)
        assert w.called("set_graph_overlay")
        assert {k for k, _ in w.called("set_graph_marks")} >= {"nan", "first"}
        # a selection fetches both sides of the node from the worker into show_details
        w.select_node(1)
        # at once: the shown step's summary, no arrays (none of another step's), then the answer
        first = w.called("show_details")[0][0]
        assert first.value is None and first.step == ctl.shown_step()
        qtbot.waitUntil(lambda: w.called("show_details")[-1][0].sides is not None,
                        timeout=10000)
        d = w.called("show_details")[-1][0]
        assert d.step == ctl.shown_step() and d.sides[0].startswith("reference")
        # the Backward stepper walks the shown step's replayed reference and says so
        qtbot.waitUntil(lambda: bool(w.called("walk_backward")), timeout=10000)
        tape, loss = w.called("walk_backward")[-1]
        assert tape is not w.session.tape and len(tape) == len(w.session.tape)
        assert any("Backward of live step 1" in t for (t,) in w.called("set_stepper_walks"))
        ctl.stop()
        qtbot.waitUntil(lambda: ctl.live.state == STOPPED, timeout=10000)
        ctl.close()
        assert w.called("show_own_details")  # the Inspector back to the tape's own arrays
        assert not ctl.live.is_alive()
    finally:
        ctl.close()
