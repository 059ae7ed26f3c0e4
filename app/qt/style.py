"""The application's look: Fusion style plus the shipped style sheet (resources/style.qss), light
or dark as the system is (views.theme)."""

from __future__ import annotations


def apply_style(app) -> None:
    """Use the Fusion style and our style sheet, in the system's light or dark theme (or
    ``TAPESCOPE_THEME=dark|light``). The sheet comes from the installed package; a missing one
    is an installation fault, so it is said on stderr (the app still opens)."""
    import sys

    from tapescope.resources import resource_path
    from tapescope.views import theme

    dark = theme.system_wants_dark(app)  # before Fusion: the platform's palette says it
    app.setStyle("Fusion")
    try:
        sheet = resource_path("style.qss").read_text(encoding="utf-8")
    except FileNotFoundError as e:
        print(f"tapescope: {e}; the window is unstyled", file=sys.stderr)
        sheet = ""
    if dark and not theme.is_dark_palette(app.palette()):
        app.setPalette(theme.dark_palette())  # Fusion's own palette is light
    theme.apply(app, sheet)
