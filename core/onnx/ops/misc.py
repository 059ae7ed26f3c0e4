"""Odds and ends: BitCast, Col2Im, string ops, and the few ai.onnx.ml ops the suite uses."""

from __future__ import annotations

import re

import numpy as np
from onnx import helper

from tapescope.core.onnx.registry import as_int_list, op
from tapescope.core.ops.nn import col2im

ML = "ai.onnx.ml"


@op("BitCast")
def bit_cast(ctx, x, to=1):
    dt = np.dtype(helper.tensor_dtype_to_np_dtype(to))
    x = np.ascontiguousarray(x)
    if dt.itemsize == x.dtype.itemsize:
        return x.view(dt)
    if dt.itemsize < x.dtype.itemsize:  # each element splits into a new last axis
        return x.view(dt).reshape(x.shape + (x.dtype.itemsize // dt.itemsize,))
    return x.view(dt).reshape(x.shape[:-1])  # the last axis merges into one element


@op("Col2Im")
def col2im_(ctx, x, image_shape, block_shape, dilations=None, pads=None, strides=None):
    img, blk = as_int_list(image_shape), as_int_list(block_shape)
    nd = len(img)
    n = x.shape[0]
    c = x.shape[1] // int(np.prod(blk))
    dil = list(dilations or [1] * nd)
    st = list(strides or [1] * nd)
    p = list(pads or [0] * (2 * nd))
    return col2im(x, (n, c) + tuple(img), blk, st, dil, [(p[i], p[i + nd]) for i in range(nd)])


@op("StringConcat")
def string_concat(ctx, a, b):
    return np.vectorize(lambda u, v: str(u) + str(v), otypes=[object])(a, b)


@op("StringSplit")
def string_split(ctx, x, delimiter=None, maxsplit=None):
    flat = [str(s) for s in np.asarray(x).reshape(-1)]
    sep = delimiter or None
    parts = [s.split(sep, -1 if maxsplit is None else maxsplit) if s or sep else []
             for s in flat]
    if sep is None:
        parts = [s.split(None, -1 if maxsplit is None else maxsplit) for s in flat]
    width = max([len(p) for p in parts] + [0])
    y = np.full((len(flat), width), "", dtype=object)
    for i, p in enumerate(parts):
        y[i, :len(p)] = p
    shape = np.asarray(x).shape
    return y.reshape(shape + (width,)), np.array([len(p) for p in parts],
                                                  np.int64).reshape(shape)


@op("RegexFullMatch")
def regex_full_match(ctx, x, pattern=""):
    rx = re.compile(pattern)
    return np.vectorize(lambda s: rx.fullmatch(str(s)) is not None, otypes=[bool])(x)


@op("Binarizer", domain=ML)
def binarizer(ctx, x, threshold=0.0):
    return (x > threshold).astype(x.dtype)


@op("ArrayFeatureExtractor", domain=ML)
def array_feature_extractor(ctx, x, idx):
    return np.take(x, np.asarray(idx).astype(np.int64).reshape(-1), axis=-1).reshape(
        x.shape[:-1] + (-1,)) if x.ndim > 1 else np.take(x, np.asarray(idx).reshape(-1))


@op("LabelEncoder", domain=ML)
def label_encoder(ctx, x, **attrs):
    def pick(prefix):
        for suffix in ("strings", "int64s", "floats", "tensor"):
            v = attrs.get(f"{prefix}_{suffix}")
            if v is not None:
                return list(np.asarray(v).reshape(-1)) if suffix == "tensor" else list(v)
        return None
    keys, values = pick("keys"), pick("values")
    table = dict(zip(keys, values, strict=True))
    default = None
    for suffix in ("string", "int64", "float", "tensor"):
        if f"default_{suffix}" in attrs:
            d = attrs[f"default_{suffix}"]
            default = np.asarray(d).reshape(-1)[0] if suffix == "tensor" else d
            if suffix == "tensor" or default not in ("_Unused", -1, -0.0):
                break
    if values and isinstance(values[0], str):
        dt = object
    else:
        dt = np.asarray(values).dtype
    flat = [table.get(v if not isinstance(v, (bytes, np.bytes_)) else v.decode(), default)
            for v in np.asarray(x).reshape(-1)]
    return np.array(flat, dtype=dt).reshape(np.asarray(x).shape)


def _complex(x):
    return x[..., 0].astype(np.complex128) if x.shape[-1] == 1 else x[..., 0] + 1j * x[..., 1]


@op("DFT")
def dft(ctx, x, dft_length=None, axis_in=None, axis=1, inverse=0, onesided=0):
    if ctx.opset >= 20:  # axis became an input (default -2, counted on the full rank)
        axis = -2 if axis_in is None else int(np.asarray(axis_in).reshape(-1)[0])
    ax = axis % x.ndim
    if ax == x.ndim - 1:
        raise ValueError("DFT axis cannot be the last (real/imaginary) axis")
    c = _complex(x)
    n = None if dft_length is None else int(np.asarray(dft_length).reshape(-1)[0])
    y = np.fft.ifft(c, n=n, axis=ax) if inverse else np.fft.fft(c, n=n, axis=ax)
    if onesided:
        y = np.take(y, np.arange(y.shape[ax] // 2 + 1), axis=ax)
    return np.stack([y.real, y.imag], axis=-1).astype(x.dtype)


@op("STFT")
def stft(ctx, x, frame_step, window=None, frame_length=None, onesided=1):
    step = int(np.asarray(frame_step).reshape(-1)[0])
    flen = int(np.asarray(frame_length).reshape(-1)[0]) if frame_length is not None \
        else len(window)
    c = _complex(x)  # (batch, signal)
    frames = (c.shape[1] - flen) // step + 1
    idx = np.arange(frames)[:, None] * step + np.arange(flen)[None, :]
    seg = c[:, idx]  # (batch, frames, flen)
    if window is not None:
        seg = seg * window
    y = np.fft.fft(seg, axis=-1)
    if onesided:
        y = y[..., : flen // 2 + 1]
    return np.stack([y.real, y.imag], axis=-1).astype(x.dtype)
