"""What a node will cost, predicted from its inputs before it runs: the element count of its
biggest output (``PREDICT``, for ops whose size comes from values or broadcasting) and its work
in units of about a nanosecond of the reference executor (``NODE_COST`` per node, one per output
element, ``SLOW_COST`` for refmath transcendentals, ``STRING_COST`` for Python strings, plus the
multiply-adds of ``MACS``). ``core.onnx.limits`` checks them against the run's budget.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from tapescope.core.onnx.errors import OnnxError


class TooBigToIndex(OnnxError):
    """Dims whose product (the zero dims left out) no array can have, even an empty one:
    numpy would raise a bare ValueError ("array is too big") for (0, 2**61)."""


#: the most elements the nonzero dims of any shape may multiply to: numpy refuses a shape
#: whose product times its item size (up to 16 bytes) does not fit an intp, even when a zero
#: dim makes it empty
MAX_INDEXABLE = (1 << 63) // 16


def _prod(dims, what: str) -> int:
    """The element count of ``dims`` as an exact Python int; a negative dim is an error, and
    so are dims whose nonzero ones multiply past MAX_INDEXABLE (:class:`TooBigToIndex`)."""
    n = 1
    nonzero = 1
    for d in dims:
        d = int(d)
        if d < 0:
            raise OnnxError(f"{what}: negative dimension {d} in {tuple(int(x) for x in dims)}")
        n *= d
        nonzero *= max(d, 1)
    if nonzero > MAX_INDEXABLE:
        raise TooBigToIndex(f"{what} would have dims {tuple(int(x) for x in dims)}, whose "
                            f"product {'(empty) ' if n == 0 else ''}no array can have")
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
    from tapescope.core.onnx.registry import as_int_list

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


def _reshape(ins, attrs, opset):
    """Reshape makes no more than it reads; its target dims are checked (TooBigToIndex)."""
    x = _shape(ins[0])
    keep = not attrs.get("allowzero")
    dims = [x[i] if d == 0 and keep and i < len(x) else d
            for i, d in enumerate(_ints(ins[1]))]
    _prod([d for d in dims if d != -1], "Reshape")
    return _prod(x, "Reshape")


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
    "Einsum": _einsum, "Reshape": _reshape,
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


def makes_or_reads_strings(op_type: str, ins: list, attrs: dict) -> bool:
    """Whether the node makes (Cast to STRING) or reads Python strings: a Python loop."""
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
