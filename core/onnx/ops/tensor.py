"""Indexing: Gather, GatherElements, GatherND and the Scatter family."""

from __future__ import annotations

import numpy as np

from tapescope.core.onnx.registry import op


def _fix(idx: np.ndarray, dim: int) -> np.ndarray:
    """Negative indices count from the end; out-of-range ones are an error, not a wrap."""
    idx = np.asarray(idx).astype(np.int64)
    if idx.size and (idx.min() < -dim or idx.max() >= dim):
        raise IndexError(f"index out of range [{-dim}, {dim}): {idx.min()}..{idx.max()}")
    return np.where(idx < 0, idx + dim, idx)


@op("Gather")
def gather(ctx, x, indices, axis=0):
    ax = axis % x.ndim
    return np.take(x, _fix(indices, x.shape[ax]), axis=ax)


@op("GatherElements")
def gather_elements(ctx, x, indices, axis=0):
    ax = axis % x.ndim
    return np.take_along_axis(x, _fix(indices, x.shape[ax]), axis=ax)


@op("GatherND")
def gather_nd(ctx, x, indices, batch_dims=0):
    idx = np.asarray(indices).astype(np.int64)
    b = batch_dims
    k = idx.shape[-1]
    bshape = x.shape[:b]
    nb = int(np.prod(bshape))
    xb = x.reshape((nb,) + x.shape[b:])
    ib = idx.reshape((nb, -1, k))
    dims = np.array(x.shape[b:b + k])
    ib = np.where(ib < 0, ib + dims, ib)
    rows = np.arange(nb)[:, None]
    out = xb[(rows,) + tuple(ib[..., j] for j in range(k))]
    return out.reshape(idx.shape[:-1] + x.shape[b + k:])


def _reduce_into(reduction):
    return {"none": None, "add": np.add, "mul": np.multiply, "max": np.maximum,
            "min": np.minimum}[reduction]


@op("ScatterElements", "Scatter")
def scatter_elements(ctx, x, indices, updates, axis=0, reduction="none"):
    ax = axis % x.ndim
    idx = _fix(indices, x.shape[ax])
    y = x.copy()
    full = list(np.indices(idx.shape, sparse=True))
    full[ax] = idx
    fn = _reduce_into(reduction)
    if fn is None:
        y[tuple(full)] = updates
    else:  # unbuffered, in index order, so repeated indices all count
        fn.at(y, tuple(np.broadcast_arrays(*full)), updates)
    return y


@op("ScatterND")
def scatter_nd(ctx, x, indices, updates, reduction="none"):
    idx = np.asarray(indices).astype(np.int64)
    k = idx.shape[-1]
    y = x.copy()
    flat = idx.reshape(-1, k)
    upd = updates.reshape((flat.shape[0],) + x.shape[k:])
    fn = _reduce_into(reduction)
    for i in range(flat.shape[0]):  # one update per index tuple, in order (spec's loop)
        t = tuple(flat[i])
        y[t] = upd[i] if fn is None else fn(y[t], upd[i])
    return y


@op("Unique")
def unique(ctx, x, axis=None, sorted=1):  # noqa: A002 - ONNX name
    vals, first, inverse, counts = np.unique(x, return_index=True, return_inverse=True,
                                             return_counts=True, axis=axis)
    if not sorted:
        order = np.argsort(first, kind="stable")
        remap = np.empty_like(order)
        remap[order] = np.arange(order.size)
        vals = np.take(vals, order, axis=0 if axis is None else axis)
        first, counts, inverse = first[order], counts[order], remap[inverse.reshape(-1)]
    return (vals, first.astype(np.int64), inverse.reshape(-1).astype(np.int64),
            counts.astype(np.int64))
