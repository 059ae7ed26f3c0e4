"""tapescope application layer: CLI, main window, session controller."""


def version() -> str:
    """The installed tapescope's version ("unknown" when it runs uninstalled)."""
    import importlib.metadata

    try:
        return importlib.metadata.version("tapescope")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"
