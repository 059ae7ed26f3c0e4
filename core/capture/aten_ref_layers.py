"""Reference forms of aten's layer kernels: layer norm, batch norm, group norm, embedding and
scaled dot-product attention, with their backwards (convolutions and pools: ``aten_ref_conv``).
Each is the tape's own form where it is the same op (``layer_norm``'s lines, the ``attention``
composite, ``gather``'s scatter-add) and otherwise the composite written in
docs/reference-order.md, "Captured aten ops". Half inputs compute in float32 and round each
output once."""

from __future__ import annotations

import functools
import math

import numpy as np

from tapescope.core.capture.aten_ref_shape import swap_last2
from tapescope.core.capture.aten_ref_table import (
    F32,
    HALF,
    I64,
    M,
    NoReference,
    arr,
    compute,
    form,
    fp_quiet,
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
    return [y.reshape(x.shape).astype(x.dtype), mu.reshape(stat).astype(sd),
            r.reshape(stat).astype(sd)]


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
            out.append((r * ((gd - ma) - (xh * mb))).reshape(x.shape).astype(x.dtype))
        if mask[1] and weight is not None:
            out.append(serial_sum(g2 * xh, 0).reshape(weight.shape).astype(weight.dtype))
        if mask[2] and bias is not None:
            out.append(serial_sum(g2, 0).reshape(bias.shape).astype(bias.dtype))
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
    return [y.reshape(x.shape).astype(x.dtype), mu.reshape(n_, groups).astype(sd),
            r.reshape(n_, groups).astype(sd)]


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
            out.append((r * ((gd - ma) - (xh * mb))).reshape(x.shape).astype(x.dtype))
        if mask[1]:
            out.append(serial_sum(gw * xh.reshape(n_, c, -1), (0, 2)).astype(x.dtype))
        if mask[2]:
            out.append(serial_sum(gw, (0, 2)).astype(x.dtype))
    return out


# ---- embedding --------------------------------------------------------------------------------
@form("aten.embedding.default")
def _embedding(args: list, kwargs: dict) -> list:
    w, idx = args[0], np.asarray(args[1]).astype(I64)
    return [np.take(w, idx, axis=0)]


@form("aten.embedding_dense_backward.default")
def _embedding_backward(args: list, kwargs: dict) -> list:
    g, idx, num, pad, scale = args[:5]
    if scale:
        raise NoReference("embedding_dense_backward with scale_grad_by_freq")
    rows = np.asarray(idx).astype(I64).reshape(-1)
    gw = _w(g).reshape(rows.size, -1)
    base = np.broadcast_to(np.zeros((), gw.dtype), (int(num), gw.shape[1]))
    # the tape's gather backward: zeros, then g's rows added in index order
    out = REGISTRY["gather"].backward(M, gw, [base, rows], None, {"axis": 0}, [True, False])[0]
    if 0 <= pad < num:
        out[pad] = 0
    return [out.astype(g.dtype)]


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


def _attention(q, k, v, mask, dropout_p, is_causal, scale):
    if dropout_p:
        raise NoReference("scaled dot-product attention with dropout is random")
    if q.shape[:-2] != k.shape[:-2]:
        raise NoReference("scaled dot-product attention with grouped heads (enable_gqa)")
    out = result_type(q, k, v)
    qw, kw, vw = _w(q, out), _w(k, out), _w(v, out)
    with fp_quiet():
        s, _ = _scores(qw, kw, scale, is_causal, mask)
        p = REGISTRY["softmax"].forward(M, [s], {"axis": -1})
        o = _matmul(p, vw)
        m = np.max(s, axis=-1, keepdims=True)
        lse = m + M.log(serial_sum(M.exp(s - m), -1, keepdims=True))
    return o.astype(out), lse[..., 0], p, out


@form("aten._scaled_dot_product_flash_attention_for_cpu.default")
def _sdpa_flash_cpu(args: list, kwargs: dict) -> list:
    q, k, v = args[:3]
    o, lse, _, out = _attention(q, k, v, kwargs.get("attn_mask"), opt(kwargs, args, 3,
                                "dropout_p", 0.0), opt(kwargs, args, 4, "is_causal", False),
                                kwargs.get("scale"))
    return [o, lse.astype(F32 if out != np.float64 else out)]


@form("aten._scaled_dot_product_attention_math.default")
def _sdpa_math(args: list, kwargs: dict) -> list:
    q, k, v = args[:3]
    o, _, p, out = _attention(q, k, v, opt(kwargs, args, 3, "attn_mask"),
                              opt(kwargs, args, 4, "dropout_p", 0.0),
                              opt(kwargs, args, 5, "is_causal", False), kwargs.get("scale"))
    return [o, p.astype(out)]


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
    out = result_type(q, k, v)
    qw, kw, vw, gw = _w(q, out), _w(k, out), _w(v, out), _w(g, out)
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
    return [gq.astype(q.dtype), gk.astype(k.dtype), gv.astype(v.dtype)]
