"""Data movement: transpose, reshape, slice, concat. No arithmetic; gradients are exact copies."""

from __future__ import annotations

import numpy as np

from tapescope.core.optable.registry import OpDef, ShapeError, norm_axis, register


def _axes(shape, attrs):
    axes = attrs.get("axes")
    if axes is None:
        return tuple(range(len(shape)))[::-1]
    axes = tuple(norm_axis(a, len(shape)) for a in axes)
    if sorted(axes) != list(range(len(shape))):
        raise ShapeError(f"axes {tuple(attrs['axes'])} are not a permutation for rank "
                         f"{len(shape)}")
    return axes


def _transpose_bwd(M, g, xs, y, at, needs):
    axes = _axes(xs[0].shape, at)
    return [g.transpose(np.argsort(axes)).copy(order="C")]


def _r(rng, dtype, *s):
    return rng.uniform(-1, 1, s).astype(dtype)


register(OpDef(
    "transpose", 1, "movement", "none",
    lambda sh, at: tuple(sh[0][a] for a in _axes(sh[0], at)),
    # NOTE: .copy(order="C"), not np.ascontiguousarray, which turns a 0-d array into 1-d
    forward=lambda M, xs, at: xs[0].transpose(_axes(xs[0].shape, at)).copy(order="C"),
    backward=_transpose_bwd,
    sample=lambda rng, dt: [([_r(rng, dt, 3, 4)], {"axes": None}),
                            ([_r(rng, dt, 2, 3, 4)], {"axes": (1, 0, 2)})],
    doc="permutation of axes (default: reversed)"))


def _reshape_shape(shapes, at):
    src = shapes[0]
    target = tuple(at["shape"])
    n = int(np.prod(src, dtype=np.int64))
    if target.count(-1) > 1:
        raise ShapeError(f"reshape {src} to {target}: at most one -1")
    known = int(np.prod([d for d in target if d != -1], dtype=np.int64))
    if -1 in target:
        if known == 0 or n % known:
            raise ShapeError(f"cannot reshape {src} to {target}")
        target = tuple(n // known if d == -1 else d for d in target)
    if int(np.prod(target, dtype=np.int64)) != n:
        raise ShapeError(f"cannot reshape {src} ({n} elements) to {target}")
    return target


register(OpDef(
    "reshape", 1, "movement", "none", _reshape_shape,
    forward=lambda M, xs, at: xs[0].reshape(_reshape_shape([xs[0].shape], at)).copy(),
    backward=lambda M, g, xs, y, at, needs: [g.reshape(xs[0].shape)],
    sample=lambda rng, dt: [([_r(rng, dt, 3, 4)], {"shape": (2, 6)}),
                            ([_r(rng, dt, 2, 3, 4)], {"shape": (-1, 4)})],
    doc="row-major reshape"))


def _slice_shape(shapes, at):
    s = shapes[0]
    ax = norm_axis(at["axis"], len(s))
    start, stop = at["start"], at["stop"]
    if not 0 <= start <= stop <= s[ax]:
        raise ShapeError(f"slice [{start}:{stop}] is out of range for axis {ax} of {s}")
    return s[:ax] + (stop - start,) + s[ax + 1:]


def _slice_index(shape, at):
    ax = norm_axis(at["axis"], len(shape))
    return (slice(None),) * ax + (slice(at["start"], at["stop"]),)


def _slice_bwd(M, g, xs, y, at, needs):
    out = np.zeros_like(xs[0])
    out[_slice_index(xs[0].shape, at)] = g
    return [out]


register(OpDef(
    "slice", 1, "movement", "none", _slice_shape,
    forward=lambda M, xs, at: xs[0][_slice_index(xs[0].shape, at)].copy(),
    backward=_slice_bwd,
    sample=lambda rng, dt: [([_r(rng, dt, 3, 6)], {"axis": 1, "start": 1, "stop": 4}),
                            ([_r(rng, dt, 4, 2)], {"axis": 0, "start": 0, "stop": 2})],
    doc="x[start:stop] along axis; ga = zeros with g placed (+0.0 elsewhere)"))


def _concat_shape(shapes, at):
    if not shapes:
        raise ShapeError("concat needs at least one input")
    s0 = shapes[0]
    ax = norm_axis(at["axis"], len(s0))
    for s in shapes[1:]:
        if len(s) != len(s0) or s[:ax] != s0[:ax] or s[ax + 1:] != s0[ax + 1:]:
            raise ShapeError(f"concat along axis {ax}: shapes {tuple(shapes)} do not fit")
    return s0[:ax] + (sum(s[ax] for s in shapes),) + s0[ax + 1:]


def _concat_bwd(M, g, xs, y, at, needs):
    ax = norm_axis(at["axis"], g.ndim)
    out, off = [], 0
    for x in xs:
        n = x.shape[ax]
        out.append(g[(slice(None),) * ax + (slice(off, off + n),)].copy(order="C"))
        off += n
    return out


register(OpDef(
    "concat", None, "movement", "none", _concat_shape,
    forward=lambda M, xs, at: np.concatenate(xs, axis=at["axis"]),
    backward=_concat_bwd,
    sample=lambda rng, dt: [([_r(rng, dt, 2, 3), _r(rng, dt, 2, 2)], {"axis": 1}),
                            ([_r(rng, dt, 1, 3), _r(rng, dt, 2, 3), _r(rng, dt, 1, 3)],
                             {"axis": 0})],
    doc="inputs joined along axis; each ga is its slice of g"))
