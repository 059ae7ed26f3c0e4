"""The application's look: Fusion style plus resources/style.qss."""

from __future__ import annotations

from pathlib import Path

STYLE_PATH = Path(__file__).resolve().parent.parent / "resources" / "style.qss"


def apply_style(app) -> None:
    """Use the Fusion style and our style sheet (silently plain when the sheet is missing)."""
    app.setStyle("Fusion")
    if STYLE_PATH.is_file():
        app.setStyleSheet(STYLE_PATH.read_text(encoding="utf-8"))
