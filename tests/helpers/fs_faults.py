"""Filesystem faults for tests of core.atomic's callers: a full disk, a read-only filesystem.

They patch the ``os`` functions that ``core.atomic`` (the one writer) calls, so every file the
project writes sees them; root is not stopped by chmod, so a read-only place is faked too.
"""

from __future__ import annotations

import errno
import os

from tapescope.core import atomic


def full_disk(monkeypatch, after: int = 0) -> None:
    """os.write raises ENOSPC once ``after`` bytes went out (what a full disk does)."""
    real, sent = os.write, [0]

    def write(fd, data):
        if sent[0] + len(data) > after:
            raise OSError(errno.ENOSPC, "No space left on device")
        sent[0] += len(data)
        return real(fd, data)

    monkeypatch.setattr(atomic.os, "write", write)


def read_only(monkeypatch) -> None:
    """Creating a file raises EROFS (a read-only filesystem); reading still works."""
    real = os.open

    def refuse(path, flags, mode=0o777, **kw):
        if flags & os.O_CREAT:
            raise OSError(errno.EROFS, "Read-only file system")
        return real(path, flags, mode, **kw)

    monkeypatch.setattr(atomic.os, "open", refuse)
