"""Products and conversions: MatMul, Gemm, Einsum, Cast, CumSum, TopK, Range and friends.

MatMul and Gemm go through ``ctx.k.matmul``: in reference mode the serial-k product of the tape.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from tapescope.core.onnx.registry import as_int_list, op


@op("MatMul")
def matmul(ctx, a, b):
    return ctx.k.matmul(a, b).astype(np.result_type(a, b), copy=False)


@op("Gemm")
def gemm(ctx, a, b, c=None, alpha=1.0, beta=1.0, transA=0, transB=0, broadcast=0):
    """Y = alpha * A' @ B' + beta * C, as the tape records it: matmul, then scale, then add_bias."""
    if transA:
        a = a.T
    if transB:
        b = b.T
    t = a.dtype.type
    y = ctx.k.matmul(a, b).astype(a.dtype, copy=False)
    if alpha != 1.0:
        y = y * t(alpha)
    if c is not None:
        y = y + (c if beta == 1.0 else c * t(beta))
    return y.astype(a.dtype, copy=False)


@op("MatMulInteger")
def matmul_integer(ctx, a, b, a_zero=None, b_zero=None):
    a = a.astype(np.int32) - (0 if a_zero is None else np.asarray(a_zero).astype(np.int32))
    if b_zero is not None:
        bz = np.asarray(b_zero).astype(np.int32)
        b = b.astype(np.int32) - (bz if bz.ndim == 0 else bz.reshape(1, -1))
    return ctx.k.matmul(a, b.astype(np.int32)).astype(np.int32)


@op("Einsum")
def einsum(ctx, *xs, equation=""):
    # not a tape op: numpy's einsum without path optimisation (contraction order of numpy);
    # floats numpy cannot contract (bfloat16) go through float32
    dt = np.result_type(*xs)
    if dt.kind == "V" or dt.name == "bfloat16":
        xs = tuple(x.astype(np.float32) for x in xs)
    return np.asarray(np.einsum(equation.replace(" ", ""), *xs, optimize=False)).astype(
        dt, copy=False)


def _to_dtype(to: int) -> np.dtype:
    if to == TensorProto.STRING:
        return np.dtype(object)
    return np.dtype(helper.tensor_dtype_to_np_dtype(to))


def _cast(x: np.ndarray, dt: np.dtype, saturate: int = 1) -> np.ndarray:
    if dt.kind == "O":
        if x.dtype.kind == "f":
            return np.array([_float_str(v) for v in x.reshape(-1)], dtype=object).reshape(x.shape)
        return x.astype(str).astype(object)
    if x.dtype == object:  # strings to numbers
        return np.array([float(v) for v in x.reshape(-1)]).astype(dt).reshape(x.shape)
    if dt.kind == "V" or dt.name.startswith(("float8", "float4", "int4", "uint4", "int2",
                                               "uint2")):
        src = x.astype(np.float32) if x.dtype.kind not in "iub" else x
        if saturate and dt.name.startswith("float8"):
            import ml_dtypes
            info = ml_dtypes.finfo(dt)
            if x.dtype.kind == "f":  # saturate: out-of-range values and +-inf clip, NaN stays
                src = np.where(np.isnan(src), src, np.clip(src, float(info.min), float(info.max)))
        return src.astype(dt)
    return x.astype(dt)


def _float_str(v) -> str:
    f = float(v)
    if np.isnan(f):
        return "NaN"
    if np.isinf(f):
        return "INF" if f > 0 else "-INF"
    return np.format_float_positional(np.float32(f), trim="-") if abs(f) < 1e16 else repr(f)


@op("Cast")
def cast(ctx, x, to=1, saturate=1, round_mode="up"):
    return _cast(np.asarray(x), _to_dtype(to), saturate)


@op("CastLike")
def cast_like(ctx, x, like, saturate=1, round_mode="up"):
    return _cast(np.asarray(x), like.dtype, saturate)


def _cumulative(ufunc, fill, x, axis, exclusive, reverse):
    ax = int(np.asarray(axis).reshape(-1)[0]) % x.ndim
    y = np.flip(x, ax) if reverse else x
    # ufunc.accumulate is a serial left-to-right loop: the reference order
    out = ufunc.accumulate(y, axis=ax, dtype=x.dtype)
    if exclusive:
        out = np.concatenate([fill(np.take(out, [0], axis=ax)),
                              np.take(out, range(out.shape[ax] - 1), axis=ax)], axis=ax)
    return np.flip(out, ax) if reverse else out


@op("CumSum")
def cumsum(ctx, x, axis, exclusive=0, reverse=0):
    return _cumulative(np.add, np.zeros_like, x, axis, exclusive, reverse)


@op("CumProd")
def cumprod(ctx, x, axis, exclusive=0, reverse=0):
    return _cumulative(np.multiply, np.ones_like, x, axis, exclusive, reverse)


@op("TopK")
def topk(ctx, x, k=None, axis=-1, largest=1, sorted=1):  # noqa: A002 - ONNX name
    kk = int(np.asarray(k).reshape(-1)[0])  # an input from opset 10, an attribute before
    ax = axis % x.ndim
    # stable sort on the key; for largest, sort by negated value keeps lower index first on ties
    key = -x if largest else x
    if x.dtype.kind in "ui" and largest:
        idx = np.argsort(-(x.astype(np.int64)), axis=ax, kind="stable")
    else:
        idx = np.argsort(key, axis=ax, kind="stable")
    idx = np.take(idx, np.arange(kk), axis=ax)
    vals = np.take_along_axis(x, idx, axis=ax)
    return vals, idx.astype(np.int64)


@op("Range")
def range_(ctx, start, limit, delta, stash_type=None):
    s, l_, d = (np.asarray(v).reshape(()) for v in (start, limit, delta))
    n = int(max(np.ceil((l_ - s) / d), 0))
    # x_i = start + i * delta, as the spec's loop accumulates it
    out = s + np.arange(n).astype(s.dtype) * d
    return out.astype(s.dtype)


@op("Det")
def det(ctx, x):
    return np.linalg.det(x).astype(x.dtype)


@op("Hardmax")
def hardmax(ctx, x, axis=-1):
    if ctx.opset < 13:
        ax = axis % x.ndim
        flat = x.reshape(int(np.prod(x.shape[:ax])), -1)
        y = np.zeros_like(flat)
        y[np.arange(flat.shape[0]), np.argmax(flat, axis=1)] = 1
        return y.reshape(x.shape)
    ax = axis % x.ndim
    y = np.zeros_like(x)
    np.put_along_axis(y, np.expand_dims(np.argmax(x, axis=ax), ax), 1, axis=ax)
    return y


@op("OneHot")
def one_hot(ctx, indices, depth, values, axis=-1):
    d = int(np.asarray(depth).reshape(-1)[0])
    idx = np.asarray(indices).astype(np.int64)
    idx = np.where(idx < 0, idx + d, idx)
    ax = axis % (idx.ndim + 1)
    hot = np.expand_dims(idx, ax) == np.arange(d).reshape([-1 if i == ax else 1
                                                           for i in range(idx.ndim + 1)])
    off, on = values[0], values[1]
    return np.where(hot, on, off).astype(values.dtype)


@op("EyeLike")
def eye_like(ctx, x, dtype=None, k=0):
    dt = _to_dtype(dtype) if dtype is not None else x.dtype
    return np.eye(x.shape[0], x.shape[1], k=k, dtype=dt)


@op("Trilu")
def trilu(ctx, x, k=None, upper=1):
    kk = 0 if k is None else int(np.asarray(k).reshape(-1)[0])
    return np.triu(x, kk) if upper else np.tril(x, kk)


@op("NonZero")
def nonzero(ctx, x):
    return np.array(np.nonzero(x), dtype=np.int64).reshape(x.ndim, -1)


@op("Size")
def size(ctx, x):
    return np.array(np.asarray(x).size, dtype=np.int64)


@op("Shape")
def shape(ctx, x, start=0, end=None):
    s = np.array(np.asarray(x).shape, dtype=np.int64)
    if ctx.opset < 15:
        return s
    return s[start:end] if end is not None else s[start:]


@op("ConstantOfShape")
def constant_of_shape(ctx, shp, value=None):
    v = np.zeros(1, np.float32) if value is None else np.asarray(value).reshape(-1)
    # NOTE: a read-only broadcast of the one value, not np.full: the light models ship their
    # weights this way (vgg19: 575 MB of them), and a view holds no memory (nor budget bytes)
    return np.broadcast_to(np.asarray(v[0], dtype=v.dtype), tuple(as_int_list(shp)))


@op("Constant")
def constant(ctx, value=None, value_float=None, value_floats=None, value_int=None,
             value_ints=None, value_string=None, value_strings=None, sparse_value=None):
    if value is not None:
        return np.asarray(value)
    if value_float is not None:
        return np.array(value_float, np.float32)
    if value_floats is not None:
        return np.array(value_floats, np.float32)
    if value_int is not None:
        return np.array(value_int, np.int64)
    if value_ints is not None:
        return np.array(value_ints, np.int64)
    if value_string is not None:
        return np.array(value_string, dtype=object)
    if value_strings is not None:
        return np.array(value_strings, dtype=object)
    raise ValueError("Constant has no value attribute")
