"""Quantization: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, QLinearMatMul,
ConvInteger, QLinearConv (numpy; not tape ops)."""

from __future__ import annotations

import numpy as np
from onnx import helper

from tapescope.core.onnx.registry import op
from tapescope.core.ops.nn import conv_nd, pads_for


def _per_axis(s, x, axis, block_size):
    """Broadcast a per-tensor, per-axis or blocked scale/zero point against x."""
    s = np.asarray(s)
    if s.ndim == 0 or s.size == 1 and not block_size:
        return s.reshape(())
    ax = axis % x.ndim
    if block_size:
        return np.repeat(s, block_size, axis=ax).take(range(x.shape[ax]), axis=ax)
    return s.reshape([-1 if i == ax else 1 for i in range(x.ndim)])


def _limits(dt):
    name = dt.name
    if name in ("int4", "uint4", "int2", "uint2"):
        bits = int(name[-1])
        if name[0] == "i":
            return -(1 << (bits - 1)), (1 << (bits - 1)) - 1
        return 0, (1 << bits) - 1
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return info.min, info.max
    return None


def _to_quant(v, dt, saturate=1):
    """Round half to even and saturate into dt (integers), or cast (float8 and friends)."""
    lim = _limits(dt)
    if lim is None:
        if saturate and dt.name.startswith("float8"):
            import ml_dtypes
            fi = ml_dtypes.finfo(dt)
            v = np.where(np.isfinite(v), np.clip(v, float(fi.min), float(fi.max)), v)
        return v.astype(np.float32).astype(dt)
    return np.clip(np.rint(v), *lim).astype(dt)


@op("QuantizeLinear")
def quantize_linear(ctx, x, scale, zero_point=None, axis=1, block_size=0, saturate=1,
                    output_dtype=0, precision=0):
    if zero_point is not None:
        dt = np.asarray(zero_point).dtype
    elif output_dtype:
        dt = np.dtype(helper.tensor_dtype_to_np_dtype(output_dtype))
    else:
        dt = np.dtype(np.uint8)
    s = _per_axis(scale, x, axis, block_size).astype(np.float64)
    v = x.astype(np.float64) / s
    if _limits(dt) is not None:
        v = np.rint(v)
        if zero_point is not None:
            v = v + _per_axis(zero_point, x, axis, block_size).astype(np.float64)
        return _to_quant(v, dt, saturate)
    return _to_quant(v, dt, saturate)


@op("DequantizeLinear")
def dequantize_linear(ctx, x, scale, zero_point=None, axis=1, block_size=0, output_dtype=0):
    s = _per_axis(scale, x, axis, block_size)
    v = x.astype(np.float32) if x.dtype.kind not in "iu" else x.astype(np.int64)
    if zero_point is not None:
        zp = _per_axis(zero_point, x, axis, block_size)
        zp = zp.astype(np.float32) if zp.dtype.kind not in "iu" else zp.astype(np.int64)
        v = v - zp
    out_dt = np.dtype(helper.tensor_dtype_to_np_dtype(output_dtype)) if output_dtype else s.dtype
    return (v.astype(np.float32) * s.astype(np.float32)).astype(out_dt)


@op("DynamicQuantizeLinear")
def dynamic_quantize_linear(ctx, x):
    lo, hi = min(0.0, float(np.min(x))), max(0.0, float(np.max(x)))
    scale = np.float32((hi - lo) / 255)
    zp = np.uint8(np.clip(np.rint(0 - lo / scale), 0, 255)) if scale else np.uint8(0)
    y = np.clip(np.rint(x / scale) + zp, 0, 255).astype(np.uint8) if scale else \
        np.zeros(x.shape, np.uint8)
    return y, np.array(scale, np.float32), np.array(zp, np.uint8)


def _deq(x, s, zp):
    return (x.astype(np.int64) - np.asarray(zp).astype(np.int64)).astype(np.float64) * \
        np.asarray(s, np.float64)


@op("QLinearMatMul")
def qlinear_matmul(ctx, a, a_s, a_zp, b, b_s, b_zp, y_s, y_zp):
    bzp = np.asarray(b_zp)
    bs = np.asarray(b_s, np.float64)
    if bzp.ndim == 1 and b.ndim == 2:
        bzp, bs = bzp.reshape(1, -1), bs.reshape(1, -1)
    acc = (a.astype(np.int64) - np.asarray(a_zp).astype(np.int64)) @ \
        (b.astype(np.int64) - bzp.astype(np.int64))
    v = acc.astype(np.float64) * (np.asarray(a_s, np.float64) * bs / np.asarray(y_s, np.float64))
    return _to_quant(v + np.asarray(y_zp).astype(np.float64), np.asarray(y_zp).dtype)


def _conv_geometry(x, w, auto_pad, dilations, kernel_shape, pads, strides):
    nd = x.ndim - 2
    k = list(kernel_shape or w.shape[2:])
    st = list(strides or [1] * nd)
    dil = list(dilations or [1] * nd)
    return st, pads_for(x.shape[2:], k, st, dil, pads, auto_pad), dil


@op("ConvInteger")
def conv_integer(ctx, x, w, x_zp=None, w_zp=None, auto_pad="NOTSET", dilations=None, group=1,
                 kernel_shape=None, pads=None, strides=None):
    xi = x.astype(np.int32) - (0 if x_zp is None else np.asarray(x_zp).astype(np.int32))
    wz = 0 if w_zp is None else np.asarray(w_zp).astype(np.int32)
    wz = wz.reshape(-1, *([1] * (w.ndim - 1))) if np.ndim(wz) == 1 else wz
    wi = w.astype(np.int32) - wz
    st, padw, dil = _conv_geometry(x, w, auto_pad, dilations, kernel_shape, pads, strides)
    return conv_nd(xi, wi, st, padw, dil, group, matmul=np.matmul).astype(np.int32)


@op("QLinearConv")
def qlinear_conv(ctx, x, x_s, x_zp, w, w_s, w_zp, y_s, y_zp, b=None, auto_pad="NOTSET",
                 dilations=None, group=1, kernel_shape=None, pads=None, strides=None):
    xi = x.astype(np.int64) - np.asarray(x_zp).astype(np.int64)
    wz = np.asarray(w_zp).astype(np.int64)
    wz = wz.reshape(-1, *([1] * (w.ndim - 1))) if wz.ndim == 1 else wz
    wi = w.astype(np.int64) - wz
    st, padw, dil = _conv_geometry(x, w, auto_pad, dilations, kernel_shape, pads, strides)
    acc = conv_nd(xi, wi, st, padw, dil, group, matmul=np.matmul)
    if b is not None:
        acc = acc + b.reshape((1, -1) + (1,) * (x.ndim - 2))
    ws = np.asarray(w_s, np.float64)
    ws = ws.reshape((1, -1) + (1,) * (x.ndim - 2)) if ws.ndim == 1 else ws
    v = acc.astype(np.float64) * (np.asarray(x_s, np.float64) * ws / np.asarray(y_s, np.float64))
    return _to_quant(v + np.asarray(y_zp).astype(np.float64), np.asarray(y_zp).dtype)
