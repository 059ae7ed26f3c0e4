"""Work around a PySide6 refcount bug that aborts the app after a few hundred Qt calls.

PySide6 6.12.0 returns ``None`` from every void method without taking a new reference (fine on
CPython >= 3.12, where ``None`` is immortal). On CPython 3.11 each such call (``setPos``,
``scale``, ``drawRect``, ...) drops one reference from ``None``, and after about 5,000 of them
the interpreter aborts with "none_dealloc: deallocating None"; emitting a ``bool`` signal a few
hundred times ends in "bool_dealloc" the same way. We probe for the bug and, only when it is
present, give these singletons enough extra references to outlive any session.

Importing this module applies the workaround: every module that calls Qt imports it first (the
widget modules of views/, and through them app's Qt code). It is not in ``views/__init__``, so
the Qt-free modules of views/ load no Qt.
"""

from __future__ import annotations

import ctypes
import sys

EXTRA_REFS = 1 << 50  # ~1e15 void calls: centuries of painting at a million calls a second
applied = False


def void_call_leaks() -> bool:
    """True when calling a void PySide6 method takes a reference away from ``None``."""
    from PySide6.QtCore import QPointF

    p = QPointF()
    before = sys.getrefcount(None)
    for _ in range(10):
        p.setX(1.0)
    return sys.getrefcount(None) < before - 5


def guard_none_refcount() -> bool:
    """Apply the workaround once if this PySide6/CPython pair needs it; returns whether it did."""
    global applied
    if applied or sys.implementation.name != "cpython" or sys.version_info >= (3, 12):
        return applied
    if void_call_leaks():
        # NOTE: ob_refcnt is the first field of every CPython object; these singletons are
        # static objects that are never freed, so extra references cost nothing. True and
        # False suffer the same way (bool signal arguments), so they get the same treatment.
        for singleton in (None, True, False, Ellipsis, NotImplemented):
            ctypes.c_ssize_t.from_address(id(singleton)).value += EXTRA_REFS
        applied = True
    return applied


guard_none_refcount()  # on import: before the importing module's first Qt call
