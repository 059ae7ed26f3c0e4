"""Loss and normalisation ops of recent opsets: NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss,
RMSNormalization, RotaryEmbedding."""

from __future__ import annotations

import numpy as np

from tapescope.core.onnx.registry import op


def _nll(ctx, x, target, weight, reduction, ignore_index):
    t = np.asarray(target).astype(np.int64)
    c = x.shape[1]
    mask = np.ones(t.shape, bool) if ignore_index is None else t != ignore_index
    safe = np.where(mask, t, 0)
    picked = np.take_along_axis(x, np.expand_dims(safe, 1), axis=1)[:, 0]
    w = np.ones(c, x.dtype) if weight is None else weight
    wt = np.where(mask, w[safe], 0).astype(x.dtype)
    loss = -picked * wt
    if reduction == "none":
        return loss.astype(x.dtype)
    total = ctx.k.sum(loss)
    if reduction == "sum":
        return np.asarray(total, x.dtype)
    return np.asarray(total / ctx.k.sum(wt), x.dtype)  # weighted mean


@op("NegativeLogLikelihoodLoss")
def nll_loss(ctx, x, target, weight=None, ignore_index=None, reduction="mean"):
    return _nll(ctx, x, target, weight, reduction, ignore_index)


@op("SoftmaxCrossEntropyLoss")
def softmax_ce(ctx, scores, labels, weights=None, ignore_index=None, reduction="mean"):
    d = scores - np.max(scores, axis=1, keepdims=True)
    logp = (d - ctx.k.log(ctx.k.sum(ctx.k.exp(d), 1, keepdims=True))).astype(scores.dtype)
    loss = _nll(ctx, logp, labels, weights, reduction, ignore_index)
    return (loss, logp) if ctx.wants(1) else loss


@op("RMSNormalization")
def rms_norm(ctx, x, scale, axis=-1, epsilon=1e-5, stash_type=1):
    ax = axis % x.ndim
    xs = x.astype(np.float32) if stash_type == 1 and x.dtype != np.float64 else x
    axes = tuple(range(ax, x.ndim))
    n = int(np.prod([x.shape[a] for a in axes]))
    ms = ctx.k.sum(xs * xs, axes, keepdims=True) / xs.dtype.type(n)
    y = xs / np.sqrt(ms + xs.dtype.type(epsilon))
    return (y.astype(x.dtype) * scale).astype(x.dtype)


@op("RotaryEmbedding")
def rotary(ctx, x, cos, sin, pos=None, interleaved=0, num_heads=0, rotary_embedding_dim=0):
    shape = x.shape
    if x.ndim == 3:  # (B, S, hidden) -> (B, S, H, D)
        x = x.reshape(shape[0], shape[1], num_heads, -1)
    else:  # (B, H, S, D) -> (B, S, H, D)
        x = np.transpose(x, (0, 2, 1, 3))
    d = x.shape[-1]
    rd = rotary_embedding_dim or d
    if pos is not None:
        cos, sin = cos[pos], sin[pos]
    cos = cos[:, :, None, : rd // 2]
    sin = sin[:, :, None, : rd // 2]
    rot, rest = x[..., :rd], x[..., rd:]
    if interleaved:
        x1, x2 = rot[..., 0::2], rot[..., 1::2]
    else:
        x1, x2 = rot[..., : rd // 2], rot[..., rd // 2:]
    r1 = x1 * cos - x2 * sin
    r2 = x2 * cos + x1 * sin
    if interleaved:
        out = np.stack([r1, r2], axis=-1).reshape(rot.shape)
    else:
        out = np.concatenate([r1, r2], axis=-1)
    y = np.concatenate([out, rest], axis=-1).astype(x.dtype)
    if len(shape) == 3:
        return y.reshape(shape)
    return np.transpose(y, (0, 2, 1, 3))


