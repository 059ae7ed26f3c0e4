"""Import an ONNX graph onto a tape: every node becomes tape ops (Gemm -> matmul + add_bias, Conv
-> conv2d, BatchNormalization -> its formula in primitives, ...), so the model can be inspected,
stepped through backward, fine-tuned with ``core.optim`` and replayed on a device.

Nodes whose inputs are all known at import (initializers, constants, shapes of tape values) are
computed right away with the executor's kernels: shape subgraphs fold and never reach the tape.
Weights become params (trainable) where they reach a tape op: floating initializers with at
least one dimension, the outputs of ConstantOfShape (how the onnx package's light models ship
theirs) and anything folded from them (densenet's Unsqueeze of a scale); see ``weight_names``.
``Constant`` nodes, 0-d values and everything else stay const.
A node with no tape form raises OnnxError naming it.
"""

from __future__ import annotations

import re
import weakref
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tapescope.core import ops, precision
from tapescope.core.names import shown
from tapescope.core.onnx import lowerings
from tapescope.core.onnx.errors import OnnxError, node_label
from tapescope.core.onnx.executor import Session
from tapescope.core.onnx.export_meta import META_MAX, exported_parameters, signature
from tapescope.core.onnx.limits import Budget, Limits, _over
from tapescope.core.onnx.loader import check_inputs, np_dtype
from tapescope.core.onnx.reference import REFERENCE
from tapescope.core.onnx.registry import Ctx, as_int_list
from tapescope.core.ops.nn import pads_for
from tapescope.core.tape import Var


@dataclass
class Imported:
    """What an import produced: graph outputs, params by initializer name, every value by name."""

    outputs: dict[str, Any]
    params: dict[str, Any]
    values: dict[str, Any]
    folded: list[str] = field(default_factory=list)
    # per recorded ONNX node: {"name", "op_type", "attributes", "inputs", "first", "stop"}
    # (its tape nodes are ids first..stop-1): what the Inspector shows, as Netron does
    onnx_nodes: list[dict] = field(default_factory=list)
    # this step's data beyond the inputs: derived constants and dropout masks (tape leaves)
    data_leaves: dict[str, Any] = field(default_factory=dict)
    # batch norm in training mode: the updated running statistics by input name (ONNX spec)
    running: dict[str, np.ndarray] = field(default_factory=dict)
    # integer input -> the row count of the Gather it indexes (valid ids are 0..n-1)
    index_bounds: dict[str, int] = field(default_factory=dict)


def _nn_record(tape, op: str, inputs: list, attrs: dict | None = None):
    """Record one of core.ops.nn's ops (they have no wrapper in core.ops)."""
    return tape.record(op, inputs, attrs)


NAME_PART = 120  # characters of a scope or a leaf name: scope/leaf fits core.names.MAX_NAME

def leaf_name(name: str | None) -> str | None:
    """A tensor name as a tape leaf's name: '/' is the tape's scope separator, so an
    initializer ``gpu_0/conv1_w_0`` becomes ``gpu_0.conv1_w_0`` (and sits in its layer's scope,
    not in a ``gpu_0`` group of every weight). Escaped and cut (``core.names.shown``): a scope
    and a leaf stay within what a tape file keeps."""
    return None if name is None else shown(name.replace("/", "."), NAME_PART)


def module_path(node) -> str:
    """The PyTorch module path the dynamo exporter records in a node's metadata
    (``namespace``: ``": __main__.Net/blocks.0: ...Block/attn: ...Attention/linear: aten..."``
    -> ``blocks.0/attn``: scope ``/blocks.0/attn/<node>``), or "". torch 2.13 writes each
    module's full dotted path (``blocks.0/blocks.0.attn/blocks.0.attn.qkv``): each keeps only
    its own part past its parent's, a Sequential's or ModuleList's index with its parent's
    name (``blocks/blocks.0/expand/expand.1``, ``blocks.0/attn/qkv``): TorchScript's scopes.
    Read as text, never evaluated; long values are ignored."""
    for p in node.metadata_props:
        if p.key == "namespace" and len(p.value) <= 4096:
            parts = [seg.split(":", 1)[0].strip() for seg in p.value.split("/")]
            out, parent = [], ""
            for x in parts[1:-1]:
                if not x:
                    continue
                own = x[len(parent) + 1:] if parent and x.startswith(parent + ".") else x
                if own != x and own[:1].isdigit():  # blocks.0 under blocks
                    own = f"{parent.rsplit('.', 1)[-1]}.{own}"
                out.append(own)
                parent = x
            return "/".join(out)
    return ""


def scope_name(st) -> str:
    """The tape scope of an ONNX node's ops: its name, else its first output, else op + index;
    under its module path when the exporter recorded one (dynamo), so a layer's nodes group
    as TorchScript's ``/layer/Op`` names do."""
    n = st.node
    name = n.name or next((o for o in n.output if o), "") or f"{n.op_type}_{st.label}"
    path = module_path(n) if n.metadata_props else ""
    return shown(f"/{path}/{name}" if path and not name.startswith("/") else name, NAME_PART)


# ops whose folded float outputs are weights (the light models' ConstantOfShape weights), when
# their input is a constant of the file (not a shape read from an activation)
WEIGHT_SOURCES = ("ConstantOfShape",)

#: ops that hand a weight's elements on unchanged (a copy, a transpose, a reshape, a part of it):
#: what they fold from a weight is that weight. Any other op's result is not one (a broadcast,
#: a scale, a mask, what a Shape computes); where such an op reads a weight the import records
#: it on the tape, so the weight itself trains (docs/models.md, "What the import makes
#: trainable")
WEIGHT_VIEWS = ("Identity", "Transpose", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Slice",
                "Split", "Cast", "CastLike")

#: ops that read only their input's shape (never its values)
SHAPE_OPS = ("Shape", "Size")



def is_weight_value(v: Any) -> bool:
    """Whether a value may be a weight: a floating array with at least one dimension (a 0-d
    value is a constant: the exporters' attention scale, GELU's 0.5 and sqrt(2), a Pow
    exponent)."""
    return isinstance(v, np.ndarray) and precision.is_float(v.dtype) and v.ndim >= 1


def is_broadcast(v: Any) -> bool:
    """Whether ``v`` repeats one slice along an axis of size > 1 without being one value
    throughout: what an Expand / Tile of a parameter folded by the exporter looks like (a
    parameter that is all zeros or all ones cannot be told apart and counts as a weight)."""
    if not isinstance(v, np.ndarray) or v.size < 2:
        return False
    flat = v.reshape(-1)
    if np.all(flat == flat[0]):
        return False
    return any(v.shape[a] > 1 and bool(np.all(v == v.take([0], axis=a)))
               for a in range(v.ndim))


def weight_names(graph, values: dict[str, Any] | None = None) -> set[str]:
    """The names whose values are weights (docs/models.md): the file's floating initializers
    with at least one dimension, the outputs of ConstantOfShape of a constant shape (the light
    models' weights), and what a copy, transpose, reshape or part of a weight folds to
    (``WEIGHT_VIEWS``). A torch.export (dynamo) file says which initializers are parameters:
    those, and what its optimizer folded from a parameter unless it is a broadcast of it
    (``values``, the initializers' arrays, tell); its buffers and what it folded from shapes
    (an attention scale, a causal mask) are constants. ``Constant`` nodes are never weights,
    nor anything computed from constants alone; the importer further keeps a weight constant
    where its consumer reads it as data (running statistics, a recurrent initial state) and
    wherever its value is 0-d or not floating."""
    export = exported_parameters(graph)
    names = set()
    for t in graph.initializer:
        if t.data_type not in _FLOAT_TYPES or len(t.dims) < 1:
            continue
        if export is None or t.name in export[0]:
            names.add(t.name)
        elif any(s in export[0] for s in export[1].get(t.name, ())) and not is_broadcast(
                (values or {}).get(t.name)):
            names.add(t.name)  # a transposed Linear weight, an RNN's reordered gates
    consts = {t.name for t in graph.initializer}
    for n in graph.node:
        ins = [i for i in n.input if i]
        if n.op_type == "Constant" or (ins and n.op_type not in SHAPE_OPS
                                       and all(i in consts for i in ins)):
            consts.update(o for o in n.output if o)
        if (export is None and n.op_type in WEIGHT_SOURCES and all(i in consts for i in ins)) \
                or (n.op_type in WEIGHT_VIEWS and ins and n.input[0] in names):
            names.update(o for o in n.output if o)
    return names


def exported_broadcasts(graph, values: dict[str, Any]) -> dict[str, str]:
    """{initializer: the parameter it is a broadcast of}, in a torch.export (dynamo) file whose
    optimizer folded ``cls.expand(B, -1, -1)`` into an initializer ``expand`` (its
    ``folded_from`` names the one parameter; ``cls`` itself is gone from the file): the import
    trains that parameter (the broadcast's repeated slice) and records the broadcast."""
    export = exported_parameters(graph)
    if export is None:
        return {}
    out = {}
    for t in graph.initializer:
        src = [s for s in export[1].get(t.name, ()) if s in export[0]]
        if t.name not in export[0] and len(src) == 1 and src[0] not in values and is_broadcast(
                values.get(t.name)):
            out[t.name] = src[0]
    return out


_FX_NODE = "pkg.torch.onnx.fx_node"
_ORIGINAL = "pkg.torch.onnx.original_node_name"


def exported_merges(graph, values: dict[str, Any]) -> dict[tuple[str, str], dict[str, str]]:
    """Parameters a torch.export (dynamo) file's optimizer merged into an initializer of equal
    value, to be split again: {(node name, first output): {input it reads: the parameter it
    stands for there}}. A node's ``fx_node`` metadata names the parameters its aten call
    took (``layer_norm(x, [8], %p_ln2_weight, %p_ln2_bias, ...)``); where one is not in the
    file (nor folded into another initializer) and the node reads instead a parameter its call
    did not take (``ln1.weight``, or an initializer folded from one), that input stands for
    it, paired in order (or, where the call is decomposed into nodes that each read one, by
    the parameters' last name part: ``weight`` for ``weight``). Only a value
    that is one number throughout (fresh ones and zeros) is split: equal random values are
    one tensor in PyTorch (a tied weight), kept one."""
    export = exported_parameters(graph)
    if export is None:
        return {}
    params, folded = export
    sig = signature(graph) or ""
    target = dict(re.findall(r"^\s*(\w+): PARAMETER target='([^']*)'", sig, re.M))
    in_file = {t.name for t in graph.initializer} | {i.name for i in graph.input} | {
        o for n in graph.node for o in n.output}  # (a split-out name must be a new one)
    gone = {t for t in target.values() if t not in in_file
            and not any(t in names for names in folded.values())}
    if not gone:
        return {}
    own = {vi.name: p.value for vi in (*graph.value_info, *graph.input)
           for p in vi.metadata_props if p.key == _ORIGINAL}
    holder = {t: ph for ph, t in target.items()}

    def stands_for(i: str) -> str | None:
        """The placeholder of the parameter initializer ``i`` is (or was folded from: a
        GroupNorm's weight unsqueezed to [C, 1, 1])."""
        if i in params and i in own:
            return own[i]
        src = [holder[f] for f in folded.get(i, ()) if f in holder]
        return src[0] if len(src) == 1 else None

    out: dict[tuple[str, str], dict[str, str]] = {}
    for n in graph.node:
        fx = next((p.value for p in n.metadata_props if p.key == _FX_NODE
                   and len(p.value) <= META_MAX), None)
        if not fx:
            continue
        took = re.findall(r"%(p_\w+)", fx.split("args = ", 1)[-1])
        wanted = list(dict.fromkeys(target[ph] for ph in took
                                    if ph in target and target[ph] in gone))
        stand = [i for i in n.input if (ph := stands_for(i)) and ph not in took]
        if not wanted or not stand or not all(_one_value(values.get(i)) for i in stand):
            continue
        if len(wanted) == len(stand):
            pairs = dict(zip(stand, wanted, strict=True))
        else:  # a decomposed call (GroupNorm: its Mul reads the weight, its Add the bias):
            # each input for the one wanted parameter of the same last name part
            pairs = {}
            for i in stand:
                part = target[stands_for(i)].rsplit(".", 1)[-1]
                same = [w for w in wanted if w.rsplit(".", 1)[-1] == part]
                if len(same) == 1:
                    pairs[i] = same[0]
        if pairs:
            out[(n.name, n.output[0] if n.output else "")] = pairs
    return out


def _outer_reads(node) -> set[str]:
    """The names a control-flow node's subgraphs read (their nodes' inputs, nested graphs
    included), whether made inside or taken from the enclosing scope."""
    def graphs(n) -> list:
        return [a.g for a in n.attribute if a.g.node] + [g for a in n.attribute for g in a.graphs]

    out: set[str] = set()
    stack = graphs(node)
    while stack:
        for n in stack.pop().node:
            out.update(i for i in n.input if i)
            stack += graphs(n)
    return out


def _one_value(v: Any) -> bool:
    return isinstance(v, np.ndarray) and v.size >= 1 and bool(np.all(v == v.reshape(-1)[0]))


def broadcast_source(v: np.ndarray) -> np.ndarray:
    """The one slice a broadcast repeats: index 0 of every axis along which it is constant."""
    for a in range(v.ndim):
        if v.shape[a] > 1 and np.all(v == v.take([0], axis=a)):
            v = v.take([0], axis=a)
    return np.ascontiguousarray(v)


def _canonical(name: str, params: set[str]) -> tuple[bool, bool, str]:
    """How much ``name`` looks like the parameter itself (a torch.export PARAMETER, then a
    name not made up by an exporter): of a tied pair, the other one is the copy."""
    return name in params, not name.startswith(("onnx::", "val_")), name


def tied_copies(weights: set[str], values: dict[str, Any],
                params: set[str] | None = None) -> dict[str, str]:
    """{a 2-D weight: the weight it is the transpose of}, found by value: the exporters fold a
    tied head's ``emb.weight.T`` into an initializer of its own (TorchScript's
    ``onnx::MatMul_N``, dynamo's ``val_N``); the import records it as the transpose of the one
    weight, so the tie holds in training (a weight of one value throughout is never taken for
    a copy). Candidates meet on their first row first, so each pair is compared in full once."""
    two = sorted(k for k in weights if getattr(values.get(k), "ndim", 0) == 2
                 and precision.is_float(values[k].dtype) and values[k].size > 1)
    by_col: dict[tuple, list[str]] = {}
    for k in two:
        v = values[k]
        by_col.setdefault((v.shape[::-1], v.dtype.str, v[:, 0].tobytes()), []).append(k)
    out: dict[str, str] = {}
    for k in sorted(two, key=lambda n: _canonical(n, params or set())):  # copies first
        v = values[k]
        for src in by_col.get((v.shape, v.dtype.str, v[0].tobytes()), ()):
            if src != k and src not in out and k not in out.values() and not np.all(
                    v == v.reshape(-1)[0]) and np.array_equal(values[src].T, v) and not (
                    v.shape[0] == v.shape[1] and np.array_equal(v, v.T)):
                out[k] = src  # (a symmetric one, an identity init, is equal, not tied)
                break
    return out


#: per Session: (weight_names, tied_copies), found once (the workload imports every step)
_RULES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def session_weights(sess: Session) -> tuple[set[str], dict[str, str], list, dict[str, str],
                                            dict[tuple[str, str], dict[str, str]]]:
    """``weight_names``, ``tied_copies``, the steps to record again (``refold``),
    ``exported_broadcasts`` and ``exported_merges`` of ``sess``'s model (its folded
    initializers included), once per Session."""
    got = _RULES.get(sess)
    if got is None:
        g, inits = sess.model.graph, sess.graph.inits
        names = weight_names(g, inits)
        export = exported_parameters(g)
        got = (names, tied_copies(names, inits, export[0] if export else None),
               refold(sess, names),
               exported_broadcasts(g, inits), exported_merges(g, inits))
        _RULES[sess] = got
    return set(got[0]), dict(got[1]), list(got[2]), dict(got[3]), dict(got[4])


def refold(sess: Session, weights: set[str]) -> list:
    """The nodes a Session folded at load (``fold=True``) that computed from a weight by
    anything but a view or a Shape (``cls.expand(2, -1, -1)`` at a traced batch), and what was
    folded from them, as steps in graph order: the import records them on the tape again, so
    the weight itself trains instead of a constant copy of its broadcast."""
    from tapescope.core.onnx.executor import Step
    from tapescope.core.onnx.registry import kernel_for, node_attrs

    folded = set(getattr(sess, "_folded_names", ()))
    if not folded:
        return []
    again: set[str] = set()
    steps = []
    for i, n in enumerate(sess.model.graph.node):
        outs = [o for o in n.output if o]
        if not outs or not all(o in folded for o in outs):
            continue
        ins = [x for x in n.input if x]
        if (n.op_type not in WEIGHT_VIEWS + SHAPE_OPS and any(
                x in weights and is_weight_value(sess.graph.inits.get(x)) for x in ins)) or \
                any(x in again for x in ins):
            domain = "" if n.domain in ("", "ai.onnx") else n.domain
            opset = sess.lm.opsets.get(domain, 0)
            steps.append(Step(node_label(i, n), n, kernel_for(n), node_attrs(n, opset), opset))
            again.update(outs)
    return steps


# TensorProto FLOAT, FLOAT16, DOUBLE, BFLOAT16
_FLOAT_TYPES = (1, 10, 11, 16)


class _Importer:
    def __init__(self, sess: Session, tape, trainable: bool, budget: Budget) -> None:
        self.sess = sess
        self.budget = budget
        self.tape = tape
        self.trainable = trainable
        self.init_names = set(sess.graph.inits)
        # names whose values are weights (the rule of weight_names; grown as the import folds
        # copies and views of them), and the tied copies recorded as a weight's transpose
        self.weights, self.tied, self.refold, self.broadcasts, self.merges = \
            session_weights(sess)
        self.tied_vars: dict[str, Var] = {}
        self.params: dict[str, Any] = {}
        self.label = ""
        self.tape_bytes = 0  # what the import recorded on the tape, with gradients: charge_tape
        self.env: dict[str, Any] = {}
        self.calibrate: dict[str, np.ndarray] | None = None
        # integer graph inputs by name, as integers (step data: token ids, labels)
        self.int_data: dict[str, np.ndarray] = {}
        # names of values folded from step data (an integer input's view, a Where's mask from
        # an attention_mask): constants of this step only, not of the model
        self.derived: set[str] = set()
        # the tape leaves holding derived values (and dropout masks): the step's data, which
        # a device replay uploads every step like the inputs (OnnxWorkload adds them)
        self.data_leaves: dict[str, Var] = {}
        self.step_seed: Any = 0  # dropout masks: default_rng((step_seed, node index))
        self.masks: dict[str, np.ndarray] = {}  # dropout masks by node output name
        self.running: dict[str, np.ndarray] = {}  # batch norm (training): updated statistics
        self.index_bounds: dict[str, int] = {}  # integer input -> rows of the Gather it indexes
        self.roots: dict[str, set[str]] = {}  # a derived value -> the integer inputs it reads
        # a probe import finds index_bounds on drawn inputs: labels out of range are taken
        # modulo the classes instead of refused (the caller draws them again within bounds)
        self.probe = False
        self._torch_names: dict[str, str] | None = None  # weight -> PyTorch's name, when asked

    def var(self, v: Any, name: str | None = None):
        """A tape Var for ``v``: float initializers become (shared) params, the rest consts."""
        if not isinstance(v, np.ndarray):
            return v
        if name in self.params:
            return self.params[name]
        if name in self.tied and self.trainable:  # emb.weight.T folded by the exporter
            if name not in self.tied_vars:
                src = self.tied[name]
                self.tied_vars[name] = ops.transpose(self.var(self.sess.graph.inits[src], src))
            return self.tied_vars[name]
        if name in self.broadcasts and self.trainable and isinstance(v, np.ndarray):
            if name not in self.tied_vars:  # cls.expand(B, -1, -1) folded by the exporter
                src = self.broadcasts[name]
                if src not in self.params:
                    self.params[src] = self.tape.param(broadcast_source(v), name=leaf_name(src))
                self.tied_vars[name] = ops.mul(self.params[src], self.tape.const(
                    np.ones(v.shape), name="ones"))
            return self.tied_vars[name]
        if name in self.weights and is_weight_value(v) and self.trainable:
            if name not in self.params:
                self.params[name] = self.tape.param(v, name=self.weight_leaf_name(name))
            return self.params[name]
        return self.const(v, name, derived=name in self.derived)

    def weight_leaf_name(self, name: str) -> str | None:
        """A weight's leaf name: PyTorch's parameter where the exporter renamed it
        (``val_12`` -> ``blocks.0.attn.qkv.weight.T``: ``state_dict.torch_names``, worked out
        once per import, when the first weight is made), else its own."""
        if self._torch_names is None:
            from tapescope.core.onnx.state_dict import torch_names

            self._torch_names = torch_names(self.sess.model.graph, {
                k: np.shape(v) for k, v in self.sess.graph.inits.items()
                if k in self.weights and isinstance(v, np.ndarray)})
        return leaf_name(self._torch_names.get(name, name))

    def const(self, v: np.ndarray, name: str | None = None, derived: bool = False) -> Var:
        """A const leaf; a ``derived`` one (computed from this step's data) is registered as a
        data leaf, so a device replay gets its new value every step."""
        c = self.tape.const(v, name=leaf_name(name))
        if derived:
            key = name or f"leaf{c.id}"
            while key in self.data_leaves:
                key += "'"
            self.data_leaves[key] = c
        return c

    def static(self, v: Any, what: str) -> np.ndarray:
        if v is not None and not isinstance(v, np.ndarray):
            raise OnnxError(f"{what} must be known at import (a constant), not computed on the "
                            "tape", node=self.label)
        return v

    def check(self) -> None:
        if not self.tape.ok:
            raise OnnxError(f"the tape refused it: {self.tape.error}", node=self.label)

    #: what the tape holds for each byte of a value it records: the value and its gradient
    TAPE_COPIES = 2

    def charge_tape(self, nbytes: int, after: bool = False) -> None:
        """Count ``nbytes`` of recorded values (times TAPE_COPIES) against ``max_bytes``,
        with what the run holds besides; refuse them over it. Called with the node's predicted
        output before its converter runs (``after``: with what it recorded, then)."""
        lim = self.budget.limits
        total = self.budget.bytes + self.tape_bytes + nbytes * self.TAPE_COPIES
        if total > lim.max_bytes:
            raise _over(f"the tape would hold about {total} bytes (its values and their "
                        f"gradients{' as recorded' if after else ''})", lim.max_bytes,
                        "max_bytes")
        if after:
            self.tape_bytes = total - self.budget.bytes


# ---- converters: f(imp, step, ins, names) -> Var or tuple of Vars ----------------------------

def _v(imp, ins, names, i):
    return imp.var(ins[i], names[i])


def _unary(fn):
    return lambda imp, st, ins, names: fn(_v(imp, ins, names, 0))


def _binary(fn):
    return lambda imp, st, ins, names: fn(_v(imp, ins, names, 0), _v(imp, ins, names, 1))


def _record(op):
    return lambda imp, st, ins, names: _nn_record(imp.tape, op, [_v(imp, ins, names, 0)])


def _matmul(imp, st, ins, names):
    a, b = _v(imp, ins, names, 0), _v(imp, ins, names, 1)
    if len(b.shape) == 2:
        return ops.matmul(a, b)
    if len(a.shape) == 3 and a.shape[:1] == b.shape[:1] and len(b.shape) == 3:
        return ops.bmm(a, b)
    if len(a.shape) == len(b.shape) >= 3 and a.shape[:-2] == b.shape[:-2]:
        lead = a.shape[:-2]
        y = ops.bmm(ops.reshape(a, (-1,) + a.shape[-2:]), ops.reshape(b, (-1,) + b.shape[-2:]))
        return ops.reshape(y, lead + (a.shape[-2], b.shape[-1]))
    raise OnnxError(f"MatMul of shapes {a.shape} and {b.shape} has no tape form", node=imp.label)


def _gemm(imp, st, ins, names):
    at = st.attrs
    a, b = _v(imp, ins, names, 0), _v(imp, ins, names, 1)
    if at.get("transA", 0):
        a = ops.transpose(a)
    if at.get("transB", 0):
        b = ops.transpose(b)
    y = ops.matmul(a, b)
    if at.get("alpha", 1.0) != 1.0:
        y = ops.muls(y, at["alpha"])
    if len(ins) > 2 and ins[2] is not None:
        c = _v(imp, ins, names, 2)
        if at.get("beta", 1.0) != 1.0:
            c = ops.muls(c, at["beta"])
        y = ops.add_bias(y, c)
    return y


def _conv(imp, st, ins, names):
    at = st.attrs
    x, w = _v(imp, ins, names, 0), _v(imp, ins, names, 1)
    if len(x.shape) == 3:  # 1-D (Conv1d): conv2d on a unit height, the same chains
        y = _conv(imp, lowerings._Attrs(st, lowerings.as_2d(at)),
                  [lowerings.unit_height(x), lowerings.unit_height(w)] + list(ins[2:]), names)
        return lowerings.drop_height(y)
    if len(x.shape) not in (4, 5):
        raise OnnxError("only 1-D, 2-D and 3-D convolutions have a tape form", node=imp.label)
    nd = len(x.shape) - 2  # 2: conv2d; 3 (Conv3d): conv3d, the same chains with a depth axis
    k = list(at.get("kernel_shape") or w.shape[2:])
    strides = list(at.get("strides") or [1] * nd)
    dil = list(at.get("dilations") or [1] * nd)
    padw = pads_for(x.shape[2:], k, strides, dil, at.get("pads"), at.get("auto_pad", "NOTSET"))
    y = _nn_record(imp.tape, f"conv{nd}d", [x, w], {
        "strides": tuple(strides), "dilations": tuple(dil), "group": int(at.get("group", 1)),
        "pads": tuple(b for b, _ in padw) + tuple(e for _, e in padw)})
    if len(ins) > 2 and ins[2] is not None:
        b = _v(imp, ins, names, 2)
        y = ops.add(y, ops.reshape(b, (1, w.shape[0]) + (1,) * nd))
    return y


def _pool(kind):
    def conv(imp, st, ins, names):
        at = st.attrs
        x = _v(imp, ins, names, 0)
        if len(x.shape) == 3:  # 1-D (MaxPool1d, AvgPool1d): the 2-D pool on a unit height
            y = conv(imp, lowerings._Attrs(st, lowerings.as_2d(at)),
                     [lowerings.unit_height(x)] + list(ins[1:]), names)
            return lowerings.drop_height(y)
        nd = len(x.shape) - 2  # 2, or 3 (MaxPool3d, AvgPool3d): the 3-D op, the same order
        if nd not in (2, 3) or any(d != 1 for d in (at.get("dilations") or [1] * nd)):
            raise OnnxError("only undilated 1-D, 2-D and 3-D pools have a tape form",
                            node=imp.label)
        k = list(at["kernel_shape"])
        strides = list(at.get("strides") or [1] * nd)
        padw = pads_for(x.shape[2:], k, strides, [1] * nd, at.get("pads"),
                        at.get("auto_pad", "NOTSET"))
        attrs = {"kernel": tuple(k), "strides": tuple(strides),
                 "pads": tuple(b for b, _ in padw) + tuple(e for _, e in padw),
                 "ceil_mode": int(at.get("ceil_mode", 0))}
        if kind == "avg":
            attrs["count_include_pad"] = int(at.get("count_include_pad", 0))
        return _nn_record(imp.tape, f"{kind}pool{nd}d", [x], attrs)
    return conv


def _channel(imp, v, name, c, nd):
    return ops.reshape(imp.var(v, name), (1, c) + (1,) * (nd - 2))


def _batchnorm(imp, st, ins, names):
    if st.attrs.get("training_mode", 0):
        return lowerings.batchnorm_training(imp, st, ins, names)
    x = _v(imp, ins, names, 0)
    c, nd = x.shape[1], len(x.shape)
    scale, bias = (_channel(imp, ins[i], names[i], c, nd) for i in (1, 2))
    stats = [imp.static(ins[i], "running mean/var") for i in (3, 4)]
    if imp.calibrate is not None:  # running statistics := this batch's (--reinit)
        xv = x.value
        axes = (0,) + tuple(range(2, nd))
        stats = [np.mean(xv, axes).astype(stats[0].dtype), np.var(xv, axes).astype(
            stats[1].dtype)]
        imp.calibrate.update({names[3]: stats[0], names[4]: stats[1]})
    # running statistics are data, not trainable
    mean, var = (ops.reshape(imp.tape.const(s), (1, c) + (1,) * (nd - 2)) for s in stats)
    # (x - mean) / sqrt(var + eps) * scale + bias: the executor's formula, primitive by primitive
    den = ops.sqrt(ops.adds(var, st.attrs.get("epsilon", 1e-5)))
    return ops.add(ops.mul(ops.div(ops.sub(x, mean), den), scale), bias)


def _layernorm(imp, st, ins, names):
    x = _v(imp, ins, names, 0)
    nd = len(x.shape)
    axes = tuple(range(st.attrs.get("axis", -1) % nd, nd))
    scale = _v(imp, ins, names, 1)
    norm = x.shape[axes[0]:]
    wants_stats = any(o for o in st.node.output[1:])
    if not wants_stats and tuple(scale.shape) in (norm, (int(np.prod(norm)),)):
        # the row op (its forward is this composite's, bit for bit; its backward is written
        # once): normalized dims flattened to one row
        flat = int(np.prod(norm))
        xr = x if len(axes) == 1 else ops.reshape(x, x.shape[:axes[0]] + (flat,))
        sr = scale if len(scale.shape) == 1 else ops.reshape(scale, (flat,))
        y = ops.layer_norm(xr, sr, eps=float(st.attrs.get("epsilon", 1e-5)))
        if len(axes) != 1:
            y = ops.reshape(y, x.shape)
        if len(ins) > 2 and ins[2] is not None:
            y = ops.add(y, _v(imp, ins, names, 2))
        return y
    mean = ops.mean(x, axes, keepdims=True)
    d = ops.sub(x, mean)
    var = ops.mean(ops.mul(d, d), axes, keepdims=True)
    one = imp.tape.const(np.ones(()))
    inv = ops.div(one, ops.sqrt(ops.adds(var, st.attrs.get("epsilon", 1e-5))))
    y = ops.mul(ops.mul(d, inv), _v(imp, ins, names, 1))
    if len(ins) > 2 and ins[2] is not None:
        y = ops.add(y, _v(imp, ins, names, 2))
    return y, mean, inv  # the optional outputs Mean and InvStdDev (keepdims shapes)


def _softmax(imp, st, ins, names):
    """Softmax; before opset 13 the axis defaults to 1 and the input is flattened to 2-D there
    (the executor's rule, ``core/onnx/ops/reduce.py``)."""
    x = _v(imp, ins, names, 0)
    ax = st.attrs.get("axis", 1 if st.opset < 13 else -1) % len(x.shape)
    if st.opset >= 13:
        return ops.softmax(x, ax)
    flat = ops.reshape(x, (int(np.prod(x.shape[:ax])), -1))
    return ops.reshape(ops.softmax(flat, -1), x.shape)


def _reduce(fn):
    def conv(imp, st, ins, names):
        x = _v(imp, ins, names, 0)
        axes = st.attrs.get("axes")
        if len(ins) > 1 and ins[1] is not None:
            axes = as_int_list(imp.static(ins[1], "axes"))
        if not axes:
            if st.attrs.get("noop_with_empty_axes", 0):
                return x
            axes = None
        return fn(x, None if axes is None else tuple(a % len(x.shape) for a in axes),
                  keepdims=bool(st.attrs.get("keepdims", 1)))
    return conv


def _reshape_like(imp, st, ins, names):
    """Reshape/Flatten/Squeeze/Unsqueeze: the executor's kernel on a dummy gives the shape."""
    x = _v(imp, ins, names, 0)
    dummy = np.broadcast_to(np.zeros((), np.float32), x.shape)
    shape = st.kernel(_ctx(st, imp), dummy, *ins[1:], **st.attrs).shape
    return ops.reshape(x, shape)


def _transpose(imp, st, ins, names):
    perm = st.attrs.get("perm")
    return ops.transpose(_v(imp, ins, names, 0), tuple(perm) if perm else None)


def _concat(imp, st, ins, names):
    xs = [imp.var(v, n) for v, n in zip(ins, names, strict=True)]
    return ops.concat(xs, st.attrs["axis"] % len(xs[0].shape))


def _slice(imp, st, ins, names):
    x = _v(imp, ins, names, 0)
    if st.opset >= 10:
        starts, ends = (as_int_list(imp.static(ins[i], "slice bounds")) for i in (1, 2))
        axes = as_int_list(ins[3]) if len(ins) > 3 and ins[3] is not None else None
        steps = as_int_list(ins[4]) if len(ins) > 4 and ins[4] is not None else None
    else:
        starts, ends, axes, steps = (st.attrs.get(k) for k in ("starts", "ends", "axes", None))
    axes = axes or list(range(len(starts)))
    if steps and any(s != 1 for s in steps):
        raise OnnxError("Slice with steps other than 1 has no tape form", node=imp.label)
    y = x
    for s, e, a in zip(starts, ends, axes, strict=True):
        a %= len(x.shape)
        lo, hi, _ = slice(s, e).indices(x.shape[a])
        y = ops.slice(y, a, lo, max(lo, hi))
    return y


def _split(imp, st, ins, names):
    x = _v(imp, ins, names, 0)
    dummy = np.broadcast_to(np.zeros((), np.float32), x.shape)
    parts = st.kernel(_ctx(st, imp), dummy, *ins[1:], **st.attrs)
    ax = st.attrs.get("axis", 0) % len(x.shape)
    out, lo = [], 0
    for p in parts:
        out.append(ops.slice(x, ax, lo, lo + p.shape[ax]))
        lo += p.shape[ax]
    return tuple(out)


def _gather(imp, st, ins, names):
    idx = ins[1]
    x = _v(imp, ins, names, 0)
    axis = int(st.attrs.get("axis", 0))
    if isinstance(idx, np.ndarray):
        idx = imp.var(idx, names[1])  # a constant, or this step's (folded from integer inputs)
    elif idx.op != "const":  # a graph input is a const leaf: fine; a computed index is not
        raise OnnxError("Gather indices computed from float values on the tape have no tape "
                        "form (integer inputs and what is computed from them alone fold)",
                        node=imp.label)
    if len(x.shape):
        n = x.shape[axis % len(x.shape)]
        roots = imp.roots.get(names[1], ())
        for root in roots:  # ids from an integer input: a workload draws them in [0, rows)
            imp.index_bounds[root] = min(n, imp.index_bounds.get(root, n))
        vals = np.asarray(idx.value)
        if roots and vals.size and (vals.min() < -n or vals.max() >= n):
            if imp.probe:  # a probe's drawn ids (0..9 into a 2-row token-type table): wrapped,
                idx = imp.tape.const(np.mod(vals, n), name=leaf_name(names[1]))  # drawn again
            else:
                which = ", ".join(f"--input {r}=FILE.npy" for r in sorted(roots))
                raise OnnxError(f"Gather index {names[1]!r} (from integer input "
                                f"{', '.join(repr(r) for r in sorted(roots))}) indexes a table "
                                f"of {n} rows: its values must be in [0, {n}), they span "
                                f"[{vals.min()}, {vals.max()}] (give {which} within it)",
                                node=imp.label)
    return _nn_record(imp.tape, "gather", [x, idx], {"axis": axis})


def _leaky_relu(imp, st, ins, names):
    x = _v(imp, ins, names, 0)
    # relu(x) - alpha*relu(-x): for x < 0 that is -(alpha*(-x)) = alpha*x exactly (rounding is
    # symmetric), so it matches the executor's where(x < 0, alpha*x, x) bit for bit (but -0.0)
    return ops.sub(ops.relu(x), ops.muls(ops.relu(ops.neg(x)), st.attrs.get("alpha", 0.01)))


def _passthrough(imp, st, ins, names):
    return _v(imp, ins, names, 0)


def _sum(imp, st, ins, names):
    # left to right, one add per input: the executor's fold, so the bits agree
    y = _v(imp, ins, names, 0)
    for i in range(1, len(ins)):
        y = ops.add(y, _v(imp, ins, names, i))
    return y


def _lrn(imp, st, ins, names):
    """LRN in primitives (docs/reference-order-nn.md): s = serial sum of the squares over the
    channel window (zero padded); y = x / exp(beta * log(bias + (alpha / size) * s))."""
    at = st.attrs
    x = _v(imp, ins, names, 0)
    size = int(at["size"])
    if len(x.shape) < 3 or size < 1:
        raise OnnxError(f"LRN of shape {x.shape} with size {size} has no tape form",
                        node=imp.label)
    c = x.shape[1]
    sq = ops.mul(x, x)
    lo, hi = (size - 1) // 2, size // 2  # window [c - floor((s-1)/2), c + ceil((s-1)/2)]
    parts = [imp.tape.const(np.zeros((x.shape[0], k) + tuple(x.shape[2:])), name="lrn_pad")
             if k else None for k in (lo, hi)]
    pad = ops.concat([v for v in (parts[0], sq, parts[1]) if v is not None], 1)
    # NOTE: the executor starts from 0 + pad[0]: exact, the squares are never -0.0
    s = ops.slice(pad, 1, 0, c)
    for j in range(1, size):
        s = ops.add(s, ops.slice(pad, 1, j, j + c))
    d = ops.adds(ops.muls(s, at.get("alpha", 1e-4) / size), at.get("bias", 1.0))
    # d ** beta as exp(beta * log(d)) through refmath (d >= bias > 0)
    return ops.div(x, ops.exp(ops.muls(ops.log(d), at.get("beta", 0.75))))


def no_tape_form(op_type: str, opset: int) -> str:
    """The message for an op without a tape form: what it is and the ways out."""
    from onnx import defs

    hint = ""
    try:  # an op the onnx package defines as a function of others: a newer opset may lower it
        schema = defs.get_schema(op_type, opset)
        if schema.has_function or schema.has_context_dependent_function:
            hint = (f"; ONNX defines {op_type} by a function of other ops: a model with that "
                    "function's ops in its place trains (e.g. an exporter that decomposes it)")
    except Exception:  # noqa: BLE001 - a custom domain or unknown op: no schema
        pass
    return (f"op {op_type} has no tape form (the ops that have one: docs/onnx-coverage.md; "
            f"adding one: docs/adding-an-op.md){hint}")


def _table_op(op: str):
    """The converter of an ONNX operator that the op table maps to exactly ``op``."""
    fn = getattr(ops, op, None)
    if fn is None:
        return _record(op)  # an op without a core.ops wrapper (erf)
    return _binary(fn) if ops.REGISTRY[op].arity == 2 else _unary(fn)


CONVERTERS = {
    # the op table's ONNX mapping (OpDef.onnx in core/ops): Add, Sub, ..., Relu, Sigmoid, Erf
    **{o: _table_op(n) for n, d in ops.REGISTRY.items() for o in d.onnx},
    "MatMul": _matmul, "Gemm": _gemm, "Conv": _conv, "MaxPool": _pool("max"),
    "AveragePool": _pool("avg"),
    "GlobalAveragePool": lambda imp, st, ins, names: ops.mean(
        _v(imp, ins, names, 0), tuple(range(2, len(ins[0].shape))), keepdims=True),
    "BatchNormalization": _batchnorm, "LayerNormalization": _layernorm, "Softmax": _softmax,
    "ReduceSum": _reduce(ops.sum), "ReduceMean": _reduce(ops.mean),
    "Reshape": _reshape_like, "Flatten": _reshape_like, "Squeeze": _reshape_like,
    "Unsqueeze": _reshape_like, "Transpose": _transpose, "Concat": _concat, "Slice": _slice,
    "Split": _split, "Gather": _gather, "LeakyRelu": _leaky_relu, "Identity": _passthrough,
    "Dropout": _passthrough, "Sum": _sum, "LRN": _lrn,
    **lowerings.CONVERTERS,  # what the PyTorch exporters emit (Where, Gelu, GRU, ...)
}


def _plain(v: Any) -> Any:
    """An attribute value as JSON-friendly data (tensors and graphs by summary)."""
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, np.ndarray):
        return v.tolist() if v.size <= 16 else f"tensor {v.dtype} {list(v.shape)}"
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return type(v).__name__


def onnx_node_info(st, first: int, stop: int) -> dict:
    """One ONNX node as the Inspector shows it: op type, name, the attributes as written in
    the file (kernel_shape, strides, pads, group, ...) and its input tensor names."""
    attrs = {k: _plain(v) for k, v in sorted(st.attrs.items())}
    return {"name": st.node.name or scope_name(st), "op_type": st.node.op_type,
            "attributes": attrs, "inputs": [n for n in st.node.input if n],
            "outputs": [n for n in st.node.output if n], "first": first, "stop": stop}


def _ctx(st, imp) -> Ctx:
    def run_sub(g, inputs, outer):
        return imp.sess.run_graph(g, inputs, outer, imp.budget)

    return Ctx(st.opset, st.node, REFERENCE, run_sub, imp.env, budget=imp.budget)


def import_to_tape(model: Any, tape, inputs: dict[str, np.ndarray], *,
                   trainable: bool = True, params: dict[str, Any] | None = None,
                   wrt: tuple[str, ...] = (), limits: Limits | None = None,
                   cancel: Any = None, overrides: dict[str, np.ndarray] | None = None,
                   calibrate: dict[str, np.ndarray] | None = None,
                   step_seed: Any = 0, probe: bool = False) -> Imported:
    """Record ``model`` on ``tape`` for ``inputs``; returns outputs, params and every value.

    Training: import once, ``m = tape.mark()``, then per step ``tape.reset_to(m)`` and import
    again with ``params=first.params`` so the same parameters are reused (and updated).
    Initializers named in ``wrt`` become params up front, so nothing that depends on them is
    folded (ONNX's Gradient op differentiates with respect to them). ``limits`` and ``cancel``
    work as for :class:`core.onnx.Session`: every node's output size is checked before it is
    computed or recorded. ``inputs`` may hold Vars already on ``tape`` (a workload's data
    leaves). ``overrides`` replaces constants by name, wherever they come from (an initializer
    or a folded node): ``--reinit``'s fresh batch-norm statistics. Given a dict, ``calibrate``
    makes every BatchNormalization use its input's own per-channel mean and (biased) variance
    instead of the running ones, and collects them by name (``--reinit`` sets them this way).
    ``step_seed`` seeds a training-mode Dropout's masks (``default_rng((step_seed, node))``).
    ``probe``: the inputs were drawn to find ``index_bounds`` (labels out of range are wrapped,
    not refused); import again with inputs drawn within them.
    """
    sess = model if isinstance(model, Session) else Session(model, mode="reference", fold=False,
                                                            limits=limits)
    given = {k: v for k, v in inputs.items() if isinstance(v, Var)}  # already on the tape
    feeds = {k: np.asarray(v) for k, v in inputs.items() if k not in given}
    # a Var computes in the tape's dtype whatever the model declares: only its shape is checked
    declared = {vi.name: vi.type.tensor_type.elem_type for vi in sess.lm.model.graph.input}
    check_inputs(sess.lm, {**feeds, **{
        k: np.broadcast_to(np.zeros((), np_dtype(declared[k]) if declared.get(k) else v.dtype),
                           v.shape) for k, v in given.items()}})
    imp = _Importer(sess, tape, trainable, Budget(limits or sess.limits, cancel))
    imp.params.update(params or {})
    imp.calibrate = calibrate
    imp.step_seed = step_seed
    imp.probe = probe
    env = imp.env
    env.update(sess.graph.inits)
    over = dict(overrides or {})
    env.update({k: v for k, v in over.items() if k in env})
    env.update(given)
    for name, x in feeds.items():
        env[name] = tape.const(x, name=leaf_name(name))
    for name, v in env.items():  # integer step data, kept as integers for folding
        if name in declared and name not in sess.graph.inits and isinstance(v, Var):
            dt = np_dtype(declared[name]) if declared[name] else None
            if dt is not None and dt.kind in "iub":
                imp.int_data[name] = np.asarray(feeds.get(name, v.value)).astype(dt)
                imp.roots[name] = {name}
    for name in wrt:  # differentiated with respect to: a param whatever its shape
        if name not in imp.params:
            imp.params[name] = tape.param(env[name], name=leaf_name(name))
        env[name] = imp.params[name]
    folded = []
    onnx_nodes: list[dict] = []
    steps = (imp.refold if trainable else []) + list(sess.graph.steps)
    read = {n for st in steps for n in st.node.input} | set(sess.output_names)
    for st in steps:
        imp.label = st.label
        names = list(st.node.input)
        split = imp.merges.get((st.node.name, st.node.output[0] if st.node.output else ""))
        if split and trainable:  # ln2.weight, merged into ln1.weight by dynamo's optimizer
            for old, new in split.items():
                if new not in env:
                    env[new] = np.array(env[old])
                imp.weights.add(new)
            names = [split.get(n, n) for n in names]
        ins = [env[n] if n else None for n in names]
        if st.node.op_type in ("Shape", "Size") and ins and not isinstance(ins[0], np.ndarray):
            ins = [np.broadcast_to(np.zeros((), np.float32), ins[0].shape)] + ins[1:]
        from_data = any(n in imp.derived or n in imp.int_data for n in names if n)
        if (imp.int_data and any(n in imp.int_data for n in names if n)
                and not any(n in imp.weights for n in names if n)):
            # an integer-only subgraph (input_ids.view(...), a Shape of the ids): fold it on
            # this step's integers; what it computes is this step's data, not the model's
            ins = [imp.int_data.get(n, v) if n else v for n, v in zip(names, ins, strict=True)]
            if not all(v is None or isinstance(v, np.ndarray) for v in ins):
                ins = [env[n] if n else None for n in names]
        # a weight read by anything but a copy, a view or a Shape is recorded on the tape, so
        # the weight itself trains (folded, a broadcast of it would become a weight of its own)
        op = st.node.op_type
        reads_weight = imp.trainable and op not in WEIGHT_VIEWS + SHAPE_OPS and any(
            (n in imp.weights or n in imp.broadcasts) and is_weight_value(v)
            for n, v in zip(names, ins, strict=True) if n)
        try:
            imp.budget.before(st.node.op_type, ins, st.attrs, st.opset)
            if op in ("If", "Loop", "Scan") and any(isinstance(env.get(n), Var)
                                                    for n in _outer_reads(st.node)):
                raise OnnxError(f"{op} whose body reads a value on the tape has no tape form "
                                "(one that reads only constants folds)", node=st.label)
            if not reads_weight and all(v is None or isinstance(v, np.ndarray) for v in ins):
                out = st.kernel(_ctx(st, imp), *ins, **st.attrs)  # known now: fold
                # NOTE: a kernel may hand back a numpy scalar (Gather of a 0-d index): an array
                out = (tuple(v if v is None else np.asarray(v) for v in out)
                       if isinstance(out, tuple) else np.asarray(out))
                for v in out if isinstance(out, tuple) else (out,):
                    imp.budget.hold(v)
                folded.append(st.label)
                if from_data:
                    imp.derived.update(o for o in st.node.output if o)
                    roots = set().union(*(imp.roots.get(n, ()) for n in names if n))
                    imp.roots.update({o: roots for o in st.node.output if o})
                if op in WEIGHT_VIEWS and names and names[0] in imp.weights:
                    imp.weights.update(o for o in st.node.output if o)
                if over:
                    out = tuple(over.get(o, v) for o, v in zip(
                        st.node.output, out if isinstance(out, tuple) else (out,), strict=False))
            else:
                conv = CONVERTERS.get(st.node.op_type)
                if conv is None:
                    raise OnnxError(no_tape_form(st.node.op_type, st.opset), node=st.label)
                first_id = len(tape)
                cost = Budget.cost(st.node.op_type, ins, st.attrs, st.opset)
                if cost is not None and cost[0]:  # its output on the tape, before it is made
                    imp.charge_tape(cost[0] * np.dtype(tape.dtype).itemsize)
                with tape.scope(scope_name(st)):
                    out = conv(imp, st, ins, names)
                given = len(out) if isinstance(out, tuple) else 1
                lost = [o for o in st.node.output[given:] if o in read]
                if lost:  # an optional output the converter does not make (MaxPool's Indices)
                    raise OnnxError(f"output {list(st.node.output).index(lost[0])} of "
                                    f"{st.node.op_type} ({shown(lost[0])!r}) has no tape form "
                                    f"(its tape form gives the first {given})", node=st.label)
                onnx_nodes.append(onnx_node_info(st, first_id, len(tape)))
                imp.check()
                imp.charge_tape(sum(tape.value(i).nbytes for i in range(first_id, len(tape))),
                                after=True)
        except OnnxError as exc:
            if exc.node is None:
                exc.node = st.label
            raise exc.with_file(sess.label) from None
        except Exception as exc:
            raise OnnxError(f"{type(exc).__name__}: {exc}", file=sess.label,
                            node=st.label) from None
        if not isinstance(out, tuple):
            out = (out,)
        for n, v in zip(st.node.output, out, strict=False):
            if n:
                env[n] = v
    outputs = {n: imp.var(env[n], n) for n in sess.output_names}
    return Imported(outputs, imp.params, dict(env), folded, onnx_nodes, imp.data_leaves,
                    imp.running, imp.index_bounds)
