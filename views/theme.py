"""Light or dark, as the system is: the palette, the style sheet, the plots and the graph.

The theme is chosen once, before the window is built (``app.qt.style.apply_style``): dark when the
desktop asks for it (Qt's colour scheme, or a palette whose window colour is dark, as a dark
GNOME/KDE theme gives) or when ``TAPESCOPE_THEME=dark``; ``TAPESCOPE_THEME=light`` forces
light. The parity colours (green exact, amber to red, violet NaN) are the same in both: they are
data, drawn on the node boxes, which stay light with dark text in both themes (as in Netron).
What changes is everything around them: the window, the docks, the tables, the plots' and the
graph's backgrounds and the marks drawn on the background (the first-divergence flag, frame
labels).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QPalette

import tapescope.views._pyside_guard  # noqa: F401  (the PySide6 refcount guard, before any Qt call)


@dataclass(frozen=True)
class Theme:
    """The colours of one theme (names are #rrggbb, or rgba() where the sheet takes it)."""

    dark: bool
    graph_bg: str
    plot_bg: str
    plot_fg: str
    overlay_bg: QColor  # the minimap's and the legend's backing
    on_background: str  # text and marks drawn straight on the graph's background
    frame: str  # fused-segment frames and their labels


LIGHT = Theme(False, "#f7f8fa", "#ffffff", "#4b5563", QColor(255, 255, 255, 215), "#111827",
              "#0e7490")
DARK = Theme(True, "#1b1e24", "#22262e", "#c9cfd9", QColor(34, 38, 46, 225), "#f3f4f6",
             "#22d3ee")

# the shipped (light) style sheet's colours and their dark twins
_SHEET_DARK = {"#d5d9e0": "#3a404b", "#e9ecf1": "#2b3039", "#e3e6eb": "#353b45",
               "#cfe0fb": "#1e3a8a", "selection-color: black": "selection-color: white",
               "#f1f3f6": "#2b3039", "#dde1e7": "#3a404b", "#eef1f5": "#262a32"}

_current = LIGHT


def current() -> Theme:
    """The theme the window is drawn in (light until ``apply`` chose another)."""
    return _current


def is_dark_palette(pal: QPalette) -> bool:
    """Is this a dark palette (its window darker than its text)?"""
    return pal.color(QPalette.Window).lightness() < pal.color(QPalette.WindowText).lightness()


def system_wants_dark(app) -> bool:
    """Dark by the environment's word (TAPESCOPE_THEME), else Qt's colour scheme, else the
    palette the platform gave the application."""
    forced = os.environ.get("TAPESCOPE_THEME", "").strip().lower()
    if forced in ("dark", "light"):
        return forced == "dark"
    hints = app.styleHints()
    scheme = getattr(hints, "colorScheme", None)
    if scheme is not None and scheme() == Qt.ColorScheme.Dark:
        return True
    return is_dark_palette(app.palette())


def dark_palette() -> QPalette:
    """Fusion's colours, dark."""
    p = QPalette()
    for role, color in ((QPalette.Window, "#23272e"), (QPalette.WindowText, "#e5e7eb"),
                        (QPalette.Base, "#1b1e24"), (QPalette.AlternateBase, "#262a32"),
                        (QPalette.ToolTipBase, "#2b3039"), (QPalette.ToolTipText, "#e5e7eb"),
                        (QPalette.Text, "#e5e7eb"), (QPalette.Button, "#2b3039"),
                        (QPalette.ButtonText, "#e5e7eb"), (QPalette.BrightText, "#ffffff"),
                        (QPalette.Link, "#7aa7ff"), (QPalette.Highlight, "#2f5fb3"),
                        (QPalette.HighlightedText, "#ffffff"),
                        (QPalette.PlaceholderText, "#8b93a1")):
        p.setColor(role, QColor(color))
    for role in (QPalette.WindowText, QPalette.Text, QPalette.ButtonText):
        p.setColor(QPalette.Disabled, role, QColor("#6b7280"))
    return p


def sheet_for(sheet: str, theme: Theme) -> str:
    """The shipped style sheet in ``theme``'s colours."""
    if not theme.dark:
        return sheet
    for a, b in _SHEET_DARK.items():
        sheet = sheet.replace(a, b)
    return sheet


def apply(app, sheet: str = "") -> Theme:
    """Choose the theme as the system asks, and set the palette, the sheet, pyqtgraph's
    defaults and the graph's background marks. Call before any window is built."""
    dark = system_wants_dark(app)
    theme = DARK if dark else LIGHT
    if dark and not is_dark_palette(app.palette()):
        app.setPalette(dark_palette())  # a forced dark theme on a light platform palette
    if sheet:
        app.setStyleSheet(sheet_for(sheet, theme))
    _use(theme)
    return theme


def _use(theme: Theme) -> None:
    global _current
    _current = theme
    import pyqtgraph as pg

    pg.setConfigOptions(background=theme.plot_bg, foreground=theme.plot_fg)
    from tapescope.views import graph_canvas

    # marks drawn on the background, not on a box: the same objects, recoloured in place
    graph_canvas.FIRST_COLOR.setRgba(QColor(theme.on_background).rgba())
    graph_canvas.FRAME_COLOR.setRgba(QColor(theme.frame).rgba())


def reset() -> None:
    """Back to the light theme (tests)."""
    _use(LIGHT)
