"""Budgets for running a model someone sent you: a 1 MB file must not cost gigabytes or forever.

:class:`Limits` says how much one run may take (elements per tensor, bytes held, Loop/Scan
iterations, nodes after inlining local functions); :class:`Budget` is one run's account against
them, shared by every subgraph the run enters. Every check happens *before* the allocation or
the work it guards: the output size of each op whose size comes from values (ConstantOfShape,
Expand, Tile, Range, Pad, Resize, OneHot, ...) or from broadcasting (Add, MatMul, ...) is
predicted from its inputs first (``PREDICT``); every other output is checked right after its
kernel, which never makes more than its inputs hold. A limit error names the node, the op, the
numbers and the flag that raises it.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import numpy as np

from core.onnx.errors import OnnxError

#: how each limit is raised on the command line (the error message says so)
FLAGS = {"max_elements": "--max-elements", "max_bytes": "--max-bytes",
         "max_loop_iterations": "--max-loop-iterations", "max_nodes": "--max-nodes",
         "max_work": "--max-work"}


@dataclass(frozen=True)
class Limits:
    """How much one model run may take. Defaults keep a hostile model under ~1 GB and seconds;
    raise them for a big model you trust (``Limits(max_elements=10**9)``, ``--max-elements``).
    """

    #: elements in any one tensor (2**25: 128 MB as float32)
    max_elements: int = 1 << 25
    #: bytes held by the values of one run, all tensors together (a view shares its base's
    #: bytes; initializers read from the file are not counted); 512 MiB, so that with the
    #: interpreter and a kernel's temporaries a run stays near 1 GB
    max_bytes: int = 1 << 29
    #: Loop/Scan/SequenceMap iterations in one run, all loops together (nested ones multiply)
    max_loop_iterations: int = 100_000
    #: nodes of the model once its local functions are inlined (they nest exponentially)
    max_nodes: int = 100_000
    #: estimated work of one run, in units of about a nanosecond of the reference executor:
    #: each node run counts NODE_COST, each output element 1 (SLOW_COST for ops through
    #: refmath's transcendentals), each multiply-add 1 (2**34: ~20 s here)
    max_work: int = 1 << 34

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


def _prod(dims, what: str) -> int:
    """The element count of ``dims`` as an exact Python int; a negative dim is an error."""
    n = 1
    for d in dims:
        d = int(d)
        if d < 0:
            raise OnnxError(f"{what}: negative dimension {d} in {tuple(int(x) for x in dims)}")
        n *= d
    return n


def check_shape(dims, what: str, limits: Limits) -> int:
    """Refuse a shape with a negative dim or more than ``max_elements``; return its size."""
    n = _prod(dims, what)
    # a zero dim makes it empty, but numpy still refuses dims whose product overflows: count
    # the others too
    if _prod([max(int(d), 1) for d in dims], what) > limits.max_elements:
        raise _over(f"{what} would have {n} elements {tuple(int(d) for d in dims)}"
                    + (" (empty, but its other dims are too big)" if n == 0 else ""),
                    limits.max_elements, "max_elements")
    return n


class Budget:
    """One run's account: bytes held, iterations done, and the cancel flag checked between
    nodes. Subgraph runs share their parent's budget."""

    def __init__(self, limits: Limits, cancel: Any = None) -> None:
        self.limits = limits
        self.cancel = cancel  # anything with is_set() (threading.Event), or None
        self.bytes = 0
        self.iterations = 0
        self.nodes = 0  # nodes run so far (a progress dialog can read it)
        self.work = 0  # estimated work so far (see Limits.max_work)
        self._held: dict[int, Any] = {}  # id(base array) -> weak reference to it

    # -- between nodes --------------------------------------------------------------------
    def check_cancel(self) -> None:
        """Raise OnnxCancelled if the cancel event is set."""
        if self.cancel is not None and self.cancel.is_set():
            raise OnnxCancelled("cancelled")

    def iteration(self) -> None:
        """Count one Loop/Scan iteration; refuse one too many (all loops of a run together)."""
        self.check_cancel()
        self.iterations += 1
        if self.iterations > self.limits.max_loop_iterations:
            raise OnnxLimitError(
                f"the run would take more than {self.limits.max_loop_iterations} loop "
                "iterations (max loop iterations, all loops of a run together; raise it with "
                "--max-loop-iterations or Limits(max_loop_iterations=...))")

    # -- around one node ---------------------------------------------------------------------
    def before(self, op_type: str, ins: list, attrs: dict, opset: int) -> None:
        """Refuse the node if the output size predicted from its inputs is over the limits."""
        self.check_cancel()
        self.nodes += 1
        pred = PREDICT.get(op_type)
        try:
            n = None if pred is None else pred(ins, attrs, opset)
        except Exception:  # noqa: BLE001 - a malformed node: its kernel says what is wrong
            n = None
        self.charge_work(op_type, ins, attrs, n)
        if n is None:
            return
        if n > self.limits.max_elements:
            raise _over(f"the output would have {n} elements", self.limits.max_elements,
                        "max_elements")
        if self.bytes + n > self.limits.max_bytes:  # at least a byte per element
            raise _over(f"the run would hold at least {self.bytes + n} bytes",
                        self.limits.max_bytes, "max_bytes")

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
        strings = _makes_or_reads_strings(op_type, ins, attrs)
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
        self.work += work
        if self.work > self.limits.max_work:
            raise _over(f"the run would take an estimated {self.work} units of work (this "
                        f"node {work})", self.limits.max_work, "max_work")

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
        base = value
        while isinstance(base.base, np.ndarray):
            base = base.base
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

    def _freed(self, key: int, nbytes: int, _ref: Any) -> None:
        self._held.pop(key, None)
        self.bytes -= nbytes


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


# ---- output sizes predicted from the inputs -----------------------------------------------------

def _size(x) -> int:
    if isinstance(x, list):
        # what a sequence op costs is its list, not its tensors' data: copying a list and
        # freeing the old one take a few ns an entry (16: with room for a loaded machine)
        return 16 * len(x)
    shape = getattr(x, "shape", None)
    return _prod(shape, "size") if shape is not None else 1


def _shape(x) -> tuple[int, ...]:
    return tuple(int(d) for d in x.shape)


def _ints(x) -> list[int]:
    from core.onnx.registry import as_int_list

    return as_int_list(x)


def _broadcast(*shapes) -> int | None:
    """The element count of numpy's broadcast of ``shapes`` (None if they do not broadcast)."""
    nd = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(1, nd + 1):
        dims = {s[-i] for s in shapes if len(s) >= i} - {1}
        if len(dims) > 1:
            return None
        out.append(dims.pop() if dims else 1)
    return _prod(out, "broadcast")


def _elementwise(ins, attrs, opset):
    shapes = [_shape(x) for x in ins if hasattr(x, "shape")]
    return _broadcast(*shapes) if len(shapes) > 1 else None


def _matmul(a_i: int, b_i: int):
    def pred(ins, attrs, opset):
        a, b = _shape(ins[a_i]), _shape(ins[b_i])
        a = (1,) + a if len(a) == 1 else a
        b = b + (1,) if len(b) == 1 else b
        batch = _broadcast(a[:-2], b[:-2])
        return None if batch is None else batch * a[-2] * b[-1]
    return pred


def _gemm(ins, attrs, opset):
    a, b = _shape(ins[0]), _shape(ins[1])
    m = a[1] if attrs.get("transA") else a[0]
    n = b[0] if attrs.get("transB") else b[1]
    return m * n


def _constant_of_shape(ins, attrs, opset):
    return _prod(_ints(ins[0]), "ConstantOfShape")


def _expand(ins, attrs, opset):
    return _broadcast(_shape(ins[0]), tuple(_ints(ins[1])))


def _tile(ins, attrs, opset):
    return _prod([d * r for d, r in zip(_shape(ins[0]), _ints(ins[1]), strict=False)], "Tile")


def _range(ins, attrs, opset):
    s, lim, d = (float(np.asarray(v).reshape(-1)[0]) for v in ins[:3])
    n = (lim - s) / d if d else math.inf
    return max(math.ceil(n), 0) if math.isfinite(n) else None  # nan/inf: the kernel refuses


def _pad(ins, attrs, opset):
    x = _shape(ins[0])
    p = _ints(ins[1]) if opset >= 11 else list(attrs.get("pads") or attrs.get("paddings"))
    axes = _ints(ins[3]) if opset >= 18 and len(ins) > 3 and ins[3] is not None \
        else list(range(len(x)))
    dims = list(x)
    for i, a in enumerate(axes):
        dims[a % len(x)] += max(p[i], 0) + max(p[i + len(axes)], 0)
    return _prod(dims, "Pad")


def _resize(ins, attrs, opset):
    x = _shape(ins[0])
    scales = sizes = None
    if opset < 9:  # Upsample-7: scales is an attribute
        scales = attrs.get("scales")
    elif opset < 11 or len(ins) == 2:  # Upsample-9, Resize-10: (X, scales)
        scales = list(np.asarray(ins[1]).reshape(-1))
    else:
        if len(ins) > 2 and ins[2] is not None and np.asarray(ins[2]).size:
            scales = list(np.asarray(ins[2]).reshape(-1))
        if len(ins) > 3 and ins[3] is not None:
            sizes = _ints(ins[3])
    axes = list(attrs.get("axes") or range(len(x)))
    dims = list(x)
    if sizes:
        for a, s in zip(axes, sizes, strict=False):
            dims[a % len(x)] = s
    elif scales:
        for a, s in zip(axes, scales, strict=False):
            if not math.isfinite(float(s)):
                return None
            dims[a % len(x)] = math.floor(x[a % len(x)] * float(s))
    return _prod(dims, "Resize")


def _one_hot(ins, attrs, opset):
    return int(np.asarray(ins[0]).size) * max(int(np.asarray(ins[1]).reshape(-1)[0]), 0)


def _random(ins, attrs, opset):
    return _prod(attrs.get("shape") or [], "Random")


def _concat(ins, attrs, opset):
    return sum(int(np.asarray(x).size) if not hasattr(x, "size") else int(x.size)
               for x in ins if x is not None)


def _gather(ins, attrs, opset):
    x, idx = _shape(ins[0]), _shape(ins[1])
    ax = int(attrs.get("axis", 0)) % max(len(x), 1)
    return _prod(x[:ax] + idx + x[ax + 1:], "Gather")


def _gather_nd(ins, attrs, opset):
    x, idx = _shape(ins[0]), _shape(ins[1])
    b = int(attrs.get("batch_dims", 0))
    return _prod(idx[:-1] + x[b + idx[-1]:], "GatherND")


def _top_k(ins, attrs, opset):
    x = _shape(ins[0])
    k = _ints(ins[1])[0] if opset >= 10 else int(attrs.get("k", 1))
    ax = int(attrs.get("axis", -1)) % len(x)
    return _prod(x[:ax] + (max(k, 0),) + x[ax + 1:], "TopK")


def _window(ins, attrs, opset):
    return max(_ints(ins[0])[0], 0)


def _spatial(w_i: int | None):
    """Conv/pool (weights at input ``w_i``): the padded input, and the im2col matrix (output
    positions x window)."""
    def pred(ins, attrs, opset):
        x = _shape(ins[0])
        nd = len(x) - 2
        if nd < 1:
            return None
        k = list(attrs.get("kernel_shape") or (_shape(ins[w_i])[2:] if w_i else [1] * nd))
        return _windows(x, nd, k, attrs)
    return pred


def _windows(x, nd, k, attrs):
    pads = list(attrs.get("pads") or [0] * (2 * nd))
    st = list(attrs.get("strides") or [1] * nd)
    dil = list(attrs.get("dilations") or [1] * nd)
    padded = [x[2 + i] + max(pads[i], 0) + max(pads[i + nd], 0) for i in range(nd)]
    span = [(k[i] - 1) * dil[i] + 1 for i in range(nd)]
    out = [max((padded[i] - span[i]) // max(st[i], 1) + 1, 0) for i in range(nd)]
    cols = _prod([x[0], x[1]] + out + k, "window")
    return max(_prod(x[:2] + tuple(padded), "padded input"), cols)


def _conv_transpose(ins, attrs, opset):
    x, w = _shape(ins[0]), _shape(ins[1])
    nd = len(x) - 2
    if attrs.get("output_shape"):
        sp = list(attrs["output_shape"])[-nd:]
    else:
        k = list(attrs.get("kernel_shape") or w[2:])
        st = list(attrs.get("strides") or [1] * nd)
        dil = list(attrs.get("dilations") or [1] * nd)
        op_ = list(attrs.get("output_padding") or [0] * nd)
        sp = [st[i] * (x[2 + i] - 1) + op_[i] + (k[i] - 1) * dil[i] + 1 for i in range(nd)]
    return _prod([x[0], w[1] * int(attrs.get("group", 1))] + sp, "ConvTranspose")


def _max_unpool(ins, attrs, opset):
    if len(ins) > 2 and ins[2] is not None:
        return _prod(_ints(ins[2]), "MaxUnpool")
    x = _shape(ins[0])
    nd = len(x) - 2
    k = list(attrs["kernel_shape"])
    st = list(attrs.get("strides") or [1] * nd)
    return _prod(list(x[:2]) + [(x[2 + i] - 1) * st[i] + k[i] for i in range(nd)], "MaxUnpool")


def _col2im(ins, attrs, opset):
    x = _shape(ins[0])
    return _prod([x[0], x[1] // max(_prod(_ints(ins[2]), "block"), 1)] + _ints(ins[1]),
                 "Col2Im")


def _multinomial(ins, attrs, opset):
    return _shape(ins[0])[0] * int(attrs.get("sample_size", 1))


def _concat_seq(ins, attrs, opset):
    return sum(int(v.size) for v in ins[0]) if isinstance(ins[0], list) else None


def _einsum(ins, attrs, opset):
    eq = str(attrs.get("equation", "")).replace(" ", "")
    if "..." in eq:
        return None
    lhs, _, out = eq.partition("->")
    terms = lhs.split(",")
    dims: dict[str, int] = {}
    for term, x in zip(terms, ins, strict=False):
        for letter, d in zip(term, _shape(x), strict=False):
            dims[letter] = max(dims.get(letter, 1), d)
    if "->" not in eq:  # implicit output: the letters used once, in alphabetical order
        out = "".join(sorted(c for c in dims if lhs.count(c) == 1))
    return _prod([dims.get(c, 1) for c in out], "Einsum")


def _dft(ins, attrs, opset):
    x = _shape(ins[0])
    n = _ints(ins[1])[0] if len(ins) > 1 and ins[1] is not None and np.asarray(ins[1]).size \
        else None
    if n is None:
        return None
    return _prod(x[:-2], "DFT") * max(n, 1) * 2 * max(x[-2] if len(x) > 2 else 1, 1)


_BROADCAST = ("Add", "Sub", "Mul", "Div", "Pow", "Mod", "And", "Or", "Xor", "Equal", "Greater",
              "GreaterOrEqual", "Less", "LessOrEqual", "BitShift", "BitwiseAnd", "BitwiseOr",
              "BitwiseXor", "Max", "Min", "Sum", "Mean", "Where", "PRelu")

#: op type -> f(inputs, attrs, opset) -> the element count of its biggest output (or None)
PREDICT: dict[str, Callable[[list, dict, int], int | None]] = {
    **{name: _elementwise for name in _BROADCAST},
    "MatMul": _matmul(0, 1), "MatMulInteger": _matmul(0, 1), "QLinearMatMul": _matmul(0, 3),
    "Gemm": _gemm, "ConstantOfShape": _constant_of_shape, "Expand": _expand, "Tile": _tile,
    "Range": _range, "Pad": _pad, "Resize": _resize, "Upsample": _resize, "OneHot": _one_hot,
    "RandomNormal": _random, "RandomUniform": _random, "Concat": _concat, "Gather": _gather,
    "GatherND": _gather_nd, "TopK": _top_k, "HannWindow": _window, "HammingWindow": _window,
    "BlackmanWindow": _window, "Conv": _spatial(1), "ConvInteger": _spatial(1),
    "QLinearConv": _spatial(3), "MaxPool": _spatial(None), "AveragePool": _spatial(None),
    "LpPool": _spatial(None),
    "ConvTranspose": _conv_transpose, "MaxUnpool": _max_unpool, "Col2Im": _col2im,
    "Multinomial": _multinomial, "ConcatFromSequence": _concat_seq, "DFT": _dft,
    "Einsum": _einsum,
}


# ---- work estimates -----------------------------------------------------------------------------

#: the executor's own cost per node run (Python dispatch, checks), in work units (~ns)
NODE_COST = 50_000
#: per output element of ops computed through refmath's transcendentals (~0.1-0.5 us each)
SLOW_COST = 512
SLOW_OPS = frozenset({
    "Exp", "Log", "Tanh", "Sigmoid", "Erf", "Softmax", "LogSoftmax", "Softplus", "Mish", "Elu",
    "Selu", "Celu", "Swish", "Gelu", "Pow", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh",
    "Cosh", "Asinh", "Acosh", "Atanh", "LSTM", "GRU", "RNN", "LpNormalization", "LRN",
    "SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss", "Hardmax", "ReduceLogSumExp",
    "ReduceLogSum", "LayerNormalization", "BatchNormalization", "InstanceNormalization",
    "GroupNormalization", "RMSNormalization", "MeanVarianceNormalization"})


#: per element of an op that makes or reads Python strings (a Python loop, ~1 us an element),
#: and what each string costs in memory (object arrays count only their 8-byte pointers)
STRING_COST = 1024
STRING_BYTES = 64


def _makes_or_reads_strings(op_type: str, ins: list, attrs: dict) -> bool:
    if op_type == "Cast" and attrs.get("to") == 8:  # TensorProto.STRING
        return True
    return any(isinstance(x, np.ndarray) and x.dtype.kind == "O" for x in ins)


def _mm_macs(a_i: int, b_i: int):
    def macs(ins, attrs, n_out):
        return n_out * _shape(ins[a_i])[-1]
    return macs


def _gemm_macs(ins, attrs, n_out):
    a = _shape(ins[0])
    return n_out * (a[0] if attrs.get("transA") else a[1])


def _spatial_macs(w_i: int | None):
    """Conv (weights at ``w_i``): every output element sums C/group x window taps; a pool
    (``w_i`` None) sums its window."""
    def macs(ins, attrs, n_out):
        x = _shape(ins[0])
        nd = len(x) - 2
        k = list(attrs.get("kernel_shape") or (_shape(ins[w_i])[2:] if w_i else [1] * nd))
        windows = _windows(x, nd, k, attrs)  # N x C x out x taps, or the padded input
        if w_i is None:
            return windows
        return windows * _shape(ins[w_i])[0] // max(int(attrs.get("group", 1)), 1)
    return macs


def _conv_transpose_macs(ins, attrs, n_out):
    w = _shape(ins[1])
    return _size(ins[0]) * w[1] * _prod(w[2:], "kernel")


def _einsum_macs(ins, attrs, n_out):
    """The whole iteration space: every letter's dim once (numpy, unoptimised)."""
    eq = str(attrs.get("equation", "")).replace(" ", "")
    terms = eq.split("->")[0].split(",")
    if "..." in eq or len(terms) != len([x for x in ins if x is not None]):
        return n_out * max((_size(x) for x in ins), default=1)  # a rough upper bound
    dims: dict[str, int] = {}
    for term, x in zip(terms, ins, strict=False):
        for letter, d in zip(term, _shape(x), strict=False):
            dims[letter] = max(dims.get(letter, 1), d)
    return _prod(dims.values(), "Einsum")


def _rnn_macs(ins, attrs, n_out):
    x, w, r = _shape(ins[0]), _shape(ins[1]), _shape(ins[2])
    return x[0] * x[1] * w[0] * w[1] * (w[2] + r[2])  # steps x batch x dirs x gates x (in + h)


#: op type -> f(inputs, attrs, output elements) -> multiply-adds beyond one per output element
MACS: dict[str, Callable[[list, dict, int], int]] = {
    "MatMul": _mm_macs(0, 1), "MatMulInteger": _mm_macs(0, 1), "QLinearMatMul": _mm_macs(0, 3),
    "Gemm": _gemm_macs, "Conv": _spatial_macs(1), "ConvInteger": _spatial_macs(1),
    "QLinearConv": _spatial_macs(3), "MaxPool": _spatial_macs(None),
    "AveragePool": _spatial_macs(None), "LpPool": _spatial_macs(None),
    "ConvTranspose": _conv_transpose_macs, "Einsum": _einsum_macs, "LSTM": _rnn_macs,
    "GRU": _rnn_macs, "RNN": _rnn_macs,
}
