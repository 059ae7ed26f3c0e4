"""The one error type of ``core.onnx``: it names the file, the node and the reason."""

from __future__ import annotations


class OnnxError(Exception):
    """A model that cannot be loaded or run: says which file, which node and why."""

    def __init__(self, reason: str, *, file: str | None = None, node: str | None = None) -> None:
        self.reason = reason
        self.file = file
        self.node = node
        super().__init__(self._text())

    def _text(self) -> str:
        where = []
        if self.file:
            where.append(self.file)
        if self.node:
            where.append(self.node)
        return f"{': '.join(where)}: {self.reason}" if where else self.reason

    def with_file(self, file: str | None) -> OnnxError:
        """The same error with the model's file filled in (if it had none)."""
        if file and not self.file:
            self.file = file
            self.args = (self._text(),)
        return self


def node_label(index: int, node) -> str:
    """How errors name a node: ``node 3 'conv1' (Conv)`` (the name escaped and cut)."""
    from tapescope.core.names import shown

    name = f" '{shown(node.name)}'" if node.name else ""
    return f"node {index}{name} ({node.op_type})"
