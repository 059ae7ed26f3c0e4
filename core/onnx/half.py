"""The reference executor's half-precision rule: a float16/bfloat16 node computes in float32.

For a node with a float16 or bfloat16 input, the reference kernel set runs the node's kernel on
its half inputs widened to float32 (exact) and rounds each floating output once, to nearest
even, back to the half type the schema gives it (docs/reference-order.md, "Half precision":
the tape's rule, per ONNX node). So a MatMul, a ReduceSum or a Softmax accumulates in float32
and rounds once at the end, as the tape's half ops, CUDA's ``__half`` kernels with float
accumulators and onnxruntime's CPU fp16 kernels do; computing in the half type itself rounds
at every add (measured: 1035 float16 ulp off the float64 result on a K=256 MatMul).

Which outputs go back to half: an output whose schema type constraint is shared by a present
input takes that input's type (a float32 input: it stays float32); one whose sharing inputs are
all absent takes the node's half type; an output of a type no input has (LayerNormalization's
``Mean``, typed by ``stash_type``) keeps what the kernel made; an op without a schema rounds
every float32 output. Ops that move or pick values (Reshape, Gather, ...), ops whose result
type is an attribute (Cast) and ops that run subgraphs (If, Loop, Scan) are left as they are.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np
from onnx import AttributeProto, TensorProto
from onnx.defs import SchemaError, get_schema

from tapescope.core.precision import F32, HALF

#: ops left alone: exact moves and picks (widening them only costs a copy), attribute-typed
#: results, subgraph runners and sequences
UNTOUCHED = frozenset((
    "Cast", "CastLike", "If", "Loop", "Scan", "Identity", "Reshape", "Transpose", "Squeeze",
    "Unsqueeze", "Flatten", "Concat", "Split", "Slice", "Gather", "GatherElements", "GatherND",
    "Expand", "Tile", "Shape", "Size", "Constant", "ConstantOfShape", "EyeLike",
    "DequantizeLinear", "QuantizeLinear",
    "RandomNormalLike", "RandomUniformLike", "Bernoulli", "Multinomial", "SequenceConstruct",
    "SequenceAt", "SequenceInsert", "SequenceErase", "SequenceLength", "SequenceEmpty",
    "SplitToSequence", "ConcatFromSequence", "Optional", "OptionalGetElement",
    "OptionalHasElement", "SequenceMap"))


@cache
def _output_sources(op_type: str, opset: int, domain: str, n_in: int, n_out: int):
    """Per output: (the input positions that share its type constraint, whether any formal
    input does); None without a schema."""
    try:
        s = get_schema(op_type, opset, domain)
    except SchemaError:
        return None

    def formal(params, i):
        if i < len(params):
            return params[i]
        last = params[-1] if params else None
        variadic = last is not None and last.option == last.option.Variadic
        return last if variadic else None

    ins = [formal(s.inputs, i) for i in range(n_in)]
    out = []
    for j in range(n_out):
        p = formal(s.outputs, j)
        t = p.type_str if p is not None else None
        out.append((tuple(i for i, q in enumerate(ins) if q is not None and q.type_str == t),
                    any(q.type_str == t for q in s.inputs)))
    return tuple(out)


def _target(ins, src, h):
    """The type a float32 output goes back to (None: it stays float32)."""
    if src is None:
        return h
    positions, shared = src
    for i in positions:
        v = ins[i]
        if isinstance(v, np.ndarray):
            return v.dtype if v.dtype in HALF else None
    # its type is an absent input's (LinearAttention's state with no past_state): the node's
    # half type; a type no input has (LayerNormalization's Mean, U = stash_type) stays
    return h if shared else None


_HALF_TYPES = (TensorProto.FLOAT16, TensorProto.BFLOAT16)


def mentions_half(model: Any) -> bool:
    """Whether a half value can appear in ``model``'s run: a float16/bfloat16 input, output,
    value_info, initializer or tensor attribute, or an attribute naming the type (``Cast``'s
    ``to``, a ``dtype``), in any graph or subgraph. A model without one runs its kernels as they
    are (the rule costs a few microseconds a node: 4-5 % on the 4-node tiny_mlp, measured)."""
    def graph(g) -> bool:
        for v in (*g.input, *g.output, *g.value_info):
            if v.type.tensor_type.elem_type in _HALF_TYPES:
                return True
        if any(t.data_type in _HALF_TYPES for t in g.initializer):
            return True
        for n in g.node:
            for a in n.attribute:
                if a.type == AttributeProto.INT and a.i in _HALF_TYPES and a.name in (
                        "to", "dtype", "output_dtype", "stash_type"):
                    return True
                if a.type == AttributeProto.TENSOR and a.t.data_type in _HALF_TYPES:
                    return True
                if any(t.data_type in _HALF_TYPES for t in a.tensors):
                    return True
                if a.type == AttributeProto.GRAPH and graph(a.g):
                    return True
                if any(graph(sg) for sg in a.graphs):
                    return True
        return False

    return graph(model.graph)


def _half_of(ins) -> np.dtype | None:
    for v in ins:
        if isinstance(v, np.ndarray) and v.dtype in HALF:
            return v.dtype
    return None


def in_float32(kernel: Any, op_type: str, opset: int, domain: str) -> Any:
    """``kernel`` under the half rule (the kernel itself for an untouched op)."""
    if op_type in UNTOUCHED:
        return kernel

    def run(ctx, *ins, **attrs):
        h = _half_of(ins)
        if h is None:
            return kernel(ctx, *ins, **attrs)
        wide = [v.astype(F32) if isinstance(v, np.ndarray) and v.dtype in HALF else v
                for v in ins]
        out = kernel(ctx, *wide, **attrs)
        many = isinstance(out, tuple)
        outs = out if many else (out,)
        src = _output_sources(op_type, opset, domain, len(ins), len(outs))
        back = []
        for j, v in enumerate(outs):
            if v is not None and not isinstance(v, list):
                v = np.asarray(v)
                if v.dtype == F32:
                    to = _target(ins, None if src is None else src[j], h)
                    if to is not None:
                        v = v.astype(to)
            back.append(v)
        return tuple(back) if many else back[0]

    run.__wrapped__ = kernel
    return run
