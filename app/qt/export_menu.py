"""File ▸ Export: the graph as PNG or SVG, the current panel's data as CSV (views.export).

"The current panel" is the dock holding the keyboard focus (the one last clicked); with the focus
on the graph, or nowhere, it is the graph's node list. The CSV entry names the panel it will
write before it is chosen.
"""

from __future__ import annotations

import os

from PySide6.QtWidgets import QFileDialog, QMenu

import tapescope.views._pyside_guard  # noqa: F401  (the PySide6 refcount guard, before any Qt call)
from tapescope.views import export

GRAPH = "Graph"


def current_panel(win) -> tuple[str, object]:
    """(title, widget) of the panel holding the focus: a dock's, else the graph."""
    focus = win.focusWidget()
    if focus is not None:
        for title, dock in win.docks.items():
            if dock.isVisible() and dock.isAncestorOf(focus):
                return title, dock.widget()
    return GRAPH, win.graph


def _ask(win, caption: str, suffix: str, kind: str) -> str:
    """A save dialog in the last folder; the suffix added when the user typed none."""
    start = os.path.join(win.settings.value("last_dir", "") or "", f"tapescope.{suffix}")
    path, _ = QFileDialog.getSaveFileName(win, caption, start, f"{kind} (*.{suffix})")
    if path and not path.lower().endswith("." + suffix):
        path += "." + suffix
    if path:
        win.settings.setValue("last_dir", os.path.dirname(path))
    return path


def export_graph(win, fmt: str, path: str | None = None) -> bool:
    """Write the whole graph as ``fmt`` ("png" or "svg") to ``path`` (asked when None)."""
    if win.graph.view.display is None:
        win.show_error("Cannot export", "no graph to export: open a tape or a model first")
        return False
    path = path or _ask(win, f"Export graph as {fmt.upper()}", fmt,
                        "PNG images" if fmt == "png" else "SVG drawings")
    if not path:
        return False
    try:
        size = (export.save_graph_png if fmt == "png" else export.save_graph_svg)(
            win.graph.view, path)
    except export.ExportError as e:
        win.show_error("Cannot export", str(e))
        return False
    win.set_status(f"graph written to {path} ({size.width():,}x{size.height():,})")
    return True


def export_csv(win, path: str | None = None) -> bool:
    """Write the current panel's table as CSV to ``path`` (asked when None)."""
    title, panel = current_panel(win)
    if title == GRAPH:
        if win.session is None:
            win.show_error("Cannot export", "nothing to export: open a tape or a model first")
            return False
        table = export.graph_table(win.session.graph)
    else:
        table = export.panel_table(panel, win.focusWidget())
    if table is None:
        win.show_error("Cannot export", f"the {title} panel shows no table yet")
        return False
    path = path or _ask(win, f"Export {title} as CSV", "csv", "CSV tables")
    if not path:
        return False
    try:
        n = export.write_csv(path, *table)
    except export.ExportError as e:
        win.show_error("Cannot export", str(e))
        return False
    win.set_status(f"{title}: {n:,} rows written to {path}")
    return True


def add_export_menu(win, file_menu: QMenu) -> QMenu:
    """File ▸ Export with its three entries (``win.act_export_png``, ``_svg``, ``_csv``)."""
    m = file_menu.addMenu("&Export")
    win.act_export_png = m.addAction("Graph as &PNG…", lambda: export_graph(win, "png"))
    win.act_export_svg = m.addAction("Graph as &SVG…", lambda: export_graph(win, "svg"))
    win.act_export_csv = m.addAction("Current panel as &CSV…", lambda: export_csv(win))
    win.act_export_png.setToolTip("The whole graph, parity colours and marks included")

    def name_panel() -> None:  # the entry says which panel it writes
        title = current_panel(win)[0]
        win.act_export_csv.setText(f"{'Graph nodes' if title == GRAPH else title} as &CSV…")

    m.aboutToShow.connect(name_panel)
    return m
