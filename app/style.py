"""The application's look: Fusion style plus the shipped style sheet (resources/style.qss)."""

from __future__ import annotations


def apply_style(app) -> None:
    """Use the Fusion style and our style sheet. The sheet comes from the installed package; a
    missing one is an installation fault, so it is said on stderr (the app still opens)."""
    import sys

    from resources import resource_path

    app.setStyle("Fusion")
    try:
        app.setStyleSheet(resource_path("style.qss").read_text(encoding="utf-8"))
    except FileNotFoundError as e:
        print(f"tapescope: {e}; the window is unstyled", file=sys.stderr)
