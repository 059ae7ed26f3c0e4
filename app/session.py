"""What the window shows (no Qt): one tape, its loss, where it came from, optional comparison.

Built from a ``.tape`` file, an ``.onnx`` model or a workload. Every failure is a SessionError
whose message names the file and the reason; the caller keeps its current session.
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np

from tapescope.views.models.array_stats import first_nonfinite, nonfinite_flags, nonfinite_nodes
from tapescope.views.models.graph_model import GraphModel
from tapescope.views.models.node_details import NodeDetails

# the one ulp colour scale (views.models.ulp_scale); EXACT_COLOR, NAN_COLOR, ulp_color re-exported
from tapescope.views.models.ulp_scale import (  # noqa: F401
    EXACT_COLOR,
    NAN_COLOR,
    ulp_color,
    ulp_colors,
)


class SessionError(Exception):
    """A session could not be opened; the message says what and where, ``details`` the trace."""

    def __init__(self, message: str, details: str = "") -> None:
        super().__init__(message)
        self.details = details


def find_loss(tape, meta: dict | None = None) -> int | None:
    """The loss node: ``meta["loss"]`` when given, else the last scalar node."""
    if meta and isinstance(meta.get("loss"), int) and 0 <= meta["loss"] < len(tape):
        return int(meta["loss"])
    for n in reversed(tape.nodes):
        if n.size == 1 and n.op not in ("param", "const"):
            return n.id
    return None


def unconfirmed_script(session: Session | None, spec: str | None) -> str | None:
    """``spec`` when it is a workload script that only an opened file's metadata named.

    SECURITY: a ``.tape`` may name any path as its workload; such a script runs only after the
    user confirms it (docs/security.md). A built-in workload, a script the user opened
    (``--workload PATH``, File ▸ Open of a ``.py``: source ``workload:PATH``) or one the user
    chose for the live config needs no question.
    """
    from tapescope.core.workloads import WORKLOADS

    if session is None or not spec or spec in WORKLOADS:
        return None
    if session.source == f"workload:{spec}" or session.meta.get("workload") != spec:
        return None
    return spec


def parity_colors(comparison: list[dict] | None) -> dict[int, str]:
    """Overlay colour per compared node: green exact, amber to red by max ulp, NaN purple."""
    from tapescope.core.summary import entries_worst

    entries = list(comparison or ())
    return worst_colors([int(e["id"]) for e in entries], entries_worst(entries))


def worst_colors(ids: list[int], worst) -> dict[int, str]:
    """The colour of each id from its worst ulp (``core.summary.worst``: NaN purple below 0,
    green at 0, amber to red by ulp), computed once per distinct worst value (a live 10k-node
    step has a handful)."""
    code, names = worst_codes(worst)
    return dict(zip(ids, [names[k] for k in code.tolist()], strict=True))


def worst_codes(worst) -> tuple[np.ndarray, list[str]]:
    """``worst_colors`` as arrays: a palette index per entry and the palette (one colour name
    per distinct worst value, in the window's one ulp scale, ``views.models.ulp_scale.ulp_colors``),
    what ``views.overlay.NodeColors`` holds."""
    w = np.asarray(worst, dtype=np.float64).ravel()
    # NOTE: most nodes of a step are exact: only the others are sorted (np.unique over a
    # 100k-node step's every entry cost ~10 ms a snapshot)
    off = np.flatnonzero(w != 0)
    uniq, inv = np.unique(w[off], return_inverse=True)
    vals = uniq.tolist()
    code = np.zeros(w.size, dtype=np.int64)
    if off.size < w.size:  # some exact: palette entry 0 is green
        vals.insert(0, 0.0)
        code[off] = inv.ravel() + 1
    else:
        code[off] = inv.ravel()
    return code, ulp_colors(vals)


@dataclass
class Session:
    """One opened tape plus what the panels need to know about it."""

    tape: object
    loss_id: int | None
    source: str
    meta: dict = field(default_factory=dict)
    comparison: list[dict] | None = None
    workload: object | None = None

    def __post_init__(self) -> None:
        # -1: no loss node to mark (a forward-only ONNX run)
        self.graph = GraphModel.from_tape(self.tape, -1 if self.loss_id is None else self.loss_id)
        # an imported model reads as its ONNX ops, each a folded box of its tape nodes
        self.graph.group_onnx(self.meta.get("onnx_nodes") or getattr(
            self.workload, "onnx_nodes", None) or ())
        self.grads: list = []
        self._flags: tuple[np.ndarray, np.ndarray] | None = None
        self.snapshot_gradients()

    def snapshot_gradients(self) -> None:
        """Remember the gradients of the full backward; the stepper may reset the tape's own."""
        # NOTE: the tape replaces gradient arrays (never writes into them), so keeping the
        # read-only views is enough: no copy
        lazy = getattr(getattr(self.tape, "_grads", None), "snapshot", None)
        # a tape file read lazily (core.tapefile): the same blocks on first touch, none now
        self.grads = lazy() if lazy is not None else [self.tape.grad(n.id)
                                                      for n in self.tape.nodes]
        self._flags = None  # the NaN/inf scan read the old gradients

    @property
    def title(self) -> str:
        """Short name for the window title."""
        return os.path.basename(self.source) if os.sep in self.source else self.source

    def ensure_gradients(self) -> None:
        """Run backward once when nothing has gradients yet (a forward-only file or model)."""
        if self.loss_id is None or not getattr(self.tape, "ok", True):
            return
        if all(self.tape.grad(n.id) is None for n in self.tape.nodes):
            self.tape.backward(self.tape.var(self.loss_id))
            self.snapshot_gradients()

    def details(self, node_id: int) -> NodeDetails:
        """The inspector's view of one node."""
        t = self.tape
        n = t.node(node_id)
        inputs = [(j, f"{t.node(j).op} {t.node(j).name or ''}".strip()) for j in n.inputs]
        return NodeDetails(
            id=n.id, op=n.op, name=n.name, shape=tuple(n.shape), dtype=str(np.dtype(n.dtype)),
            value=t.value(n.id), grad=self.grads[n.id], inputs=inputs, attrs=dict(n.attrs),
            onnx=self.onnx_node(n.id),
        )

    def onnx_node(self, node_id: int) -> dict | None:
        """The ONNX node an imported tape node came from (core.onnx.importer), or None."""
        infos = self.meta.get("onnx_nodes") or getattr(self.workload, "onnx_nodes", None) or ()
        for info in infos:
            if info["first"] <= node_id < info["stop"]:
                return info
        return None

    def labels(self) -> Mapping[int, str]:
        """node id → "op name" for compact display (each made when first read)."""
        return NodeLabels(self.tape)

    def parity_colors(self) -> dict[int, str]:
        """Overlay colour per compared node: green exact, amber to red by max ulp, NaN purple."""
        return parity_colors(self.comparison)

    def nonfinite_flags(self) -> tuple[np.ndarray, np.ndarray]:
        """Per node: does its value hold a NaN/inf, does its gradient (bool arrays, by id).

        One batched scan (views.models.array_stats.nonfinite_flags) shared by the alarms, the status
        line and the first-NaN jump; kept until the gradients are snapshotted again (the
        values of an opened tape never change)."""
        n = len(self.tape)
        if self._flags is None or len(self._flags[0]) != n:
            vals, grads = getattr(self.tape, "_values", None), self.grads[:n]
            if hasattr(vals, "nonfinite") and hasattr(grads, "nonfinite") and len(vals) == n:
                # a tape file read lazily: the file's NaN/inf lists (core.tapefile checks each
                # against the data when its block is read), not a read of every array
                self._flags = (vals.nonfinite(), grads.nonfinite())
            else:
                self._flags = (nonfinite_flags(_values(self.tape)), nonfinite_flags(grads))
        return self._flags

    def nonfinite(self) -> list[int]:
        """Nodes whose value or gradient holds NaN/inf."""
        return nonfinite_nodes(range(len(self.tape)), self.tape.value, self.grads.__getitem__,
                               flags=self.nonfinite_flags())

    def first_nonfinite(self) -> int | None:
        """The first node in tape order with a NaN/inf value (then gradients, from the end)."""
        return first_nonfinite(range(len(self.tape)), self.tape.value, self.grads.__getitem__,
                               flags=self.nonfinite_flags())

    def produced_nonfinite(self) -> list[int]:
        """Nodes that produced a NaN/inf from finite inputs (app.step_history's rule)."""
        from tapescope.app.step_history import produced_nonfinite

        return produced_nonfinite(self.tape.nodes, self.tape.value, self.grads.__getitem__,
                                  flags=self.nonfinite_flags())


class NodeLabels(Mapping):
    """node id → "op name" of a tape, made per read: a 100k-node tape's 100k strings cost
    0.3 s up front, and the stepper shows a few."""

    def __init__(self, tape) -> None:
        self.tape = tape

    def __getitem__(self, i: int) -> str:
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or not (
                0 <= i < len(self.tape)):
            raise KeyError(i)
        n = self.tape.node(int(i))
        return f"{n.op} {n.name or ''}".strip()

    def __len__(self) -> int:
        return len(self.tape)

    def __iter__(self) -> Iterator[int]:
        return iter(range(len(self.tape)))


def _values(tape) -> list:
    """Every node's value, by id."""
    vals = getattr(tape, "_values", None)
    # NOTE: core.Tape and OnnxTapeView keep their values in the list ``_values``: read (never
    # written) here, it saves a checked accessor call per node (0.4 s at 100k nodes)
    if isinstance(vals, list) and len(vals) == len(tape):
        return vals
    return [tape.value(i) for i in range(len(tape))]


def open_tape_file(path: str | os.PathLike) -> Session:
    """A session on a recorded ``.tape`` file."""
    from tapescope.core import tapefile
    from tapescope.core.progress import file_label, progress

    try:
        with progress(file_label("loading", path)):  # a terminal sees a big tape load
            tape, meta = tapefile.load(path, lazy=True)  # blocks are read as the window shows them
    except tapefile.TapeFileError as e:
        raise SessionError(str(e)) from None
    except (OSError, ValueError) as e:  # anything the loader did not classify
        raise SessionError(f"{path}: cannot be read ({type(e).__name__}: {e})") from None
    if len(tape) == 0:
        raise SessionError(f"{path}: the tape is empty")
    return Session(tape, find_loss(tape, meta), str(path), meta)


def open_onnx_file(path: str | os.PathLike, cancel=None, limits=None) -> Session:
    """A session on an ONNX model: imported onto a tape when every op has a tape form (then
    ``sum(first output)`` is the loss, so gradients and the stepper work), else one executor
    run shown read-only. Setting ``cancel`` (a threading.Event) stops it between nodes;
    ``limits`` (core.onnx.Limits, default: the executor's) bounds what it may take."""
    from tapescope.core.onnx import OnnxCancelled, OnnxError, OnnxLimitError

    try:
        return _import_onnx(path, cancel, limits)
    except (OnnxCancelled, OnnxLimitError) as e:  # the read-only run would do the same
        raise SessionError(str(e)) from None
    except OnnxError as e:
        first_error = str(e)
    except Exception as e:  # noqa: BLE001 — fall back to the executor's read-only view
        first_error = f"{type(e).__name__}: {e}"
    from tapescope.app.onnx_view import onnx_tape_view

    try:
        tape, meta = onnx_tape_view(path, cancel=cancel, limits=limits)
    except OnnxError as e:
        raise SessionError(str(e)) from None
    except Exception as e:  # noqa: BLE001 — any failure of a user's model is shown, not raised
        raise SessionError(f"{path}: {type(e).__name__}: {e}", traceback.format_exc()) from None
    if len(tape) == 0:
        raise SessionError(f"{path}: the model has no nodes")
    meta["import_error"] = first_error  # why it is read-only
    return Session(tape, None, str(path), meta)


def _import_onnx(path: str | os.PathLike, cancel=None, limits=None) -> Session:
    from tapescope.core import Tape, ops
    from tapescope.core.onnx import Session as OnnxSession
    from tapescope.core.onnx import default_inputs
    from tapescope.core.onnx.importer import import_to_tape

    sess = OnnxSession(path, fold=False, cancel=cancel, limits=limits)  # the importer folds
    feeds = default_inputs(sess, 0)
    floats = [a.dtype for a in feeds.values() if a.dtype.kind == "f"]
    tape = Tape(dtype=np.float64 if np.dtype(np.float64) in floats else np.float32)
    imp = import_to_tape(sess, tape, feeds, cancel=cancel)
    if not tape.ok:
        raise SessionError(f"{path}: {tape.error}")
    name, out = next(iter(imp.outputs.items()))
    loss = out if out.node.size == 1 else ops.sum(out, name=f"sum({name})")
    tape.backward(loss)
    meta = {"onnx": str(path), "inputs": {k: list(v.shape) for k, v in feeds.items()},
            "loss": f"sum of output {name!r} (ONNX models have no loss of their own)",
            "onnx_nodes": imp.onnx_nodes}
    return Session(tape, loss.id, str(path), meta)


def open_workload(spec: str, step: int = 0) -> Session:
    """A session on a built-in workload (``mlp``, ``transformer``) or a user's ``PATH.py``."""
    from tapescope.core import workloads

    try:
        wl = workloads.get(spec)
        loss = wl.record(step)
        wl.tape.backward(loss)
    except workloads.WorkloadError as e:  # the user's code failed: keep its traceback
        raise SessionError(str(e), e.details) from None
    except ValueError as e:
        raise SessionError(str(e)) from None
    except Exception as e:  # noqa: BLE001 — a workload may fail in any way; the app stays up
        raise SessionError(f"workload {spec}: {type(e).__name__}: {e}",
                           traceback.format_exc()) from None
    return Session(wl.tape, loss.id, f"workload:{spec}", {"workload": spec, "step": step},
                   workload=wl)


def open_path(path: str | os.PathLike) -> Session:
    """Open by extension: ``.tape``, ``.onnx`` or a workload ``.py``."""
    s = str(path)
    low = s.lower()
    if low.endswith(".tape") or low.endswith(".npz"):
        return open_tape_file(s)
    if low.endswith(".onnx"):
        return open_onnx_file(s)
    if low.endswith(".py"):
        return open_workload(s)
    raise SessionError(f"{s}: unknown file type (open a .tape, .onnx or workload .py file)")
