"""Tape forms of the ops PyTorch's exporters emit by default, as lowerings onto tape ops.

Each converter records existing tape ops in a written order (docs/onnx-coverage.md, "lowered";
docs/reference-order-nn.md gives each order), so every device already has its kernels and the
replay is bit for bit: Where (masked_fill), Gelu (none and tanh), Pow, HardSigmoid, HardSwish,
LogSoftmax (its row op), Expand (``x * ones``), Reciprocal (``1 / x``), ConvTranspose (the
tape's conv_transpose2d, conv2d's backward-data), Resize and Upsample (gathers and a weighted sum
per axis), InstanceNormalization (LayerNormalization's composite over the spatial axes), Cast and
CastLike (the value itself: the tape's one type), SplitToSequence / SequenceAt /
ConcatFromSequence (a list of the tape's slices, an element, a concat),
SoftmaxCrossEntropyLoss, NegativeLogLikelihoodLoss, Dropout in training mode (a seeded mask per
step), BatchNormalization in training mode (batch statistics; running statistics updated as the
spec says), and RNN / GRU / LSTM unrolled over time. A converter is
``f(imp, step, ins, names) -> Var or tuple`` (core/onnx/importer.py).
"""

from __future__ import annotations

import math

import numpy as np

from tapescope.core import ops
from tapescope.core.onnx.errors import OnnxError
from tapescope.core.tape import Var


def _v(imp, ins, names, i):
    return imp.var(ins[i], names[i])


def _derived(imp, names) -> bool:
    return any(n in imp.derived for n in names if n)


def _scalar_const(v) -> float | None:
    """The one value of a constant whose elements are all equal (a Pow exponent), else None."""
    if isinstance(v, np.ndarray) and v.size >= 1 and v.dtype.kind in "fiu":
        flat = v.reshape(-1)
        if np.all(flat == flat[0]):
            return float(flat[0])
    return None


# ---- Where: keep(a, c) + keep(b, !c) -------------------------------------------------------

def where(imp, st, ins, names):
    """ONNX Where with a condition known at import (a constant, or folded from integer
    inputs): ``keep(a, c) + keep(b, !c)``, where keep is ``m != 0 ? a : -0.0``, so each element
    is ``a`` or ``b`` bit for bit (``x + -0.0 == x``, -0.0 and NaN included)."""
    c, a, b = ins
    derived = _derived(imp, names)
    if isinstance(c, Var) and c.op == "const":  # a condition input: this step's data
        c, derived = imp.int_data.get(names[0], np.asarray(c.value) != 0), True
    if not isinstance(c, np.ndarray):
        raise OnnxError("Where with a condition computed on the tape has no tape form (a "
                        "constant condition, or one computed from integer inputs, has: "
                        "docs/onnx-coverage.md)", node=imp.label)
    cond = np.asarray(c).astype(bool)
    shape = np.broadcast_shapes(cond.shape, np.shape(a), np.shape(b))
    parts = []
    for x, m, name in ((a, cond, names[1]), (b, ~cond, names[2])):
        if isinstance(x, np.ndarray) and name not in imp.weights:
            # a constant branch (masked_fill's -inf): its kept elements, -0.0 elsewhere
            parts.append(imp.const(np.broadcast_to(np.where(m, x, -0.0), shape),
                                   f"{name}_where", derived or name in imp.derived))
        else:
            parts.append(ops.keep(imp.var(x, name),
                                  imp.const(m.astype(np.float64), "where_mask", derived)))
    return ops.add(parts[0], parts[1])


# ---- Gelu, HardSigmoid, HardSwish, Pow -----------------------------------------------------

def gelu(imp, st, ins, names):
    """The executor's order: none: ``(0.5 * x) * (1 + erf(x / T(sqrt 2)))``; tanh:
    ``(0.5 * x) * (1 + tanh(T(sqrt(2/pi)) * (x + ((T(0.044715) * x) * x) * x)))``."""
    x = _v(imp, ins, names, 0)
    half = ops.muls(x, 0.5)
    if st.attrs.get("approximate", "none") == "tanh":
        cube = ops.mul(ops.mul(ops.muls(x, 0.044715), x), x)
        inner = ops.muls(ops.add(x, cube), math.sqrt(2 / math.pi))
        return ops.mul(half, ops.adds(ops.tanh(inner), 1.0))
    sqrt2 = imp.tape.const(np.array(math.sqrt(2.0)), name="sqrt2")
    return ops.mul(half, ops.adds(ops.erf(ops.div(x, sqrt2)), 1.0))


def hard_sigmoid(imp, st, ins, names):
    """``clip01(x * T(alpha) + T(beta))``: the executor's np.clip(x*alpha + beta, 0, 1)."""
    x = _v(imp, ins, names, 0)
    return ops.clip01(ops.adds(ops.muls(x, st.attrs.get("alpha", 0.2)),
                               st.attrs.get("beta", 0.5)))


def hard_swish(imp, st, ins, names):
    """``x * clip01(x * T(1/6) + T(0.5))``: the executor's order."""
    x = _v(imp, ins, names, 0)
    return ops.mul(x, ops.clip01(ops.adds(ops.muls(x, 1 / 6), 0.5)))


def abs_(imp, st, ins, names):
    """``relu(x) + relu(-x)``: one term is +0.0, so the sum is |x| exactly (NaN stays NaN)."""
    x = _v(imp, ins, names, 0)
    return ops.add(ops.relu(x), ops.relu(ops.neg(x)))


def pow_(imp, st, ins, names):
    """Pow with a constant exponent e: 1 -> x, 2 -> x*x, 0.5 -> sqrt(x), -1 -> 1/x, 0 -> 1,
    another integer n (|n| <= 8) -> x*x*...*x left to right (1/that for n < 0); otherwise, and
    for a computed exponent, exp(e * log(x)) through refmath (NaN for x < 0, as pow is for a
    non-integer e). x*x, sqrt and 1/x are what numpy's pow computes for 2, 0.5 and -1 (the
    executor agrees bit for bit there); the other forms round more than once."""
    x = _v(imp, ins, names, 0)
    e = _scalar_const(ins[1]) if names[1] not in imp.weights else None
    if e is None:
        return ops.exp(ops.mul(_v(imp, ins, names, 1), ops.log(x)))
    if not isinstance(x, Var):
        raise OnnxError("Pow of a constant base has no tape form", node=imp.label)
    shape = np.broadcast_shapes(x.shape, np.shape(ins[1]))
    if x.shape != shape:
        x = ops.mul(x, imp.tape.const(np.ones(shape)))  # the exponent's broadcast, exact
    if e == 1.0:
        return x
    if e == 0.0:
        return imp.tape.const(np.ones(shape), name="pow0")
    if e == 2.0:
        return ops.mul(x, x)
    if e == 0.5:
        return ops.sqrt(x)
    one = imp.tape.const(np.array(1.0), name="one")
    if e == -1.0:
        return ops.div(one, x)
    if e == int(e) and abs(e) <= 8:
        y = x
        for _ in range(int(abs(e)) - 1):
            y = ops.mul(y, x)
        return y if e > 0 else ops.div(one, y)
    return ops.exp(ops.muls(ops.log(x), e))


# ---- Expand: x * ones(shape) ----------------------------------------------------------------

def expand(imp, st, ins, names):
    """ONNX Expand (``cls.expand(B, -1, -1)``, GQA's ``repeat_kv``) as ``x * ones(out)``:
    every element is x's bit for bit (``x * 1 == x``, -0.0, inf and NaN included) and the
    gradient is mul's, the broadcast axes summed by ``unbroadcast`` (serial, row-major), so a
    weight broadcast into a batch trains as the one weight it is."""
    x = _v(imp, ins, names, 0)
    shape = tuple(int(d) for d in np.asarray(imp.static(ins[1], "Expand's shape")).reshape(-1))
    try:
        out = np.broadcast_shapes(tuple(x.shape), shape)
    except ValueError:
        raise OnnxError(f"Expand of shape {tuple(x.shape)} to {shape}: not broadcastable",
                        node=imp.label) from None
    if out == tuple(x.shape):
        return ops.mul(x, imp.tape.const(np.ones(()), name="ones"))  # a node of its own
    return ops.mul(x, imp.tape.const(np.ones(out), name="ones"))


# ---- sequences of slices: SplitToSequence, SequenceAt, ConcatFromSequence --------------------

def split_to_sequence(imp, st, ins, names):
    """SplitToSequence of a tape value (TorchScript's ``tensor_split``, ``unbind``) with a
    constant split: a Python list of the tape's slices (``keepdims=0`` without a split: each
    reshaped without the axis), the executor's kernel on a stand-in giving the parts' sizes;
    a sequence is never a tape value itself, only its elements are."""
    x = _v(imp, ins, names, 0)
    split = ins[1] if len(ins) > 1 else None
    if isinstance(split, Var):
        raise OnnxError("SplitToSequence with a split computed on the tape has no tape form",
                        node=imp.label)
    dummy = np.broadcast_to(np.zeros((), np.float32), x.shape)
    parts = st.kernel(None, dummy, *ins[1:], **st.attrs)
    ax = st.attrs.get("axis", 0) % len(x.shape)
    out, lo = [], 0
    for p in parts:
        n = p.shape[ax] if p.ndim == len(x.shape) else 1
        piece = ops.slice(x, ax, lo, lo + n)
        out.append(piece if p.shape == piece.shape else ops.reshape(piece, p.shape))
        lo += n
    return out


def sequence_at(imp, st, ins, names):
    """SequenceAt of a sequence of tape values at a constant position: that element."""
    seq = ins[0]
    if not isinstance(seq, list):
        raise OnnxError("SequenceAt of a value that is not a sequence", node=imp.label)
    pos = int(np.asarray(imp.static(ins[1], "SequenceAt's position")).reshape(-1)[0])
    if not -len(seq) <= pos < len(seq):
        raise OnnxError(f"SequenceAt position {pos} of a sequence of {len(seq)}",
                        node=imp.label)
    return imp.var(seq[pos], names[0])


def concat_from_sequence(imp, st, ins, names):
    """ConcatFromSequence of tape values: Concat (``new_axis=1``: each given the axis first)."""
    seq = [imp.var(v, names[0]) for v in ins[0]]
    axis = int(st.attrs.get("axis", 0))
    if st.attrs.get("new_axis", 0):
        rank = len(seq[0].shape) + 1
        axis %= rank
        seq = [ops.reshape(v, v.shape[:axis] + (1,) + v.shape[axis:]) for v in seq]
        return ops.concat(seq, axis)
    return ops.concat(seq, axis % len(seq[0].shape))


# ---- 1-D windows: the 2-D op with a unit height -------------------------------------------

def as_2d(at: dict) -> dict:
    """A 1-D Conv / ConvTranspose / pool's attributes for its 2-D op on ``[N, C, 1, L]``: a
    unit height in front of every per-axis attribute (pads ``[b, e]`` -> ``[0, b, 0, e]``).
    The 2-D op over a height of 1 runs the same chains as the 1-D one: its taps are (c, 0, k),
    row-major, so the executor's 1-D order bit for bit."""
    out = dict(at)
    for k, unit in (("kernel_shape", 1), ("strides", 1), ("dilations", 1),
                    ("output_padding", 0)):
        if at.get(k):
            out[k] = [unit, *list(at[k])]
    if at.get("pads"):
        b, e = list(at["pads"])
        out["pads"] = [0, b, 0, e]
    return out


def unit_height(v):
    """``[N, C, L]`` -> ``[N, C, 1, L]`` (a weight ``[M, C, k]`` -> ``[M, C, 1, k]``)."""
    return ops.reshape(v, tuple(v.shape[:2]) + (1,) + tuple(v.shape[2:]))


def drop_height(v):
    return ops.reshape(v, tuple(v.shape[:2]) + tuple(v.shape[3:]))


# ---- ConvTranspose: the tape's conv_transpose2d (conv2d's backward-data) -------------------

class _Attrs:
    """A step with other attributes (the 1-D forms' 2-D ones)."""

    def __init__(self, st, attrs: dict) -> None:
        self.node, self.opset, self.label, self.attrs = st.node, st.opset, st.label, attrs


def conv_transpose(imp, st, ins, names):
    """ConvTranspose (2-D: what nn.ConvTranspose2d exports; strides, pads, dilations,
    output_padding, group; 1-D on a unit height; 3-D as ``conv_transpose3d``) as the tape's
    ``conv_transpose2d`` (conv2d's backward-data: the executor's order bit for bit), then the
    bias as a broadcasting ``add``. ``output_shape`` and ``auto_pad`` (no exporter of PyTorch
    writes them) are refused, naming them."""
    at = st.attrs
    x, w = _v(imp, ins, names, 0), _v(imp, ins, names, 1)
    if len(x.shape) == 3:  # 1-D (ConvTranspose1d): the 2-D op with a unit height
        y = conv_transpose(imp, _Attrs(st, as_2d(at)), [unit_height(x), unit_height(w)]
                           + list(ins[2:]), names)
        return drop_height(y)
    if len(x.shape) not in (4, 5):
        raise OnnxError(f"ConvTranspose of a {len(x.shape) - 2}-D input has no tape form "
                        "(1-D, 2-D and 3-D have)", node=imp.label)
    nd = len(x.shape) - 2  # 3 (ConvTranspose3d): conv_transpose3d, the same order in 3-D
    for name, dflt in (("output_shape", None), ("auto_pad", "NOTSET")):
        if at.get(name, dflt) not in (dflt, None, [], ()):
            raise OnnxError(f"ConvTranspose with {name} {at[name]!r} has no tape form (give "
                            "pads and output_padding: what ConvTranspose2d exports)",
                            node=imp.label)
    if at.get("kernel_shape") and list(at["kernel_shape"]) != list(w.shape[2:]):
        raise OnnxError(f"ConvTranspose kernel_shape {list(at['kernel_shape'])} differs from "
                        f"its weight's {list(w.shape[2:])}", node=imp.label)
    p = list(at.get("pads") or [0] * (2 * nd))
    y = imp.tape.record(f"conv_transpose{nd}d", [x, w], {
        "strides": tuple(at.get("strides") or (1,) * nd), "pads": tuple(int(v) for v in p),
        "dilations": tuple(at.get("dilations") or (1,) * nd),
        "group": int(at.get("group", 1)),
        "output_padding": tuple(at.get("output_padding") or (0,) * nd)})
    if len(ins) > 2 and ins[2] is not None:
        m = w.shape[1] * int(at.get("group", 1))
        y = ops.add(y, ops.reshape(_v(imp, ins, names, 2), (1, m) + (1,) * nd))
    return y


# ---- Resize / Upsample: gathers and a weighted sum per axis ----------------------------------

def resize(imp, st, ins, names):
    """Resize (and Upsample: what ``F.interpolate`` exports) in the executor's order, axis by
    resized axis (core/onnx/ops/resize.py ``resize_taps``): nearest is one ``gather`` of the
    chosen rows; linear and cubic are ``gather(x, idx_0) * T(w_0)``, then ``+ gather(x, idx_t)
    * T(w_t)`` per further tap, the indices and weights constants of the shapes (float64,
    rounded once to the tape's type). Every coordinate_transformation_mode and nearest_mode
    but tf_crop_and_resize (its extrapolation) imports; antialias is refused."""
    from tapescope.core.onnx.ops.resize import resize_args, resize_taps, upsample_args

    x = _v(imp, ins, names, 0)
    if st.node.op_type == "Upsample":
        sc = ins[1] if len(ins) > 1 else None
        args = upsample_args(imp.static(sc, "Upsample's scales"), **st.attrs)
    else:
        extra = [imp.static(ins[i] if len(ins) > i else None, f"Resize's {what}")
                 for i, what in ((1, "roi"), (2, "scales"), (3, "sizes"))]
        args = resize_args(st.opset, *extra, **st.attrs)
    scales, sizes, roi, axes, mode, ctm, rule, a, excl, anti, _, policy = args
    if anti:
        raise OnnxError("Resize with antialias 1 has no tape form (antialias 0 has)",
                        node=imp.label)
    if ctm == "tf_crop_and_resize":
        raise OnnxError("Resize with coordinate_transformation_mode 'tf_crop_and_resize' has no "
                        "tape form (its extrapolated border is not a gather)", node=imp.label)
    try:
        plan = resize_taps(tuple(x.shape), scales, sizes, roi, axes, mode, ctm, rule, a, excl,
                           anti, policy)
    except ValueError as e:  # an unknown mode, coordinate_transformation_mode or nearest_mode
        raise OnnxError(f"Resize: {e}", node=imp.label) from None
    def take(v, ax, rows):
        return imp.tape.record("gather", [v, imp.tape.const(rows.astype(np.float64),
                                                            name="resize_idx")], {"axis": ax})

    y = x
    for ax, idx, w, _ in plan:
        if w is None:
            y = take(y, ax, idx[:, 0])
            continue
        shp = (-1,) + (1,) * (len(x.shape) - ax - 1)
        acc = None
        for t in range(idx.shape[1]):
            term = ops.mul(take(y, ax, idx[:, t]),
                           imp.tape.const(w[:, t].reshape(shp), name="resize_w"))
            acc = term if acc is None else ops.add(acc, term)
        y = acc
    if y is x:
        return ops.mul(x, imp.tape.const(np.ones(()), name="ones"))  # a node of its own
    return y


# ---- InstanceNormalization: LayerNormalization's composite per (n, c) ----------------------

def instance_norm(imp, st, ins, names):
    """InstanceNormalization (what GroupNorm exports to, between two Reshapes) in the
    executor's order over the spatial axes: ``m = mean(x)``; ``d = x - m``; ``v = mean(d *
    d)``; ``inv = 1 / sqrt(v + eps)``; ``y = (d * inv) * scale + bias``, scale and bias per
    channel (reshaped to ``[1, C, 1, ...]``)."""
    x = _v(imp, ins, names, 0)
    nd = len(x.shape)
    if nd < 3:
        raise OnnxError(f"InstanceNormalization of a {nd}-D input has no tape form (it takes "
                        "[N, C, D1, ...])", node=imp.label)
    axes = tuple(range(2, nd))
    cshape = (1, x.shape[1]) + (1,) * (nd - 2)
    scale, bias = (ops.reshape(_v(imp, ins, names, i), cshape) for i in (1, 2))
    mean = ops.mean(x, axes, keepdims=True)
    d = ops.sub(x, mean)
    var = ops.mean(ops.mul(d, d), axes, keepdims=True)
    one = imp.tape.const(np.ones(()), name="one")
    inv = ops.div(one, ops.sqrt(ops.adds(var, st.attrs.get("epsilon", 1e-5))))
    return ops.add(ops.mul(ops.mul(d, inv), scale), bias)


# ---- Cast, CastLike: the tape's one type ----------------------------------------------------

_RANK = {"float16": 1, "bfloat16": 1, "float32": 2, "float64": 3}


def model_precision(graph) -> str | None:
    """The model's floating type (``core.onnx.workload.model_dtype``'s rule, on a loaded
    graph): its first floating graph input's, else its first floating initializer's."""
    names = {1: "float32", 11: "float64", 10: "float16", 16: "bfloat16"}
    inits = {t.name for t in graph.initializer}
    for vi in graph.input:
        if vi.name not in inits and vi.type.tensor_type.elem_type in names:
            return names[vi.type.tensor_type.elem_type]
    return next((names[t.data_type] for t in graph.initializer if t.data_type in names), None)


def cast(imp, st, ins, names):
    """Cast / CastLike of a tape value to a floating type records nothing: the tape holds
    every value in its one type (the model's, or ``--dtype``'s), so a cast to that type
    (dynamo's ``optimize=False`` casts, a function body's ``stash_type`` cast) is the value
    itself, and in a model run at another precision than its own (``--dtype float32`` on an
    fp16 export) so is every cast between floating types: the whole model runs in the tape's.
    A cast to another type inside a model run at its own precision (float32 -> float16 in a
    float32 model, an fp16 export's casts up to float32 around a softmax in a half episode)
    would change the precision where the tape does not: refused, naming the types and the
    ``--dtype`` that runs the model in one. A cast to an integer type has no tape form."""
    from tapescope.core.onnx.loader import np_dtype

    if isinstance(ins[0], np.ndarray):  # CastLike(constant, tape value): a constant of its type
        return np.asarray(ins[0]).astype(np.dtype(imp.tape.dtype))
    x = _v(imp, ins, names, 0)
    if st.node.op_type == "CastLike":
        like = ins[1]
        target = np.dtype(like.dtype) if isinstance(like, np.ndarray) else np.dtype(
            imp.tape.dtype)
    else:
        target = np_dtype(int(st.attrs["to"]))
    tape_t = np.dtype(imp.tape.dtype)
    if target.name not in _RANK:
        raise OnnxError(f"{st.node.op_type} of a tape value to {target.name} has no tape form "
                        "(to a floating type has)", node=imp.label)
    own = model_precision(imp.sess.lm.model.graph)
    if target != tape_t and own == tape_t.name:
        raise OnnxError(f"{st.node.op_type} from {tape_t.name} to {target.name} inside a "
                        f"{own} model has no tape form: the tape holds every value in one type "
                        f"(--dtype {target.name} runs the whole model in {target.name})",
                        node=imp.label)
    return x


# ---- Reciprocal: 1 / x ---------------------------------------------------------------------

def reciprocal(imp, st, ins, names):
    """ONNX Reciprocal (HF RMSNorm's ``torch.rsqrt`` exports Sqrt then Reciprocal) as
    ``div(1, x)``: the executor's ``1 / x`` bit for bit (one correctly rounded division), and
    div's written backward (``gb = unb(-((g*y)/b))``)."""
    return ops.div(imp.tape.const(np.ones(()), name="one"), _v(imp, ins, names, 0))


# ---- LogSoftmax: the tape's log_softmax row op ------------------------------------------------

def log_softmax(imp, st, ins, names):
    """LogSoftmax as the tape's ``log_softmax`` (the executor's order: d = x - max;
    d - log(serial_sum(exp(d)))); before opset 13 over the input flattened to 2-D at axis."""
    x = _v(imp, ins, names, 0)
    ax = st.attrs.get("axis", 1 if st.opset < 13 else -1) % len(x.shape)
    if st.opset >= 13:
        return ops.log_softmax(x, ax)
    flat = ops.reshape(x, (int(np.prod(x.shape[:ax])), -1))
    return ops.reshape(ops.log_softmax(flat, -1), x.shape)


# ---- losses ---------------------------------------------------------------------------------

def _labels(imp, st, ins, names, logits_shape):
    """The labels as a const Var [N, d1, ...], checked against ignore_index."""
    lab = ins[1]
    if len(ins) > 2 and ins[2] is not None:
        raise OnnxError(f"{st.node.op_type} with class weights has no tape form",
                        node=imp.label)
    vals = lab.value if isinstance(lab, Var) else np.asarray(lab)
    c = int(logits_shape[-1])
    roots = imp.roots.get(names[1], ())
    for root in roots:  # labels from an integer input: a workload draws them in [0, classes)
        imp.index_bounds[root] = min(c, imp.index_bounds.get(root, c))
    if imp.probe and roots and np.any((np.asarray(vals) < 0) | (np.asarray(vals) >= c)):
        lab = vals = np.mod(np.asarray(vals), c)  # a probe's drawn labels (drawn again after)
    ign = st.attrs.get("ignore_index")
    if ign is not None and np.any(np.asarray(vals) == ign):
        raise OnnxError(f"{st.node.op_type}: a label equals ignore_index {ign}; the tape's "
                        "mean is over every label (give labels in [0, classes))",
                        node=imp.label)
    if isinstance(lab, Var):
        if lab.op != "const":
            raise OnnxError(f"{st.node.op_type} labels computed on the tape have no tape form",
                            node=imp.label)
        return lab
    return imp.var(np.asarray(lab).astype(np.float64), names[1])


def _classes_last(x: Var) -> Var:
    """[N, C, d1, ...] -> [N, d1, ..., C] (transpose; a no-op for [N, C])."""
    nd = len(x.shape)
    return x if nd == 2 else ops.transpose(x, (0,) + tuple(range(2, nd)) + (1,))


def softmax_ce(imp, st, ins, names):
    """SoftmaxCrossEntropyLoss, reduction mean: the tape's cross_entropy over the classes
    axis moved last (its order is the executor's: log(s) - z[t], serial sum, / R)."""
    red = st.attrs.get("reduction", "mean")
    if red != "mean":
        raise OnnxError(f"SoftmaxCrossEntropyLoss with reduction {red!r} has no tape form "
                        "(mean has)", node=imp.label)
    if len(st.node.output) > 1 and st.node.output[1]:
        raise OnnxError("SoftmaxCrossEntropyLoss's log_prob output has no tape form",
                        node=imp.label)
    x = _classes_last(_v(imp, ins, names, 0))
    return ops.cross_entropy(x, _labels(imp, st, ins, names, x.shape))


def nll_loss(imp, st, ins, names):
    """NegativeLogLikelihoodLoss, mean: ``mean(-(serial_sum over classes of keep(x, onehot)))``
    — the picked log-probability exactly (the other classes add -0.0), then the executor's
    serial sum / N."""
    red = st.attrs.get("reduction", "mean")
    x = _classes_last(_v(imp, ins, names, 0))
    lab = _labels(imp, st, ins, names, x.shape)
    c = x.shape[-1]
    t = np.asarray(lab.value).astype(np.int64)
    onehot = (t[..., None] == np.arange(c)).astype(np.float64)
    # the one-hot is this step's data when the labels are (an input, or folded from one)
    per_step = isinstance(ins[1], Var) or names[1] in imp.derived
    picked = ops.sum(ops.keep(x, imp.const(onehot, "onehot", per_step)), axis=len(x.shape) - 1)
    nll = ops.neg(picked)
    if red == "none":
        return nll
    return ops.sum(nll) if red == "sum" else ops.mean(nll)


# ---- training mode: Dropout, BatchNormalization ------------------------------------------

def dropout(imp, st, ins, names):
    """Inference (or ratio 0): the identity. Training: ``y = x * m`` with ``m = keep ?
    T(1/(1-ratio)) : +0.0`` and ``keep = u >= ratio``, u uniform from
    ``default_rng((step_seed, node index))``: a new mask every step, a data leaf of the step
    (the device replays it)."""
    x = _v(imp, ins, names, 0)
    ratio = st.attrs.get("ratio", 0.5)
    if len(ins) > 1 and ins[1] is not None:
        ratio = float(np.asarray(imp.static(ins[1], "Dropout's ratio")))
    train = False  # before opset 12 Dropout is inference-only in ONNX's semantics
    if len(ins) > 2 and ins[2] is not None:
        train = bool(np.asarray(imp.static(ins[2], "Dropout's training_mode")))
    want_mask = len(st.node.output) > 1 and bool(st.node.output[1])
    if not train or ratio == 0.0:
        return (x, np.ones(x.shape, bool)) if want_mask else x
    if not 0.0 <= ratio < 1.0:
        raise OnnxError(f"Dropout ratio {ratio} is outside [0, 1)", node=imp.label)
    index = int(st.label.split()[1]) if st.label.startswith("node ") else len(imp.masks)
    rng = np.random.default_rng((*np.atleast_1d(imp.step_seed).tolist(), index))
    keep = rng.random(x.shape) >= ratio
    m = np.where(keep, 1.0 / (1.0 - ratio), 0.0)
    imp.masks[st.node.output[0]] = keep
    y = ops.mul(x, imp.const(m, f"{st.node.output[0]}_mask", derived=True))
    if want_mask:  # the mask output is this step's too, wherever it is read
        imp.derived.add(st.node.output[1])
        return y, keep
    return y


def batchnorm_training(imp, st, ins, names):
    """BatchNormalization, training_mode=1: ``mean = mean(x)`` and ``var = mean((x - mean)^2)``
    over (N, spatial) (the population variance, as the spec's reference); ``y = ((x - mean) /
    sqrt(var + eps)) * scale + bias``, primitive by primitive. The running statistics are
    updated as the spec says, ``r * momentum + batch * (1 - momentum)``, on the host; they are
    the node's 2nd and 3rd outputs and the next step's inputs (OnnxWorkload carries them)."""
    x = _v(imp, ins, names, 0)
    nd = len(x.shape)
    c = x.shape[1]
    axes = (0,) + tuple(range(2, nd))
    scale, bias = (ops.reshape(imp.var(ins[i], names[i]), (1, c) + (1,) * (nd - 2))
                   for i in (1, 2))
    mean = ops.mean(x, axes, keepdims=True)
    d = ops.sub(x, mean)
    var = ops.mean(ops.mul(d, d), axes, keepdims=True)
    den = ops.sqrt(ops.adds(var, st.attrs.get("epsilon", 1e-5)))
    y = ops.add(ops.mul(ops.div(d, den), scale), bias)
    mom = float(st.attrs.get("momentum", 0.9))
    outs = [y]
    for k, cur in ((3, mean), (4, var)):
        old = imp.static(ins[k], "running mean/var")
        t = old.dtype.type
        new = (old * t(mom) + np.asarray(cur.value).reshape(-1).astype(old.dtype)
               * t(1.0 - mom)).astype(old.dtype)
        imp.running[names[k]] = new
        outs.append(imp.const(new, f"{names[k]}_updated", derived=True))
    return tuple(outs)


# ---- recurrent layers, unrolled over time --------------------------------------------------

_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
_DEFAULT_ACTS = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}


def _act(name: str):
    f = {"sigmoid": ops.sigmoid, "tanh": ops.tanh, "relu": ops.relu}.get(name.lower())
    if f is None:
        raise KeyError(name)
    return f


def _one_minus(z: Var) -> Var:
    return ops.adds(ops.neg(z), 1.0)  # -z + 1 is the one rounding of 1 - z


def recurrent(imp, st, ins, names):
    """RNN / GRU / LSTM unrolled over the sequence, one direction after the other
    (docs/reference-order-nn.md): per direction, ``xw = X @ W^T + Wb`` for every step at
    once (rows are independent: each row is the serial product of its own step), then per
    step ``hr = h @ R^T`` and the gates in the executor's order:

    - RNN: ``h = f((xw + hr) + Rb)``
    - GRU: ``z = s((xw_z + hr_z) + Rb_z)``, ``r = s((xw_r + hr_r) + Rb_r)``,
      ``n = t(xw_n + r * (hr_n + Rb_n))`` (linear_before_reset, what PyTorch exports) or
      ``t((xw_n + (r * h) @ R_n^T) + Rb_n)``; ``h = (1 - z) * n + z * h``
    - LSTM (gates i, o, f, c): ``g = (xw + hr) + Rb``; ``i = s(g_i [+ P_i * c])``,
      ``f = s(g_f [+ P_f * c])``, ``c~ = t(g_c)``, ``c = f * c + i * c~``,
      ``o = s(g_o [+ P_o * c])``, ``h = o * t(c)``.
    """
    kind = st.node.op_type
    at = st.attrs
    x = _v(imp, ins, names, 0)
    if at.get("layout", 0):
        x = ops.transpose(x, (1, 0, 2))
    for i, what in ((4, "sequence_lens"),):
        if len(ins) > i and ins[i] is not None:
            lens = imp.static(ins[i], what)
            if np.any(np.asarray(lens) != x.shape[0]):
                raise OnnxError(f"{kind} with sequence_lens shorter than the sequence has no "
                                "tape form", node=imp.label)
    if at.get("clip") is not None:
        raise OnnxError(f"{kind} with clip has no tape form", node=imp.label)
    if kind == "LSTM" and at.get("input_forget", 0):
        raise OnnxError("LSTM with input_forget has no tape form", node=imp.label)
    seq, batch, n_in = x.shape
    w, r = _v(imp, ins, names, 1), _v(imp, ins, names, 2)
    ndir, gh, _ = w.shape
    hsz = r.shape[-1]
    gates = _GATES[kind]
    acts = at.get("activations") or _DEFAULT_ACTS[kind] * ndir
    try:
        fs = [[_act(a) for a in acts[d * len(_DEFAULT_ACTS[kind]):
                                     (d + 1) * len(_DEFAULT_ACTS[kind])]] for d in range(ndir)]
    except KeyError as e:
        raise OnnxError(f"{kind} activation {e.args[0]!r} has no tape form (Sigmoid, Tanh, "
                        "Relu have)", node=imp.label) from None
    b = _v(imp, ins, names, 3) if len(ins) > 3 and ins[3] is not None else None

    def state(i, what):  # an initial state is data, never a weight
        v = ins[i] if len(ins) > i else None
        if v is None:
            return None
        if isinstance(v, np.ndarray):
            v = imp.const(v, names[i], names[i] in imp.derived)
        if at.get("layout", 0):
            v = ops.transpose(v, (1, 0, 2))
        return v

    h0, c0 = state(5, "initial_h"), state(6, "initial_c")
    p = _v(imp, ins, names, 7) if kind == "LSTM" and len(ins) > 7 and ins[7] is not None \
        else None  # peepholes [ndir, 3H]: i, o, f
    zeros = imp.tape.const(np.zeros((batch, hsz)), name="h0")
    direction = at.get("direction", "forward")
    ys, hs, cs = [], [], []
    xf = ops.reshape(x, (seq * batch, n_in))
    for d in range(ndir):
        def row(v, k=d):  # [ndir, ...] -> direction k's [...]
            return ops.reshape(ops.slice(v, 0, k, k + 1), v.shape[1:])

        wt = ops.transpose(row(w))  # [I, G*H]
        rt = ops.transpose(row(r))  # [H, G*H]
        xw = ops.matmul(xf, wt)
        if b is not None:
            bd = row(b)
            xw = ops.add(xw, ops.slice(bd, 0, 0, gates * hsz))
            rb = ops.slice(bd, 0, gates * hsz, 2 * gates * hsz)
        else:
            rb = None
        rbs = [None] * gates if rb is None else [
            ops.slice(rb, 0, k * hsz, (k + 1) * hsz) for k in range(gates)]
        pds = [None] * 3 if p is None else [
            ops.slice(row(p), 0, k * hsz, (k + 1) * hsz) for k in range(3)]
        rn = (ops.transpose(ops.slice(row(r), 0, 2 * hsz, 3 * hsz))
              if kind == "GRU" and not at.get("linear_before_reset", 0) else None)
        h = row(h0) if h0 is not None else zeros
        c = row(c0) if c0 is not None else zeros
        rev = direction == "reverse" or d == 1
        out = [None] * seq
        for t in (range(seq - 1, -1, -1) if rev else range(seq)):
            xt = ops.slice(xw, 0, t * batch, (t + 1) * batch)
            h, c = _cell(kind, fs[d], xt, ops.matmul(h, rt), h, c, rbs, pds, rn, hsz)
            out[t] = ops.reshape(h, (1, 1, batch, hsz))
        ys.append(ops.concat(out, 0) if seq > 1 else out[0])
        hs.append(ops.reshape(h, (1, batch, hsz)))
        cs.append(ops.reshape(c, (1, batch, hsz)))
    y = ops.concat(ys, 1) if ndir > 1 else ys[0]
    yh = ops.concat(hs, 0) if ndir > 1 else hs[0]
    yc = ops.concat(cs, 0) if ndir > 1 else cs[0]
    if at.get("layout", 0):
        y = ops.transpose(y, (2, 0, 1, 3))
        yh, yc = ops.transpose(yh, (1, 0, 2)), ops.transpose(yc, (1, 0, 2))
    return (y, yh, yc) if kind == "LSTM" else (y, yh)


def _gate(v: Var, k: int, hsz: int) -> Var:
    return ops.slice(v, 1, k * hsz, (k + 1) * hsz)


def _plus(v: Var, b: Var | None) -> Var:
    return v if b is None else ops.add(v, b)


def _peep(v: Var, p: Var | None, c: Var) -> Var:
    return v if p is None else ops.add(v, ops.mul(p, c))


def _cell(kind, f, xt, hr, h, c, rbs, pds, rn, hsz):
    """One time step of one direction: the new (h, c) (docstring of ``recurrent``)."""
    if kind == "RNN":
        return f[0](_plus(ops.add(xt, hr), rbs[0])), c
    if kind == "GRU":
        z = f[0](_plus(ops.add(_gate(xt, 0, hsz), _gate(hr, 0, hsz)), rbs[0]))
        rr = f[0](_plus(ops.add(_gate(xt, 1, hsz), _gate(hr, 1, hsz)), rbs[1]))
        if rn is None:  # linear_before_reset
            n = f[1](ops.add(_gate(xt, 2, hsz), ops.mul(rr, _plus(_gate(hr, 2, hsz), rbs[2]))))
        else:
            n = f[1](_plus(ops.add(_gate(xt, 2, hsz), ops.matmul(ops.mul(rr, h), rn)), rbs[2]))
        return ops.add(ops.mul(_one_minus(z), n), ops.mul(z, h)), c
    g = ops.add(xt, hr)
    gs = [_plus(_gate(g, k, hsz), rbs[k]) for k in range(4)]  # (xw + hr) + Rb, per gate
    i = f[0](_peep(gs[0], pds[0], c))
    fg = f[0](_peep(gs[2], pds[2], c))
    cn = ops.add(ops.mul(fg, c), ops.mul(i, f[1](gs[3])))
    o = f[0](_peep(gs[1], pds[1], cn))
    return ops.mul(o, f[2](cn)), cn


CONVERTERS = {
    "Where": where, "Gelu": gelu, "HardSigmoid": hard_sigmoid, "HardSwish": hard_swish,
    "Pow": pow_, "Abs": abs_, "SoftmaxCrossEntropyLoss": softmax_ce,
    "NegativeLogLikelihoodLoss": nll_loss, "LogSoftmax": log_softmax,
    "Dropout": dropout, "RNN": recurrent, "GRU": recurrent, "LSTM": recurrent,
    "Expand": expand, "Reciprocal": reciprocal, "ConvTranspose": conv_transpose,
    "Resize": resize, "Upsample": resize, "InstanceNormalization": instance_norm,
    "Cast": cast, "CastLike": cast, "SplitToSequence": split_to_sequence,
    "SequenceAt": sequence_at, "ConcatFromSequence": concat_from_sequence,
}
