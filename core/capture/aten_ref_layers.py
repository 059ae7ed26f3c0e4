"""Reference forms of aten's layer kernels: layer norm, batch norm, group norm, embedding and
scaled dot-product attention, with their backwards (convolutions and pools: ``aten_ref_conv``).
Each is the tape's own form where it is the same op (``layer_norm``'s lines, the ``attention``
composite, ``gather``'s scatter-add) and otherwise the composite written in
docs/reference-order.md, "Captured aten ops". Half inputs compute in float32 and round each
output once."""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from tapescope.core.capture.aten_ref_shape import swap_last2
from tapescope.core.capture.aten_ref_table import (
    F32,
    HALF,
    I64,
    M,
    NoReference,
    arr,
    check_elems,
    compute,
    form,
    fp_quiet,
    is_float,
    opt,
    result_type,
    wide,
)
from tapescope.core.ops import REGISTRY
from tapescope.core.ops.reference import bmm as ref_bmm
from tapescope.core.ops.reference import matmul as ref_matmul
from tapescope.core.ops.reference import serial_sum

_w = wide


def _matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``ref_matmul(a, b)``; for operands of one batch shape (attention's [B, H, L, D]) its
    batched product on the batch axes merged, without its ``broadcast_to`` of each operand to
    that same shape (~10 us a call at the zoo's sizes, five calls an attention backward): the
    same products per batch entry, so the same bits."""
    lead = a.shape[:-2]
    if a.ndim < 3 or b.shape[:-2] != lead:
        return ref_matmul(a, b)
    y = ref_bmm(a.reshape(-1, *a.shape[-2:]), b.reshape(-1, *b.shape[-2:]))
    return y.reshape(*lead, a.shape[-2], b.shape[-1])


def _stat_dtype(x: np.ndarray, *params) -> np.dtype:
    """The dtype of a norm's saved statistics: the parameters' (float32) when a half input
    meets float32 parameters (torch's mixed type), else the input's."""
    for p in params:
        if p is not None and x.dtype in HALF and p.dtype == F32:
            return F32
    return x.dtype


# ---- layer norm -------------------------------------------------------------------------------
def _ln_parts(x2: np.ndarray, eps: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mu, d, r): mu = serial_sum(x) / n; d = x - mu; r = 1 / sqrt(serial_sum(d * d) / n +
    eps): core's lines (core/ops/rowwise.py, _ln_parts)."""
    t = x2.dtype.type
    n = t(x2.shape[-1])
    mu = serial_sum(x2, -1, keepdims=True) / n
    d = x2 - mu
    var = serial_sum(d * d, -1, keepdims=True) / n
    return mu, d, t(1) / np.sqrt(var + t(eps))


def _ln_stats(x2: np.ndarray, eps: float) -> tuple[np.ndarray, np.ndarray]:
    mu, _, r = _ln_parts(x2, eps)
    return mu, r


@form("aten.native_layer_norm.default")
def _layer_norm(args: list, kwargs: dict) -> list:
    x, shape, weight, bias, eps = args[:5]
    k = len(shape)
    lead = x.shape[:x.ndim - k]
    x2 = _w(x).reshape(-1, math.prod(shape))
    gamma = np.ones(x2.shape[-1], x2.dtype) if weight is None else _w(weight).reshape(-1)
    with fp_quiet():
        # the tape's layer_norm forward, (d * r) * gamma, on its statistics computed once here
        # (they are outputs too: its own call made them again, 2 of the form's 4 row sums);
        # tests/capture/test_judge_small_steps.py holds the two to the same bits
        mu, d, r = _ln_parts(x2, eps)
        y = (d * r) * gamma
        if bias is not None:
            y = y + _w(bias).reshape(-1)
    stat, sd = lead + (1,) * k, _stat_dtype(x, weight, bias)
    # (copy=False: the outputs are fresh arrays; a copy of each was ~5 % of the form)
    return [y.reshape(x.shape).astype(x.dtype, copy=False),
            mu.reshape(stat).astype(sd, copy=False), r.reshape(stat).astype(sd, copy=False)]


@form("aten.native_layer_norm_backward.default")
def _layer_norm_backward(args: list, kwargs: dict) -> list:
    g, x, shape, mean, rstd, weight, bias, mask = args[:8]
    d_ = math.prod(shape)
    x2, g2 = _w(x).reshape(-1, d_), _w(g, x.dtype).reshape(-1, d_)
    mu, r = _w(mean, x.dtype).reshape(-1, 1), _w(rstd, x.dtype).reshape(-1, 1)
    t = x2.dtype.type
    n = t(d_)
    out = []
    with fp_quiet():
        xh = (x2 - mu) * r
        gd = g2 if weight is None else g2 * _w(weight).reshape(-1)
        if mask[0]:
            ma = serial_sum(gd, -1, keepdims=True) / n
            mb = serial_sum(gd * xh, -1, keepdims=True) / n
            out.append((r * ((gd - ma) - (xh * mb))).reshape(x.shape).astype(x.dtype, copy=False))
        if mask[1] and weight is not None:
            out.append(serial_sum(g2 * xh, 0).reshape(weight.shape).astype(weight.dtype,
                                                                           copy=False))
        if mask[2] and bias is not None:
            out.append(serial_sum(g2, 0).reshape(bias.shape).astype(bias.dtype, copy=False))
    return out


# ---- batch norm and group norm ----------------------------------------------------------------
def _chan(v: np.ndarray, nd: int) -> np.ndarray:
    return v.reshape((1, -1) + (1,) * (nd - 2))


def _bn_apply(xw, mean, invstd, weight, bias):
    nd = xw.ndim
    y = (xw - _chan(mean, nd)) * _chan(invstd, nd)
    if weight is not None:
        y = y * _chan(_w(weight, xw.dtype), nd)
    if bias is not None:
        y = y + _chan(_w(bias, xw.dtype), nd)
    return y


def batch_norm(x, weight, bias, rm, rv, training: bool, momentum: float, eps: float
               ) -> tuple[list, list]:
    """([out, save_mean, save_invstd], [new running mean, new running var]) (the second list
    empty without running statistics; in eval mode they are unchanged copies)."""
    xw = _w(x)
    t = xw.dtype.type
    ax = (0,) + tuple(range(2, x.ndim))
    n = math.prod(x.shape[a] for a in ax)
    stats = [] if rm is None or rv is None else [arr(rm, rm.dtype).copy(),
                                                 arr(rv, rv.dtype).copy()]
    with fp_quiet():
        if not training:
            if not stats:
                raise NoReference("batch norm in eval mode without running statistics")
            mean, invstd = _w(rm, x.dtype), t(1) / np.sqrt(_w(rv, x.dtype) + t(eps))
            y = _bn_apply(xw, mean, invstd, weight, bias)
            empty = np.zeros((0,), x.dtype)
            return [y.astype(x.dtype, copy=False), empty, empty.copy()], stats
        mean = serial_sum(xw, ax) / t(n)
        d = xw - _chan(mean, x.ndim)
        sq = d * d
        ss = serial_sum(sq, ax)
        invstd = t(1) / np.sqrt((ss / t(n)) + t(eps))
        # _bn_apply's ops in place (d is its xw - mean; the squares' buffer reused): the same
        # bits without four more passes' allocations (a 16x32x64x64 batch: 7.3 -> 4.4 ms)
        y = np.multiply(d, _chan(invstd, x.ndim), out=sq)
        if weight is not None:
            np.multiply(y, _chan(_w(weight, xw.dtype), x.ndim), out=y)
        if bias is not None:
            np.add(y, _chan(_w(bias, xw.dtype), x.ndim), out=y)
        del d
        sd = _stat_dtype(x, weight, bias, rm, rv)
        out = [y.astype(x.dtype, copy=False), mean.astype(sd), invstd.astype(sd)]
        if stats:
            ct = compute(rm.dtype)
            mo, keep = ct.type(momentum), ct.type(1.0 - momentum)
            unbiased = arr(ss, ct) / ct.type(max(n - 1, 0))
            stats = [((mo * arr(mean, ct)) + (keep * _w(rm))).astype(rm.dtype),
                     ((mo * unbiased) + (keep * _w(rv))).astype(rv.dtype)]
    return out, stats


@form("aten.native_batch_norm.default", "aten._native_batch_norm_legit.default")
def _native_batch_norm(args: list, kwargs: dict) -> list:
    # the running statistics are written arguments (marked Tensor(a!) or, for
    # native_batch_norm, written unmarked, as the recorder records them): they come first
    x, w, b, rm, rv, training, momentum, eps = args[:8]
    out, stats = batch_norm(x, w, b, rm, rv, training, momentum, eps)
    return stats + out


@form("aten._native_batch_norm_legit_functional.default")
def _bn_functional(args: list, kwargs: dict) -> list:
    x, w, b, rm, rv, training, momentum, eps = args[:8]
    out, stats = batch_norm(x, w, b, rm, rv, training, momentum, eps)
    return out + stats


@form("aten._native_batch_norm_legit.no_stats")
def _bn_no_stats(args: list, kwargs: dict) -> list:
    x, w, b, training, momentum, eps = args[:6]
    return batch_norm(x, w, b, None, None, True, momentum, eps)[0]


@form("aten._native_batch_norm_legit_no_training.default")
def _bn_no_training(args: list, kwargs: dict) -> list:
    x, w, b, rm, rv, momentum, eps = args[:7]
    return batch_norm(x, w, b, rm, rv, False, momentum, eps)[0]


@form("aten.native_batch_norm_backward.default")
def _bn_backward(args: list, kwargs: dict) -> list:
    g, x, weight, rm, rv, save_mean, save_invstd, train, eps, mask = args[:10]
    xw, gw = _w(x), _w(g, x.dtype)
    t = xw.dtype.type
    nd = x.ndim
    ax = (0,) + tuple(range(2, nd))
    n = t(math.prod(x.shape[a] for a in ax))
    with fp_quiet():
        if train:
            mean, invstd = _w(save_mean, x.dtype), _w(save_invstd, x.dtype)
        else:
            mean, invstd = _w(rm, x.dtype), t(1) / np.sqrt(_w(rv, x.dtype) + t(eps))
        sum_g = serial_sum(gw, ax)
        xc = np.subtract(xw, _chan(mean, nd))
        dot = serial_sum(np.multiply(xc, gw, out=xc), ax)
        wv = np.ones(x.shape[1], xw.dtype) if weight is None else _w(weight, x.dtype)
        out = []
        if mask[0]:
            if train:
                k = ((dot * invstd) * invstd) / n
                # the same ops in the same order, each into one of two buffers (not a fresh
                # array each: the passes' allocations were most of its time)
                dx = np.subtract(xw, _chan(mean, nd), out=xc)
                np.multiply(dx, _chan(k, nd), out=dx)
                gx = np.subtract(gw, _chan(sum_g / n, nd))
                np.subtract(gx, dx, out=gx)
                np.multiply(gx, _chan(invstd, nd), out=gx)
                np.multiply(gx, _chan(wv, nd), out=gx)
                del dx
            else:
                gx = gw * _chan(invstd * wv, nd)
            out.append(gx.astype(x.dtype, copy=False))
        if mask[1]:
            out.append((dot * invstd).astype(x.dtype if weight is None else weight.dtype))
        if mask[2]:
            out.append(sum_g.astype(x.dtype if weight is None else weight.dtype))
    return out


@form("aten.native_group_norm.default")
def _group_norm(args: list, kwargs: dict) -> list:
    x, weight, bias, n_, c, hw, groups, eps = args[:8]
    xg = _w(x).reshape(n_, groups, -1)
    mu, r = _ln_stats(xg, eps)
    with fp_quiet():
        y = ((xg - mu) * r).reshape(n_, c, -1)
        if weight is not None:
            y = y * _w(weight, x.dtype).reshape(1, c, 1)
        if bias is not None:
            y = y + _w(bias, x.dtype).reshape(1, c, 1)
    sd = _stat_dtype(x, weight, bias)
    return [y.reshape(x.shape).astype(x.dtype, copy=False),
            mu.reshape(n_, groups).astype(sd, copy=False),
            r.reshape(n_, groups).astype(sd, copy=False)]


@form("aten.native_group_norm_backward.default")
def _group_norm_backward(args: list, kwargs: dict) -> list:
    g, x, mean, rstd, weight, n_, c, hw, groups, mask = args[:10]
    xw, gw = _w(x).reshape(n_, c, -1), _w(g, x.dtype).reshape(n_, c, -1)
    mu = _w(mean, x.dtype).reshape(n_, groups, 1, 1)
    r = _w(rstd, x.dtype).reshape(n_, groups, 1, 1)
    t = xw.dtype.type
    cg = c // groups
    with fp_quiet():
        xh = ((xw.reshape(n_, groups, cg, -1) - mu) * r)
        wv = np.ones(c, xw.dtype) if weight is None else _w(weight, x.dtype)
        gd = (gw * wv.reshape(1, c, 1)).reshape(n_, groups, cg, -1)
        out = []
        if mask[0]:
            m = t(cg * xw.shape[-1])
            ma = serial_sum(gd, (2, 3), keepdims=True) / m
            mb = serial_sum(gd * xh, (2, 3), keepdims=True) / m
            out.append((r * ((gd - ma) - (xh * mb))).reshape(x.shape).astype(x.dtype, copy=False))
        if mask[1]:
            out.append(serial_sum(gw * xh.reshape(n_, c, -1), (0, 2)).astype(x.dtype, copy=False))
        if mask[2]:
            out.append(serial_sum(gw, (0, 2)).astype(x.dtype, copy=False))
    return out


# ---- embedding --------------------------------------------------------------------------------
@form("aten.embedding.default")
def _embedding(args: list, kwargs: dict) -> list:
    w, idx = args[0], np.asarray(args[1]).astype(I64)
    return [np.take(w, idx, axis=0)]


def embedding_backward_by_freq(args: list, fused: Any = None) -> np.ndarray:
    """``embedding_dense_backward`` with ``scale_grad_by_freq`` (ATen's loop): each index's
    count over all the indices (padding's too); from +0, in index order, each row (not the
    padding index's) adds ``g[i] * T(1 / count)`` (the double rounded once to the type; the
    product rounded, then the sum; ``fused``: ``fused(g, scale, row)``, ATen's add with
    alpha on its vector path)."""
    g, idx, num, pad = args[:4]
    rows = np.asarray(idx).astype(I64).reshape(-1)
    gw = np.asarray(g).reshape(rows.size, -1)
    if not is_float(gw.dtype) or (rows.size and (rows.min() < 0 or rows.max() >= int(num))):
        raise NoReference("embedding_dense_backward: a float gradient and indices in range")
    check_elems(int(num) * gw.shape[1], "embedding_dense_backward")
    T = gw.dtype.type
    counts = np.bincount(rows, minlength=int(num))
    out = np.zeros((int(num), gw.shape[1]), gw.dtype)
    with fp_quiet():
        for i, k in enumerate(rows.tolist()):
            if k == pad:
                continue
            sc = T(1.0 / counts[k])
            out[k] = (fused(gw[i], np.full_like(gw[i], sc), out[k]) if fused is not None
                      else out[k] + (gw[i] * sc).astype(gw.dtype)).astype(gw.dtype)
    return out


@form("aten.embedding_dense_backward.default")
def _embedding_backward(args: list, kwargs: dict) -> list:
    g, idx, num, pad, scale = args[:5]
    if scale:
        return [embedding_backward_by_freq(args)]
    rows = np.asarray(idx).astype(I64).reshape(-1)
    gw = _w(g).reshape(rows.size, -1)
    check_elems(int(num) * gw.shape[1], "embedding_dense_backward")
    base = np.broadcast_to(np.zeros((), gw.dtype), (int(num), gw.shape[1]))
    # the tape's gather backward: zeros, then g's rows added in index order
    out = REGISTRY["gather"].backward(M, gw, [base, rows], None, {"axis": 0}, [True, False])[0]
    if 0 <= pad < num:
        out[pad] = 0
    return [out.astype(g.dtype)]


@form("aten.embedding_renorm_.default")
def _embedding_renorm(args: list, kwargs: dict) -> list:
    """``nn.Embedding(max_norm=)``'s in-place renormalisation (ATen's loop over the sorted
    unique indices): each looked-up row whose ``p``-norm (``linalg_vector_norm``'s form)
    exceeds ``max_norm`` is multiplied by ``T(max_norm / (norm + 1e-7))`` (float64, rounded
    to the weight's type once)."""
    from tapescope.core.capture.aten_ref_nn import vector_norm

    w, idx = np.asarray(args[0]), np.asarray(args[1])
    max_norm, p = float(args[2]), float(args[3])
    if w.ndim != 2 or not is_float(w.dtype) or idx.dtype.kind not in "iu":
        raise NoReference("embedding_renorm_ of other than a float matrix and integer indices")
    rows = np.unique(idx.astype(I64).reshape(-1))
    if rows.size and (rows[0] < 0 or rows[-1] >= w.shape[0]):
        raise NoReference("embedding_renorm_: an index outside the weight's rows")
    out = w.copy()
    for r in rows:
        norm = float(vector_norm(out[r], p))
        if norm > max_norm:
            with fp_quiet():
                out[r] = out[r] * w.dtype.type(max_norm / (norm + 1e-7))
    return [out]


# ---- embedding bag ----------------------------------------------------------------------------
_MAX_ROWS = 1 << 31  # the weight gradient's elements a form allocates, num_weights x dim


def _bag_of(offsets: np.ndarray, n: int) -> np.ndarray:
    """Each index's bag: ATen's make_offset2bag (the offsets counted into n + 1 slots, the first
    less one, a running sum, the last slot dropped), so an empty bag is skipped and an index
    past a trailing offset falls in the bag after it."""
    slots = np.zeros(n + 1, I64)
    np.add.at(slots, offsets.astype(I64), 1)
    if n + 1:
        slots[0] -= 1
    return np.cumsum(slots)[:n]


def _bag_args(args: list, kwargs: dict) -> tuple:
    w, idx, offs = np.asarray(args[0]), np.asarray(args[1]), np.asarray(args[2])
    mode = int(opt(kwargs, args, 4, "mode", 0))
    psw = opt(kwargs, args, 6, "per_sample_weights", None)
    last = bool(opt(kwargs, args, 7, "include_last_offset", False))
    pad = int(opt(kwargs, args, 8, "padding_idx", -1))
    if w.ndim != 2 or idx.ndim != 1 or offs.ndim != 1:
        raise NoReference("embedding_bag: weight 2-D, indices and offsets 1-D")
    if mode not in (0, 1, 2) or (psw is not None and mode != 0):
        raise NoReference(f"embedding_bag mode {mode}"
                          + (" with per_sample_weights" if psw is not None else ""))
    if opt(kwargs, args, 5, "sparse", False):
        raise NoReference("embedding_bag with sparse gradients")
    it = np.promote_types(idx.dtype, offs.dtype)
    idx, offs = idx.astype(I64), offs.astype(I64)
    n, rows = idx.size, w.shape[0]
    if offs.size < (2 if last else 1) or offs[0] != 0 or np.any(np.diff(offs) < 0) \
            or offs[-1] > n or np.any((idx < 0) | (idx >= rows)):
        raise NoReference("embedding_bag: offsets or indices out of range")
    return w, idx, offs, mode, psw, last, pad, it


def _bag_weigh(out: np.ndarray, rows: np.ndarray, psw: np.ndarray | None,
               bags: np.ndarray) -> None:
    """The reference's sum: each bag's rows (times their weights, the product rounded) added
    to it in index order (np.add.at is unbuffered and sequential)."""
    np.add.at(out, bags, rows if psw is None else rows * psw[:, None])


def bag_forward(args: list, kwargs: dict, grad: bool, weigh=_bag_weigh) -> list:
    """The reference embedding bag: per bag, zeros and then its rows added in index order
    (times ``per_sample_weights``, the product rounded), the ``padding_idx`` rows skipped;
    ``mean`` divides by the rows added (at least 1); ``max`` keeps the first row and then each
    element greater than it (ATen's rule), its word index beside it. The integer outputs are
    ATen's: offset2bag (empty for a float32 or half ``sum`` without padding, ATen's fast path
    that skips it), bag sizes (zeros for ``sum``), max indices (the bag sizes for sum and mean)."""
    w, idx, offs, mode, psw, last, pad, it = _bag_args(args, kwargs)
    n, bags, d = idx.size, offs.size - (1 if last else 0), w.shape[1]
    t = compute(w.dtype)
    bag = _bag_of(offs[:bags], n)
    keep = idx != pad if pad >= 0 else np.ones(n, bool)
    ends = np.append(offs[1:bags], n) if bags else offs[:0]
    size = (ends - offs[:bags]) - np.bincount(bag[~keep], minlength=bags)[:bags]
    out = np.zeros((bags, d), t)
    ww, i, b = _w(w), idx[keep], bag[keep]
    with fp_quiet():
        if mode < 2:
            if psw is not None and np.shape(psw) != idx.shape:
                raise NoReference("embedding_bag: per_sample_weights not one per index")
            weigh(out, ww[i], None if psw is None else arr(psw, t)[keep], b)
            if mode == 1:
                out = out / np.maximum(size, 1).astype(t)[:, None]
        else:
            arg = np.zeros((bags, d), I64)
            seen = np.zeros(bags, bool)
            for k in range(i.size):  # (a max is no sum: any order gives its bits; ATen's)
                r, bk = ww[i[k]], b[k]
                take = ~seen[bk] | (r > out[bk])
                out[bk] = np.where(take, r, out[bk])
                arg[bk] = np.where(take, i[k], arg[bk])
                seen[bk] = True
    fast = mode == 0 and pad < 0 and w.dtype != np.float64
    o2b = bag[:0] if fast else bag
    if mode == 0:
        size = np.zeros(bags if grad else offs.size, I64)
    mx = arg if mode == 2 else size
    return [out.astype(w.dtype), o2b.astype(it), size.astype(it), mx.astype(it)]


@form("aten._embedding_bag.default")
def _embedding_bag(args: list, kwargs: dict) -> list:
    return bag_forward(args, kwargs, grad=True)


@form("aten._embedding_bag_forward_only.default")
def _embedding_bag_forward_only(args: list, kwargs: dict) -> list:
    return bag_forward(args, kwargs, grad=False)


@form("aten._embedding_bag_backward.default")
def _embedding_bag_backward(args: list, kwargs: dict) -> list:
    return bag_backward(bag_grad_args(args, kwargs, dense=False), _bag_add)


@form("aten._embedding_bag_dense_backward.default")
def _embedding_bag_dense_backward(args: list, kwargs: dict) -> list:
    return bag_backward(bag_grad_args(args, kwargs, dense=True), _bag_add)


def bag_grad_args(args: list, kwargs: dict, dense: bool) -> dict:
    """An embedding bag backward's arguments, checked: ``_embedding_bag_backward``'s (grad,
    indices, offsets, offset2bag, bag_size, max_indices, num_weights, scale_grad_by_freq, mode,
    sparse, per_sample_weights, padding_idx) or, ``dense``, ``_embedding_bag_dense_backward``'s
    (the same without offsets and sparse). Each index's bag: offset2bag, or from the offsets
    where the forward's fast path left it empty."""
    if dense:
        rest, offs = args[:8], None
        psw, pad = opt(kwargs, args, 8, "per_sample_weights"), opt(kwargs, args, 9,
                                                                   "padding_idx", -1)
    else:
        if opt(kwargs, args, 9, "sparse", False):
            raise NoReference("embedding_bag backward with sparse gradients")
        rest, offs = args[:2] + args[3:9], args[2]
        psw, pad = opt(kwargs, args, 10, "per_sample_weights"), opt(kwargs, args, 11,
                                                                    "padding_idx", -1)
    if len(rest) < 8:
        raise NoReference("embedding_bag backward: too few arguments")
    g, idx, o2b, size, mx = (np.asarray(a) for a in rest[:5])
    num, freq, mode = int(rest[5]), bool(rest[6]), int(rest[7])
    if freq:
        raise NoReference("embedding_bag backward with scale_grad_by_freq")
    if g.ndim != 2 or idx.ndim != 1 or mode not in (0, 1, 2) or not is_float(g.dtype) \
            or idx.dtype.kind not in "iu" or (psw is not None and mode != 0):
        raise NoReference("embedding_bag backward: grad 2-D, indices 1-D, mode 0-2")
    if not 0 <= num <= _MAX_ROWS // max(g.shape[1], 1):
        raise NoReference(f"embedding_bag backward of {num} rows")
    check_elems(num * g.shape[1], "embedding_bag backward")
    idx, size, pad = idx.astype(I64), size.astype(I64), int(pad)
    if mode == 2:
        mx, live = mx.astype(I64), np.flatnonzero(size != 0)
        if mx.shape != g.shape or size.shape != (g.shape[0],) \
                or np.any((mx[live] < 0) | (mx[live] >= num)):
            raise NoReference("embedding_bag backward: max indices out of range")
        return {"g": g, "mode": mode, "num": num, "mx": mx, "live": live}
    o2b = o2b.astype(I64)
    if o2b.size == 0 and idx.size and offs is not None:
        o2b = _bag_of(np.asarray(offs).astype(I64), idx.size)
    if o2b.shape != idx.shape or np.any((idx < 0) | (idx >= num)) \
            or np.any((o2b < 0) | (o2b >= g.shape[0])) \
            or (mode == 1 and size.shape != (g.shape[0],)) \
            or (psw is not None and np.shape(psw) != idx.shape):
        raise NoReference("embedding_bag backward: indices or bags out of range")
    keep = idx != pad if pad >= 0 else np.ones(idx.size, bool)
    return {"g": g, "mode": mode, "num": num, "idx": idx[keep], "bag": o2b[keep],
            "n": size[o2b[keep]] if mode == 1 else None,
            "psw": None if psw is None else np.asarray(psw)[keep], "all": idx, "keep": keep}


def _bag_add(gw: np.ndarray, p: dict) -> None:
    """The reference's accumulation: each index's row added in index order, ``mean``'s divided
    by its bag's size (none for an empty bag), ``per_sample_weights``' product rounded."""
    rows = _w(p["g"])[p["bag"]]
    if p["n"] is not None:
        n = p["n"]
        rows = np.where((n != 0)[:, None], rows / np.maximum(n, 1).astype(gw.dtype)[:, None],
                        rows)
    elif p["psw"] is not None:
        rows = rows * arr(p["psw"], gw.dtype)[:, None]
    np.add.at(gw, p["idx"], rows)


def bag_backward(p: dict, add) -> list:
    """The weight's gradient from zeros: ``add(gw, p)`` for sum and mean; ``max``: each bag's
    gradient added where its max came from, the bags in order (ATen's index_add_, the bags
    that kept a row)."""
    g = p["g"]
    gw = np.zeros((p["num"], g.shape[1]), compute(g.dtype))
    with fp_quiet():
        if p["mode"] == 2:
            live = p["live"]
            cols = np.broadcast_to(np.arange(g.shape[1]), (live.size, g.shape[1]))
            np.add.at(gw, (p["mx"][live], cols), _w(g)[live])
        else:
            add(gw, p)
    return [gw.astype(g.dtype)]


# ---- LSTM (oneDNN's layer: mkldnn_rnn_layer) -----------------------------------------------
#: the outputs of an op whose bytes no reference computes (oneDNN's LSTM workspace: its own
#: layout of the gates), by op: the judge takes them as recorded (the verdict ``recorded``)
# ---- weight normalisation (torch.nn.utils.parametrizations.weight_norm) -------------------------
def _wn_args(v, g, dim) -> tuple:
    """``(v, g, the other dimensions, the compute type)``: a half type's in float32, as
    ATen's kernel (its norms are float32 then)."""
    v, g = np.asarray(v), np.asarray(g)
    if v.ndim == 0 or not is_float(v.dtype) or g.dtype != v.dtype:
        raise NoReference("weight norm of other than float weights and g of their type")
    d = int(dim) % v.ndim
    want = tuple(n if i == d else 1 for i, n in enumerate(v.shape))
    if g.shape != want:
        raise NoReference(f"weight norm: g of {list(g.shape)}, the weight wants {list(want)}")
    ct = compute(v.dtype)
    return wide(v, ct), wide(g, ct), tuple(i for i in range(v.ndim) if i != d), ct


@form("aten._weight_norm_interface.default")
def _weight_norm(args: list, kwargs: dict) -> list:
    """ATen's kernel: per slice along ``dim``, ``norm = sqrt(serial_sum(v * v))`` over the
    other dimensions, ``a = g / norm``, ``w = v * a``; outputs ``w`` and ``norm`` (g's
    shape)."""
    dt = np.asarray(args[0]).dtype
    v, g, other, ct = _wn_args(args[0], args[1], opt(kwargs, args, 2, "dim", 0))
    with fp_quiet():
        norm = np.sqrt(serial_sum(v * v, other, keepdims=True))
        w = v * (g / norm)
    return [arr(w, dt), np.asarray(norm, ct)]


@form("aten._weight_norm_interface_backward.default")
def _weight_norm_backward(args: list, kwargs: dict) -> list:
    """ATen's kernel: per slice ``s = serial_sum(gw * v)``, ``gg = s / norm``, ``a = g /
    norm``, ``b = (a * gg) / norm``, ``gv = (a * gw) - (b * v)``; outputs ``gv``,
    ``gg``."""
    gw, norm, dt = np.asarray(args[0]), np.asarray(args[3]), np.asarray(args[1]).dtype
    v, g, other, ct = _wn_args(args[1], args[2], opt(kwargs, args, 4, "dim", 0))
    if gw.shape != v.shape or norm.shape != g.shape or gw.dtype != dt or norm.dtype != ct:
        raise NoReference("weight norm backward: the gradient or norms do not match the weight")
    gw = wide(gw, ct)
    with fp_quiet():
        s = serial_sum(gw * v, other, keepdims=True)
        gg = s / norm
        a = g / norm
        b = (a * gg) / norm
        gv = (a * gw) - (b * v)
    return [arr(gv, dt), arr(gg, dt)]


OPAQUE_OUTPUTS: dict[str, frozenset[int]] = {"aten.mkldnn_rnn_layer.default": frozenset({3})}

_SIG, _TANH = REGISTRY["sigmoid"], REGISTRY["tanh"]


def _lstm_args(x, w_ih, w_hh, b_ih, b_hh, hx, cx, reverse, batch_sizes, mode, hidden,
               has_biases) -> tuple:
    x, w_ih, w_hh, hx, cx = (np.asarray(a) for a in (x, w_ih, w_hh, hx, cx))
    if int(mode) != 2 or list(batch_sizes or []):
        raise NoReference("mkldnn_rnn_layer: an LSTM (mode 2) of unpacked sequences only")
    h = int(hidden)
    if x.ndim != 3 or w_ih.shape != (4 * h, x.shape[2]) or w_hh.shape != (4 * h, h) \
            or hx.shape != (x.shape[1], h) or cx.shape != hx.shape:
        raise NoReference("mkldnn_rnn_layer: shapes of an LSTM layer, time-major")
    t = compute(x.dtype)
    bias = None
    if has_biases:
        b_ih, b_hh = np.asarray(b_ih), np.asarray(b_hh)
        if b_ih.shape != (4 * h,) or b_hh.shape != (4 * h,):
            raise NoReference("mkldnn_rnn_layer: biases of 4 x hidden")
        bias = (_w(b_ih, t), _w(b_hh, t))
    steps = range(x.shape[0] - 1, -1, -1) if reverse else range(x.shape[0])
    return _w(x, t), _w(w_ih, t), _w(w_hh, t), bias, _w(hx, t), _w(cx, t), steps, h


def _lstm_run(x, w_ih, w_hh, bias, h, c, steps, hidden) -> tuple:
    """The forward in reference order, every step's state kept for the backward."""
    ys = np.empty((x.shape[0], x.shape[1], hidden), x.dtype)
    states = []
    for s in steps:
        gi = ref_matmul(x[s], swap_last2(w_ih))
        gh = ref_matmul(h, swap_last2(w_hh))
        if bias is not None:
            gi, gh = gi + bias[0], gh + bias[1]
        gates = gi + gh
        i, f, o = (_SIG.forward(M, [gates[:, k * hidden:(k + 1) * hidden]], {})
                   for k in (0, 1, 3))
        g = _TANH.forward(M, [gates[:, 2 * hidden:3 * hidden]], {})
        c_prev, h_prev = c, h
        c = (f * c) + (i * g)
        tc = _TANH.forward(M, [c], {})
        h = o * tc
        ys[s] = h
        states.append((s, i, f, g, o, c_prev, h_prev, tc))
    return ys, h, c, states


@form("aten.mkldnn_rnn_layer.default")
def _mkldnn_rnn_layer(args: list, kwargs: dict) -> list:
    """oneDNN's LSTM layer (float32 ``nn.LSTM`` on the CPU), in the order of torch's own CPU
    cell (the float64 path): per step, ``gates = ((x_t @ W_ihᵀ) + b_ih) + ((h @ W_hhᵀ) +
    b_hh)``, i, f, o the tape's sigmoid, g its tanh of their quarters, ``c = (f * c) + (i *
    g)``, ``h = o * tanh(c)``; ``reverse`` runs the steps backwards. Outputs: every step's h,
    the last h and c, and the workspace (None: OPAQUE_OUTPUTS, taken as recorded)."""
    if len(args) < 13:
        raise NoReference("mkldnn_rnn_layer: too few arguments")
    x, w_ih, w_hh, bias, h, c, steps, hidden = _lstm_args(*args[:11], args[12])
    with fp_quiet():
        ys, h, c, _ = _lstm_run(x, w_ih, w_hh, bias, h, c, steps, hidden)
    dt = np.asarray(args[0]).dtype
    return [ys.astype(dt), h.astype(dt), c.astype(dt), None]


@form("aten.mkldnn_rnn_layer_backward.default")
def _mkldnn_rnn_layer_backward(args: list, kwargs: dict) -> list:
    """Back through time in reference order: the forward re-run (its states), then from the
    last step to the first: ``dh += dy_t``; ``do = dh * tanh(c)``; ``dc += (dh * o) * tanh'``
    (the tape's tanh backward); ``di = dc * g``, ``df = dc * c_prev``, ``dg = dc * i``; the
    gates' sigmoid / tanh backwards; ``dx_t = dG @ W_ih``, ``dh = dG @ W_hh``, ``dc = dc * f``;
    ``dW_ih += dGᵀ @ x_t``, ``dW_hh += dGᵀ @ h_prev``, ``db += serial_sum(dG)`` (both biases'
    the same), each step's term added to the running sum in turn. Outputs: dx, dW_ih, dW_hh,
    db_ih, db_hh (without biases too, as oneDNN computes them), dhx, dcx (the workspace is not
    read)."""
    if len(args) < 22:
        raise NoReference("mkldnn_rnn_layer_backward: too few arguments")
    (x0, w_ih0, w_hh0, b_ih0, b_hh0, hx0, cx0, _out, _hy, _cy, gy, ghy, gcy, reverse, mode,
     hidden, _layers, has_biases) = args[:18]
    batch_sizes = args[20]
    x, w_ih, w_hh, bias, h, c, steps, hid = _lstm_args(
        x0, w_ih0, w_hh0, b_ih0, b_hh0, hx0, cx0, reverse, batch_sizes, mode, hidden,
        has_biases)
    t = x.dtype
    for g_, shape in ((gy, (x.shape[0], x.shape[1], hid)), (ghy, h.shape), (gcy, c.shape)):
        if g_ is not None and np.shape(g_) != shape:
            raise NoReference("mkldnn_rnn_layer_backward: gradients of the outputs' shapes")
    with fp_quiet():
        _, _, _, states = _lstm_run(x, w_ih, w_hh, bias, h, c, steps, hid)
        dh = _w(ghy, t).copy() if ghy is not None else np.zeros_like(h)
        dc = _w(gcy, t).copy() if gcy is not None else np.zeros_like(c)
        gy = _w(gy, t) if gy is not None else None
        dx = np.zeros_like(x)
        dw_ih, dw_hh = np.zeros_like(w_ih), np.zeros_like(w_hh)
        db = np.zeros(4 * hid, t)
        for s, i, f, g, o, c_prev, h_prev, tc in reversed(states):
            if gy is not None:
                dh = dh + gy[s]
            do = dh * tc
            dc = dc + _TANH.backward(M, dh * o, [None], tc, {}, [True])[0]
            di, df, dg = dc * g, dc * c_prev, dc * i
            dgates = np.concatenate([_SIG.backward(M, di, [None], i, {}, [True])[0],
                                     _SIG.backward(M, df, [None], f, {}, [True])[0],
                                     _TANH.backward(M, dg, [None], g, {}, [True])[0],
                                     _SIG.backward(M, do, [None], o, {}, [True])[0]], axis=1)
            dx[s] = ref_matmul(dgates, w_ih)
            dh = ref_matmul(dgates, w_hh)
            dc = dc * f
            dw_ih = dw_ih + ref_matmul(swap_last2(dgates), x[s])
            dw_hh = dw_hh + ref_matmul(swap_last2(dgates), h_prev)
            db = db + serial_sum(dgates, 0)
    dt = np.asarray(x0).dtype
    out = [dx, dw_ih, dw_hh]
    out += [db, db.copy()]  # (without biases too: oneDNN computes them, torch drops them)
    return [a.astype(dt) for a in out + [dh, dc]]


# ---- scaled dot-product attention -------------------------------------------------------------
@functools.lru_cache(maxsize=32)
def _causal(ls: int, ss: int, dt: np.dtype) -> np.ndarray:
    """The causal mask (-inf above the diagonal, 0 elsewhere), read only: made once per shape
    (np.triu of np.full was ~5 us of each attention call at the zoo's sizes)."""
    m = np.triu(np.full((ls, ss), -np.inf, dt), k=1)
    m.setflags(write=False)
    return m


def _scores(q, k, scale, is_causal, mask):
    s = _matmul(q, swap_last2(k))  # kᵀ C-ordered by the native copy: the same values
    t = s.dtype.type
    sc = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    s = s * t(sc)  # the scale rounded once on the host, as the tape's attention
    if is_causal:
        ls, ss = s.shape[-2:]
        s = s + _causal(ls, ss, s.dtype)
    if mask is not None:
        m = np.asarray(mask)
        s = np.where(m, s, t(-np.inf)) if m.dtype == np.bool_ else s + arr(m, s.dtype)
    return s, t(sc)


def _groups(q, k, v) -> int:
    """How many query heads share each key/value head: 1, or ``Hq / Hkv`` for grouped-query
    attention (``enable_gqa=True``: key and value with fewer heads, dimension -3, each read by
    a run of ``Hq / Hkv`` query heads, as ``repeat_interleave`` lays them out); NoReference for
    shapes that are neither."""
    qs, ks, vs = np.shape(q), np.shape(k), np.shape(v)
    if len(qs) < 3 or len(ks) != len(qs) or len(vs) != len(qs) or ks[:-1] != vs[:-1] \
            or qs[:-3] != ks[:-3] or qs[-1] != ks[-1]:
        raise NoReference("scaled dot-product attention: query, key and value shapes "
                          f"{list(qs)}, {list(ks)}, {list(vs)} do not go together")
    if qs[-3] == ks[-3]:
        return 1
    if ks[-3] == 0 or qs[-3] % ks[-3]:
        raise NoReference(f"scaled dot-product attention: {qs[-3]} query heads are not a "
                          f"multiple of {ks[-3]} key heads")
    return qs[-3] // ks[-3]


def _attention(q, k, v, mask, dropout_p, is_causal, scale):
    if dropout_p:
        raise NoReference("scaled dot-product attention with dropout is random")
    groups = _groups(q, k, v)
    out = result_type(q, k, v)
    qw, kw, vw = _w(q, out), _w(k, out), _w(v, out)
    if groups > 1:  # (grouped heads: each key/value head repeated for its query heads)
        kw, vw = np.repeat(kw, groups, axis=-3), np.repeat(vw, groups, axis=-3)
    with fp_quiet():
        s, _ = _scores(qw, kw, scale, is_causal, mask)
        # the tape's softmax (core.ops.reference.softmax: m = max; e = exp(s - m); z =
        # serial_sum(e); p = e / z) written out, so the logsumexp m + log(z) takes its m and
        # z: the same values as a second pass over the scores would make, one exp pass less
        m = np.max(s, axis=-1, keepdims=True)
        e = M.exp(s - m)
        z = serial_sum(e, -1, keepdims=True)
        p = e / z
        o = _matmul(p, vw)
        lse = m + M.log(z)
    return o.astype(out, copy=False), lse[..., 0], p, out


@form("aten._scaled_dot_product_flash_attention_for_cpu.default")
def _sdpa_flash_cpu(args: list, kwargs: dict) -> list:
    q, k, v = args[:3]
    o, lse, _, out = _attention(q, k, v, kwargs.get("attn_mask"), opt(kwargs, args, 3,
                                "dropout_p", 0.0), opt(kwargs, args, 4, "is_causal", False),
                                kwargs.get("scale"))
    return [o, lse.astype(F32 if out != np.float64 else out, copy=False)]


@form("aten._scaled_dot_product_attention_math.default")
def _sdpa_math(args: list, kwargs: dict) -> list:
    q, k, v = args[:3]
    o, _, p, out = _attention(q, k, v, opt(kwargs, args, 3, "attn_mask"),
                              opt(kwargs, args, 4, "dropout_p", 0.0),
                              opt(kwargs, args, 5, "is_causal", False), kwargs.get("scale"))
    return [o, p.astype(out, copy=False)]


@form("aten.scaled_dot_product_attention.default")
def _sdpa(args: list, kwargs: dict) -> list:
    q, k, v = args[:3]
    return [_attention(q, k, v, opt(kwargs, args, 3, "attn_mask"),
                       opt(kwargs, args, 4, "dropout_p", 0.0),
                       opt(kwargs, args, 5, "is_causal", False), kwargs.get("scale"))[0]]


@form("aten._scaled_dot_product_flash_attention_for_cpu_backward.default")
def _sdpa_flash_cpu_backward(args: list, kwargs: dict) -> list:
    g, q, k, v = args[:4]
    dropout_p, is_causal = opt(kwargs, args, 6, "dropout_p", 0.0), opt(kwargs, args, 7,
                                                                      "is_causal", False)
    if dropout_p:
        raise NoReference("scaled dot-product attention with dropout is random")
    groups = _groups(q, k, v)
    out = result_type(q, k, v)
    qw, kw, vw, gw = _w(q, out), _w(k, out), _w(v, out), _w(g, out)
    if groups > 1:
        kw, vw = np.repeat(kw, groups, axis=-3), np.repeat(vw, groups, axis=-3)
    with fp_quiet():
        # the forward's probabilities again (the recorded out and logsumexp are not read), then
        # the tape's attention backward: bmm, softmax and muls rules in reverse
        s, sc = _scores(qw, kw, kwargs.get("scale"), is_causal, kwargs.get("attn_mask"))
        p = REGISTRY["softmax"].forward(M, [s], {"axis": -1})
        gv = _matmul(swap_last2(p), gw)
        gp = _matmul(gw, swap_last2(vw))
        gs = REGISTRY["softmax"].backward(M, gp, [s], p, {"axis": -1}, [True])[0] * sc
        gq = _matmul(gs, kw)
        gk = _matmul(swap_last2(gs), qw)
        if groups > 1:  # repeat_interleave's backward: each head's copies summed in order
            gk, gv = (serial_sum(x.reshape(*np.shape(k)[:-2], groups, *x.shape[-2:]), -3)
                      for x in (gk, gv))
    return [gq.astype(q.dtype, copy=False), gk.astype(k.dtype, copy=False),
            gv.astype(v.dtype, copy=False)]
