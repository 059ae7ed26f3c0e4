"""Row-space analysis: which captured nodes are row-local, and the maximal runs they form.

A node is row-local when its output row s (the flattened leading axes; columns are the last axis)
depends only on row s of its ACTIVATION inputs (same shape as the output, or a matmul's left
operand) plus WHOLE leaf operands read in full: elementwise ops with [..., c], [c] or [1]
operands, every unary, matmul act[..., k] @ W[k, c] with W a leaf, and every row op of the
table (a row form, core/optable/rows.py) over the last axis, its col inputs leaves. A maximal run
of consecutive row-local nodes with the same row count (leaves in between are transparent)
becomes one segment. A whole operand that needs a
gradient must broadcast over rows only (leading axes all 1), so its gradient is a serial sum over
rows in the tape's order; the parameter-gradient kernel computes it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tapescope.core.optable.registry import REGISTRY
from tapescope.gpu.optable import BINARY as OPTABLE_BINARY
from tapescope.gpu.optable import UNARY as OPTABLE_UNARY
from tapescope.gpu.rowtable import ROW_OPS

__all__ = ["RowNode", "Segment", "row_info", "find_segments", "LEAVES", "BINARY", "UNARY", "ROW",
           "HAND_FUSED"]

LEAVES = ("param", "const")
# every op of the table with a C form fuses: binaries with whole (broadcast) operands, unaries
BINARY = tuple(n for n in OPTABLE_BINARY if REGISTRY[n].fusion == "row_local")
UNARY = tuple(n for n in OPTABLE_UNARY if REGISTRY[n].fusion == "row_local")
# every row op of the table that is row-local (a total, e.g. a loss, runs in the serial tail)
ROW = tuple(n for n in ROW_OPS if REGISTRY[n].fusion == "row_local" and not REGISTRY[n].row.total)
# row-local ops with neither form: row_info and codegen spell each by hand
HAND_FUSED = ("matmul",)


@dataclass(frozen=True)
class RowNode:
    """How one row-local node reads its inputs: input position k -> 'act' or 'whole'."""

    id: int
    rows: int
    cols: int
    kinds: tuple[str, ...]


@dataclass
class Segment:
    """A fused run: node ids lo..hi (inclusive; leaves inside are skipped), rows R."""

    lo: int
    hi: int
    rows: int
    nodes: list[RowNode] = field(default_factory=list)

    @property
    def ids(self) -> list[int]:
        """Ids of the computing nodes, increasing."""
        return [n.id for n in self.nodes]


def _geom(shape: tuple[int, ...]) -> tuple[int, int]:
    cols = shape[-1] if shape else 1
    size = 1
    for d in shape:
        size *= d
    return (size // cols if cols else 0), cols


def _row_broadcast(shape: tuple[int, ...], out: tuple[int, ...]) -> bool:
    """The operand repeats over rows only: leading axes 1, last axis c or 1 (grad-reducible)."""
    if len(shape) > len(out):
        return False
    lead = shape[:-1] if shape else ()
    last = shape[-1] if shape else 1
    return all(d == 1 for d in lead) and last in (1, out[-1])


def _broadcasts(shape: tuple[int, ...], out: tuple[int, ...]) -> bool:
    if len(shape) > len(out):
        return False
    pad = (1,) * (len(out) - len(shape)) + tuple(shape)
    return all(p in (1, o) for p, o in zip(pad, out, strict=True))


def row_info(nodes: tuple, i: int) -> RowNode | None:
    """The RowNode of node i, or None when it is not row-local."""
    n = nodes[i]
    if n.op in LEAVES or REGISTRY[n.op].fusion == "none" or len(n.shape) < 2:
        return None
    rows, cols = _geom(n.shape)
    if rows < 1 or cols < 1:
        return None
    ins = [nodes[j] for j in n.inputs]
    kinds: list[str] = []
    if n.op in BINARY:
        for x in ins:
            if tuple(x.shape) == tuple(n.shape):
                kinds.append("act")
            elif x.op in LEAVES and _broadcasts(x.shape, n.shape) and (
                    not x.requires_grad or _row_broadcast(x.shape, n.shape)):
                kinds.append("whole")
            else:
                return None
    elif n.op in UNARY:
        if any(tuple(x.shape) != tuple(n.shape) for x in ins):
            return None
        kinds = ["act"] * len(ins)
    elif n.op in ROW:
        f = REGISTRY[n.op].row
        if f.axis and n.attrs.get(f.axis, -1) % len(n.shape) != len(n.shape) - 1:
            return None  # the fused row is the last axis
        for x, (_, kind) in zip(ins, f.ins, strict=True):
            if kind == "row" and tuple(x.shape) == tuple(n.shape):
                kinds.append("act")
            elif kind == "col" and x.op in LEAVES:
                kinds.append("whole")  # its gradient: the parameter kernel, serial over rows
            else:
                return None
    elif n.op == "matmul":
        a, w = ins
        if w.op not in LEAVES or len(w.shape) != 2 or _geom(a.shape)[0] != rows:
            return None
        kinds = ["act", "whole"]
    else:
        return None
    return RowNode(i, rows, cols, tuple(kinds))


def find_segments(nodes: tuple, min_nodes: int = 2) -> list[Segment]:
    """Maximal consecutive runs of row-local nodes with equal row counts (>= min_nodes)."""
    segs: list[Segment] = []
    cur: Segment | None = None
    act_targets: set[int] = set()
    whole_targets: set[int] = set()

    def close() -> None:
        nonlocal cur
        if cur is not None and len(cur.nodes) >= min_nodes:
            segs.append(cur)
        cur = None
        act_targets.clear()
        whole_targets.clear()

    for n in nodes:
        if n.op in LEAVES:
            continue  # transparent: no launch
        info = row_info(nodes, n.id)
        if info is None or info.rows < 2:
            close()
            continue
        acts = {j for j, k in zip(n.inputs, info.kinds, strict=True) if k == "act"}
        wholes = {j for j, k in zip(n.inputs, info.kinds, strict=True)
                  if k == "whole" and nodes[j].requires_grad}
        # a buffer that takes row contributions AND reduced ones would see them reordered
        clash = (acts | act_targets) & (wholes | whole_targets)
        if cur is not None and (info.rows != cur.rows or clash):
            close()
        if cur is None:
            if acts & wholes:
                continue
            cur = Segment(n.id, n.id, info.rows)
        cur.nodes.append(info)
        cur.hi = n.id
        act_targets.update(acts)
        whole_targets.update(wholes)
    close()
    return segs
