"""The movement family: Reshape, Transpose, Slice, Concat, Split, Pad, ... (no arithmetic)."""

from __future__ import annotations

import numpy as np

from tapescope.core.onnx.registry import as_int_list, op


@op("Reshape")
def reshape(ctx, x, shp=None, shape=None, allowzero=0, consumed_inputs=None):
    dims = as_int_list(shp if ctx.opset >= 5 else shape)
    if not allowzero:  # 0 copies the input's dim
        dims = [x.shape[i] if d == 0 else d for i, d in enumerate(dims)]
    return np.reshape(x, dims)


@op("Flatten")
def flatten(ctx, x, axis=1):
    ax = axis + x.ndim if axis < 0 else axis
    return x.reshape(int(np.prod(x.shape[:ax])), -1) if x.size else \
        x.reshape(int(np.prod(x.shape[:ax])), int(np.prod(x.shape[ax:])))


@op("Transpose")
def transpose(ctx, x, perm=None):
    return np.transpose(x, perm if perm else None)


@op("Squeeze")
def squeeze(ctx, x, axes_in=None, axes=None):
    ax = axes_in if ctx.opset >= 13 else axes
    if ax is None or np.asarray(ax).size == 0:
        return np.squeeze(x)
    return np.squeeze(x, tuple(a % x.ndim for a in as_int_list(ax)))


@op("Unsqueeze")
def unsqueeze(ctx, x, axes_in=None, axes=None):
    ax = as_int_list(axes_in if ctx.opset >= 13 else axes)
    n = x.ndim + len(ax)
    y = x
    for a in sorted(a % n for a in ax):
        y = np.expand_dims(y, a)
    return y


@op("Concat")
def concat(ctx, *xs, axis=None):
    if axis is None:
        axis = 1  # opset 1-3 default
    return np.concatenate(xs, axis=axis)


@op("Split")
def split(ctx, x, split_in=None, axis=0, split=None, num_outputs=None):
    ax = axis % x.ndim
    sizes = split_in if ctx.opset >= 13 else split
    if ctx.opset < 13 and split_in is not None:  # opset 2-12 also took it as an optional input
        sizes = split_in
    n = ctx.n_outputs
    if sizes is None or np.asarray(sizes).size == 0:
        d = x.shape[ax]
        if num_outputs is not None:
            n = num_outputs
        chunk = -(-d // n)  # ceil: the last part may be smaller (opset 18)
        sizes = [min(chunk, d - i * chunk) for i in range(n)]
    cuts = np.cumsum(as_int_list(sizes))[:-1]
    return tuple(np.split(x, cuts, axis=ax))


@op("Slice")
def slice_(ctx, x, starts=None, ends=None, axes=None, steps=None):
    if ctx.opset < 10:  # starts/ends/axes were attributes
        pass
    st, en = as_int_list(starts), as_int_list(ends)
    ax = as_int_list(axes) if axes is not None else list(range(len(st)))
    sp = as_int_list(steps) if steps is not None else [1] * len(st)
    sl = [slice(None)] * x.ndim
    for s, e, a, p in zip(st, en, ax, sp, strict=False):
        a %= x.ndim
        d = x.shape[a]
        # clamp like the spec: INT_MAX/INT_MIN style sentinels behave as 'to the end'
        s = max(-d - 1, min(d, s))
        e = max(-d - 1, min(d, e))
        if p < 0:
            s = d - 1 if s >= d else s
            e = None if e < -d else e
        else:
            s = 0 if s < -d else s
        sl[a] = slice(s, e, p)
    return x[tuple(sl)]


@op("Expand")
def expand(ctx, x, shp):
    target = np.broadcast_shapes(x.shape, tuple(as_int_list(shp)))
    return np.broadcast_to(x, target).copy()


@op("Tile")
def tile(ctx, x, repeats, tiles=None, axis=None):
    return np.tile(x, as_int_list(repeats))


@op("Identity")
def identity(ctx, x):
    return x


@op("Dropout")
def dropout(ctx, x, ratio_in=None, training_mode=None, ratio=0.5, is_test=0, seed=None):
    """Inference (or ratio 0): the identity, mask all True. Training mode: the tape import's
    mask (core.onnx.lowerings.dropout), drawn from the run's seed (``Session.run(seed=)``):
    ``keep = default_rng((*seed, node index)).random(x.shape) >= ratio`` and ``y = x * m``,
    ``m = keep ? T(1/(1-ratio)) : +0.0`` in x's type, one multiply. Without a seed: refused.
    (The node's ``seed`` attribute is not used: the run's seed decides, as on the tape.)"""
    r = float(np.asarray(ratio_in)) if ratio_in is not None else ratio
    if training_mode is None or not bool(np.asarray(training_mode)) or r == 0:
        return (x, np.ones(x.shape, dtype=bool)) if ctx.n_outputs > 1 else x
    if not 0.0 <= r < 1.0:
        raise ValueError(f"Dropout ratio {r} is outside [0, 1)")
    run = ctx.budget
    if run is None or run.seed is None:
        raise ValueError("Dropout in training mode draws a random mask: give a seed "
                         "(tapescope onnx --seed N; Session.run(..., seed=(N, 0)))")
    label = ctx.label
    index = int(label.split()[1]) if label.startswith("node ") else len(run.masks)
    rng = np.random.default_rng((*np.atleast_1d(run.seed).tolist(), index))
    keep = rng.random(x.shape) >= r
    run.masks[ctx.node.output[0]] = keep
    y = x * np.where(keep, 1.0 / (1.0 - r), 0.0).astype(x.dtype)
    return (y, keep) if ctx.wants(1) else y


@op("Pad")
def pad(ctx, x, pads_in=None, value_in=None, axes=None, mode="constant", pads=None,
        paddings=None, value=0.0):
    if ctx.opset >= 11:
        p = as_int_list(pads_in)
        v = 0 if value_in is None or np.asarray(value_in).size == 0 else \
            np.asarray(value_in).reshape(-1)[0]
    else:
        p = list(pads if pads is not None else paddings)
        v = value
    ax = as_int_list(axes) if axes is not None else list(range(x.ndim))
    ax = [a % x.ndim for a in ax]
    n = len(ax)
    width = [(0, 0)] * x.ndim
    for i, a in enumerate(ax):
        width[a] = (p[i], p[i + n])
    # negative pads crop
    crop = tuple(slice(-b if b < 0 else 0, x.shape[i] + e if e < 0 else None)
                 for i, (b, e) in enumerate(width))
    x = x[crop]
    width = [(max(b, 0), max(e, 0)) for b, e in width]
    if mode == "constant":
        return np.pad(x, width, mode="constant", constant_values=v)
    return np.pad(x, width, mode={"reflect": "reflect", "edge": "edge", "wrap": "wrap"}[mode])


@op("DepthToSpace")
def depth_to_space(ctx, x, blocksize=1, mode="DCR"):
    n, c, h, w = x.shape
    b = blocksize
    if mode == "DCR":
        y = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        y = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    return y.reshape(n, c // (b * b), h * b, w * b)


@op("SpaceToDepth")
def space_to_depth(ctx, x, blocksize=1, mode="DCR"):
    n, c, h, w = x.shape
    b = blocksize
    perm = (0, 1, 3, 5, 2, 4) if mode == "CRD" else (0, 3, 5, 1, 2, 4)
    y = x.reshape(n, c, h // b, b, w // b, b).transpose(perm)
    return y.reshape(n, c * b * b, h // b, w // b)


@op("Compress")
def compress(ctx, x, condition, axis=None):
    cond = np.asarray(condition).astype(bool)
    return np.compress(cond, x, axis=axis)


@op("ReverseSequence")
def reverse_sequence(ctx, x, lens, batch_axis=1, time_axis=0):
    y = x.copy()
    for b, n in enumerate(as_int_list(lens)):
        src = [slice(None)] * x.ndim
        src[batch_axis] = b
        src[time_axis] = slice(0, n)
        dst = list(src)
        dst[time_axis] = slice(n - 1, None, -1) if n > 0 else slice(0, 0)
        y[tuple(src)] = x[tuple(dst)]
    return y
