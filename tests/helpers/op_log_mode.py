"""A dispatch mode of "the script's own": it lists the name of every op it sees and runs it as
it is. The capture tests enter it around the recorder to check that the recorder's own reads
(``numpy()``'s ``detach``, a C-order copy) are no op of the script's. Imports torch: only for
tests that have it (after ``pytest.importorskip("torch")``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch.utils._python_dispatch import TorchDispatchMode


class OpLog(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def recorded_under_log(run: Callable[[], Any], **recorder: Any) -> tuple[Any, Any, list[str]]:
    """``run()`` under a recorder (``Recorder(**recorder)``) inside an ``OpLog`` the script
    entered first: ``(the recorder, run's result, the ops the log saw)``."""
    from tapescope.app.capture.recorder import Recorder

    with OpLog() as seen:
        rec = Recorder(**recorder).start()
        try:
            got = run()
        finally:
            rec.stop()
    return rec, got, seen.ops
