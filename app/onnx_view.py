"""An ONNX model shown as a read-only tape: one node per initializer, input and operator.

Until an importer records ONNX models onto a real tape, the inspector can still show a model:
the executor (core.onnx) runs it once on deterministic inputs and every intermediate tensor
becomes a node value. There are no gradients (the stepper stays off for these sessions).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from tapescope.core.names import MAX_NAME, shown


@dataclass(frozen=True)
class OnnxNode:
    """The fields of ``core.Node`` the app reads."""

    id: int
    op: str
    inputs: tuple[int, ...]
    shape: tuple[int, ...]
    dtype: np.dtype
    name: str | None
    attrs: MappingProxyType = field(default_factory=lambda: MappingProxyType({}))
    requires_grad: bool = False

    @property
    def size(self) -> int:
        """Element count."""
        return int(np.prod(self.shape, dtype=np.int64))


class OnnxTapeView:
    """Tape-like read access (``nodes``, ``value``, ``grad``, ``params``) over one ONNX run."""

    ok = True
    error = None

    def __init__(self, nodes: list[OnnxNode], values: list[np.ndarray], params: list[int],
                 dtype: np.dtype):
        self._nodes = tuple(nodes)
        self._values = values
        self._params = params
        self.dtype = dtype

    def __len__(self) -> int:
        return len(self._nodes)

    @property
    def nodes(self) -> tuple[OnnxNode, ...]:
        """Every node, index == id."""
        return self._nodes

    def node(self, i: int) -> OnnxNode:
        """One node by id."""
        return self._nodes[int(i)]

    def value(self, i: int) -> np.ndarray:
        """The tensor computed for node ``i`` (read-only)."""
        v = self._values[int(i)].view()
        v.flags.writeable = False
        return v

    def grad(self, i: int) -> None:
        """ONNX runs have no gradients."""
        return None

    def params(self) -> list:
        """Initializer node ids (shown as parameters)."""
        return list(self._params)


def _as_array(v: Any) -> np.ndarray:
    a = np.asarray(v) if not isinstance(v, list) else np.asarray(v, dtype=object)
    return a if a.dtype != object else np.zeros(0)


def onnx_tape_view(path: str | os.PathLike, seed: int = 0, cancel: Any = None,
                   limits: Any = None) -> tuple[OnnxTapeView, dict]:
    """Run the model at ``path`` once and wrap every tensor it computed as a node (``cancel``,
    a threading.Event, stops the run between nodes; ``limits``: core.onnx.Limits)."""
    from tapescope.core.onnx import Session, default_inputs

    sess = Session(path, cancel=cancel, limits=limits)
    feeds = default_inputs(sess, seed)
    g = sess.model.graph
    wanted = [o for n in g.node for o in n.output if o]
    env = sess.run(feeds, outputs=wanted, cancel=cancel) if wanted else {}
    nodes: list[OnnxNode] = []
    values: list[np.ndarray] = []
    producer: dict[str, int] = {}
    params: list[int] = []

    def add(op: str, ins: tuple[int, ...], name: str, value: Any, attrs=None) -> int:
        a = _as_array(value)
        i = len(nodes)
        name = shown(name, MAX_NAME)  # from the file: escaped and cut before any view sees it
        nodes.append(OnnxNode(i, op, ins, tuple(a.shape), a.dtype, name,
                              MappingProxyType(dict(attrs or {}))))
        values.append(a)
        return i

    for name, arr in sess.graph.inits.items():
        producer[name] = add("param", (), name, arr)
        params.append(producer[name])
    for name, arr in feeds.items():
        producer[name] = add("const", (), name, arr)
    from onnx import helper

    for k, n in enumerate(g.node):
        ins = tuple(sorted({producer[x] for x in n.input if x in producer}))
        attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute
                 if a.type in (a.INT, a.FLOAT, a.INTS, a.FLOATS, a.STRING)}
        outs = [o for o in n.output if o]
        label = n.name or (outs[0] if outs else f"node{k}")
        first = add(n.op_type, ins, label, env.get(outs[0]) if outs else np.zeros(0), attrs)
        for o in outs:
            producer[o] = first  # later outputs of a multi-output node point at its box
    float_dt = next((v.dtype for v in values if v.dtype.kind == "f"), np.dtype(np.float32))
    meta = {"onnx": str(path), "inputs": {shown(k): list(v.shape) for k, v in feeds.items()},
            "outputs": [shown(n) for n in sess.output_names]}
    return OnnxTapeView(nodes, values, params, float_dt), meta
