"""The reference forms of quantization-aware training's fused observer and fake quantizer
(session 45: ``torch.ao.quantization.prepare_qat``'s ``FusedMovingAvgObsFakeQuantize`` records
``aten._fused_moving_avg_obs_fq_helper``, each call of it no reference before: 60 of a QAT
script's 518 outputs).

The op, as ATen's CPU kernel computes it (FusedObsFakeQuant.cpp, QuantUtils.h; measured against
torch every bit on per-tensor and per-channel, symmetric and affine calls):

* the observer (``observer_on``): the input's minimum and maximum (per channel of ``ch_axis``
  for ``per_row_fake_quant``; a first call's empty running statistics are made +-inf), each
  running value ``r = x`` where it is infinite, else ``r + c * (x - r)`` in float32 (the
  averaging constant rounded to float32, no FMA);
* the quantization parameters (``fake_quant_on``), per running pair: ``min(min, 0)`` and
  ``max(max, 0)`` (symmetric: first widened to ``max(|min / qmin_s|, |max / qmax_s|)`` times the
  symmetric range, in float32); ``scale = (max - min) / (qmax - qmin)`` in double, 0.1 where
  its float32 is 0 or has an infinite reciprocal, at least 6.1e-5 (the bounds scaled by the
  same factor); the zero point from whichever bound's term is the smaller (``|q| - |bound /
  scale|``), the middle of the range where symmetric, clamped or rounded to nearest even; the
  scale stored as float32, the zero point as int32;
* the fake quantizer: ``inv = 1 / scale`` in float32, ``q = int64(zp + rint(x * inv))``
  (float32), ``out = (clamp(q, qmin, qmax) - zp) * scale`` in double, rounded to the input's
  type; ``mask = qmin <= q <= qmax``. With fake quantization off: ``x`` and a mask of ones.

Outputs in the recorder's order: the four written statistics, then ``output`` and ``mask``.
"""

from __future__ import annotations

import numpy as np

from tapescope.core.capture.aten_ref_table import (
    F32,
    NoReference,
    check_elems,
    form,
    opt,
    recorded_output,
)

__all__: list[str] = []

_SMALL_SCALE = float(np.float32(6.1e-5))  # QuantUtils.h's SMALL_SCALE_THRESHOLD


def _qparams(mn: float, mx: float, qmin: int, qmax: int, symmetric: bool) -> tuple[float, int]:
    """QuantUtils.h's ``ChooseQuantizationParams`` (no power of two, no reduced range)."""
    f = np.float32
    mn, mx = float(f(mn)), float(f(mx))
    if mn < 0 < mx and symmetric:
        sqmin, sqmax = -((qmax - qmin) // 2 + 1), (qmax - qmin) // 2
        ms = max(abs(mn / sqmin), abs(mx / sqmax))
        mn, mx = float(f(ms * sqmin)), float(f(ms * sqmax))
    mn, mx = min(mn, 0.0), max(mx, 0.0)
    scale = (mx - mn) / (qmax - qmin)
    with np.errstate(all="ignore"):
        if f(scale) == 0 or np.isinf(f(1) / f(scale)):
            scale = 0.1
    if scale < _SMALL_SCALE:
        org, scale = scale, _SMALL_SCALE
        if mn == 0.0:
            mx = float(f(_SMALL_SCALE * (qmax - qmin)))
        elif mx == 0.0:
            mn = float(f(-_SMALL_SCALE * (qmax - qmin)))
        else:
            amp = float(f(_SMALL_SCALE / org))
            mn, mx = float(f(mn * amp)), float(f(mx * amp))
    from_min, from_max = qmin - mn / scale, qmax - mx / scale
    err_min, err_max = abs(qmin) - abs(mn / scale), abs(qmax) - abs(mx / scale)
    z0 = from_min if err_min < err_max else from_max
    if mn < 0 < mx and symmetric:
        z0 = (qmin + qmax) / 2
    z = qmin if z0 < qmin else qmax if z0 > qmax else int(np.rint(z0))
    return scale, z


def _fake_quant(x: np.ndarray, scale: float, zp: int, qmin: int, qmax: int
                ) -> tuple[np.ndarray, np.ndarray]:
    sc = np.float32(scale)
    with np.errstate(all="ignore"):
        inv = np.float32(1) / sc
        q = (x.dtype.type(zp) + np.rint((x * inv).astype(x.dtype))).astype(x.dtype)
        q = np.nan_to_num(q, nan=0.0, posinf=2.0 ** 62, neginf=-2.0 ** 62).astype(np.int64)
        out = ((np.clip(q, qmin, qmax).astype(np.float64) - float(zp)) * float(sc)).astype(x.dtype)
    return out, (q >= qmin) & (q <= qmax)


@form("aten._fused_moving_avg_obs_fq_helper.default")
def _fused_obs_fq(args: list, kwargs: dict) -> list:
    if len(args) < 11:
        raise NoReference("_fused_moving_avg_obs_fq_helper: too few arguments")
    x, obs, fq, rmin, rmax, scale, zp = (np.asarray(a) for a in args[:7])
    c, qmin, qmax, ch = args[7], args[8], args[9], args[10]
    per_row = bool(opt(kwargs, args, 11, "per_row_fake_quant", False))
    symmetric = bool(opt(kwargs, args, 12, "symmetric_quant", False))
    if x.dtype not in (F32, np.dtype(np.float64)) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in (qmin, qmax, ch)) \
            or not qmin < qmax or not isinstance(c, float | int) or obs.size != 1 \
            or fq.size != 1:
        raise NoReference("_fused_moving_avg_obs_fq_helper: a float32 / float64 input, "
                          "integer quant_min < quant_max and ch_axis, one-element switches")
    rmin, rmax = rmin.astype(F32), rmax.astype(F32)
    scale, zp = scale.astype(F32), zp.astype(np.int32)
    if per_row:
        if not 0 <= ch < x.ndim:
            raise NoReference(f"_fused_moving_avg_obs_fq_helper: ch_axis {ch} of a "
                              f"{x.ndim}-d input")
        size = x.shape[ch]
        check_elems(size, "_fused_moving_avg_obs_fq_helper")
        resized = rmin.size == 0
        if resized:  # (a first call: its statistics made, its qparams resized)
            rmin, rmax = np.full(size, np.inf, F32), np.full(size, -np.inf, F32)
            scale = np.resize(scale, size).astype(F32)
            zp = np.resize(zp, size).astype(np.int32)
        rows = np.moveaxis(x, ch, 0).reshape(size, -1)
    else:
        size, rows, resized = 1, x.reshape(1, -1), False
    if rmin.size != size or rmax.size != size or scale.size != size or zp.size != size:
        raise NoReference("_fused_moving_avg_obs_fq_helper: statistics and parameters of "
                          f"{size} entries expected")
    rmin, rmax, scale, zp = rmin.copy(), rmax.copy(), scale.copy(), zp.copy()
    fm, fx, fs, fz = (a.reshape(-1) for a in (rmin, rmax, scale, zp))
    if int(obs.reshape(-1)[0]) and rows.shape[1]:
        c32 = np.float32(c)
        with np.errstate(all="ignore"):
            for i, (lo, hi) in enumerate(zip(rows.min(1), rows.max(1), strict=True)):
                fm[i] = lo if np.isinf(fm[i]) else np.float32(fm[i] + np.float32(
                    c32 * np.float32(lo - fm[i])))
                fx[i] = hi if np.isinf(fx[i]) else np.float32(fx[i] + np.float32(
                    c32 * np.float32(hi - fx[i])))
    if not int(fq.reshape(-1)[0]):
        if resized:  # (resized, unwritten: the heap's; the recorded bytes, not judged)
            rs, rz = recorded_output(2, scale), recorded_output(3, zp)
            scale, zp = scale if rs is None else rs, zp if rz is None else rz
        return [rmin, rmax, scale, zp, x.copy(), np.ones(x.shape, np.bool_)]
    for i in range(size):
        s, z = _qparams(fm[i], fx[i], qmin, qmax, symmetric)
        fs[i], fz[i] = np.float32(s), z
    if per_row:
        out, mask = np.empty_like(x), np.empty(x.shape, np.bool_)
        xs, os_, ms = (np.moveaxis(a, ch, 0) for a in (x, out, mask))
        for i in range(size):
            os_[i], ms[i] = _fake_quant(xs[i], fs[i], int(fz[i]), qmin, qmax)
    else:
        out, mask = _fake_quant(x, fs[0], int(fz[0]), qmin, qmax)
    return [rmin, rmax, scale, zp, out, mask]
