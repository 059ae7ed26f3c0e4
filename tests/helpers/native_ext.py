"""The native code's CPython extension (core/native/refmath_py.c) for the tests of its entries:
skipped where there is no native code or no ``Python.h`` (the path that runs instead is named in
the reason), a failure where ``Python.h`` is there and it did not build."""

from __future__ import annotations

import os
import sysconfig
from collections.abc import Callable
from typing import Any

import pytest

from tapescope.core import native


def ext_or_skip(instead: str, entry: Callable[[], Any] | None = None) -> Any:
    """The extension, or ``entry()`` (one of core.native's ``*_entry`` getters) where given;
    ``instead``: what runs where the extension is not built (the skip's reason)."""
    inc = sysconfig.get_paths().get("include") or ""
    if native.library() is None:
        pytest.skip("no native code")
    got = native.refmath_ext() if entry is None else entry()
    if got is None:
        assert not os.path.isfile(os.path.join(inc, "Python.h")), "the extension did not build"
        pytest.skip(f"no Python.h: {instead}")
    return got
