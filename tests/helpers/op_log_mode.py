"""A dispatch mode of "the script's own": it lists the name of every op it sees and runs it as
it is. The capture tests enter it around the recorder to check that the recorder's own reads
(``numpy()``'s ``detach``, a C-order copy) are no op of the script's. Imports torch: only for
tests that have it (after ``pytest.importorskip("torch")``)."""

from __future__ import annotations

from torch.utils._python_dispatch import TorchDispatchMode


class OpLog(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))
