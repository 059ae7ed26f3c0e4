"""The tape: a flat arena of nodes with parallel value and gradient lists (the CPU reference).

Node inputs always have smaller ids, so reverse index order is a topological order: ``backward``
walks it once. Gradients start at +0.0 and every contribution is added in a fixed order (nodes in
reverse id order; a node's inputs in input order), which is the order device kernels mirror.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, NamedTuple

import numpy as np

from tapescope.core import mathlib, precision
from tapescope.core.optable.registry import REGISTRY, ShapeError

# NOTE: DTYPES and core.precision.HALF are core.tapefile's allow-list
DTYPES = (np.dtype(np.float64), np.dtype(np.float32))
_F32 = np.dtype(np.float32)


class TapeError(RuntimeError):
    """A tape operation failed: a poisoned tape, a foreign Var, a bad leaf."""

    #: a poisoned tape's error: where the op that poisoned it was recorded, outermost first
    #: ((file, line) pairs): the error is raised later (at the end of the episode), so its own
    #: traceback does not reach the user's line; ``tapescope`` names it from these
    recorded_at: tuple[tuple[str, int], ...] = ()

    @classmethod
    def poisoned(cls, tape: Tape, message: str) -> TapeError:
        """``message`` about ``tape``'s poison, carrying where it was recorded."""
        e = cls(message)
        e.recorded_at = tape.error_frames
        return e


class Node(NamedTuple):
    """One tape entry: the op, its inputs (smaller ids), attributes, shape and name."""

    id: int
    op: str
    inputs: tuple[int, ...]
    attrs: Mapping[str, Any]
    shape: tuple[int, ...]
    dtype: np.dtype
    name: str | None
    requires_grad: bool

    @property
    def size(self) -> int:
        """Element count of the node's value."""
        n = 1
        for d in self.shape:
            n *= d
        return n


@dataclass(frozen=True)
class Mark:
    """A point on the tape to reset to: node count and parameter count at the time."""

    n_nodes: int
    n_params: int


@dataclass(frozen=True)
class Contribution:
    """One gradient contribution a node pushes to one of its inputs during backward."""

    input_id: int
    value: np.ndarray
    before: np.ndarray | None
    after: np.ndarray


@dataclass(frozen=True)
class BackwardStep:
    """One node of a backward walk: its incoming gradient and what it pushes to its inputs."""

    node: Node
    grad: np.ndarray
    contributions: tuple[Contribution, ...]


_NO_ATTRS: Mapping[str, Any] = MappingProxyType({})  # shared by every node without attributes
_new_node = tuple.__new__


def _readonly(a: np.ndarray) -> np.ndarray:
    v = np.asarray(a).view()
    v.flags.writeable = False
    return v


class Var:
    """A handle on one tape node; arithmetic operators record ops on the same tape."""

    __slots__ = ("tape", "id")
    __array_priority__ = 1000  # ndarray (op) Var defers to Var's reflected operators

    def __init__(self, tape: Tape, id: int) -> None:
        self.tape = tape
        self.id = id

    @property
    def node(self) -> Node:
        """The node record (raises TapeError on a Var of a poisoned tape)."""
        return self.tape.node(self)

    @property
    def shape(self) -> tuple[int, ...]:
        """Shape of the value."""
        return self.node.shape

    @property
    def dtype(self) -> np.dtype:
        """Dtype of the value (the tape's)."""
        return self.tape.dtype

    @property
    def name(self) -> str | None:
        """The scoped name given at recording time."""
        return self.node.name

    @property
    def op(self) -> str:
        """The op that produced this value."""
        return self.node.op

    @property
    def value(self) -> np.ndarray:
        """Read-only value."""
        return self.tape.value(self)

    @property
    def grad(self) -> np.ndarray | None:
        """Read-only gradient, None when backward never reached it."""
        return self.tape.grad(self)

    def __repr__(self) -> str:
        if self.id < 0:
            return "Var(poisoned)"
        n = self.node
        return f"Var(id={n.id}, op={n.op}, shape={n.shape}, name={n.name!r})"

    # operators: python scalars become adds/muls; see docs/tape-api.md. They record the op
    # directly (what core.ops' wrappers do), so this module never imports core.ops.
    def _bin(self, op: str, a: Any, b: Any) -> Var:
        t = self.tape
        return t.record(op, [a if isinstance(a, Var) else t._lift(a),
                             b if isinstance(b, Var) else t._lift(b)])

    def _scalar(self, op: str, x: Var, s: Any) -> Var:
        return self.tape.record(op, [x], {"s": float(s)})

    # NOTE: the chain's hot operators (+, *) test for a python float first and record in place:
    # one Python call fewer a node than through _scalar/_bin (issue 29); the same ops recorded
    def __add__(self, o: Any) -> Var:
        if type(o) is float or _is_scalar(o):
            return self.tape.record("adds", [self], {"s": float(o)})
        t = self.tape
        return t.record("add", [self, o if isinstance(o, Var) else t._lift(o)])

    def __radd__(self, o: Any) -> Var:
        return self._scalar("adds", self, o) if _is_scalar(o) else self._bin("add", o, self)

    def __sub__(self, o: Any) -> Var:
        return self._scalar("adds", self, -o) if _is_scalar(o) else self._bin("sub", self, o)

    def __rsub__(self, o: Any) -> Var:
        if _is_scalar(o):
            return self._scalar("adds", -self, o)
        return self._bin("sub", o, self)

    def __mul__(self, o: Any) -> Var:
        if type(o) is float or _is_scalar(o):
            return self.tape.record("muls", [self], {"s": float(o)})
        t = self.tape
        return t.record("mul", [self, o if isinstance(o, Var) else t._lift(o)])

    def __rmul__(self, o: Any) -> Var:
        return self._scalar("muls", self, o) if _is_scalar(o) else self._bin("mul", o, self)

    def __truediv__(self, o: Any) -> Var:
        # NOTE: never x * (1/s): the reciprocal adds a rounding the contract does not have
        return self._bin("div", self, o)

    def __rtruediv__(self, o: Any) -> Var:
        return self._bin("div", o, self)

    def __matmul__(self, o: Any) -> Var:
        return self._bin("matmul", self, o)

    def __rmatmul__(self, o: Any) -> Var:
        return self._bin("matmul", o, self)

    def __neg__(self) -> Var:
        return self.tape.record("neg", [self])


def _is_scalar(o: Any) -> bool:
    return isinstance(o, (int, float, np.integer, np.floating)) and not isinstance(o, bool)


class Tape:
    """A define-by-run reverse-mode autodiff tape: the semantic reference of every device."""

    def __init__(self, dtype: Any = np.float64, math: str = "refmath") -> None:
        try:
            dt = precision.dtype_of(dtype)
        except (TypeError, ValueError):
            raise TapeError(f"tape dtype {dtype} is not supported "
                            f"({', '.join(precision.NAMES)})") from None
        self.dtype = dt
        # half: values, gradients and leaves are stored in dt; every op computes in float32
        # from its inputs widened exactly and rounds its result once (docs/reference-order.md)
        self.half = dt in precision.HALF
        self.compute_dtype = precision.compute_dtype(dt)
        self.math = math
        self.M = mathlib.get(math)
        self._nodes: list[Node] = []
        self._values: list[np.ndarray] = []
        self._grads: list[np.ndarray | None] = []
        self._params: list[int] = []
        self._scope: list[str] = []
        self.ok = True
        self.error: str | None = None
        self.error_frames: tuple[tuple[str, int], ...] = ()  # (file, line), outermost first
        self._error_at: int | None = None

    # ---- inspection -------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._nodes)

    @property
    def nodes(self) -> tuple[Node, ...]:
        """Every node, index == id."""
        return tuple(self._nodes)

    def node(self, v: Var | int) -> Node:
        """The node record of ``v``."""
        return self._nodes[self._id(v)]

    def var(self, id: int) -> Var:
        """A Var for node ``id``."""
        self._check_id(id)
        return Var(self, id)

    def params(self) -> list[Var]:
        """Parameters in registration order."""
        return [Var(self, i) for i in self._params]

    def value(self, v: Var | int) -> np.ndarray:
        """Read-only value of ``v``."""
        return _readonly(self._values[self._id(v)])

    def grad(self, v: Var | int) -> np.ndarray | None:
        """Read-only gradient of ``v``; None when backward never reached it."""
        g = self._grads[self._id(v)]
        return None if g is None else _readonly(g)

    def _id(self, v: Var | int) -> int:
        if isinstance(v, Var):
            if v.tape is not self:
                raise TapeError(f"Var {v.id} belongs to another tape")
            i = v.id
        else:
            i = int(v)
        self._check_id(i)
        return i

    def _check_id(self, i: int) -> None:
        if i < 0:
            raise TapeError.poisoned(self, f"this Var came from a poisoned tape: {self.error}")
        if i >= len(self._nodes):
            raise TapeError(f"node {i} does not exist (the tape has {len(self._nodes)} nodes;"
                            " was it reset past this node?)")

    # ---- leaves -----------------------------------------------------------------------------
    def param(self, array: Any, name: str | None = None) -> Var:
        """Register a trainable parameter (a copy of ``array``)."""
        v = self._leaf("param", array, name)
        if v.id >= 0:
            self._params.append(v.id)
        return v

    def const(self, array: Any, name: str | None = None) -> Var:
        """Record a data leaf (a copy of ``array``): inputs, targets, masks."""
        return self._leaf("const", array, name)

    def _leaf(self, op: str, array: Any, name: str | None) -> Var:
        if not self.ok:
            return Var(self, -1)
        a = np.asarray(array)
        if a.dtype.kind not in "fiub" and a.dtype not in precision.HALF:
            raise TapeError(f"{op} {name or ''}: cannot take an array of dtype {a.dtype}")
        value = np.array(a, dtype=self.dtype, order="C", copy=True)
        if self.half and a.dtype.kind in "iu" and a.size and \
                not np.array_equal(value.astype(np.float64), a):
            # integer data (indices, targets) must survive the storage type exactly
            raise TapeError(f"{op} {name or ''}: integer data is not exact in {self.dtype} "
                            f"(largest {int(np.abs(a).max())})")
        return self._append(op, (), {}, value, name, requires_grad=(op == "param"))

    def _lift(self, o: Any) -> Var:
        if isinstance(o, Var):
            return o
        return self.const(np.asarray(o, dtype=self.dtype))

    def assign(self, v: Var | int, array: Any) -> None:
        """Overwrite a leaf's value in place (optimizer steps, new inputs, device sync)."""
        i = self._id(v)
        n = self._nodes[i]
        if n.op not in ("param", "const"):
            raise TapeError(f"node {i} {n.op}: only param and const values can be assigned")
        a = np.asarray(array)
        if a.shape != n.shape:
            raise TapeError(f"node {i} {n.op} {n.name or ''}: shape {a.shape} given, "
                            f"{n.shape} expected")
        self._values[i] = np.array(a, dtype=self.dtype, order="C", copy=True)

    def _adopt(self, v: Var, array: np.ndarray) -> None:
        """``assign`` of a fresh array nobody else holds (an optimizer's new weights): kept
        as it is, without assign's copy, when it already is the tape's dtype, C-contiguous
        and owns its memory; copied otherwise."""
        i = self._id(v)
        n = self._nodes[i]
        if isinstance(array, np.ndarray) and array.dtype == self.dtype and array.shape == n.shape \
                and array.flags.c_contiguous and array.flags.owndata and n.op == "param":
            self._values[i] = array
        else:
            self.assign(v, array)

    # ---- recording --------------------------------------------------------------------------
    @contextlib.contextmanager
    def scope(self, name: str) -> Iterator[None]:
        """Prefix the names of nodes recorded inside with ``name/``."""
        self._scope.append(name.strip("/"))
        try:
            yield
        finally:
            self._scope.pop()

    def _scoped(self, name: str | None) -> str | None:
        if not self._scope:
            return name
        prefix = "/".join(self._scope)
        return f"{prefix}/{name}" if name else f"{prefix}/"

    def _append(self, op: str, inputs: tuple[int, ...], attrs: dict, value: np.ndarray,
                name: str | None, requires_grad: bool) -> Var:
        i = len(self._nodes)
        node = Node(i, op, inputs, MappingProxyType(dict(attrs)), tuple(value.shape),
                    self.dtype, self._scoped(name), requires_grad)
        self._nodes.append(node)
        self._values.append(value)
        self._grads.append(None)
        return Var(self, i)

    def record(self, op: str, inputs: Sequence[Var], attrs: Mapping[str, Any] | None = None,
               name: str | None = None) -> Var:
        """Compute op on inputs and append one node; a shape error poisons the tape."""
        if not self.ok:
            return Var(self, -1)
        opdef = REGISTRY[op]
        nodes = self._nodes
        values = self._values
        n = len(nodes)
        # NOTE: one pass over the inputs gathers their ids, shapes and values and the node's
        # requires_grad (registry.grad_inputs' rule, inline): record is the tape's hot path, and
        # a comprehension is a Python call of its own (issue 29). Only _id raises in it, so the
        # first bad input still raises before anything is computed.
        nd = opdef.nondiff_inputs
        if type(inputs) is list and len(inputs) == 1:  # a unary op (most of a chain's nodes)
            v = inputs[0]
            if v.tape is not self or not 0 <= v.id < n:
                self._id(v)  # raises the precise error
            j = v.id
            node = nodes[j]
            rg = True if node.requires_grad and not (nd and 0 in nd) else False
            ids = [j]
            shapes = [node.shape]
            xs = [values[j]]
        else:
            ids = []
            shapes = []
            xs = []
            rg = False
            for v in inputs:
                if v.tape is not self or not 0 <= v.id < n:
                    self._id(v)  # raises the precise error
                j = v.id
                node = nodes[j]
                if node.requires_grad and not rg and (not nd or len(ids) not in nd):
                    rg = True
                ids.append(j)
                shapes.append(node.shape)
                xs.append(values[j])
        attrs = {} if attrs is None else attrs
        try:
            shape = tuple(opdef.shape(shapes, attrs))
            # NOTE: no np.errstate here (it costs more than a small op): inf and NaN are data
            # the inspector shows; numpy warns once per place at most.
            if self.half:
                y = opdef.forward(self.M, [x.astype(_F32) for x in xs], attrs)
                with np.errstate(over="ignore"):  # the op's one rounding to storage (inf: data)
                    y = np.asarray(y).astype(self.dtype)
            else:
                y = opdef.forward(self.M, xs, attrs)
        except ShapeError as e:  # shapes, or a value the op cannot take (a target out of range)
            self._poison(f"node {n} {op}: {e}")
            return Var(self, -1)
        dt = self.dtype
        if type(y) is not np.ndarray or (y.dtype is not dt and y.dtype != dt) or \
                not y.flags.c_contiguous:
            y = np.ascontiguousarray(y, dtype=self.dtype).reshape(np.shape(y))
        if y.shape != shape:
            raise AssertionError(f"{op}: forward gave {y.shape}, shape rule said {shape}")
        i = len(nodes)
        # NOTE: tuple.__new__ builds the same Node as Node(...) without namedtuple's Python-level
        # __new__ (a measurable share of a small op's cost)
        nodes.append(_new_node(Node, (i, op, tuple(ids), MappingProxyType(dict(attrs)) if attrs
                                      else _NO_ATTRS, shape, dt,
                                      self._scoped(name) if self._scope else name, rg)))
        values.append(y)
        self._grads.append(None)
        return Var(self, i)

    def _poison(self, message: str) -> None:
        self.ok = False
        self.error = message
        self._error_at = len(self._nodes)
        frames = []  # where the op was recorded (a workload's line): only on this error path
        f = sys._getframe(2)
        while f is not None:
            frames.append((f.f_code.co_filename, f.f_lineno))
            f = f.f_back
        self.error_frames = tuple(reversed(frames))

    # ---- minibatch pattern ------------------------------------------------------------------
    def mark(self) -> Mark:
        """Remember the current end of the tape (parameters registered so far survive resets)."""
        return Mark(len(self._nodes), len(self._params))

    def reset_to(self, mark: Mark) -> None:
        """Drop every node after ``mark``; a poison raised after the mark is cleared too."""
        n = mark.n_nodes
        if n > len(self._nodes):
            raise TapeError(f"mark at {n} nodes is past the tape's end ({len(self._nodes)})")
        del self._nodes[n:], self._values[n:], self._grads[n:]
        self._params = [p for p in self._params if p < n]
        if not self.ok and self._error_at is not None and self._error_at >= n:
            self.ok, self.error, self._error_at = True, None, None
            self.error_frames = ()

    # ---- backward ---------------------------------------------------------------------------
    def backward(self, loss: Var, seed: float = 1.0) -> None:
        """Reverse-mode sweep from ``loss`` (seeded with ones, or ``seed``: a loss scale, which
        must be exact in the tape dtype); fills every reached gradient."""
        for _ in self._sweep(loss, events=False, seed=seed):
            pass

    def backward_steps(self, loss: Var) -> Iterator[BackwardStep]:
        """The same sweep as ``backward``, one event per node that pushes a gradient."""
        yield from self._sweep(loss, events=True)

    def _sweep(self, loss: Var, events: bool, seed: float = 1.0) -> Iterator[BackwardStep]:
        if not self.ok:
            raise TapeError.poisoned(self, str(self.error))
        li = self._id(loss)
        if self._nodes[li].size != 1:
            raise TapeError(f"backward needs a scalar loss; node {li} "
                            f"{self._nodes[li].op} has shape {self._nodes[li].shape}")
        self._grads = [None] * len(self._nodes)
        self._grads[li] = np.full(self._nodes[li].shape, seed, dtype=self.dtype)
        if seed != 1.0 and float(self._grads[li].reshape(-1)[0]) != seed:
            raise TapeError(f"backward seed {seed!r} is not exact in {self.dtype}")
        if not events:  # (yields nothing: the errstate ends with the sweep)
            with np.errstate(all="ignore"):  # once per sweep: inf/NaN are data here
                yield from self._sweep_nodes(li, False)
            return
        # one errstate a node, left before each yield: a generator suspended inside a ``with``
        # would keep numpy's errors ignored in its consumer (the window's stepper) between steps
        it = self._sweep_nodes(li, True)
        while True:
            with np.errstate(all="ignore"):
                ev = next(it, None)
            if ev is None:
                return
            yield ev

    def _sweep_nodes(self, li: int, events: bool) -> Iterator[BackwardStep]:
        dt = self.dtype
        # +0.0 as a read-only 0-d array (float64/float32): np.add takes it quicker than a numpy
        # scalar, the same value and loop (issue 29); half types keep their scalar
        zero = precision.ZERO.get(dt)
        if zero is None:
            zero = dt.type(0)
        nodes, values, grads = self._nodes, self._values, self._grads
        half, M = self.half, self.M
        for i in range(li, -1, -1):
            g = grads[i]
            if g is None:
                continue
            node = nodes[i]
            inputs = node.inputs
            if not node.requires_grad or not inputs:
                continue
            # registry.grad_inputs' rule, inline (the sweep's hot path, as in record); one loop
            # gathers needs and the inputs' values (a comprehension is a Python call of its own)
            opdef = REGISTRY[node.op]
            nd = opdef.nondiff_inputs
            if len(inputs) == 1:  # a unary op (most of a chain's nodes)
                j = inputs[0]
                if not nodes[j].requires_grad or (nd and 0 in nd):
                    continue
                needs = [True]
                xs = [values[j]]
            else:
                needs = []
                xs = []
                reach = False
                for j in inputs:
                    need = nodes[j].requires_grad and (not nd or len(needs) not in nd)
                    needs.append(need)
                    xs.append(values[j])
                    reach = reach or need
                if not reach:
                    continue
            if half:  # computed in float32, each contribution rounded once below
                parts = opdef.backward(M, g.astype(_F32), [x.astype(_F32) for x in xs],
                                       values[i].astype(_F32), node.attrs, needs)
            else:
                parts = opdef.backward(M, g, xs, values[i], node.attrs, needs)
            contribs = []
            for k, j in enumerate(inputs):
                c = parts[k]
                if not needs[k] or c is None:
                    continue
                shape = nodes[j].shape
                if type(c) is not np.ndarray or c.shape != shape or \
                        (c.dtype is not dt and c.dtype != dt):
                    c = (np.asarray(c).astype(dt) if half  # (in the sweep's errstate)
                         else np.asarray(c, dtype=dt)).reshape(shape)
                before = grads[j]
                # gradients start at +0.0 and every contribution is added: g = g + c
                after = np.add(zero if before is None else before, c)
                grads[j] = after
                if events:
                    contribs.append(Contribution(j, _readonly(c), None if before is None
                                                 else _readonly(before), _readonly(after)))
            if events:
                yield BackwardStep(node, _readonly(g), tuple(contribs))
