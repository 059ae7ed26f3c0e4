"""What tapescope is, as installed: its version (for --version, doctor and the report)."""

from __future__ import annotations

import importlib.metadata


def version() -> str:
    """The installed tapescope's version ("unknown" when it runs uninstalled)."""
    try:
        return importlib.metadata.version("tapescope")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"
