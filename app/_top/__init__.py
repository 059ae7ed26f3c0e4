"""tapescope: the exact reference for your training step (README.md, docs/capture.md).

This folder is the ``tapescope`` package itself (pyproject.toml maps it here and the
repository's top-level folders to ``tapescope.app``, ``tapescope.core``, ...). Every import of
one of those runs this file first, so it imports nothing: what it offers loads when first read::

    import tapescope
    with tapescope.capture("run.capture", steps=2):
        train()            # unmodified; the first 2 optimizer steps are recorded

``tapescope.capture`` is ``tapescope.app.capture.capture`` (torch is imported when a capture
starts, not here); ``tapescope.__version__`` the installed distribution's version.
"""

from __future__ import annotations

from typing import Any

__all__ = ["__version__", "capture"]


def __getattr__(name: str) -> Any:
    if name == "capture":
        from tapescope.app.capture import capture

        return capture
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("tapescope")
        except PackageNotFoundError:  # run from a checkout that was never installed
            return "0+unknown"
    raise AttributeError(f"module 'tapescope' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
