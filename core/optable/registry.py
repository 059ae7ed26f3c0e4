"""The op table: every op is defined once, its shape rule, forward, backward and metadata together.

Device kernels, fusion classes and grad-check cases are keyed by the same op names, and tests walk
``REGISTRY`` so that no op can lack any of them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tapescope.core.optable.rows import RowForm, check

Shape = tuple[int, ...]
# forward(M, xs, attrs) -> y ; M is the math namespace of core.mathlib
Forward = Callable[[Any, Sequence[np.ndarray], Mapping[str, Any]], np.ndarray]
# backward(M, g, xs, y, attrs, needs) -> one contribution (or None) per input, in input order
Backward = Callable[
    [Any, np.ndarray, Sequence[np.ndarray], np.ndarray, Mapping[str, Any], Sequence[bool]],
    Sequence["np.ndarray | None"],
]
# sample(rng, dtype) -> list of (inputs, attrs) cases for grad-check and device parity tests
Sample = Callable[[np.random.Generator, np.dtype], list[tuple[list[np.ndarray], dict]]]

KINDS = ("leaf", "elementwise", "unary", "reduce", "matmul", "movement", "rowwise", "loss")
FUSION = ("row_local", "row_local_matmul", "none")


class ShapeError(ValueError):
    """An op's inputs have shapes (or attributes) the op cannot take."""


@dataclass(frozen=True)
class CForm:
    """An elementwise op's ONE C spelling, in the kernel templates' tokens (gpu/source.py).

    Every C target is rendered from it (gpu/optable.py): the kernel library's switches, the fused
    row kernels, emitc. Placeholders: ``{a}``, ``{b}`` (a binary's operands) or ``{x}`` (a
    unary's), ``{y}`` the output, ``{g}`` the incoming gradient, ``{s}`` the host scalar, and the
    names of ``lets``. ``fwd`` is y; ``bwd[k]`` is the contribution to input k before ``unb``.
    ``lets`` are named subexpressions ``(name, expr)`` a target binds once before the term.
    ``scalar(attrs)`` is the host scalar ``{s}`` (rounded once to T), or None when unused.
    """

    fwd: str
    bwd: tuple[str, ...]
    lets: tuple[tuple[str, str], ...] = ()
    scalar: Callable[[Mapping[str, Any]], float] | None = None


@dataclass(frozen=True)
class OpDef:
    """One op: its shape rule, reference forward and backward, and metadata."""

    name: str
    arity: int | None  # None: variadic (concat)
    kind: str
    fusion: str
    shape: Callable[[Sequence[Shape], Mapping[str, Any]], Shape]
    forward: Forward | None
    backward: Backward | None
    sample: Sample | None
    transcendental: bool = False  # calls refmath; differs under math="platform"
    nondiff_inputs: tuple[int, ...] = ()  # inputs that never receive a gradient (targets)
    doc: str = ""
    c: CForm | None = None  # elementwise ops: the one C spelling every C target renders
    row: RowForm | None = None  # row ops: the one row loop every C target renders (rows.py)
    onnx: tuple[str, ...] = ()  # ONNX operators that import as exactly this op


REGISTRY: dict[str, OpDef] = {}


def register(op: OpDef) -> OpDef:
    """Add ``op`` to the table; a name is defined once."""
    if op.name in REGISTRY:
        raise ValueError(f"op {op.name!r} is already registered")
    if op.kind not in KINDS:
        raise ValueError(f"op {op.name!r}: kind {op.kind!r} is not one of {KINDS}")
    if op.fusion not in FUSION:
        raise ValueError(f"op {op.name!r}: fusion {op.fusion!r} is not one of {FUSION}")
    if op.row is not None:
        if op.c is not None:
            raise ValueError(f"op {op.name!r}: a C form or a row form, not both")
        check(op.name, op.row, op.arity)
        if op.row.out == "row" and op.fusion != "none":
            # a fused row segment keeps one shape throughout (gpu/fusion/analysis.py): a node
            # with one value per row ends it and runs its library kernels
            raise ValueError(f"op {op.name!r}: a row form with one output per row (out=\"row\") "
                             "has fusion=\"none\"")
    REGISTRY[op.name] = op
    return op


def grad_inputs(nodes: Sequence[Any], i: int) -> list[int]:
    """Input positions node ``i`` pushes a gradient to once its own gradient is reached.

    The one gradient-reach rule (tape, replay, fusion, emitc): a node that requires a gradient
    pushes to every input that requires one, except the op's ``nondiff_inputs`` (targets).
    """
    n = nodes[i]
    if not n.inputs or not n.requires_grad:
        return []
    nd = REGISTRY[n.op].nondiff_inputs
    return [k for k, j in enumerate(n.inputs) if nodes[j].requires_grad and k not in nd]


def reached_nodes(nodes: Sequence[Any], loss: int) -> list[bool]:
    """Which of nodes[0..loss] ``backward(loss)`` gives a gradient (static, by the rule above)."""
    reached = [False] * (loss + 1)
    reached[loss] = True
    for i in range(loss, -1, -1):
        if reached[i]:
            for k in grad_inputs(nodes, i):
                reached[nodes[i].inputs[k]] = True
    return reached


def broadcast_shape(a: Shape, b: Shape) -> Shape:
    """numpy's broadcast of two shapes, or ShapeError naming both."""
    if a == b:
        return a
    try:
        return tuple(np.broadcast_shapes(a, b))
    except ValueError:
        raise ShapeError(f"shapes {a} and {b} do not broadcast") from None


def norm_axis(axis: int, ndim: int) -> int:
    """``axis`` as a non-negative index, or ShapeError."""
    if not -ndim <= axis < max(ndim, 1):
        raise ShapeError(f"axis {axis} is out of range for rank {ndim}")
    return axis % max(ndim, 1)
