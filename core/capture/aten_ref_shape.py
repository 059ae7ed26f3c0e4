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
    fast,
    form,
    fp_quiet,
    opt,
)


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
    return I64 if isinstance(v, int) else F32


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
        dt = as_dtype(kwargs.get("dtype")) or (_fill_dtype(v, None) if value is None else F32)
        return [np.full(size, cast(v, dt))]
    return run


form("aten.zeros.default")(_factory(0))
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
    return [np.eye(rows, cols, dtype=as_dtype(kwargs.get("dtype")) or F32)]


@form("aten.scalar_tensor.default")
def _scalar_tensor(args: list, kwargs: dict) -> list:
    return [cast(args[0], as_dtype(kwargs.get("dtype")) or F32)]


@form("aten.arange.default", "aten.arange.start", "aten.arange.start_step")
def _arange(args: list, kwargs: dict) -> list:
    nums = [a for a in args if isinstance(a, int | float)]
    start, end, step = (0, nums[0], 1) if len(nums) == 1 else (
        nums[0], nums[1], nums[2] if len(nums) > 2 else 1)
    dt = as_dtype(kwargs.get("dtype"))
    if dt is None:
        dt = I64 if all(isinstance(v, int) for v in (start, end, step)) else F32
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
    dt = as_dtype(kwargs.get("dtype")) or F32
    if steps == 1:
        return [np.asarray([start], F64).astype(dt)]
    i = np.arange(steps, dtype=F64)
    step = (F64.type(end) - F64.type(start)) / F64.type(max(steps - 1, 1))
    with np.errstate(all="ignore"):
        v = np.where(i < steps // 2, F64.type(start) + step * i,
                     F64.type(end) - step * (steps - 1 - i))
    return [np.rint(v).astype(dt) if dt.kind in "iu" else v.astype(dt)]


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


@form("aten.as_strided.default", "aten.as_strided_.default", "aten.as_strided_copy.default")
def _as_strided(args: list, kwargs: dict) -> list:
    """The elements ``x.as_strided(size, stride, offset)`` shows: each output element's
    storage position found among the input's own (laid out by its recorded layout,
    ``LAYOUT_KW``); an element of the storage that is not one of the input's is not in the
    capture: no reference."""
    from tapescope.core.capture.file import LAYOUT_KW

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
    if x.size and all(st == c for d, st, c in zip(x.shape, in_strides,
                                                  _c_order(x.shape), strict=True) if d > 1):
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


def _c_order(shape: tuple[int, ...]) -> list[int]:
    """The strides (in elements) of C order over ``shape``."""
    out, step = [], 1
    for d in reversed(shape):
        out.append(step)
        step *= d
    return out[::-1]


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


@form("aten.narrow.default")
def _narrow(args: list, kwargs: dict) -> list:
    x, d, start, length = args
    d = _dim(d, x.ndim)
    start = _dim(start, x.shape[d])
    return [np.array(x[(slice(None),) * d + (slice(start, start + length),)])]


@form("aten.unsqueeze.default")
def _unsqueeze(args: list, kwargs: dict) -> list:
    x = args[0]
    return [np.array(np.expand_dims(x, _dim(args[1], x.ndim + 1)))]


@form("aten.squeeze.default", "aten.squeeze.dim", "aten.squeeze.dims")
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


@form("aten.scatter.value", "aten.scatter.src")
def _scatter(args: list, kwargs: dict) -> list:
    """(self, dim, index, value | src): a copy of self with ``out[..., index[i], ...] = value``
    (or src at i) at every position i of ``index`` along ``dim`` (``F.one_hot``'s); exact. An
    index out of range, or a src written twice to one place (whose winner is the loop's
    order), has no form."""
    x, d, idx, val = args[0], args[1], np.asarray(args[2]), args[3]
    if "reduce" in kwargs or len(args) > 4:
        raise NoReference("scatter with a reduce")
    x = np.asarray(x)
    d = _dim(int(d), x.ndim)
    if x.ndim == 0 or idx.ndim != x.ndim or any(
            idx.shape[a] > x.shape[a] for a in range(x.ndim) if a != d):
        raise NoReference("an index whose shape does not fit self")
    idx = idx.astype(I64)
    if idx.size and (idx.min() < -x.shape[d] or idx.max() >= x.shape[d]):
        raise NoReference("an index out of range (torch raises)")
    where = list(np.indices(idx.shape, sparse=True))
    where[d] = idx % x.shape[d] if x.shape[d] else idx
    out = np.array(x, copy=True)
    if isinstance(val, np.ndarray) and val.ndim:
        src = val[tuple(slice(0, n) for n in idx.shape)]
        flat = np.ravel_multi_index(tuple(np.broadcast_arrays(*where)), x.shape)
        if np.unique(flat).size != flat.size:
            raise NoReference("scatter of a src onto one place twice")
        out[tuple(where)] = src
    else:
        out[tuple(where)] = np.asarray(val).astype(x.dtype)
    return [out]


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
    width = [(0, 0)] * x.ndim
    for i in range(len(pad) // 2):
        width[x.ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1])
    if any(a < 0 or b < 0 for a, b in width):
        raise NoReference("constant_pad_nd with a negative pad (a crop)")
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
