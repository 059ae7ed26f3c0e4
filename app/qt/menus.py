"""Menus and the toolbar of the main window (kept apart so main_window.py stays readable)."""

from __future__ import annotations

from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QApplication, QMessageBox

import tapescope.views._pyside_guard  # noqa: F401  (the PySide6 refcount guard, before any Qt call)
from tapescope.resources import EXAMPLES


def _action(win, text: str, fn, shortcut=None, tip: str | None = None) -> QAction:
    a = QAction(text, win)
    if shortcut is not None:
        a.setShortcut(QKeySequence(shortcut))
    if tip:
        a.setToolTip(tip)
    a.triggered.connect(fn)
    return a


def _open_example(win, name: str) -> bool:
    """File > Open example: the shipped file, found through the installed package."""
    from tapescope.resources import example_path

    try:
        path = example_path(name)
    except FileNotFoundError as e:
        QMessageBox.warning(win, "tapescope", str(e))
        return False
    return win.open_file(str(path))


def build_menus(win) -> None:
    """File, Edit, View, Debug, Help menus and the main toolbar on ``win`` (a MainWindow)."""
    mb = win.menuBar()
    f = mb.addMenu("&File")
    win.act_open = _action(win, "&Open…", win.open_dialog, QKeySequence.StandardKey.Open)
    f.addAction(win.act_open)
    win.recent_menu = f.addMenu("Open &Recent")
    wl = f.addMenu("Built-in &workloads")
    for name in ("mlp", "transformer"):
        wl.addAction(_action(win, name, lambda _=False, n=name: win.open_workload(n)))
    ex = f.addMenu("Open e&xample")  # the tapes and models the package ships
    win.example_actions = {}
    for name, rel in EXAMPLES.items():
        a = _action(win, f"{name} ({rel.rsplit('/', 1)[-1]})",
                    lambda _=False, n=name: _open_example(win, n))
        win.example_actions[name] = a
        ex.addAction(a)
    f.addAction(_action(win, "&Save tape as…", win.save_dialog, QKeySequence.StandardKey.SaveAs))
    from tapescope.app.qt.export_menu import add_export_menu

    add_export_menu(win, f)  # graph as PNG / SVG, the current panel as CSV
    f.addSeparator()
    f.addAction(_action(win, "&Quit", win.close, QKeySequence.StandardKey.Quit))

    e = mb.addMenu("&Edit")
    win.act_find = _action(win, "&Find node…", win.graph.open_search, QKeySequence.StandardKey.Find)
    e.addAction(win.act_find)
    e.addAction(_action(win, "Copy value as numpy", lambda: win.inspector.copy_as_numpy("value"),
                        "Ctrl+Shift+C"))
    e.addAction(_action(win, "Copy gradient as numpy",
                        lambda: win.inspector.copy_as_numpy("grad"), "Ctrl+Shift+G"))
    win.act_nan = _action(win, "Jump to first &NaN", win.jump_to_first_nan, "Ctrl+N",
                          "Select the first node that produced a NaN or inf (from finite "
                          "inputs, or one only one side holds); an inf both sides hold is data "
                          "(Ctrl+N)")
    e.addAction(win.act_nan)

    e.addSeparator()
    win.act_back = _action(win, "&Back", win.go_back, "Alt+Left",
                           "The node selected before this one (Alt+Left, the mouse's back button)")
    win.act_forward = _action(win, "&Forward", win.go_forward, "Alt+Right",
                              "The next node of the ones visited (Alt+Right)")
    e.addAction(win.act_back)
    e.addAction(win.act_forward)

    v = mb.addMenu("&View")
    graph_actions = win.graph.view.actions_for_menu()
    for a in graph_actions:
        v.addAction(a)
    v.addSeparator()
    for d in win.docks.values():
        v.addAction(d.toggleViewAction())
    v.addSeparator()
    win.act_reset_layout = _action(win, "&Reset layout", lambda: win.window_layout.reset(),
                                   tip="Put every dock back where it started; fit the screen")
    v.addAction(win.act_reset_layout)

    d = mb.addMenu("&Debug")
    for a in win.stepper_panel.actions.values():
        d.addAction(a)

    h = mb.addMenu("&Help")
    h.addAction(_action(win, "&About tapescope", lambda: QMessageBox.about(
        win, "About tapescope", "tapescope — a tape inspector and debugger: the CPU reference "
        "tape, its DAG, its gradients, and where a device's bits differ.")))
    h.addAction(_action(win, "About &Qt", QApplication.aboutQt))

    tb = win.main_toolbar = win.addToolBar("Main")
    tb.setObjectName("main_toolbar")
    tb.addAction(win.act_open)
    tb.addAction(graph_actions[0])  # fit
    tb.addAction(win.act_find)
    tb.addAction(win.act_nan)
    # NOTE: the Backward stepper's actions live in its dock's own toolbar and in Debug (F11,
    # Shift+F11, F5, ...): here they stood beside the Live toolbar's training step, two "Step"
    # buttons side by side; this row holds the step scrubber instead (app.qt.time_travel)
