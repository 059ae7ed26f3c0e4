"""An ONNX model shown as a read-only tape: one node per initializer, input and operator.

Until an importer records ONNX models onto a real tape, the inspector can still show a model:
the executor (core.onnx) runs it once on deterministic inputs and every intermediate tensor
becomes a node value. There are no gradients (the stepper stays off for these sessions).
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np


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
    from core.onnx import Session, default_inputs

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
    meta = {"onnx": str(path), "inputs": {k: list(v.shape) for k, v in feeds.items()},
            "outputs": list(sess.output_names)}
    return OnnxTapeView(nodes, values, params, float_dt), meta


# ---- opening with a progress dialog and Cancel ------------------------------------------------

class _CountingCancel(threading.Event):
    """A cancel event that counts how often the executor asked (once per node and per loop
    iteration): the progress dialog shows that count, the executor needs nothing more."""

    def __init__(self) -> None:
        super().__init__()
        self.steps = 0

    def is_set(self) -> bool:
        self.steps += 1
        return super().is_set()


def open_onnx_with_progress(parent, path: str | os.PathLike, show_after_ms: int = 300,
                            limits: Any = None):
    """Open an ONNX model on a worker thread behind a progress dialog with Cancel.

    Cancel stops the executor between nodes and loop iterations; the result is the
    ``app.session.Session``, or a ``SessionError`` (also for a cancelled open: "cancelled").
    The Qt event loop keeps running meanwhile, so the window stays responsive. ``limits``
    (core.onnx.Limits) raises or lowers the executor's budgets for this model.
    """
    from PySide6.QtCore import QEventLoop, Qt, QTimer
    from PySide6.QtWidgets import QProgressDialog

    from app.session import SessionError, open_onnx_file

    cancel = _CountingCancel()
    result: dict[str, Any] = {}

    def work() -> None:
        try:
            result["session"] = open_onnx_file(path, cancel=cancel, limits=limits)
        except BaseException as exc:  # noqa: BLE001 - handed to the GUI thread as is
            result["error"] = exc

    name = os.path.basename(os.fspath(path))
    dlg = QProgressDialog(f"Running {name}…", "Cancel", 0, 0, parent)
    dlg.setObjectName("onnx_progress")
    dlg.setWindowTitle("Opening ONNX model")
    dlg.setWindowModality(Qt.WindowModal)
    dlg.setMinimumDuration(show_after_ms)
    dlg.canceled.connect(cancel.set)
    dlg.setValue(0)  # starts the show-after timer
    worker = threading.Thread(target=work, name="onnx-open", daemon=True)
    loop = QEventLoop()
    t0 = time.perf_counter()

    def poll() -> None:
        if not worker.is_alive():
            loop.quit()
        elif dlg.wasCanceled():  # (cancel() called on the dialog emits no canceled signal)
            cancel.set()
        elif not threading.Event.is_set(cancel):  # (not counted as a step)
            dlg.setLabelText(f"Running {name}… {cancel.steps} nodes and iterations, "
                             f"{time.perf_counter() - t0:.1f} s")

    timer = QTimer()
    timer.setInterval(50)
    timer.timeout.connect(poll)
    worker.start()
    timer.start()
    loop.exec()
    timer.stop()
    worker.join()
    dlg.reset()
    dlg.deleteLater()
    if "error" in result:
        err = result["error"]
        if isinstance(err, SessionError):
            raise err
        raise SessionError(f"{path}: {type(err).__name__}: {err}") from None
    return result["session"]
