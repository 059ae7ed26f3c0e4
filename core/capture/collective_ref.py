"""The reference of a collective: every rank's recorded inputs reduced in a stated fixed
order, and the other orders ``--explain`` tries (numpy only; docs/reference-order.md,
"Collectives"; used by ``core.capture.ranks``).

An all-reduce SUM is ``((x0 + x1) + x2) + ...`` in rank order, each addition rounded once to the
tensor's dtype (half types: added in float32 and rounded once); AVG that divided by N; PRODUCT
the same order of products; MIN / MAX elementwise; a reduce-scatter the chunk of that sum that
is the rank's; an all-gather, a broadcast: copies. The variants (``ORDERS``): ``ring`` (gloo's
on the CPU, measured), ``tree``, ``reverse``; and ``layout``, no order: the reference's values
in another order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["ORDERS", "REPLICATED", "CollectiveNoRef", "collective_reference",
           "explain_collective", "reduce_order", "strided"]

REDUCE_OPS = ("SUM", "AVG", "PRODUCT", "MIN", "MAX")
# collectives after which every rank holds the same bits
REPLICATED = frozenset({"allreduce_", "all_reduce", "all_reduce_", "allgather_",
                        "_allgather_base_", "broadcast_", "barrier", "monitored_barrier_"})


def _add(a: np.ndarray, b: np.ndarray, f: Callable) -> np.ndarray:
    """One elementwise step of a reduction, rounded once to the inputs' dtype (half types
    computed in float32: exact for one addition or product of two)."""
    dt = a.dtype
    with np.errstate(all="ignore"):
        if dt.name in ("float16", "bfloat16"):
            return f(a.astype(np.float32), b.astype(np.float32)).astype(dt)
        return np.asarray(f(a, b)).astype(dt, copy=False)


_COMBINE = {"SUM": np.add, "AVG": np.add, "PRODUCT": np.multiply, "MIN": np.minimum,
            "MAX": np.maximum}


def reduce_order(xs: list[np.ndarray], op: str = "SUM", order: str = "rank") -> np.ndarray:
    """The reduction of the ranks' tensors ``xs`` (by rank) in ``order``: ``rank`` (the
    reference: ((x0 + x1) + x2) + ...), ``reverse``, ``tree`` (pairs, then pairs of pairs) or
    ``ring`` (gloo's: N chunks of ceil(n/N) elements, chunk c from rank c-1 down to rank c)."""
    f = _COMBINE[op]
    n = len(xs)

    def serial(seq: list[int], sl: Any = slice(None)) -> np.ndarray:
        acc = np.array(xs[seq[0]].reshape(-1)[sl])
        for r in seq[1:]:
            acc = _add(acc, xs[r].reshape(-1)[sl], f)
        return acc

    if order == "rank":
        out = serial(list(range(n)))
    elif order == "reverse":
        out = serial(list(range(n - 1, -1, -1)))
    elif order == "tree":
        parts = [xs[r].reshape(-1) for r in range(n)]
        while len(parts) > 1:
            parts = [_add(parts[j], parts[j + 1], f) if j + 1 < len(parts) else parts[j]
                     for j in range(0, len(parts), 2)]
        out = np.array(parts[0])
    elif order == "ring":
        size = xs[0].size
        step = -(-size // n)
        out = np.empty(size, dtype=xs[0].dtype)
        for c in range(n):
            lo, hi = c * step, min(size, (c + 1) * step)
            if lo >= hi:
                continue
            out[lo:hi] = serial([(c - 1 - j) % n for j in range(n)], slice(lo, hi))
    else:
        raise ValueError(f"unknown order {order!r}")
    if op == "AVG":
        dt = out.dtype
        with np.errstate(all="ignore"):
            out = (out.astype(np.float32) / np.float32(n)).astype(dt) \
                if dt.name in ("float16", "bfloat16") else (out / dt.type(n)).astype(dt)
    return out.reshape(xs[0].shape)


ORDERS = (("ring", "gloo's ring: N chunks, chunk c summed from rank c-1 down to rank c"),
          ("tree", "a tree: pairs of ranks, then pairs of pairs"),
          ("reverse", "rank order reversed: rank N-1 down to rank 0"))


class CollectiveNoRef(Exception):
    """The collective has no reference (the message says why)."""


def _tensor_list(a: Any) -> list:
    return a if isinstance(a, list) else [a]


def collective_reference(op: str, per_rank_args: list[list], world: int) -> list[list]:
    """Per rank, the reference outputs of collective ``op`` from every rank's decoded
    positional arguments (arrays for tensors; ``{"g": ...}``, ``{"r": ...}`` as recorded)."""
    name = op.split(".")[1] if "." in op else op
    if name in ("allreduce_", "all_reduce", "all_reduce_"):
        if op.startswith("c10d."):
            red = per_rank_args[0][2]
            red = red.get("r") if isinstance(red, dict) else None
            lists = [_tensor_list(a[0]) for a in per_rank_args]
        else:  # _c10d_functional.all_reduce(input, "sum", group_name)
            red = str(per_rank_args[0][1]).upper()
            lists = [[a[0]] for a in per_rank_args]
        if red not in REDUCE_OPS:
            raise CollectiveNoRef(f"reduce op {red} has no reference order")
        outs = [reduce_order([lst[j] for lst in lists], red) for j in range(len(lists[0]))]
        return [outs for _ in range(world)]
    if name == "_reduce_scatter_base_":  # (output, input, group, op, ...): chunk r of the sum
        red = per_rank_args[0][3].get("r") if isinstance(per_rank_args[0][3], dict) else None
        if red not in REDUCE_OPS:
            raise CollectiveNoRef(f"reduce op {red} has no reference order")
        n = np.asarray(per_rank_args[0][0]).size
        return [[reduce_order([np.asarray(a[1]).reshape(-1)[r * n:(r + 1) * n]
                               for a in per_rank_args], red).reshape(np.shape(a_r[0]))]
                for r, a_r in enumerate(per_rank_args)]
    if name == "reduce_scatter_":  # (outputs, input lists, group, op, ...): out[j] of rank r
        red = per_rank_args[0][3].get("r") if isinstance(per_rank_args[0][3], dict) else None
        if red not in REDUCE_OPS:
            raise CollectiveNoRef(f"reduce op {red} has no reference order")
        return [[reduce_order([a[1][j][r] for a in per_rank_args], red)
                 for j in range(len(_tensor_list(per_rank_args[r][0])))] for r in range(world)]
    if name == "_allgather_base_":  # (output, input, group, ...): the inputs by rank, flat
        outs = [np.concatenate([np.asarray(a[1]).reshape(-1) for a in per_rank_args])
                .reshape(np.shape(per_rank_args[0][0]))]
        return [outs for _ in range(world)]
    if name in ("barrier", "monitored_barrier_"):  # no data
        return [[] for _ in range(world)]
    if name == "allgather_":  # (output lists, inputs, group, ...): out[j][r] = rank r's input j
        ins = [_tensor_list(a[1]) for a in per_rank_args]
        outs = [np.array(ins[r][j]) for j in range(len(ins[0])) for r in range(world)]
        return [outs for _ in range(world)]
    if name == "broadcast_":  # (tensors, group, root rank, root tensor, ...)
        root = per_rank_args[0][2]
        if not isinstance(root, int) or not 0 <= root < world:
            raise CollectiveNoRef(f"broadcast root {root!r} is not a rank")
        outs = [np.array(t) for t in _tensor_list(per_rank_args[root][0])]
        return [outs for _ in range(world)]
    raise CollectiveNoRef(f"{op} has no reference here (all-reduce, reduce-scatter, all-gather, "
                 "broadcast and barrier have)")


def strided(flat: np.ndarray, size: list, stride: list, offset: int) -> np.ndarray | None:
    """``as_strided`` over a 1-D array read as its storage from element 0, or None when the
    view reaches outside it."""
    if flat.ndim != 1 or offset < 0 or any(st < 0 for st in stride) or len(size) != len(stride):
        return None
    end = offset + sum((n - 1) * st for n, st in zip(size, stride, strict=True) if n > 0)
    if any(n == 0 for n in size):
        return np.empty(size, dtype=flat.dtype)
    if end >= flat.size:
        return None
    base = np.ascontiguousarray(flat)[offset:]
    return np.array(np.lib.stride_tricks.as_strided(
        base, shape=size, strides=[st * flat.itemsize for st in stride], writeable=False))


def _n_diff(a: Any, b: Any) -> int:
    """How many elements of ``a`` and ``b`` differ in their bits (all of them where the
    shapes or types differ). Here, not the judge's comparison: the judge imports this module
    (a one-rank capture's collectives)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return max(a.size, b.size)
    if a.dtype.kind != "c" and a.dtype.itemsize in (1, 2, 4, 8):
        u = f"u{a.dtype.itemsize}"
        return int(np.count_nonzero(np.ascontiguousarray(a).view(u) !=
                                    np.ascontiguousarray(b).view(u)))
    return int(np.count_nonzero(a != b))


def explain_collective(op: str, args: list[list], outs: list) -> dict:
    """The order (``ORDERS``, or ``layout``) that reproduces a rank's introduced all-reduce
    outputs ``outs`` from every rank's decoded arguments ``args``, or unknown with the
    closest."""
    if not op.split(".")[1].startswith(("allreduce_", "all_reduce")):
        return {"cause": "unknown", "variant": ""}
    if op.startswith("c10d."):
        red = args[0][2].get("r") if isinstance(args[0][2], dict) else None
        lists = [_tensor_list(a[0]) for a in args]
    else:
        red = str(args[0][1]).upper()
        lists = [[a[0]] for a in args]
    if red not in REDUCE_OPS:
        return {"cause": "unknown", "variant": ""}
    ref = [reduce_order([lst[j] for lst in lists], red) for j in range(len(outs))]
    if all(np.array_equal(np.sort(np.asarray(g, dtype=np.float64).ravel()),
                          np.sort(np.asarray(o, dtype=np.float64).ravel()))
           for g, o in zip(ref, outs, strict=True)):
        return {"cause": "layout", "variant": "the reference's values in another order (the "
                "bucket's elements moved on this rank)"}
    best = None
    for name, label in ORDERS:
        n_diff = 0
        for j, o in enumerate(outs):
            y = reduce_order([lst[j] for lst in lists], red, name)
            n_diff += _n_diff(y, o)
        if n_diff == 0:
            return {"cause": name, "variant": label}
        if best is None or n_diff < best[0]:
            best = (n_diff, name)
    return {"cause": "unknown", "variant": "", "closest": best[1] if best else None,
            "n_diff": best[0] if best else None}
