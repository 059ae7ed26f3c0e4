"""Capture: record the user's own PyTorch run (``tapescope capture``, docs/capture.md).

Imports torch (so it lives in app/, never core/). The Python API::

    from app.capture import capture
    with capture("run.capture", steps=2):
        train()            # unmodified; the first 2 optimizer steps are recorded

The file is written when the last step ends (the script runs on untouched) or, with fewer
steps, when the block ends (the complete steps only).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

__all__ = ["DEFAULT_MAX_BYTES", "Recorder", "capture"]

from app.capture.limits import DEFAULT_MAX_BYTES


def __getattr__(name: str) -> Any:  # torch is imported by the recorder only, when used
    if name == "Recorder":
        from app.capture.recorder import Recorder

        return Recorder
    raise AttributeError(name)


@contextlib.contextmanager
def capture(path: str | os.PathLike, steps: int = 2, *, max_bytes: int = DEFAULT_MAX_BYTES,
            hashes_only: bool = False) -> Iterator[Any]:
    """Record the first ``steps`` optimizer steps run inside the block into ``path``; yields
    the ``Recorder``."""
    from app.capture.recorder import Recorder

    if steps < 1:
        raise ValueError(f"steps must be at least 1, not {steps}")
    path = os.fspath(path)
    from app.capture.compiled import install

    meta: dict[str, Any] = {}
    rec = Recorder(steps, max_bytes, hashes_only, on_done=lambda r: r.save(path, meta))
    # torch.compile inside the block: its graphs and their calls recorded (until the block ends)
    restore = install(meta, lambda: rec)
    rec.start()
    try:
        yield rec
    finally:
        try:
            if not rec.done:
                rec.finish()  # fewer steps than asked: the complete ones are written
            else:
                rec.stop()
        finally:
            restore()
    if rec.error is not None:
        raise rec.error
    if rec.failed:  # the block ran untouched; recording stopped at an op
        raise RuntimeError(rec.failed)
