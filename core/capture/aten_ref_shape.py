"""Reference forms of aten's copies, casts, fills, factories and views: no arithmetic, so every
one is exact (a view returns a copy of the values it shows: the reference never aliases a
recorded input). Casts follow c10's conversions: float64 -> float16/bfloat16 goes through
float32 (two roundings, as ``c10::Half(double)``), float -> integer truncates."""

from __future__ import annotations

import ctypes
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from tapescope.core.capture.aten_ref_table import (
    BOOL,
    F32,
    F64,
    HALF,
    I64,
    NoReference,
    arr,
    as_dtype,
    check_elems,
    default_float,
    fast,
    form,
    fp_quiet,
    is_float,
    opt,
    recorded_output,
    result_type,
)
from tapescope.core.capture.file import LAYOUT_KW, c_strides


def cast(x: Any, dt: np.dtype) -> np.ndarray:
    """``x`` converted to ``dt`` as torch converts (see the module docstring)."""
    x = np.asarray(x)
    if x.dtype == dt:
        return x.copy()
    with fp_quiet():
        if dt == BOOL:
            return x != 0
        if dt in HALF and x.dtype == F64:
            return x.astype(F32).astype(dt)
        return x.astype(dt)


def _copy(args: list, kwargs: dict) -> list:
    return [np.array(args[0], copy=True)]


for _n in ("clone", "detach", "alias", "lift_fresh", "lift_fresh_copy", "contiguous",
           "_local_scalar_dense", "positive"):
    form(f"aten.{_n}.default")(_copy)


@form("aten._to_copy.default")
def _to_copy(args: list, kwargs: dict) -> list:
    dt = as_dtype(kwargs.get("dtype"))
    return [cast(args[0], dt if dt is not None else args[0].dtype)]


@form("prims.convert_element_type.default")
def _convert_element_type(args: list, kwargs: dict) -> list:
    """inductor's decompositions spell a cast this way (compiled graphs, core/capture/regions)."""
    return [cast(args[0], as_dtype(args[1]))]


@form("aten.copy.default")
def _copy_into(args: list, kwargs: dict) -> list:
    self, src = args[0], args[1]
    return [cast(np.broadcast_to(src, self.shape), self.dtype)]


@form("aten.fill.Scalar", "aten.fill.Tensor")
def _fill(args: list, kwargs: dict) -> list:
    return [np.full(args[0].shape, cast(args[1], args[0].dtype))]


@form("aten.zero.default")
def _zero(args: list, kwargs: dict) -> list:
    return [np.zeros(args[0].shape, args[0].dtype)]


def _fill_dtype(v: Any, dt: Any) -> np.dtype:
    d = as_dtype(dt)
    if d is not None:
        return d
    if isinstance(v, bool):
        return BOOL
    return I64 if isinstance(v, int) else default_float()


def _like(value: Any):
    def run(args: list, kwargs: dict) -> list:
        x = args[0]
        dt = as_dtype(kwargs.get("dtype")) or x.dtype
        v = args[1] if value is None else value
        return [np.full(x.shape, cast(v, dt))]
    return run


form("aten.zeros_like.default")(_like(0))
form("aten.ones_like.default")(_like(1))
form("aten.full_like.default")(_like(None))


@fast("aten.zeros_like.default")
def _fast_zeros_like(args: list, kwargs: dict) -> list | None:
    """zeros_like of an array in its own dtype (an optimizer's new state: ~60 a zoo GPT
    capture): the form's fill of ``cast(0, dtype)``, all zero bits (+0.0, False), as
    ``np.zeros``; None with a dtype (the form)."""
    x = args[0] if len(args) == 1 else None
    if type(x) is not np.ndarray or (kwargs and kwargs.get("dtype") is not None):
        return None
    return [np.zeros(x.shape, x.dtype)]


def _numel(size: Any, what: str) -> tuple[int, ...]:
    """A size argument as a shape of non-negative ints, its elements within ``check_elems``."""
    if not isinstance(size, list | tuple) or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in size):
        raise NoReference(f"{what}: a size of non-negative integers")
    check_elems(math.prod(size), what)
    return tuple(size)


def _factory(value: Any):
    def run(args: list, kwargs: dict) -> list:
        size = _numel(args[0], "a factory")
        v = args[1] if value is None else value
        dt = as_dtype(kwargs.get("dtype")) or (_fill_dtype(v, None) if value is None
                                                else default_float())
        return [np.full(size, cast(v, dt))]
    return run


form("aten.zeros.default")(_factory(0))
# forward AD's zero tangents (a ZeroTensor: zeros, whatever its memory holds)
form("aten._efficientzerotensor.default")(_factory(0))
form("aten.ones.default")(_factory(1))
form("aten.full.default")(_factory(None))


def _new(value: Any):
    def run(args: list, kwargs: dict) -> list:
        x, size = args[0], _numel(args[1], "a new tensor")
        v = args[2] if value is None else value
        dt = as_dtype(kwargs.get("dtype")) or x.dtype
        return [np.full(size, cast(v, dt))]
    return run


form("aten.new_zeros.default")(_new(0))
form("aten.new_ones.default")(_new(1))
form("aten.new_full.default")(_new(None))


@form("aten.eye.default", "aten.eye.m")
def _eye(args: list, kwargs: dict) -> list:
    """``eye(n[, m])``: ones on the diagonal (float32 unless a dtype is given)."""
    n = args[0]
    m = args[1] if len(args) > 1 else n
    rows, cols = _numel([n, m], "eye")
    return [np.eye(rows, cols, dtype=as_dtype(kwargs.get("dtype")) or default_float())]


@form("aten.scalar_tensor.default")
def _scalar_tensor(args: list, kwargs: dict) -> list:
    return [cast(args[0], as_dtype(kwargs.get("dtype")) or default_float())]


@form("aten.arange.default", "aten.arange.start", "aten.arange.start_step")
def _arange(args: list, kwargs: dict) -> list:
    nums = [a for a in args if isinstance(a, int | float)]
    start, end, step = (0, nums[0], 1) if len(nums) == 1 else (
        nums[0], nums[1], nums[2] if len(nums) > 2 else 1)
    dt = as_dtype(kwargs.get("dtype"))
    if dt is None:
        dt = I64 if all(isinstance(v, int) for v in (start, end, step)) else default_float()
    if step == 0 or not all(math.isfinite(v) for v in (start, end, step)):
        raise NoReference("arange: a finite range and a non-zero step")
    n = max(0, -(-(end - start) // step)) if isinstance(end - start, int) else \
        max(0, int(np.ceil((end - start) / step)))
    check_elems(n, "arange")
    # value i = start + i * step, in float64 (torch's accumulate type), then rounded once
    vals = np.asarray(start, F64) + np.arange(n, dtype=F64) * np.asarray(step, F64)
    return [vals.astype(dt) if dt != I64 else start + np.arange(n, dtype=I64) * step]


@form("aten.linspace.default")
def _linspace(args: list, kwargs: dict) -> list:
    """``steps`` values from ``start`` to ``end``: ATen's two-sided formula (start + step * i
    for the first half, end - step * (steps - 1 - i) for the rest, so both ends are exact),
    in float64, rounded once."""
    start, end, steps = args[0], args[1], args[2]
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in (start, end)) \
            or not isinstance(steps, int) or isinstance(steps, bool) or not 0 <= steps <= 1 << 31:
        raise NoReference("linspace: number ends and 0 to 2**31 steps")
    check_elems(steps, "linspace")
    return [_lin(start, end, steps, as_dtype(kwargs.get("dtype")) or default_float())]


def _lin(start: float, end: float, steps: int, dt: np.dtype) -> np.ndarray:
    """The linspace form's values (its two-sided formula in float64, rounded once to ``dt``)."""
    if steps == 1:
        return np.asarray([start], F64).astype(dt)
    i = np.arange(steps, dtype=F64)
    step = (F64.type(end) - F64.type(start)) / F64.type(max(steps - 1, 1))
    with np.errstate(all="ignore"):
        v = np.where(i < steps // 2, F64.type(start) + step * i,
                     F64.type(end) - step * (steps - 1 - i))
    return np.rint(v).astype(dt) if dt.kind in "iu" else v.astype(dt)


@form("prims.iota.default")
def _iota(args: list, kwargs: dict) -> list:
    """start + i * step, i < length, in the dtype asked for (an integer range: exact)."""
    dt = as_dtype(kwargs.get("dtype")) or I64
    start, step = kwargs.get("start", 0), kwargs.get("step", 1)
    if dt != I64 and not all(isinstance(v, int) for v in (start, step)):
        raise NoReference("prims.iota of a float range")
    return [(start + np.arange(int(args[0]), dtype=I64) * step).astype(dt)]


# ---- views: the values they show, copied ------------------------------------------------------
def _dim(d: int, nd: int) -> int:
    return d + nd if d < 0 else d


def _shape(x: np.ndarray, size) -> tuple[int, ...]:
    return tuple(int(s) for s in size)


@form("aten.view.default", "aten._unsafe_view.default", "aten.reshape.default",
      "aten._reshape_alias.default")
def _view(args: list, kwargs: dict) -> list:
    x = args[0]
    if isinstance(args[1], str) or "dtype" in kwargs:  # view.dtype: a bit reinterpretation
        raise NoReference("view.dtype reinterprets bits; it has no reference form")
    return [np.array(x.reshape(_shape(x, args[1])))]


# (the library they came from, item size -> its ts_transpose_uN): core.native.use_isa swaps
# the library in and out (the tests run every path), so the functions follow it
_TRANSPOSE: tuple[Any, dict[int, Any]] = (None, {})
#: below this many elements numpy's copy is cheaper than a ctypes call
TRANSPOSE_NATIVE_MIN = 4096


def _native_transpose() -> dict[int, Any]:
    global _TRANSPOSE
    from tapescope.core import native

    lib = native.library()
    if lib is not _TRANSPOSE[0]:
        fns = {}
        if lib is not None and hasattr(lib, "ts_transpose_u32"):
            p, ll = ctypes.c_void_p, ctypes.c_longlong
            for n in (2, 4, 8):
                fn = getattr(lib, f"ts_transpose_u{8 * n}")
                fn.argtypes, fn.restype = [p, p, ll, ll, ll], None
                fns[n] = fn
        _TRANSPOSE = (lib, fns)
    return _TRANSPOSE[1]


def swap_last2(x: np.ndarray, native_min: int = TRANSPOSE_NATIVE_MIN) -> np.ndarray:
    """``x`` with its last two axes swapped, as a new C-ordered array: the native tiled copy
    (the elements' bytes, nothing computed) for a C-contiguous ``x`` of 2-, 4- or 8-byte
    plain items and at least ``native_min`` elements, else numpy's copy of the swapped view
    (the same values; 3-7x slower on a 256 x 1024 float32); that too for an ``x`` not
    aligned to its items (the C copy reads whole items: core.native.aligned)."""
    if (x.ndim < 2 or x.size < max(native_min, 1) or not x.flags.c_contiguous
            or not x.flags.aligned or x.dtype.hasobject or x.dtype.fields is not None):
        # the swapped view's C-order copy (the method's: np.swapaxes and np.array's keyword
        # were ~0.6 us of each small transpose, ~200 a zoo GPT capture's judge)
        return x.swapaxes(-1, -2).copy()
    fn = _native_transpose().get(x.itemsize)
    if fn is None:
        return x.swapaxes(-1, -2).copy()
    r, c = x.shape[-2:]
    out = np.empty(x.shape[:-2] + (c, r), x.dtype)
    fn(x.ctypes.data, out.ctypes.data, x.size // (r * c), r, c)
    return out


def _ro(v: np.ndarray) -> np.ndarray:
    v.setflags(write=False)
    return v


@form("aten.t.default", "aten.numpy_T.default")
def _t(args: list, kwargs: dict) -> list:
    return [_ro(args[0].T)]


@form("aten.transpose.int")
def _transpose(args: list, kwargs: dict) -> list:
    x = args[0]
    a, b = sorted((_dim(args[1], x.ndim), _dim(args[2], x.ndim)))
    return [_ro(x.swapaxes(a, b))]


@form("aten.transpose_.default")
def _transpose_(args: list, kwargs: dict) -> list:
    """In place: the tensor itself with two dims exchanged (GRU / LSTM's weights' views);
    the value, a copy laid out as the new shape."""
    x = args[0]
    a, b = sorted((_dim(args[1], x.ndim), _dim(args[2], x.ndim)))
    return [np.array(x.swapaxes(a, b))]


@form("aten.t_.default")
def _t_(args: list, kwargs: dict) -> list:
    return [np.array(args[0].T)]


@form("aten.permute.default")
def _permute(args: list, kwargs: dict) -> list:
    x = args[0]
    perm = [_dim(d, x.ndim) for d in args[1]]
    return [_ro(np.transpose(x, perm))]


@form("aten.expand.default")
def _expand(args: list, kwargs: dict) -> list:
    x, size = args[0], list(args[1])
    lead = len(size) - x.ndim
    shape = [x.shape[i - lead] if s == -1 else s for i, s in enumerate(size)]
    return [np.array(np.broadcast_to(x, _numel(shape, "expand")))]


def _positions(shape: tuple[int, ...], strides: Any, offset: int) -> np.ndarray:
    """The storage position (in elements) of each element of a tensor of ``shape`` laid out by
    ``strides`` from ``offset``, in C order (int64; the caller checks the largest fits)."""
    pos = np.full((), offset, np.int64)
    nd = len(shape)
    for d, (n, st) in enumerate(zip(shape, strides, strict=True)):
        if n > 1 and st:
            pos = pos + (np.arange(n, dtype=np.int64) * st).reshape(
                [n if j == d else 1 for j in range(nd)])
    return np.broadcast_to(pos, shape).reshape(-1)


def _unfold_geometry(shape: tuple, dim: Any, size: Any, step: Any) -> tuple[int, int, int, int]:
    """(dim, size, step, windows) of ``Tensor.unfold``, checked as torch checks them."""
    if not shape:
        raise NoReference("unfold of a 0-d tensor")
    d = _dim(int(dim), len(shape))
    size, step = int(size), int(step)
    if not 0 <= d < len(shape) or size < 0 or step < 1 or size > shape[d]:
        raise NoReference("unfold: a dimension, size or step torch refuses")
    return d, size, step, (shape[d] - size) // step + 1


@form("aten.unfold.default", "aten.unfold_copy.default")
def _unfold(args: list, kwargs: dict) -> list:
    """``x.unfold(dim, size, step)`` (sliding windows: a ViT's patches, a 1-d conv by hand):
    window ``i`` of ``dim`` holds ``x[i * step + j]`` at ``j`` of a new last dimension."""
    x = np.asarray(args[0])
    d, size, step, n = _unfold_geometry(x.shape, args[1], args[2], args[3])
    check_elems(n * size * (x.size // max(x.shape[d], 1)), "unfold")
    win = np.lib.stride_tricks.sliding_window_view(x, size, axis=d)
    return [np.ascontiguousarray(np.take(win, np.arange(n) * step, axis=d))]


@form("aten.unfold_backward.default")
def _unfold_backward(args: list, kwargs: dict) -> list:
    """ATen's ``unfold_backward`` kernel: each input element from +0 adds the gradients of
    the windows that hold it in window order (``g[i, j]`` for ``i * step + j`` its index);
    an element no window holds stays 0."""
    g = np.asarray(args[0])
    in_shape = tuple(int(v) for v in args[1])
    d, size, step, n = _unfold_geometry(in_shape, args[2], args[3], args[4])
    want = in_shape[:d] + (n,) + in_shape[d + 1:] + (size,)
    if g.shape != want:
        raise NoReference(f"unfold_backward: a gradient of shape {g.shape}, not {want}")
    check_elems(math.prod(in_shape), "unfold_backward")
    gi = np.zeros(in_shape, g.dtype)
    gm = np.moveaxis(gi, d, -1)  # (a view: the windows' dimension last)
    gw = np.moveaxis(g, d, -2)  # (..., n, size)
    with fp_quiet():
        for i in range(n):
            gm[..., i * step:i * step + size] = gm[..., i * step:i * step + size] + gw[..., i, :]
    return [gi]


@form("aten.as_strided.default", "aten.as_strided_.default", "aten.as_strided_copy.default")
def _as_strided(args: list, kwargs: dict) -> list:
    """The elements ``x.as_strided(size, stride, offset)`` shows: each output element's
    storage position found among the input's own (laid out by its recorded layout,
    ``LAYOUT_KW``); an element of the storage that is not one of the input's is not in the
    capture: no reference."""
    x = np.asarray(args[0])
    size, stride = args[1], args[2]
    offset = args[3] if len(args) > 3 else kwargs.get("storage_offset")
    layout = kwargs.get(LAYOUT_KW)
    if layout is None:
        raise NoReference("its input's memory layout is not in the capture (one made before "
                          "tapescope recorded layouts: capture it again)")
    in_strides, in_offset = layout
    if offset is None:
        offset = in_offset
    ok = lambda v: isinstance(v, (list, tuple)) and all(  # noqa: E731
        type(n) is int and n >= 0 for n in v)
    if not (ok(size) and ok(stride) and len(size) == len(stride) and type(offset) is int
            and offset >= 0 and len(in_strides) == x.ndim):
        raise NoReference("its size, stride or offset is not a list of counts")
    shape = tuple(size)
    n = math.prod(shape)
    check_elems(n, "as_strided")
    if n == 0:
        return [np.empty(shape, x.dtype)]
    last = offset + sum((d - 1) * st for d, st in zip(shape, stride, strict=True))
    in_last = in_offset + sum((d - 1) * st for d, st in zip(x.shape, in_strides, strict=True))
    if max(last, in_last) >= 1 << 62:
        raise NoReference("its storage positions do not fit 62 bits")
    want = _positions(shape, stride, offset)
    flat = x.reshape(-1)
    if x.size and all(st == c for d, st, c in zip(x.shape, in_strides, c_strides(x.shape),
                                                  strict=True) if d > 1):
        at = want - in_offset  # (the input dense in C order from its offset: the position)
        if at.min() < 0 or at.max() >= x.size:
            raise NoReference("it shows storage outside its input's elements (not in the "
                              "capture)")
        return [flat[at].reshape(shape)]
    have = _positions(x.shape, in_strides, in_offset)
    order = np.argsort(have, kind="stable")
    ranked = have[order]
    j = np.minimum(np.searchsorted(ranked, want), ranked.size - 1)
    if ranked.size == 0 or not np.array_equal(ranked[j], want):
        raise NoReference("it shows storage outside its input's elements (not in the "
                          "capture)")
    return [flat[order[j]].reshape(shape)]


@form("aten.slice.Tensor")
def _slice(args: list, kwargs: dict) -> list:
    x = args[0]
    d = _dim(opt(kwargs, args, 1, "dim", 0), x.ndim)
    start, end = opt(kwargs, args, 2, "start"), opt(kwargs, args, 3, "end")
    step = opt(kwargs, args, 4, "step", 1)
    return [np.array(x[(slice(None),) * d + (slice(start, end, step),)])]


@form("aten.select.int")
def _select(args: list, kwargs: dict) -> list:
    x = args[0]
    d = _dim(args[1], x.ndim)
    return [np.array(x[(slice(None),) * d + (args[2],)])]


@form("aten.set_.source_Tensor")
def _set_source(args: list, kwargs: dict) -> list:
    """``x.set_(src)``: ``x`` now shows ``src``'s storage, shape and strides (a module swapping
    a parameter's data: spectral_norm): ``src``'s values."""
    return [np.array(args[1])]


@form("aten.narrow.default")
def _narrow(args: list, kwargs: dict) -> list:
    x, d, start, length = args
    d = _dim(d, x.ndim)
    start = _dim(start, x.shape[d])
    return [np.array(x[(slice(None),) * d + (slice(start, start + length),)])]


@form("aten.unsqueeze.default", "aten.unsqueeze_.default")
def _unsqueeze(args: list, kwargs: dict) -> list:
    x = args[0]
    return [np.array(np.expand_dims(x, _dim(args[1], x.ndim + 1)))]


@form("aten.squeeze.default", "aten.squeeze.dim", "aten.squeeze.dims",
      "aten.squeeze_.default", "aten.squeeze_.dim", "aten.squeeze_.dims")
def _squeeze(args: list, kwargs: dict) -> list:
    x = args[0]
    dims = opt(kwargs, args, 1, "dim")
    if dims is None:
        return [np.array(np.squeeze(x))]
    dims = [dims] if isinstance(dims, int) else list(dims)
    keep = tuple(_dim(d, max(x.ndim, 1)) for d in dims)
    return [np.array(np.squeeze(x, tuple(d for d in keep if x.ndim and x.shape[d] == 1)))]


@form("aten.flatten.using_ints")
def _flatten(args: list, kwargs: dict) -> list:
    x = args[0]
    if x.ndim == 0:
        return [x.reshape(1).copy()]
    s = _dim(opt(kwargs, args, 1, "start_dim", 0), x.ndim)
    e = _dim(opt(kwargs, args, 2, "end_dim", -1), x.ndim)
    return [np.array(x.reshape(x.shape[:s] + (-1,) + x.shape[e + 1:]))]


@form("aten.unflatten.int")
def _unflatten(args: list, kwargs: dict) -> list:
    x, d, sizes = args[0], _dim(args[1], args[0].ndim), tuple(args[2])
    return [np.array(x.reshape(x.shape[:d] + sizes + x.shape[d + 1:]))]


def _joined(ts: list) -> tuple[list, np.dtype]:
    from tapescope.core.capture.aten_ref_table import result_type

    dt = result_type(*ts)
    return [cast(t, dt) for t in ts], dt


@form("aten.cat.default")
def _cat(args: list, kwargs: dict) -> list:
    ts, dt = _joined(list(args[0]))
    d = opt(kwargs, args, 1, "dim", 0)
    live = [t for t in ts if not (t.ndim == 1 and t.shape[0] == 0)]  # torch skips legacy []
    if not live:
        return [np.zeros((0,), dt)]
    return [np.concatenate(live, axis=_dim(d, live[0].ndim))]


@form("aten.stack.default")
def _stack(args: list, kwargs: dict) -> list:
    ts, _ = _joined(list(args[0]))
    d = opt(kwargs, args, 1, "dim", 0)
    return [np.stack(ts, axis=_dim(d, ts[0].ndim + 1))]


def _pieces(x: np.ndarray, d: int, sizes: list[int]) -> list:
    out, off = [], 0
    for n in sizes:
        out.append(np.array(x[(slice(None),) * d + (slice(off, off + n),)]))
        off += n
    return out


@form("aten.split.Tensor", "aten.unsafe_split.Tensor")
def _split(args: list, kwargs: dict) -> list:
    x, size = args[0], int(args[1])
    d = _dim(opt(kwargs, args, 2, "dim", 0), x.ndim)
    n = x.shape[d]
    return _pieces(x, d, [min(size, n - o) for o in range(0, n, size)] if size else [0])


@form("aten.split_with_sizes.default", "aten.unsafe_split_with_sizes.default")
def _split_sizes(args: list, kwargs: dict) -> list:
    x = args[0]
    return _pieces(x, _dim(opt(kwargs, args, 2, "dim", 0), x.ndim), list(args[1]))


@form("aten.chunk.default", "aten.unsafe_chunk.default")
def _chunk(args: list, kwargs: dict) -> list:
    x, chunks = args[0], int(args[1])
    d = _dim(opt(kwargs, args, 2, "dim", 0), x.ndim)
    size = -(-x.shape[d] // chunks)
    return _split([x, size, d], {})


@form("aten.unbind.int")
def _unbind(args: list, kwargs: dict) -> list:
    x = args[0]
    d = _dim(opt(kwargs, args, 1, "dim", 0), x.ndim)
    return [np.array(np.take(x, i, axis=d)) for i in range(x.shape[d])]


@form("aten.index_select.default")
def _index_select(args: list, kwargs: dict) -> list:
    x, d, idx = args
    return [np.take(x, np.asarray(idx).astype(I64), axis=_dim(d, x.ndim))]


@form("aten.index.Tensor")
def _index(args: list, kwargs: dict) -> list:
    x, idx = args[0], list(args[1])
    key = tuple(slice(None) if i is None else np.asarray(i) for i in idx)
    return [np.array(x[key])]


@form("aten.gather.default")
def _gather(args: list, kwargs: dict) -> list:
    x, d, idx = args[0], args[1], args[2]
    return [np.take_along_axis(x, np.asarray(idx).astype(I64), axis=_dim(d, x.ndim))]


def _scatter_where(x: np.ndarray, d: Any, idx: np.ndarray) -> tuple:
    """(the places ``index``'s positions write along ``d`` as numpy's key, ``d``) for a
    scatter into ``x``; an index whose shape does not fit, or out of range, has no form."""
    d = _dim(int(d), x.ndim)
    if x.ndim == 0 or idx.ndim != x.ndim or any(
            idx.shape[a] > x.shape[a] for a in range(x.ndim) if a != d):
        raise NoReference("an index whose shape does not fit self")
    idx = idx.astype(I64)
    if idx.size and (idx.min() < -x.shape[d] or idx.max() >= x.shape[d]):
        raise NoReference("an index out of range (torch raises)")
    where = list(np.indices(idx.shape, sparse=True))
    where[d] = idx % x.shape[d] if x.shape[d] else idx
    return tuple(np.broadcast_arrays(*where)), d


@form("aten.scatter.value", "aten.scatter.src")
def _scatter(args: list, kwargs: dict) -> list:
    """(self, dim, index, value | src): a copy of self with ``out[..., index[i], ...] = value``
    (or src at i) at every position i of ``index`` along ``dim`` (``F.one_hot``'s); exact. An
    index out of range, or a src written twice to one place (whose winner is the loop's
    order), has no form."""
    x, idx, val = np.asarray(args[0]), np.asarray(args[2]), args[3]
    if "reduce" in kwargs or len(args) > 4:
        raise NoReference("scatter with a reduce")
    where, _ = _scatter_where(x, args[1], idx)
    out = np.array(x, copy=True)
    if isinstance(val, np.ndarray) and val.ndim:
        src = val[tuple(slice(0, n) for n in idx.shape)]
        flat = np.ravel_multi_index(where, x.shape)
        if np.unique(flat).size != flat.size:
            raise NoReference("scatter of a src onto one place twice")
        out[where] = src
    else:
        out[where] = np.asarray(val).astype(x.dtype)
    return [out]


#: scatter_reduce's reductions: (numpy's ufunc applied one value at a time, the identity
#: ATen writes first where ``include_self`` is False)
_SCATTER_REDUCE = {"sum": (np.add, 0.0), "mean": (np.add, 0.0), "prod": (np.multiply, 1.0),
                   "amax": (np.fmax, -np.inf), "amin": (np.fmin, np.inf)}


@form("aten.scatter_add.default", "aten.scatter_reduce.two")
def _scatter_reduce(args: list, kwargs: dict) -> list:
    """``scatter_add(self, dim, index, src)`` and ``scatter_reduce(self, dim, index, src,
    reduce, include_self=True)`` (a graph network's aggregations): src's values at ``index``'s
    positions reduced onto self's places one at a time in index order (ATen's serial loop
    along ``dim``), ``sum`` and ``mean`` by adds, ``prod`` by products, ``amax`` / ``amin``
    keeping a NaN; without ``include_self`` each written place starts from the reduction's
    identity (ATen's ``scatter_`` of it first: 0 for a sum, so a -0.0 sum is +0.0); ``mean``
    then divides by the count of values (and self) at each place, 1 where none. A half type
    computes in float32 and is rounded once at the end (ATen's opmath accumulator: measured); a
    half ``mean`` rounds its sum to the half type before it divides."""
    x, idx, src = np.asarray(args[0]), np.asarray(args[2]), np.asarray(args[3])
    add = len(args) <= 4 and "reduce" not in kwargs  # (scatter_add)
    reduce = "sum" if add else str(opt(kwargs, args, 4, "reduce"))
    include_self = True if add else bool(opt(kwargs, args, 5, "include_self", True))
    if reduce not in _SCATTER_REDUCE:
        raise NoReference(f"scatter_reduce's reduce {reduce!r}")
    if src.dtype != x.dtype or not is_float(x.dtype) or src.ndim != idx.ndim or any(
            idx.shape[a] > src.shape[a] for a in range(idx.ndim)):
        raise NoReference("scatter_reduce of floats with a src of self's type that fits index")
    where, _ = _scatter_where(x, args[1], idx)
    ufunc, identity = _SCATTER_REDUCE[reduce]
    out = np.array(x, dtype=F32 if x.dtype in HALF else x.dtype)
    flat = np.ravel_multi_index(where, x.shape).reshape(-1)
    vals = src[tuple(slice(0, n) for n in idx.shape)].reshape(-1).astype(out.dtype)
    if not include_self:
        out.reshape(-1)[flat] = identity
    with fp_quiet():
        if reduce in ("amax", "amin"):  # (a NaN, from self or src, stays: ATen's isnan test)
            nan = np.isnan(out.reshape(-1))
            np.logical_or.at(nan, flat, np.isnan(vals))
            ufunc.at(out.reshape(-1), flat, vals)
            out.reshape(-1)[nan] = np.nan
        else:
            ufunc.at(out.reshape(-1), flat, vals)
        if reduce == "mean":
            count = np.full(x.size, 1.0 if include_self else 0.0, out.dtype)
            np.add.at(count, flat, 1.0)
            count[count == 0] = 1.0
            if x.dtype in HALF:  # (the sum first rounded to the half type: ATen's composite)
                out = out.astype(x.dtype).astype(out.dtype)
            out = (out.reshape(-1) / count).reshape(x.shape)
    return [out.astype(x.dtype, copy=False)]


# ---- complex views (rotary embeddings: ``view_as_complex``, a product, ``view_as_real``) ------
_COMPLEX_OF = {np.dtype(np.float32): np.dtype(np.complex64),
               np.dtype(np.float64): np.dtype(np.complex128)}
_REAL_OF = {c: r for r, c in _COMPLEX_OF.items()}


@form("aten.view_as_complex.default")
def _view_as_complex(args: list, kwargs: dict) -> list:
    x = np.asarray(args[0])
    if x.dtype not in _COMPLEX_OF or x.ndim == 0 or x.shape[-1] != 2:
        raise NoReference("view_as_complex of a tensor whose last dimension is not 2 float32 "
                          "or float64 elements")
    return [np.array(x, order="C").view(_COMPLEX_OF[x.dtype]).reshape(x.shape[:-1])]


@form("aten.view_as_real.default")
def _view_as_real(args: list, kwargs: dict) -> list:
    z = np.asarray(args[0])
    if z.dtype not in _REAL_OF:
        raise NoReference("view_as_real of a tensor that is not complex64 or complex128")
    return [np.array(z, order="C").view(_REAL_OF[z.dtype]).reshape(z.shape + (2,))]


@form("aten._conj.default", "aten.conj_physical.default")
def _conj(args: list, kwargs: dict) -> list:
    """The conjugate (the recorder resolves a tensor's conjugate bit: ``_conj``'s recorded
    value is the conjugate); a real tensor's is itself."""
    x = np.asarray(args[0])
    return [np.conj(x) if x.dtype.kind == "c" else x.copy()]


@form("aten.resolve_conj.default", "aten.resolve_neg.default")
def _resolve(args: list, kwargs: dict) -> list:
    """The value as recorded (the recorder resolved the bit already): a copy."""
    return [np.array(args[0], copy=True)]


@form("aten.polar.default")
def _polar(args: list, kwargs: dict) -> list:
    """``abs * cos(angle) + i abs * sin(angle)``, each product in the input's type; cos and
    sin correctly rounded to float32 (from float64: the reference's own, not a C library's)."""
    a, t = np.asarray(args[0]), np.asarray(args[1])
    if a.dtype != t.dtype or a.dtype not in _COMPLEX_OF:
        raise NoReference("polar of operands that are not both float32 or both float64")
    with fp_quiet():
        c = np.cos(t.astype(F64)).astype(a.dtype)
        s_ = np.sin(t.astype(F64)).astype(a.dtype)
        out = np.empty(np.broadcast_shapes(a.shape, t.shape), _COMPLEX_OF[a.dtype])
        out.real, out.imag = a * c, a * s_
    return [out]


# ---- selections: sorts, top-k, masks, indexed writes (exact) -----------------------------------
def _sort_order(x: np.ndarray, axis: int, descending: bool) -> np.ndarray:
    """The stable order of ``x`` along ``axis`` as torch sorts (NaN the largest: last
    ascending, first descending; -0.0 and +0.0 equal)."""
    xm = np.moveaxis(x, axis, -1)
    if xm.dtype.kind in "fV":
        xf = xm.astype(F64)
        nan = np.isnan(xf)
        key = np.where(nan, 0.0, xf)
        order = np.lexsort((-key, ~nan)) if descending else np.lexsort((key, nan))
    else:
        key = xm.astype(np.int64)
        order = np.argsort(-key if descending else key, axis=-1, kind="stable")
    return np.moveaxis(order, -1, axis)


def _ties(v: np.ndarray, axis: int) -> bool:
    """Whether sorted ``v`` holds two equal neighbours along ``axis`` (NaNs equal too)."""
    if v.shape[axis] < 2:
        return False
    a, b = np.moveaxis(v, axis, -1)[..., 1:], np.moveaxis(v, axis, -1)[..., :-1]
    same = a == b
    if v.dtype.kind in "fV":
        same |= np.isnan(a.astype(F64)) & np.isnan(b.astype(F64))
    return bool(same.any())


def _bits(v: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(v).view(f"u{v.dtype.itemsize}") if v.dtype.itemsize in (
        1, 2, 4, 8) else np.ascontiguousarray(v)


def _tie_order(x: np.ndarray, vals: np.ndarray, d: int, whole: bool) -> list | None:
    """The op's recorded (values, indices) where they are a sort of ``x`` along ``d`` that
    orders equal elements otherwise than ``vals`` (the stable order): every index in range
    and once (``whole``: each row a permutation; else the top k), ``x`` at them the recorded
    values bit for bit, those values equal to ``vals`` in order (NaN equal NaN, -0 equal +0:
    the comparison the sort made). None otherwise (no recorded output: a call outside the
    judge; or the recorded one is no such sort)."""
    rv = recorded_output(0, vals)
    ri = recorded_output(1, np.zeros(vals.shape, I64))
    if rv is None or ri is None:
        return None
    n = x.shape[d]
    if ri.size and (ri.min() < 0 or ri.max() >= n):
        return None
    srt = np.sort(ri, axis=d)
    if whole and not np.array_equal(srt, np.broadcast_to(
            np.arange(n, dtype=I64).reshape([-1 if i == d else 1 for i in range(ri.ndim)]),
            srt.shape)):
        return None
    if not whole and srt.shape[d] > 1 and (np.diff(srt, axis=d) == 0).any():
        return None
    if not np.array_equal(_bits(np.take_along_axis(x, ri, axis=d)), _bits(rv)):
        return None
    same = rv == vals
    if rv.dtype.kind in "fcV":
        with fp_quiet():
            same |= np.isnan(rv.astype(F64)) & np.isnan(vals.astype(F64))
    return [rv.copy(), ri.copy()] if bool(same.all()) else None


@form("aten.sort.default", "aten.sort.stable")
def _sort(args: list, kwargs: dict) -> list:
    """(values, indices): stable where asked (``sort.stable``'s ``stable=True``). An unstable
    sort may order equal elements any way: where it did (ties), its recorded order is exact
    when it is a sort of these values (``_tie_order``), else the stable order is the
    reference's (session 43; before, no reference: ``pack_padded_sequence``'s sort of equal
    lengths)."""
    x = np.asarray(args[0])
    if "stable" in kwargs:  # (sort.stable: every argument after self by keyword)
        stable = bool(kwargs["stable"])
        d, desc = kwargs.get("dim", -1), kwargs.get("descending", False)
    else:
        stable = False
        d, desc = opt(kwargs, args, 1, "dim", -1), opt(kwargs, args, 2, "descending", False)
    if x.ndim == 0:
        return [x.copy(), np.zeros((), I64)]
    d = _dim(int(d), x.ndim)
    order = _sort_order(x, d, bool(desc))
    vals = np.take_along_axis(x, order, axis=d)
    if not stable and _ties(vals, d):
        got = _tie_order(x, vals, d, True)
        if got is not None:
            return got
    return [vals, order.astype(I64)]


@form("aten.topk.default")
def _topk(args: list, kwargs: dict) -> list:
    """(values, indices) of the k largest (smallest) along dim, sorted; where equal elements
    decide a place (a tie within the k or at its edge) the kernel may order or pick them any
    way: its recorded choice is exact when it is a top-k of these values (``_tie_order``),
    else the stable order is the reference's. An unsorted top-k: no reference (its order is
    the kernel's)."""
    x = np.asarray(args[0])
    k = int(args[1])
    d = opt(kwargs, args, 2, "dim", -1)
    largest, srt = opt(kwargs, args, 3, "largest", True), opt(kwargs, args, 4, "sorted", True)
    if not srt:
        raise NoReference("an unsorted top-k (its order is the kernel's)")
    if x.ndim == 0:
        if k > 1:
            raise NoReference("top-k of more elements than there are (torch raises)")
        return [x.copy(), np.zeros((), I64)]
    d = _dim(int(d), x.ndim)
    if not 0 <= k <= x.shape[d]:
        raise NoReference("top-k of more elements than there are (torch raises)")
    order = _sort_order(x, d, bool(largest))
    vals = np.take_along_axis(x, order, axis=d)
    top = np.take(vals, range(k), axis=d)
    if _ties(np.take(vals, range(min(k + 1, x.shape[d])), axis=d), d):
        got = _tie_order(x, top, d, False)
        if got is not None:
            return got
    return [top, np.take(order, range(k), axis=d).astype(I64)]


@form("aten._unique2.default")
def _unique2(args: list, kwargs: dict) -> list:
    """(values, inverse, counts) of ``torch.unique``: the distinct elements in ascending order
    (the CPU kernel sorts whether ``sorted`` or not: measured), each the first of its run of
    equal elements in the stable order (so -0.0 or +0.0 as it came first; every NaN its own,
    last); the inverse (input's shape) and the counts where asked, else empty (torch's)."""
    x = np.asarray(args[0]).reshape(-1)
    inv_asked = bool(opt(kwargs, args, 2, "return_inverse", False))
    cnt_asked = bool(opt(kwargs, args, 3, "return_counts", False))
    order = _sort_order(x, 0, False)
    v = x[order]
    with fp_quiet():
        new = np.ones(v.shape, bool)
        if v.size > 1:
            new[1:] = ~(v[1:] == v[:-1])  # (NaN never equal: each its own)
    starts = np.flatnonzero(new)
    out = [v[starts].copy()]
    group = np.cumsum(new) - 1
    inv = np.empty(x.shape, I64)
    inv[order] = group
    out.append(inv.reshape(np.shape(args[0])) if inv_asked else np.zeros(0, I64))
    out.append(np.diff(np.append(starts, v.size)).astype(I64) if cnt_asked else
               np.zeros(0, I64))
    return out


@form("aten.resize_.default")
def _resize_(args: list, kwargs: dict) -> list:
    """``x.resize_(size)`` of a contiguous tensor: row-major from the storage's offset, so the
    first ``min(old, new)`` elements keep ``x``'s values; the rest is memory no op wrote as
    far as the recorded ops go (the heap's, or the storage's older bytes): the recorded
    output's there, not judged as arithmetic. A tensor of other strides (its storage order
    unknown from its values) or a memory format asked: no reference."""
    x = np.asarray(args[0])
    size = [int(v) for v in args[1]]
    if opt(kwargs, args, 2, "memory_format", None) is not None:
        raise NoReference("resize_ to a memory format (its strides, not its values)")
    layout = kwargs.get(LAYOUT_KW)
    if layout is None:
        raise NoReference("its input's memory layout is not in the capture (one made before "
                          "tapescope recorded resize_'s: capture it again)")
    if len(layout[0]) != x.ndim or any(st != c for d, st, c in zip(
            x.shape, layout[0], c_strides(x.shape), strict=True) if d > 1):
        raise NoReference("resize_ of a tensor not contiguous: its storage's order is not "
                          "its values'")
    if any(v < 0 for v in size):
        raise NoReference("resize_ to a negative size (torch raises)")
    n = math.prod(size)
    check_elems(n, "resize_")
    out = np.zeros(size, x.dtype)
    k = min(n, x.size)
    if n > x.size:
        rec = recorded_output(0, out)
        if rec is None:
            raise NoReference("resize_ past the tensor's elements: its new memory is the "
                              "heap's (only the recorded output has those bytes)")
        out = rec.copy()
    out.reshape(-1)[:k] = x.reshape(-1)[:k]
    return [out]


@form("aten.index_reduce.default")
def _index_reduce(args: list, kwargs: dict) -> list:
    """``x.index_reduce_(dim, index, source, reduce, include_self)`` as ATen loops: the
    indexed slices start from ``x`` (``include_self``) or from the reduction's identity (0
    for mean, 1 for prod, -inf / +inf for amax / amin), then each ``source`` slice in index
    order: ``acc * s`` (prod), ``acc + s`` (mean), ``max`` / ``min`` (NaN propagates); mean
    divides by the count of what it added (x's included), a count of 0 as 1."""
    x, d, idx, src = np.asarray(args[0]), args[1], np.asarray(args[2]), np.asarray(args[3])
    red = str(args[4])
    incl = bool(opt(kwargs, args, 5, "include_self", True))
    if red not in ("prod", "mean", "amax", "amin") or x.ndim == 0 or idx.ndim > 1 \
            or idx.dtype.kind not in "iu" or src.dtype != x.dtype or x.dtype.kind not in "f":
        raise NoReference("index_reduce of other than a float tensor, a 1-d index and a "
                          "source of its type")
    d = _dim(int(d), x.ndim)
    idx = idx.reshape(-1).astype(I64)
    n = x.shape[d]
    want = x.shape[:d] + (idx.size,) + x.shape[d + 1:]
    if src.shape != want or (idx.size and (idx.min() < -n or idx.max() >= n)):
        raise NoReference("index_reduce: a source of another shape, or an index outside")
    idx = np.where(idx < 0, idx + n, idx)
    xm, sm = np.moveaxis(x, d, 0), np.moveaxis(src, d, 0)
    acc = xm.copy()
    T = x.dtype.type
    hit = np.zeros(n, bool)
    hit[idx] = True
    if not incl:
        ident = {"prod": T(1), "mean": T(0), "amax": T(-np.inf), "amin": T(np.inf)}[red]
        acc[hit] = ident
    with fp_quiet():
        for i, j in enumerate(idx.tolist()):
            a, b = acc[j], sm[i]
            acc[j] = (a * b if red == "prod" else a + b if red == "mean"
                      else np.maximum(a, b) if red == "amax" else np.minimum(a, b))
        if red == "mean":
            counts = np.bincount(idx, minlength=n).astype(x.dtype) + (T(1) if incl else T(0))
            counts[counts == 0] = T(1)
            acc = acc / counts.reshape((n,) + (1,) * (x.ndim - 1))
    return [np.ascontiguousarray(np.moveaxis(acc.astype(x.dtype), 0, d))]


@form("aten.block_diag.default")
def _block_diag(args: list, kwargs: dict) -> list:
    """The tensors (0-d as 1 x 1, 1-d as one row) placed down the diagonal of a zero matrix
    of their common type, exact."""
    xs = [np.asarray(t) for t in args[0]]
    if any(t.ndim > 2 for t in xs):
        raise NoReference("block_diag of a tensor of more than 2 dimensions (torch raises)")
    ms = [t.reshape(1, 1) if t.ndim == 0 else t.reshape(1, -1) if t.ndim == 1 else t
          for t in xs]
    out_t = result_type(*xs) if xs else np.dtype(np.float32)
    rows, cols = sum(m.shape[0] for m in ms), sum(m.shape[1] for m in ms)
    check_elems(rows * cols, "block_diag")
    out = np.zeros((rows, cols), out_t)
    r = c = 0
    for m in ms:
        out[r:r + m.shape[0], c:c + m.shape[1]] = m
        r, c = r + m.shape[0], c + m.shape[1]
    return [out]


@form("aten.median.default")
def _median(args: list, kwargs: dict) -> list:
    """The lower median of every element (the ((n - 1) // 2)-th in ascending order); NaN
    where there is one."""
    x = np.asarray(args[0]).reshape(-1)
    if x.size == 0:
        raise NoReference("the median of no elements")
    v = x[_sort_order(x, 0, False)]
    return [_equal_pick(x, np.asarray(v[-1] if x.dtype.kind in "fV"
                                      and np.isnan(v[-1].astype(F64)) else v[(x.size - 1) // 2]))]


def _equal_pick(x: np.ndarray, v: np.ndarray) -> np.ndarray:
    """A selected value ``v`` of ``x``, or the recorded one where the kernel picked another
    element equal to it (-0.0 for +0.0: which of equal elements a selection returns is its
    own): an element of ``x`` bit for bit."""
    rv = recorded_output(0, v)
    if rv is None or not v.size or x.dtype.kind not in "fV":
        return v
    with fp_quiet():
        if not bool(rv == v) or not bool((_bits(x) == _bits(rv)).any()):
            return v
    return rv.copy()


def _pick(x: np.ndarray, d: int, rank: np.ndarray, keep: bool) -> list:
    """(values, indices) of the element of ``rank`` (per row along ``d``, the rows' shape
    with ``d`` kept as 1) in the stable ascending order (NaN last). Which of equal elements
    a kernel returns is its own (ATen's quickselect): a recorded index whose element is, bit
    for bit, the recorded value, and that value equal to the rank's (NaN equal NaN), is
    exact; else the stable order's."""
    order = _sort_order(x, d, False)
    idx = np.take_along_axis(order, rank, axis=d)
    vals = np.take_along_axis(x, idx, axis=d)
    shape = vals.shape if keep else tuple(n for a, n in enumerate(vals.shape) if a != d)
    vals, idx = vals.reshape(shape), idx.reshape(shape).astype(I64)
    rv, ri = recorded_output(0, vals), recorded_output(1, idx)
    if rv is not None and ri is not None and (not ri.size or (ri.min() >= 0
                                                              and ri.max() < x.shape[d])):
        at = np.take_along_axis(x, ri.reshape(rank.shape), axis=d).reshape(shape)
        with fp_quiet():
            same = rv == vals
            if x.dtype.kind in "fV":
                same |= np.isnan(rv.astype(F64)) & np.isnan(vals.astype(F64))
        if np.array_equal(_bits(at), _bits(rv)) and bool(same.all()):
            return [rv.copy(), ri.copy()]
    return [vals, idx]


def _nan_count(x: np.ndarray, d: int) -> np.ndarray:
    return (np.isnan(x.astype(F64)) if x.dtype.kind in "fV" else np.zeros(x.shape, bool)).sum(
        axis=d, keepdims=True)


@form("aten.kthvalue.default")
def _kthvalue(args: list, kwargs: dict) -> list:
    """The k-th smallest along ``dim`` (1-based; NaN the largest) and its index."""
    x = np.asarray(args[0])
    k = int(args[1])
    d = int(opt(kwargs, args, 2, "dim", -1))
    keep = bool(opt(kwargs, args, 3, "keepdim", False))
    xs = x.reshape(1) if x.ndim == 0 else x
    d = _dim(d, xs.ndim)
    if not 1 <= k <= xs.shape[d]:
        raise NoReference("kthvalue: k outside the dimension (torch raises)")
    rank = np.full([1 if a == d else n for a, n in enumerate(xs.shape)], k - 1, I64)
    out = _pick(xs, d, rank, keep or x.ndim == 0)
    return [v.reshape(()) for v in out] if x.ndim == 0 else out


def _median_dim(args: list, kwargs: dict, nan_skip: bool) -> list:
    x = np.asarray(args[0])
    d = int(opt(kwargs, args, 1, "dim", -1))
    keep = bool(opt(kwargs, args, 2, "keepdim", False))
    xs = x.reshape(1) if x.ndim == 0 else x
    d = _dim(d, xs.ndim)
    n = xs.shape[d]
    if n == 0:
        raise NoReference("the median of no elements (torch raises)")
    nans = _nan_count(xs, d)
    if nan_skip:  # the lower median of the row's numbers; a row of NaNs: a NaN
        m = n - nans
        rank = np.where(m > 0, (m - 1) // 2, 0)
    else:  # the lower median, or the row's first NaN where it has one
        rank = np.where(nans > 0, n - nans, np.full(nans.shape, (n - 1) // 2))
    out = _pick(xs, d, rank.astype(I64), keep or x.ndim == 0)
    return [v.reshape(()) for v in out] if x.ndim == 0 else out


@form("aten.median.dim")
def _median_dim_form(args: list, kwargs: dict) -> list:
    """(values, indices) of the lower median along ``dim``; a row with a NaN: its NaN."""
    return _median_dim(args, kwargs, False)


@form("aten.nanmedian.dim")
def _nanmedian_dim_form(args: list, kwargs: dict) -> list:
    """(values, indices) of the lower median of each row's non-NaN elements along ``dim``; a
    row of NaNs only: a NaN."""
    return _median_dim(args, kwargs, True)


@form("aten.nanmedian.default")
def _nanmedian(args: list, kwargs: dict) -> list:
    """The lower median of every non-NaN element; NaN where all are."""
    x = np.asarray(args[0]).reshape(-1)
    if x.size == 0:
        raise NoReference("the median of no elements")
    v = x[_sort_order(x, 0, False)]
    m = x.size - int(_nan_count(x, 0)[0])
    return [_equal_pick(x, np.asarray(v[(m - 1) // 2] if m else v[0]))]


def _search(seq: np.ndarray, x: np.ndarray, right: bool, int32: bool) -> np.ndarray:
    """Each element of ``x``'s insertion point in ascending ``seq`` (its last axis; leading
    axes matched row by row): the first index whose element is greater than (``right``) or
    not less than it; NaN the largest."""
    side = "right" if right else "left"
    if seq.dtype.kind in "fV" or x.dtype.kind in "fV":
        seq, x = seq.astype(F64), x.astype(F64)
    if seq.ndim <= 1:
        got = np.searchsorted(seq.reshape(-1), x, side=side)
    else:
        if seq.shape[:-1] != x.shape[:-1]:
            raise NoReference("searchsorted: the leading dimensions of the sequence and the "
                              "values differ")
        flat_s, flat_x = seq.reshape(-1, seq.shape[-1]), x.reshape(-1, x.shape[-1])
        got = np.stack([np.searchsorted(a, b, side=side) for a, b in zip(flat_s, flat_x,
                                                                            strict=True)])
        got = got.reshape(x.shape)
    return np.asarray(got).astype(np.int32 if int32 else I64)


@form("aten.bucketize.Tensor", "aten.bucketize.Scalar")
def _bucketize(args: list, kwargs: dict) -> list:
    """The bucket of each element of ``self`` among ascending 1-d ``boundaries``:
    ``searchsorted(boundaries, self, side)``."""
    x, b = np.asarray(args[0]), np.asarray(args[1])
    if b.ndim != 1:
        raise NoReference("bucketize: boundaries of one dimension")
    return [_search(b, x, bool(opt(kwargs, args, 3, "right", False)),
                    bool(opt(kwargs, args, 2, "out_int32", False)))]


@form("aten.searchsorted.Tensor", "aten.searchsorted.Scalar")
def _searchsorted(args: list, kwargs: dict) -> list:
    """``torch.searchsorted``: insertion points in the sorted sequence (its last axis; a
    ``sorter`` gives the order that sorts it), ``side`` overriding ``right``."""
    seq, x = np.asarray(args[0]), np.asarray(args[1])
    right = bool(opt(kwargs, args, 3, "right", False))
    side = opt(kwargs, args, 4, "side", None)
    if side is not None:
        right = side == "right"
    sorter = opt(kwargs, args, 5, "sorter", None)
    if sorter is not None:
        seq = np.take_along_axis(seq, np.asarray(sorter).astype(I64), axis=-1)
    if x.ndim == 0 and seq.ndim > 1:
        raise NoReference("searchsorted: a scalar against a sequence of several rows")
    return [_search(seq, x, right, bool(opt(kwargs, args, 2, "out_int32", False)))]


@form("aten.bincount.default")
def _bincount(args: list, kwargs: dict) -> list:
    """Counts of each non-negative integer of a 1-d input, ``max(max + 1, minlength)`` bins
    (int64); with weights, their sums per bin from +0.0 in the input's order (ATen's serial
    loop), in the weights' float type (integer weights: float64)."""
    x = np.asarray(args[0])
    w = opt(kwargs, args, 1, "weights", None)
    minlength = opt(kwargs, args, 2, "minlength", 0)
    if x.ndim != 1 or x.dtype.kind not in "iu" or (x.size and x.min() < 0) \
            or not isinstance(minlength, int) or minlength < 0:
        raise NoReference("bincount: a 1-d input of non-negative integers and a minlength "
                          "from 0")
    n = max(int(x.max()) + 1 if x.size else 0, minlength)
    check_elems(n, "bincount")
    idx = x.astype(I64)
    if w is None:
        return [np.bincount(idx, minlength=n).astype(I64)]
    w = np.asarray(w)
    if w.shape != x.shape:
        raise NoReference("bincount: weights of the input's shape")
    dt = w.dtype if w.dtype.kind == "f" else F64
    out = np.zeros(n, dt)
    with fp_quiet():
        np.add.at(out, idx, w.astype(dt))  # (one element at a time, in order)
    return [out]


@form("aten.histc.default")
def _histc(args: list, kwargs: dict) -> list:
    """``bins`` equal-width bins of [min, max] (both 0: the input's own least and greatest
    element; equal: widened by 1 each way): the edges the linspace form's
    ``linspace(min, max, bins + 1)`` in the input's type, an element in bin i where
    ``edges[i] <= x < edges[i + 1]`` (``max`` itself in the last), elements outside and NaN
    left out; the counts in the input's type."""
    x = np.asarray(args[0])
    bins = int(opt(kwargs, args, 1, "bins", 100))
    lo, hi = float(opt(kwargs, args, 2, "min", 0)), float(opt(kwargs, args, 3, "max", 0))
    if x.dtype.kind not in "fV" or bins < 1:
        raise NoReference("histc: a float input and at least one bin")
    check_elems(bins, "histc")
    xf = x.astype(F64).reshape(-1)
    if lo == hi and x.size:
        with fp_quiet():
            lo, hi = float(np.min(xf)), float(np.max(xf))
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise NoReference("histc: a range that is not finite")
    if lo == hi:
        lo, hi = lo - 1, hi + 1
    if lo > hi:
        raise NoReference("histc: min above max (torch raises)")
    edges = _lin(float(x.dtype.type(lo)), float(x.dtype.type(hi)), bins + 1,
                 x.dtype).astype(F64)
    inside = (xf >= edges[0]) & (xf <= edges[-1])
    pos = np.searchsorted(edges, xf[inside], side="right") - 1
    pos = np.minimum(pos, bins - 1)
    return [np.bincount(pos, minlength=bins).astype(x.dtype)]


@form("aten.masked_scatter.default")
def _masked_scatter(args: list, kwargs: dict) -> list:
    """``self`` with the elements where ``mask`` (broadcast to it) is true taken from
    ``source``'s elements in order (row-major): a copy, exact."""
    x = np.array(args[0])
    m = np.broadcast_to(np.asarray(args[1]).astype(bool), x.shape)
    src = np.asarray(args[2]).reshape(-1)
    n = int(np.count_nonzero(m))
    if n > src.size:
        raise NoReference("masked_scatter: fewer source elements than the mask selects")
    x[m] = src[:n].astype(x.dtype)
    return [x]


def _cum_extreme(name: str, greater: bool):
    def run(args: list, kwargs: dict) -> list:
        """(values, indices) of the running maximum (minimum) along ``dim``, as ATen's loop:
        element i takes the place where it is NaN, or where the running one is not NaN and
        ``x_i >= run`` (``<=``): so the last of equal elements (its sign: -0.0 after 0.0),
        and a NaN stays until the next NaN. Exact."""
        x = np.asarray(args[0])
        d = opt(kwargs, args, 1, "dim", 0)
        if x.ndim == 0:
            return [x.copy(), np.zeros((), I64)]
        d = _dim(int(d), x.ndim)
        xm = np.moveaxis(x, d, 0)
        cur, idx = xm[0].copy(), np.zeros(xm.shape[1:], I64)
        vals, ids = np.empty_like(xm), np.empty(xm.shape, I64)
        vals[0], ids[0] = cur, idx
        f = xm.dtype.kind in "fV"
        with fp_quiet():
            for i in range(1, xm.shape[0]):
                v = xm[i]
                ge = (v >= cur) if greater else (v <= cur)
                if f:
                    nv, nc = np.isnan(v.astype(F64)), np.isnan(cur.astype(F64))
                    take = nv | (~nc & ge)
                else:
                    take = ge
                cur = np.where(take, v, cur)
                idx = np.where(take, i, idx)
                vals[i], ids[i] = cur, idx
        return [np.moveaxis(vals, 0, d).copy(), np.moveaxis(ids, 0, d).copy()]
    return run


form("aten.cummax.default")(_cum_extreme("cummax", True))
form("aten.cummin.default")(_cum_extreme("cummin", False))


@form("aten.rot90.default")
def _rot90(args: list, kwargs: dict) -> list:
    """k quarter turns from the first of ``dims`` towards the second (numpy's ``rot90``): a
    copy, exact."""
    x = np.asarray(args[0])
    k = int(opt(kwargs, args, 1, "k", 1))
    dims = list(opt(kwargs, args, 2, "dims", [0, 1]))
    if len(dims) != 2 or x.ndim < 2 or dims[0] % x.ndim == dims[1] % x.ndim:
        raise NoReference("rot90: two different dimensions")
    return [np.ascontiguousarray(np.rot90(x, k, axes=(dims[0] % x.ndim, dims[1] % x.ndim)))]


def _tri_indices(lower: bool):
    def run(args: list, kwargs: dict) -> list:
        """The (row, column) indices of a ``row x col`` matrix's lower (upper) triangle past
        ``offset``, row by row: exact."""
        row, col = int(args[0]), int(args[1])
        off = int(opt(kwargs, args, 2, "offset", 0))
        if row < 0 or col < 0:
            raise NoReference("tril/triu_indices of a negative size (torch raises)")
        rows = np.arange(row, dtype=np.int64)  # (each row's count first: checked before)
        per = np.clip(rows + off + 1, 0, col) if lower else np.clip(col - (rows + off), 0, col)
        check_elems(2 * int(per.sum()), "tril/triu_indices")
        r, c = (np.tril_indices if lower else np.triu_indices)(row, off, col)
        dt = as_dtype(kwargs.get("dtype")) or I64
        return [np.stack([r, c]).astype(dt)]
    return run


form("aten.tril_indices.default")(_tri_indices(True))
form("aten.triu_indices.default")(_tri_indices(False))


@form("aten.nonzero.default")
def _nonzero(args: list, kwargs: dict) -> list:
    return [np.argwhere(np.asarray(args[0])).astype(I64)]


@form("aten.masked_select.default")
def _masked_select(args: list, kwargs: dict) -> list:
    x, m = np.broadcast_arrays(np.asarray(args[0]), np.asarray(args[1]))
    return [np.array(x[m.astype(bool)])]


def _index_key(x: np.ndarray, indices: list) -> tuple:
    """torch's ``indices`` (a tensor per leading dimension, None for a full slice; a bool
    mask stands for its nonzero positions) as a numpy key, in range (else no reference)."""
    key: list = []
    for i in indices:
        if i is None:
            key.append(slice(None))
            continue
        i = np.asarray(i)
        if i.dtype == BOOL:
            key.extend(np.nonzero(i))
            continue
        key.append(i.astype(I64))
    if len(key) > x.ndim:
        raise NoReference("more indices than dimensions")
    for dim, k in enumerate(key):
        if isinstance(k, np.ndarray) and k.size and (k.min() < -x.shape[dim]
                                                     or k.max() >= x.shape[dim]):
            raise NoReference("an index out of range (torch raises)")
    return tuple(key)


def index_put_places(x: np.ndarray, indices: list, vals: np.ndarray) -> tuple:
    """``(places, values)`` of an ``index_put``: each written element's flat place in ``x``
    and its value in ``x``'s type, both flat, in the loop's order."""
    places = np.arange(x.size).reshape(x.shape)[_index_key(x, indices)]
    v = np.broadcast_to(vals.astype(x.dtype), places.shape).reshape(-1)
    return places.reshape(-1), v


@form("aten.index_put.default", "aten._index_put_impl_.default")
def _index_put(args: list, kwargs: dict) -> list:
    """(self, indices, values, accumulate): a copy of self with values written (accumulate:
    added, one at a time in index order: ATen's serial loop) at the indices; two writes to one
    place without accumulate race in ATen's parallel loop: no reference."""
    x, indices, vals = np.asarray(args[0]), list(args[1]), np.asarray(args[2])
    acc = bool(opt(kwargs, args, 3, "accumulate", False))
    places, v = index_put_places(x, indices, vals)
    out = np.array(x, copy=True)
    if acc:
        with fp_quiet():
            np.add.at(out.reshape(-1), places, v)
        return [out]
    if np.unique(places).size != places.size:
        raise NoReference("index_put of two values onto one place (ATen's loop races)")
    out.reshape(-1)[places] = v
    return [out]


def _front(a: np.ndarray, d: int) -> np.ndarray:
    """``a`` (a 0-d one as one element) with dimension ``d`` moved to the front (a view)."""
    return np.moveaxis(a.reshape(1) if a.ndim == 0 else a, d, 0)


def _index_args(args: list) -> tuple:
    """``(self, dim, index, source)`` of index_add / index_copy: self, its dim (a 0-d self's
    is 0), the index flat in int64, source."""
    x, idx, src = np.asarray(args[0]), np.asarray(args[2]), np.asarray(args[3])
    return x, _dim(int(args[1]), max(x.ndim, 1)), idx.reshape(-1).astype(I64), src


@form("aten.index_add.default")
def _index_add(args: list, kwargs: dict) -> list:
    """(self, dim, index, source, alpha=1): source's slices added onto self's at the index,
    one after another in index order (ATen's loop); alpha other than 1 is ATen's multiply-add
    (not written out)."""
    x, d, idx, src = _index_args(args)
    if opt(kwargs, args, 4, "alpha", 1) != 1:
        raise NoReference("index_add with alpha other than 1")
    out = np.array(x, copy=True)
    o, s2 = _front(out, d), _front(src, d).astype(x.dtype)
    n = o.shape[0]
    if idx.size and (idx.min() < -n or idx.max() >= n):
        raise NoReference("an index out of range (torch raises)")
    if s2.shape[0] != idx.size or s2.shape[1:] != o.shape[1:]:
        raise NoReference("index_add of a source of another shape (torch raises)")
    with fp_quiet():
        np.add.at(o, idx, s2)  # (o is a view of out: written through)
    return [out]


@form("aten.index_copy.default")
def _index_copy(args: list, kwargs: dict) -> list:
    x, d, idx, src = _index_args(args)
    out = np.array(x, copy=True)
    o = _front(out, d)
    if np.unique(idx % max(o.shape[0], 1)).size != idx.size:
        raise NoReference("index_copy onto one place twice (the winner is the loop's)")
    o[idx] = _front(src, d)
    return [out]


@form("aten.diagonal.default")
def _diagonal(args: list, kwargs: dict) -> list:
    x = np.asarray(args[0])
    off = opt(kwargs, args, 1, "offset", 0)
    d1, d2 = opt(kwargs, args, 2, "dim1", 0), opt(kwargs, args, 3, "dim2", 1)
    return [np.array(np.diagonal(x, off, _dim(d1, x.ndim), _dim(d2, x.ndim)))]


@form("aten.diagonal_backward.default")
def _diagonal_backward(args: list, kwargs: dict) -> list:
    """Zeros of the input's size with the gradient on the diagonal (exact)."""
    g = np.asarray(args[0])
    shape = _numel(list(args[1]), "diagonal_backward")
    off, d1, d2 = int(args[2]), args[3], args[4]
    if not shape:
        raise NoReference("diagonal_backward of a 0-d input")
    out = np.zeros(shape, g.dtype)
    view = np.diagonal(out, off, _dim(d1, len(shape)), _dim(d2, len(shape)))
    if view.shape != g.shape:
        raise NoReference(f"diagonal_backward: a gradient of {list(g.shape)} for a diagonal "
                          f"of {list(view.shape)}")
    view.flags.writeable = True  # (numpy's diagonal view is read-only; out is ours)
    view[...] = g
    return [out]


# ---- packed sequences (pack_padded_sequence) --------------------------------------------------
def _batch_sizes(lengths: Any, batch: int) -> np.ndarray:
    n = np.asarray(lengths).astype(I64).reshape(-1)
    if n.size != batch or not n.size or n.min() <= 0 or np.any(n[1:] > n[:-1]):
        raise NoReference("lengths that are not positive and sorted longest first, one per "
                          "sequence (torch raises)")
    return np.array([np.count_nonzero(n > t) for t in range(int(n[0]))], I64)


@form("aten._pack_padded_sequence.default")
def _pack_padded(args: list, kwargs: dict) -> list:
    """(input, lengths, batch_first) -> (data, batch_sizes): time step t's first
    batch_sizes[t] sequences, steps in order (a copy)."""
    x, lengths, bf = np.asarray(args[0]), args[1], bool(args[2])
    if x.ndim < 2:
        raise NoReference("pack_padded_sequence of an input of fewer than 2 dimensions")
    tb = np.swapaxes(x, 0, 1) if bf else x
    bs = _batch_sizes(lengths, tb.shape[1])
    if bs.size > tb.shape[0]:
        raise NoReference("a length past the input's steps (torch raises)")
    return [np.concatenate([tb[t, :b] for t, b in enumerate(bs)]), bs]


@form("aten._pack_padded_sequence_backward.default")
def _pack_padded_backward(args: list, kwargs: dict) -> list:
    """(grad, input_size, batch_sizes, batch_first): the packed gradient put back in its
    places, zeros elsewhere."""
    g, size, bs, bf = np.asarray(args[0]), [int(v) for v in args[1]], args[2], bool(args[3])
    tb = [size[1], size[0], *size[2:]] if bf else list(size)
    bs = np.asarray(bs).astype(I64).reshape(-1)
    check_elems(math.prod(tb), "pack_padded_sequence_backward")
    if len(tb) < 2 or bs.size > tb[0] or (bs.size and (bs.max() > tb[1] or bs.min() < 0)) \
            or int(bs.sum()) != g.shape[0]:
        raise NoReference("batch sizes that do not fit the input's size")
    out = np.zeros(tb, g.dtype)
    at = 0
    for t, b in enumerate(bs):
        out[t, :b] = g[at:at + b]
        at += int(b)
    return [np.ascontiguousarray(np.swapaxes(out, 0, 1)) if bf else out]


@form("aten.channel_shuffle.default", "aten.native_channel_shuffle.default")
def _channel_shuffle(args: list, kwargs: dict) -> list:
    """The channels as (groups, C / groups), transposed: exact."""
    x, groups = np.asarray(args[0]), int(args[1])
    if x.ndim < 3 or groups <= 0 or x.shape[1] % groups:
        raise NoReference("channel_shuffle of channels no multiple of the groups")
    n, c = x.shape[:2]
    y = x.reshape((n, groups, c // groups) + x.shape[2:]).swapaxes(1, 2)
    return [np.ascontiguousarray(y).reshape(x.shape)]


@form("aten.pixel_shuffle.default")
def _pixel_shuffle(args: list, kwargs: dict) -> list:
    """(..., C r^2, H, W) -> (..., C, H r, W r): a rearrangement (a copy)."""
    x, r = np.asarray(args[0]), int(args[1])
    if x.ndim < 3 or r < 1 or x.shape[-3] % (r * r):
        raise NoReference("pixel_shuffle of channels no multiple of the factor's square")
    *lead, c, h, w = x.shape
    n = len(lead)
    y = x.reshape(*lead, c // (r * r), r, r, h, w)
    y = y.transpose(*range(n), n, n + 3, n + 1, n + 4, n + 2)
    return [np.ascontiguousarray(y).reshape(*lead, c // (r * r), h * r, w * r)]


@form("aten.pixel_unshuffle.default")
def _pixel_unshuffle(args: list, kwargs: dict) -> list:
    """(..., C, H r, W r) -> (..., C r^2, H, W), pixel_shuffle's inverse (and its backward)."""
    x, r = np.asarray(args[0]), int(args[1])
    if x.ndim < 3 or r < 1 or x.shape[-2] % r or x.shape[-1] % r:
        raise NoReference("pixel_unshuffle of a plane no multiple of the factor")
    *lead, c, hh, ww = x.shape
    n = len(lead)
    y = x.reshape(*lead, c, hh // r, r, ww // r, r)
    y = y.transpose(*range(n), n, n + 2, n + 4, n + 1, n + 3)
    return [np.ascontiguousarray(y).reshape(*lead, c * r * r, hh // r, ww // r)]


@form("aten.repeat.default")
def _repeat(args: list, kwargs: dict) -> list:
    """``x.repeat(sizes)``: x (its shape padded with leading 1s to len(sizes)) tiled; a copy."""
    x, reps = np.asarray(args[0]), [int(r) for r in args[1]]
    if len(reps) < x.ndim or any(r < 0 for r in reps):
        raise NoReference("repeat with fewer sizes than dimensions, or a negative one")
    x = x.reshape((1,) * (len(reps) - x.ndim) + x.shape)
    check_elems(math.prod(s * r for s, r in zip(x.shape, reps, strict=True)), "repeat")
    return [np.tile(x, reps)]


@form("aten._unsafe_masked_index_put_accumulate.default")
def _masked_index_put_acc(args: list, kwargs: dict) -> list:
    """(self, mask, indices, values): self with where(mask, values, 0) added at the indices
    (clamped into range), one element at a time in index order (``np.add.at``: serial), as
    the embedding backward's decomposition in a compiled graph reads it."""
    x, mask, indices, values = args[:4]
    if any(i is None for i in indices):
        raise NoReference("_unsafe_masked_index_put_accumulate with a None index")
    out = np.array(x, copy=True)
    idx = tuple(np.clip(np.asarray(i).astype(I64), -x.shape[d], x.shape[d] - 1)
                for d, i in enumerate(indices))
    v = np.where(np.asarray(mask), np.asarray(values), np.zeros((), x.dtype)).astype(x.dtype)
    with fp_quiet():
        np.add.at(out, idx, np.broadcast_to(v, np.broadcast_shapes(
            *(i.shape for i in idx)) + x.shape[len(idx):]))
    return [out]


@form("aten.constant_pad_nd.default")
def _pad(args: list, kwargs: dict) -> list:
    x, pad = args[0], list(args[1])
    v = opt(kwargs, args, 2, "value", 0)
    if len(pad) % 2 or len(pad) > 2 * x.ndim:
        raise NoReference(f"constant_pad_nd: {len(pad)} pads for {x.ndim} dimensions")
    width = [(0, 0)] * x.ndim
    for i in range(len(pad) // 2):
        width[x.ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1])
    sides = list(zip(x.shape, width, strict=True))
    if any(n + min(a, 0) + min(b, 0) < 0 for n, (a, b) in sides):
        raise NoReference(f"constant_pad_nd: pads {pad} crop more than the size of "
                          f"{list(x.shape)}")  # (ATen's narrow refuses them too)
    check_elems(math.prod(n + a + b for n, (a, b) in sides), "constant_pad_nd")
    if any(a < 0 or b < 0 for a, b in width):
        # a negative pad crops that side (the backward of a pad is one): ATen narrows the
        # input first, then pads what is left; a copy either way, so exact
        x = x[tuple(slice(-min(a, 0), n + min(b, 0)) for n, (a, b) in sides)]
        width = [(max(a, 0), max(b, 0)) for a, b in width]
    return [np.pad(x, width, constant_values=arr(v, x.dtype))]


@form("aten.select_backward.default")
def _select_backward(args: list, kwargs: dict) -> list:
    g, sizes, d, index = args[:4]
    gx = np.zeros(tuple(sizes), g.dtype)  # +0.0 everywhere, g placed (exact)
    gx[(slice(None),) * _dim(d, len(sizes)) + (index,)] = g
    return [gx]


@form("aten.slice_backward.default")
def _slice_backward(args: list, kwargs: dict) -> list:
    g, sizes, d, start, end, step = args[:6]
    gx = np.zeros(tuple(sizes), g.dtype)
    gx[(slice(None),) * _dim(d, len(sizes)) + (slice(start, end, step),)] = g
    return [gx]


@form("aten.roll.default")
def _roll(args: list, kwargs: dict) -> list:
    """torch.roll: each element moved ``shifts`` along ``dims`` (wrapping); no ``dims``: the
    flattened tensor rolled by the one shift, its shape kept. A copy, so exact."""
    x = args[0]

    def ints(v: Any) -> list[int]:
        v = v if isinstance(v, list | tuple) else [v]
        if not all(isinstance(i, int) and not isinstance(i, bool) for i in v):
            raise NoReference("roll: shifts and dims must be integers")
        return list(v)
    shifts, dims = ints(opt(kwargs, args, 1, "shifts", [])), ints(opt(kwargs, args, 2, "dims", []))
    if not dims:
        if len(shifts) != 1:
            raise NoReference(f"roll: {len(shifts)} shifts without dims")
        return [np.roll(x.reshape(-1), shifts[0]).reshape(x.shape)]
    if len(shifts) != len(dims) or not all(-x.ndim <= d < max(x.ndim, 1) for d in dims):
        raise NoReference(f"roll: shifts {shifts} and dims {dims} of a {x.ndim}-d tensor")
    return [np.roll(x, shifts, tuple(_dim(d, x.ndim) for d in dims))]


def _diagonal_arg(args: list, kwargs: dict) -> int:
    k = opt(kwargs, args, 1, "diagonal", 0)
    if not isinstance(k, int) or isinstance(k, bool):
        raise NoReference("tril / triu: the diagonal must be an integer")
    return k


def _triangle(keep: Callable, name: str) -> Callable:
    """tril / triu: the lower / upper triangle of the last two dims (from the ``diagonal``-th),
    zeros across: a selection, exact (a causal mask's)."""
    def form_(args: list, kwargs: dict) -> list:
        x = args[0]
        if x.ndim < 2:
            raise NoReference(f"{name} of a tensor of fewer than 2 dims")
        return [keep(x, _diagonal_arg(args, kwargs))]
    return form_


form("aten.tril.default")(_triangle(np.tril, "tril"))
form("aten.triu.default")(_triangle(np.triu, "triu"))


@form("aten.flip.default")
def _flip(args: list, kwargs: dict) -> list:
    x = args[0]
    return [np.array(np.flip(x, tuple(_dim(d, x.ndim) for d in args[1])))]
