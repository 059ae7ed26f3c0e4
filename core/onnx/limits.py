"""Budgets for running a model someone sent you: a 1 MB file must not cost gigabytes or forever.

:class:`Limits` says how much one run may take (elements per tensor, live bytes, Loop/Scan
iterations, nodes after inlining local functions, estimated work); :class:`Budget` is one run's
account against them, shared by every subgraph the run enters. Every check happens *before*
the allocation or the work it guards: the output size of each op whose size comes from values
(ConstantOfShape, Expand, Tile, Range, Pad, Resize, OneHot, ...) or from broadcasting (Add,
MatMul, ...) is predicted from its inputs first (``PREDICT``), and so is its work (``MACS``,
``SLOW_OPS``); every other output is checked right after its kernel, which never makes much
more than its inputs hold. A limit error names the node, the op, the numbers and the flag that
raises it.
"""

from __future__ import annotations

import math
import os
import weakref
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import numpy as np

from tapescope.core.onnx.costs import (
    MACS,
    NODE_COST,
    PREDICT,
    SLOW_COST,
    SLOW_OPS,
    STRING_BYTES,
    STRING_COST,
    TooBigToIndex,
    _prod,
    _size,
    makes_or_reads_strings,
)
from tapescope.core.onnx.errors import OnnxError

#: how each limit is raised on the command line (the error message says so)
FLAGS = {"max_elements": "--max-elements", "max_bytes": "--max-bytes",
         "max_loop_iterations": "--max-loop-iterations", "max_nodes": "--max-nodes",
         "max_work": "--max-work"}


def machine_memory() -> int:
    """Physical memory of this machine in bytes (``os.sysconf``; 8 GiB where it cannot say)."""
    try:
        n = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        n = 0
    return int(n) if n > 0 else 8 << 30


def default_max_bytes(memory: int | None = None) -> int:
    """The default ``max_bytes``: 1/32 of the machine's memory, at least 512 MiB and at most
    2 GiB (a run, with the interpreter and a kernel's temporaries, stays near twice that)."""
    memory = machine_memory() if memory is None else memory
    return min(max(memory // 32, 512 << 20), 2 << 30)


@dataclass(frozen=True)
class Limits:
    """How much one model run may take. Defaults keep a hostile model within ~2x max_bytes
    of memory and max_work of work (tens of seconds at most);
    raise them for a big model you trust (``Limits(max_elements=10**9)``, ``--max-elements``).
    """

    #: elements in any one tensor (2**27: vgg19's 25088x4096 weight, the largest of the onnx
    #: package's light models, fits; what a run allocates is still bounded by max_bytes)
    max_elements: int = 1 << 27
    #: bytes held by the values of one run, all tensors together (a view shares its base's
    #: bytes; initializers read from the file are not counted): from the machine's memory
    #: (default_max_bytes: 1/32 of it, clamped to 512 MiB .. 2 GiB)
    max_bytes: int = default_max_bytes()
    #: Loop/Scan/SequenceMap iterations in one run, all loops together (nested ones multiply)
    max_loop_iterations: int = 100_000
    #: nodes of the model once its local functions are inlined (they nest exponentially)
    max_nodes: int = 100_000
    #: estimated work of one run, in units of about a nanosecond of the reference executor:
    #: each node run counts NODE_COST, each output element 1 (SLOW_COST for ops through
    #: refmath's transcendentals), each multiply-add 1. 2.5e10 (~25 s of the reference
    #: executor): vgg19, the heaviest light model of the onnx package, is estimated at 1.78e10,
    #: so all nine run with the defaults, with 40% to spare; benchmarks/bench_hostile.py
    #: measures what the hostile models that end on it cost in seconds
    max_work: int = 25_000_000_000

    def with_(self, **changes: int | None) -> Limits:
        """A copy with the given limits changed (``None`` leaves one as it is)."""
        return replace(self, **{k: int(v) for k, v in changes.items() if v is not None})


class OnnxLimitError(OnnxError):
    """A model that would go over one of the :class:`Limits`."""


class OnnxCancelled(OnnxError):
    """The run was cancelled (the cancel event was set) between two nodes or iterations."""


def _over(what: str, limit: int, key: str) -> OnnxLimitError:
    return OnnxLimitError(f"{what}, over the limit of {limit} ({key.replace('_', ' ')}; "
                          f"raise it with {FLAGS[key]} or Limits({key}=...))")


#: the ops of costs.PREDICT whose prediction reads their inputs' shapes and the attributes only
#: (not a value: a shape tensor, pads, a count); every other PREDICT op is charged afresh
#: each time (tests/core/onnx/test_plan_overhead.py holds this list to PREDICT and MACS)
SHAPE_PREDICTED = frozenset({
    "Add", "Sub", "Mul", "Div", "Pow", "Mod", "And", "Or", "Xor", "Equal", "Greater",
    "GreaterOrEqual", "Less", "LessOrEqual", "BitShift", "BitwiseAnd", "BitwiseOr",
    "BitwiseXor", "Max", "Min", "Sum", "Mean", "Where", "PRelu", "MatMul", "MatMulInteger",
    "QLinearMatMul", "Gemm", "RandomNormal", "RandomUniform", "Concat", "Gather", "GatherND",
    "Conv", "ConvInteger", "QLinearConv", "MaxPool", "AveragePool", "LpPool", "ConvTranspose",
    "Multinomial", "Einsum"})
#: the ops of costs.MACS whose multiply-adds read shapes and attributes only (all of them)
SHAPE_MACS = frozenset({
    "MatMul", "MatMulInteger", "QLinearMatMul", "Gemm", "Conv", "ConvInteger", "QLinearConv",
    "MaxPool", "AveragePool", "LpPool", "ConvTranspose", "Einsum", "LSTM", "GRU", "RNN"})


def shape_charged(op_type: str, attrs: dict) -> bool:
    """Whether :meth:`Budget.before`'s charge for this node is fixed by its inputs' shapes and
    dtypes (:func:`shapes_key`): a plan's run then replays the charge it made last time for
    the same shapes (:meth:`Budget.replay`: the same checks and numbers) instead of predicting
    it again (~14 us for a pool)."""
    return (op_type not in PREDICT or op_type in SHAPE_PREDICTED) \
        and (op_type not in MACS or op_type in SHAPE_MACS) \
        and not (op_type == "Cast" and attrs.get("to") == 8)  # (makes strings)


def shapes_key(ins: list) -> tuple | None:
    """(shape, dtype) of each input (None for an absent one), or None when one is not a plain
    ndarray or holds objects (strings: charged by their count)."""
    key = []
    for v in ins:
        if v is None:
            key.append(None)
        elif type(v) is np.ndarray and v.dtype.kind != "O":
            key.append((v.shape, v.dtype))
        else:
            return None
    return tuple(key)


def check_shape(dims, what: str, limits: Limits) -> int:
    """Refuse a shape with a negative dim or more than ``max_elements``; return its size."""
    try:
        n = _prod(dims, what)
    except TooBigToIndex:  # (no negative dim) over max_elements too: said as below
        n = math.prod(int(d) for d in dims)
    # a zero dim makes it empty, but numpy still refuses dims whose product overflows: count
    # the others too
    if n > limits.max_elements or \
            math.prod(max(int(d), 1) for d in dims) > limits.max_elements:
        raise _over(f"{what} would have {n} elements {tuple(int(d) for d in dims)}"
                    + (" (empty, but its other dims are too big)" if n == 0 else ""),
                    limits.max_elements, "max_elements")
    return n


def _root(a: np.ndarray) -> np.ndarray:
    """The array whose memory ``a`` views (``a`` itself when it owns its data): a budget's key."""
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


class Budget:
    """One run's account: bytes held, iterations done, and the cancel flag checked between
    nodes. Subgraph runs share their parent's budget."""

    def __init__(self, limits: Limits, cancel: Any = None) -> None:
        self.limits = limits
        self.cancel = cancel  # anything with is_set() (threading.Event), or None
        self.bytes = 0
        self.peak_bytes = 0  # the most bytes held at once (never over max_bytes)
        self.iterations = 0
        self.nodes = 0  # nodes run so far (a progress dialog can read it)
        self.work = 0  # estimated work so far (see Limits.max_work)
        # a training-mode Dropout's seed for this run (None: refused) and the masks drawn so
        # far, by output name (core.onnx.ops.shape.dropout; Session.run(seed=))
        self.seed: Any = None
        self.masks: dict[str, Any] = {}
        self._held: dict[int, Any] = {}  # id(base array) -> weak reference to it
        self._pinned: dict[int, Any] = {}  # of those, the ones counted until the run ends

    # -- between nodes --------------------------------------------------------------------
    def check_cancel(self) -> None:
        """Raise OnnxCancelled if the cancel event is set."""
        if self.cancel is not None and self.cancel.is_set():
            raise OnnxCancelled("cancelled")

    def iteration(self) -> None:
        """Count one Loop/Scan iteration; refuse one too many (all loops of a run together)."""
        self.check_cancel()
        if self.iterations + 1 > self.limits.max_loop_iterations:
            raise OnnxLimitError(
                f"the run would take more than {self.limits.max_loop_iterations} loop "
                "iterations (max loop iterations, all loops of a run together; raise it with "
                "--max-loop-iterations or Limits(max_loop_iterations=...))")
        self.iterations += 1

    # -- around one node ---------------------------------------------------------------------
    def before(self, op_type: str, ins: list, attrs: dict, opset: int) -> None:
        """Refuse the node if the output size predicted from its inputs is over the limits."""
        self.check_cancel()
        self.nodes += 1
        pred = PREDICT.get(op_type)
        try:
            n = None if pred is None else pred(ins, attrs, opset)
        except TooBigToIndex:  # (0, 2**61): numpy's bare ValueError otherwise
            raise
        except Exception:  # noqa: BLE001 - a malformed node: its kernel says what is wrong
            n = None
        self._check_output(n)
        self.charge_work(op_type, ins, attrs, n)

    def _check_output(self, n: int | None) -> None:
        if n is not None and n > self.limits.max_elements:
            raise _over(f"the output would have {n} elements", self.limits.max_elements,
                        "max_elements")
        if n is not None and self.bytes + n > self.limits.max_bytes:  # a byte an element
            raise _over(f"the run would hold at least {self.bytes + n} bytes",
                        self.limits.max_bytes, "max_bytes")

    @staticmethod
    def cost(op_type: str, ins: list, attrs: dict, opset: int) -> tuple[int | None, int] | None:
        """(predicted output elements, work) that :meth:`before` charges for this node, for
        replaying with :meth:`replay` on inputs of the same shapes; None for a node whose
        charge depends on more than that (strings)."""
        pred = PREDICT.get(op_type)
        try:
            n = None if pred is None else pred(ins, attrs, opset)
        except Exception:  # noqa: BLE001
            n = None
        sizes = [_size(x) for x in ins]
        est = n if n is not None else max(sizes, default=1)
        if makes_or_reads_strings(op_type, ins, attrs):
            return None
        work = NODE_COST + est * (SLOW_COST if op_type in SLOW_OPS else 1)
        macs = MACS.get(op_type)
        if macs is not None:
            try:
                work += macs(ins, attrs, est)
            except Exception:  # noqa: BLE001
                pass
        return n, work

    def replay(self, n: int | None, work: int) -> None:
        """:meth:`before` for a node whose :meth:`cost` is known: the same checks, in order."""
        self.check_cancel()
        self.nodes += 1
        self._check_output(n)
        self._admit_work(work)

    def replay_all(self, nodes: int, largest: int | None, work: int) -> bool:
        """:meth:`replay` of ``nodes`` nodes at once, given their largest predicted output and
        summed work, when none of them would be refused (True); otherwise nothing is charged
        and False: replay them one by one, so that the refusal names its node."""
        lim = self.limits
        if self.work + work > lim.max_work or (largest is not None and (
                largest > lim.max_elements or self.bytes + largest > lim.max_bytes)):
            return False
        self.check_cancel()
        self.nodes += nodes
        self.work += work
        return True

    def admit(self, nodes: int, largest: int | None, work: int, size: int, nbytes: int) -> bool:
        """:meth:`replay_all` of ``nodes`` nodes, then room for a new array of ``size``
        elements and ``nbytes`` bytes with what it stands for (:meth:`hold` then
        :meth:`charge`), all checked before the array is made: True when none of them would
        refuse (the nodes' charges made; hand the array to :meth:`hold_new`), else nothing
        charged and False (then charge them one by one: the refusal names its node)."""
        lim = self.limits
        if size > lim.max_elements or self.bytes + nbytes > lim.max_bytes:
            return False
        return self.replay_all(nodes, largest, work)

    def hold_new(self, value: np.ndarray, extra: int = 0) -> None:
        """:meth:`hold` of an array made after :meth:`admit` let it in, then :meth:`charge`
        of ``extra`` bytes, without checking the limits again (admit did, for these bytes)."""
        base = value
        while isinstance(base.base, np.ndarray):
            base = base.base
        key = id(base)
        if key not in self._held:
            nbytes = base.nbytes if base.flags.owndata else value.nbytes
            self._held[key] = weakref.ref(base, partial(self._freed, key, nbytes))
            self.bytes += nbytes
        self.bytes += extra
        if self.bytes > self.peak_bytes:
            self.peak_bytes = self.bytes

    def pin_dropped(self, env: dict, names) -> None:
        """``env.pop(name)`` for each of ``names``, each value then :meth:`pin`-ned: a run
        plan's values that no later step reads, dropped after a step in one call."""
        held, pinned = self._held, self._pinned
        for name in names:
            v = env.pop(name, None)
            if isinstance(v, np.ndarray):
                while isinstance(v.base, np.ndarray):
                    v = v.base
                ref = held.get(id(v))
                if isinstance(ref, weakref.ref):
                    pinned[id(v)] = ref

    def _admit_work(self, work: int) -> None:
        """Add a node's work to the account, or refuse it (the account keeps only admitted
        work: ``self.work <= max_work`` always, so a test can count what a run did)."""
        if self.work + work > self.limits.max_work:
            raise _over(f"the run would take an estimated {self.work + work} units of work "
                        f"(this node {work})", self.limits.max_work, "max_work")
        self.work += work

    def check_elements(self, n: int, what: str) -> None:
        """Refuse ``what`` of ``n`` elements over ``max_elements``."""
        if n > self.limits.max_elements:
            raise _over(f"{what} would have {n} elements", self.limits.max_elements,
                        "max_elements")

    def charge_work(self, op_type: str, ins: list, attrs: dict, n_out: int | None) -> None:
        """Add the node's estimated work (from its inputs, before it runs); refuse a run whose
        total would go over ``max_work``."""
        sizes = [_size(x) for x in ins]
        est = n_out if n_out is not None else max(sizes, default=1)
        strings = makes_or_reads_strings(op_type, ins, attrs)
        if strings and self.bytes + est * STRING_BYTES > self.limits.max_bytes:
            raise _over(f"the node would make about {est} strings "
                        f"(~{est * STRING_BYTES} bytes)", self.limits.max_bytes, "max_bytes")
        weight = STRING_COST if strings else SLOW_COST if op_type in SLOW_OPS else 1
        work = NODE_COST + est * weight
        macs = MACS.get(op_type)
        if macs is not None:
            try:
                work += macs(ins, attrs, est)
            except Exception:  # noqa: BLE001 - malformed: the kernel says what is wrong
                pass
        self._admit_work(work)

    def hold(self, value: Any) -> None:
        """Account for a tensor the run now holds, for as long as it lives; refuse one over
        the limits.

        Bytes are counted per base array (a view adds nothing) and given back when the array
        is freed (a weak reference's callback), so this is the live total: a Loop's carried
        state counts once, a sequence keeps its tensors counted while it lives. A sequence
        itself adds nothing: its tensors were counted when a node made them.
        """
        if not isinstance(value, np.ndarray):
            return
        if value.size > self.limits.max_elements:
            raise _over(f"an output has {value.size} elements {value.shape}",
                        self.limits.max_elements, "max_elements")
        base = _root(value)
        key = id(base)
        if key in self._held:
            return
        nbytes = base.nbytes if base.flags.owndata else value.nbytes
        if self.bytes + nbytes > self.limits.max_bytes:
            raise _over(f"the run would hold {self.bytes + nbytes} bytes",
                        self.limits.max_bytes, "max_bytes")
        try:
            self._held[key] = weakref.ref(base, partial(self._freed, key, nbytes))
        except TypeError:  # not weak-referenceable: count it for the whole run
            self._held[key] = base
        self.bytes += nbytes
        self.peak_bytes = max(self.peak_bytes, self.bytes)

    def hold_static(self, bases: dict, nbytes: int) -> None:
        """:meth:`hold` for arrays that outlive the run (a plan's folded values): ``bases``
        maps id(base array) -> base, as hold() keys them, ``nbytes`` their total; counted
        once, never given back during the run."""
        new = bases
        if not self._held.keys().isdisjoint(bases):
            # some already held: count only the others, as hold() does
            new = {k: v for k, v in bases.items() if k not in self._held}
            nbytes = sum(v.nbytes for v in new.values())
        if self.bytes + nbytes > self.limits.max_bytes:
            raise _over(f"the run would hold {self.bytes + nbytes} bytes",
                        self.limits.max_bytes, "max_bytes")
        self._held.update(new)
        self.bytes += nbytes
        self.peak_bytes = max(self.peak_bytes, self.bytes)

    def charge(self, nbytes: int) -> None:
        """Account for ``nbytes`` held until the run ends without an array to show for them
        (a fused chain's intermediates, which the plain run would have kept); refuse them
        over the limit."""
        if self.bytes + nbytes > self.limits.max_bytes:
            raise _over(f"the run would hold {self.bytes + nbytes} bytes",
                        self.limits.max_bytes, "max_bytes")
        self.bytes += nbytes
        self.peak_bytes = max(self.peak_bytes, self.bytes)

    def pin(self, value: Any) -> None:
        """Keep ``value``'s bytes counted until the run ends even if it is freed before: a
        run plan drops a value no later node reads (so its buffer can be used again), and the
        run is charged what the plain node loop, which keeps every value, would hold."""
        if not isinstance(value, np.ndarray):
            return
        key = id(_root(value))
        ref = self._held.get(key)
        if isinstance(ref, weakref.ref):
            self._pinned[key] = ref

    def _freed(self, key: int, nbytes: int, _ref: Any) -> None:
        if self._held.get(key) is not _ref:  # an entry of another array, since
            return
        del self._held[key]
        if self._pinned.pop(key, None) is _ref:
            return  # still counted: the plain run would hold it
        self.bytes -= nbytes


# ---- strings in the file ------------------------------------------------------------------------
#: what one string of a STRING tensor from the file costs beside its bytes, counted twice (the
#: bytes objects onnx makes, then the str objects of the array): measured ~400 B for 64 bytes
STRING_OBJECT_BYTES = 256


def string_tensor_bytes(t: Any) -> int:
    """The memory a STRING ``TensorProto`` becomes as an array (0 for other tensors), counted
    from the protobuf before any conversion."""
    if t.data_type != 8:  # TensorProto.STRING (core.onnx.limits imports no onnx)
        return 0
    return len(t.string_data) * STRING_OBJECT_BYTES + 2 * sum(map(len, t.string_data))


def charge_file_strings(held: int, nbytes: int, what: str, limits: Limits) -> int:
    """``held`` + ``nbytes`` of strings from the file (initializers and tensor attributes,
    which live as long as the model); refused over ``max_bytes``."""
    if held + nbytes > limits.max_bytes:
        raise _over(f"{what} would take about {held + nbytes} bytes as Python strings",
                    limits.max_bytes, "max_bytes")
    return held + nbytes


#: what one tensor of the file costs as objects before its data: the protobuf message parsed,
#: again in the checker's copy, the array and its entry (measured ~1.2 KB a tensor for 300,000
#: one-string initializers, the string included)
TENSOR_OBJECT_BYTES = 1024


def _varint(buf: memoryview, i: int) -> tuple[int, int]:
    v = shift = 0
    while True:
        b = buf[i]
        i += 1
        v |= (b & 0x7F) << shift
        if b < 0x80:
            return v, i
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _fields(buf: memoryview, lo: int, hi: int):
    """(field number, wire type, value or (start, end)) of the protobuf message buf[lo:hi],
    read without building it; stops (ValueError) at anything malformed."""
    i = lo
    while i < hi:
        key, i = _varint(buf, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _varint(buf, i)
            yield num, wt, v
        elif wt == 2:
            n, i = _varint(buf, i)
            if i + n > hi:
                raise ValueError("field past the end")
            yield num, wt, (i, i + n)
            i += n
        elif wt == 1 or wt == 5:
            i += 8 if wt == 1 else 4
        else:
            raise ValueError(f"wire type {wt}")


def precheck_file_tensors(data: bytes, limits: Limits) -> None:
    """Before the file is parsed: the main graph's initializers and its nodes' tensor
    attributes, read off the protobuf wire format, each charged TENSOR_OBJECT_BYTES and its
    strings as :func:`string_tensor_bytes` counts them, against ``max_bytes``; refused as soon
    as the sum is over it (issue 49: 3M string initializers, a 200 MB file, peaked at 1,168 MiB
    under a 512 MiB budget while being parsed and checked). A file too malformed to read this
    way is left to the parser, which says what is wrong."""
    buf = memoryview(data)
    cap = limits.max_bytes
    total = tensors = strings = 0

    def tensor(lo: int, hi: int) -> None:
        nonlocal total, tensors, strings
        tensors += 1
        total += TENSOR_OBJECT_BYTES
        for num, wt, v in _fields(buf, lo, hi):
            if num == 6 and wt == 2:  # string_data
                strings += 1
                total += STRING_OBJECT_BYTES + 2 * (v[1] - v[0])
                if total > cap:
                    break
        if total > cap:
            raise _over(f"the file's {tensors}+ tensors ({strings}+ strings) would take more "
                        f"than {total} bytes as objects", cap, "max_bytes")

    try:
        for num, wt, g in _fields(buf, 0, len(buf)):
            if num != 7 or wt != 2:  # ModelProto.graph
                continue
            for gnum, gwt, v in _fields(buf, *g):
                if gnum == 5 and gwt == 2:  # GraphProto.initializer
                    tensor(*v)
                elif gnum == 1 and gwt == 2:  # GraphProto.node: its attributes' tensors
                    for nnum, nwt, a in _fields(buf, *v):
                        if nnum != 5 or nwt != 2:  # NodeProto.attribute
                            continue
                        for anum, awt, t in _fields(buf, *a):
                            if anum in (5, 10) and awt == 2:  # AttributeProto.t, .tensors
                                tensor(*t)
    except (ValueError, IndexError):
        return  # malformed: the parser says what is wrong


# ---- inlining ---------------------------------------------------------------------------------

def count_inlined_nodes(model, limits: Limits, label: str) -> int:
    """How many nodes ``model`` has once its local functions are inlined, counted without
    inlining (a function called twice per level doubles per level); refuse more than
    ``max_nodes`` and functions that call themselves."""
    fns = {(f.domain, f.name): f for f in model.functions}
    memo: dict[tuple[str, str], int] = {}
    active: set[tuple[str, str]] = set()
    cap = limits.max_nodes

    def nodes_of(nodes) -> int:
        total = 0
        for node in nodes:
            key = (node.domain, node.op_type)
            total += fn_size(key) if key in fns else 1
            for a in node.attribute:
                if a.HasField("g"):
                    total += nodes_of(a.g.node)
                for g in a.graphs:
                    total += nodes_of(g.node)
            if total > cap:
                return total  # already over: stop counting (the numbers may be astronomical)
        return total

    def fn_size(key) -> int:
        if key in memo:
            return memo[key]
        if key in active:
            raise OnnxError(f"local function {key[1]!r} (domain {key[0]!r}) calls itself: it "
                            "cannot be inlined", file=label)
        active.add(key)
        memo[key] = nodes_of(fns[key].node)
        active.discard(key)
        return memo[key]

    n = nodes_of(model.graph.node)
    if n > cap:
        raise _over(f"inlining the model's local functions makes at least {n} nodes", cap,
                    "max_nodes").with_file(label)
    return n
