"""Capture: record the user's own PyTorch run (``tapescope capture``, docs/capture.md).

Imports torch (so it lives in app/, never core/). The Python API (also ``tapescope.capture``)::

    import tapescope
    with tapescope.capture("run.capture", steps=2):
        train()            # unmodified; the first 2 optimizer steps are recorded

The file is written when the last step ends (the script runs on untouched) or, with fewer
steps, when the block ends (the complete steps only). One rank of several (``torch.distributed``
initialised) writes ``run.rankN.capture`` (docs/capture.md, "Ranks").
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

__all__ = ["DEFAULT_MAX_BYTES", "Recorder", "capture", "eager_kernels"]

from tapescope.app.capture.limits import DEFAULT_MAX_BYTES


def __getattr__(name: str) -> Any:  # torch is imported by the recorder only, when used
    if name == "Recorder":
        from tapescope.app.capture.recorder import Recorder

        return Recorder
    raise AttributeError(name)


def eager_kernels() -> Any:
    """PyTorch's eager kernels for a compiled graph's departing nodes (``app.capture.eager``),
    or None where torch is not importable (the judgement is the same without them). Here, not
    in app.commands.capture, so that the worker (app.remote_server) reaches it without the
    capture command (which reaches the worker's client)."""
    try:
        from tapescope.app.capture.eager import run
    except ImportError:
        return None
    return run


@contextlib.contextmanager
def capture(path: str | os.PathLike, steps: int = 2, *, max_bytes: int = DEFAULT_MAX_BYTES,
            hashes_only: bool = False, digest: str = "xxh3_128") -> Iterator[Any]:
    """Record the first ``steps`` optimizer steps run inside the block into ``path``; yields
    the ``Recorder``. ``digest``: the values' digest algorithm, ``xxh3_128`` or ``sha256``
    (docs/capture.md, "The file")."""
    from tapescope.app.capture.recorder import Recorder

    if steps < 1:
        raise ValueError(f"steps must be at least 1, not {steps}")
    path = os.path.abspath(path)  # where it pointed when the block began (a chdir inside it)
    from tapescope.app.capture.compiled import install
    from tapescope.app.capture.tracers import install as install_trace

    meta: dict[str, Any] = {}
    rec = Recorder(steps, max_bytes, hashes_only, on_done=lambda r: _save(r, path, meta),
                   digest=digest, spool=path)
    # torch.compile inside the block: its graphs and their calls recorded (until the block ends).
    # The wrappers reach the recorder through ``held``, emptied when the block ends: a compiled
    # model kept after it, or the compile wrapper's own reference cycle, would otherwise keep
    # the recorder and its stored values (up to ``max_bytes``) until a full garbage collection
    held = [rec]
    restore = install(meta, lambda: held[0])
    restore_trace = install_trace(meta)  # (jit.trace, export: with the modes off)
    from tapescope.app.capture.shared_np import install as install_np

    restore_np = install_np(lambda: held[0])  # (memory shared with numpy: watched)
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
            restore_trace()
            restore_np()
            held[0] = None
    if rec.error is not None:
        raise rec.error
    if rec.failed:  # the block ran untouched; recording stopped at an op
        raise RuntimeError(rec.failed)


def _save(rec: Any, path: str, meta: dict) -> None:
    """The capture to ``path``; one rank of several (``torch.distributed`` initialised) writes
    ``PATH.rankN.capture`` with its rank, the world size and a run id the ranks share
    (docs/capture.md, "Ranks")."""
    from tapescope.app.capture.collectives import rank_of, shared_run

    ranked = rank_of()
    if ranked is None or ranked[1] < 2:
        rec.save(path, meta)
        return
    from tapescope.core.capture.ranks import rank_path

    rank, world = ranked
    meta["rank"] = {"rank": rank, "world_size": world, "run": shared_run()}
    rec.save(rank_path(path, rank), meta)
