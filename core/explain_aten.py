"""PyTorch's CPU kernels (ATen on an AVX-512 CPU) written out in numpy, bit for bit: the orders
``core.explain`` tries when PyTorch is the candidate (issue 44; docs/candidates.md).

What each reproduces was measured here against torch 2.13.0+cpu (CPU capability AVX512, GCC 13
with its default ``-ffp-contract=fast``, so a multiply feeding an add in a kernel is one fma);
tests/core/test_explain_aten.py holds each to torch's own bits where torch is installed.

- ``sleef_exp``: SLEEF's vectorised ``exp`` (``Sleef_expd8_u10`` / ``Sleef_expf16_u10``, the FMA
  build), what ``Vectorized<double|float>::exp()`` calls: a Cody-Waite reduction by ln 2 in two
  parts, a degree-10 (double, Estrin's scheme) / degree-6 (float, Horner) polynomial with
  every multiply-add contracted, and ``2^q`` applied in two halves.
- ``reduce_all``: ATen's ``vec::reduce_all`` of a row: one vector register of lanes (8 doubles,
  16 floats), each lane serial over its stride, a partial last vector added into the first lanes;
  then the lanes folded: in sequence for double (the generic ``vec_reduce_all``), as a halving
  tree of shuffles for float (its AVX-512 specialisation). A float row shorter than one vector
  is summed serially.
- ``softmax``: ``_vec_softmax_lastdim``: max, ``exp(x - max)`` (SLEEF), ``reduce_all``, then
  ``x * (1 / sum)``.
- ``aten_sum``: ATen's CPU sum kernel (SumKernel.cpp; dispatched to its AVX2 build here, so 4
  doubles / 8 floats a vector) over trailing axes (``vectorized_inner_sum``: a row shorter than
  one vector by ``row_sum``, else the elements past the last whole vector added serially first,
  then the vectors by ``row_sum``, then their lanes in order) or leading ones
  (``vectorized_outer_sum``: column groups of 4 vectors by the cascade over every row, the
  other columns by ``row_sum``). ``row_sum`` keeps 4 partial sums (row ``i`` in partial
  ``i % 4``, each the cascade of ``multi_row_sum``), adds the leftover rows to partial 0, then
  the partials in order. (A float32 outer sum of fewer columns than one vector is not
  reproduced.)
- ``rms_norm`` backward: ``F.rms_norm`` is ATen's composite ``(x * rsqrt(mean(x^2) + eps)) *
  w``, so autograd's chain: ``gx = (g w) r + ((-0.5 * sum(g w x)) * (r r r)) / n * (2 x)``,
  ``gw = sum_to_size(g * (x r))``, every sum ``aten_sum``; ``gx``'s two terms are handed as
  ``core.explain_prims.GradParts``: autograd adds each to x's gradient on its own, after the
  contributions of x's later consumers (a residual add's).
- ``sleef_log``: SLEEF's vectorised log (``xlog_u1``, AVX-512: ``getexp`` / ``getmant``, the
  reduction in double-double (double-float), Estrin's / Horner's polynomial), what
  ``_vec_log_softmax_lastdim`` takes of its row sums.
- ``cross_entropy`` backward: ``nll_loss``'s ``-(g / N)`` at the targets, then
  ``_vec_log_softmax_backward``'s ``fma(-exp(out), sum(gi), gi)`` on the forward's own
  log_softmax ``(x - max) - log(reduce_all(exp(x - max)))``.
- ``sigmoid``: ``1 / (1 + exp(-x))`` the same way (SLEEF's exp on register pairs, the C
  library's on the rest).
- ``swiglu``: ``silu(a) * u`` with ATen's ``silu`` ``a / (1 + exp(-a))`` (``cpu_kernel_vec``:
  vectors of two registers, SLEEF's exp; the elements past the last whole pair of registers by
  the scalar loop, the C library's exp), and its backward: ``gu = g * silu(a)``,
  ``ga = ((g * u) * s) * fma(a, 1 - s, 1)`` with ``s = 1 / (1 + exp(-a))`` (silu_backward).
- ``aten_moments``: layer_norm's mean and variance as ATen's ``RowwiseMoments`` computes them
  (moments_utils.h, its AVX2 build: 4 doubles / 8 floats a vector): Welford per lane over
  chunks of 16 vectors (``m1 = fma(1/(j+1), delta, m1)``, ``m2 = fma(delta, x - m1, m2)``),
  the chunks merged by a cascade of depth ``ceil(log2(chunks))`` (``AddMomentsVec``: ``m1 + c
  delta``, ``fma(delta m0, c delta, m2 + m2_add)``), the elements past the last whole vector
  by scalar Welford (``delta / k``, not contracted), then each lane merged into that
  (``AddMoments``, contracted); the output ``((x - mean) * rstd) * w`` is the reference's.
- ``flash_attention`` and its backward: SDPA's CPU flash kernel (FlashAttentionKernel.cpp,
  float32) by query and key blocks: MKL's products as fma chains (in panels of <= 384
  terms), ``exp_u20`` (ATen's own polynomial) on whole vectors and the C library's double
  ``exp`` on the rest, per-lane sums, the online softmax's rescaling, ``(e @ v) * (1 /
  sum)``; the backward block by block with SLEEF's exp. ``lanes`` 16 is the
  AVX-512 build, 8 the AVX2 one (both measured, the latter under ``ATEN_CPU_CAPABILITY=avx2``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from itertools import pairwise
from typing import Any

import ml_dtypes
import numpy as np

__all__ = ["ATEN_BACKWARD", "ATEN_FORWARD", "aten_moments", "aten_sum", "reduce_all", "silu",
           "mish", "sleef_exp", "sleef_log", "sleef_log1pf"]

_BF16 = np.dtype(ml_dtypes.bfloat16)

# SLEEF's constants (sleefsimddp.c / sleefsimdsp.c, misc.h)
_R_LN2 = 1.442695040888963407359924681001892137426645954152985934135449406931
_L2U = .693147180559662956511601805686950683593750
_L2L = .28235290563031577122588448175013436025525412068e-12
_L2UF, _L2LF = 0.693145751953125, 1.428606765330187045e-06
# xexp's polynomial, c9 .. c0 (the FMA build)
_EXP_C = (0.2081276378237164457e-8, 0.2511210703042288022e-7, 0.2755762628169491192e-6,
          0.2755723402025388239e-5, 0.2480158687479686264e-4, 0.1984126989855865850e-3,
          0.1388888888914497797e-2, 0.8333333333314938210e-2, 0.4166666666666602598e-1,
          0.1666666666666669072e+0)
_EXPF_C = (0.000198527617612853646278381, 0.00139304355252534151077271,
           0.00833336077630519866943359, 0.0416664853692054748535156,
           0.166666671633720397949219, 0.5)

# xlog_u1's polynomials (double: Estrin's POLY7 in x^2; float: Horner)
_LOG_C = (0.1532076988502701353e+0, 0.1525629051003428716e+0, 0.1818605932937785996e+0,
          0.2222214519839380009e+0, 0.2857142932794299317e+0, 0.3999999999635251990e+0,
          0.6666666666667333541e+0)
_LOGF_C = (0.3027294874, 0.3996108174, 0.6666694880)

# lanes of one AVX-512 register
_LANES = {np.dtype(np.float64): 8, np.dtype(np.float32): 16}


def _fma(a: Any, b: Any, c: Any) -> np.ndarray:
    from tapescope.core.explain_prims import fma

    return fma(a, b, c)


def _pow2(q: np.ndarray, dt: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """SLEEF's ``vldexp2``: ``2^(q >> 1)`` and ``2^(q - (q >> 1))``, each exact in ``dt``."""
    h = q >> 1
    return (np.ldexp(np.ones_like(q, dtype=dt), h.astype(np.int32)),
            np.ldexp(np.ones_like(q, dtype=dt), (q - h).astype(np.int32)))


def _sleef_exp64(d: np.ndarray) -> np.ndarray:
    f = np.float64
    with np.errstate(all="ignore"):
        u = np.rint(d * f(_R_LN2))
        q = np.where(np.isfinite(u), u, 0).astype(np.int64)
        s = _fma(u, f(-_L2U), d)
        s = _fma(u, f(-_L2L), s)
        s2 = s * s
        s4 = s2 * s2
        s8 = s4 * s4
        c = [f(v) for v in _EXP_C]

        def p2(a: f, b: f) -> np.ndarray:
            return _fma(s, a, b)

        p4a = _fma(s2, p2(c[2], c[3]), p2(c[4], c[5]))
        p4b = _fma(s2, p2(c[6], c[7]), p2(c[8], c[9]))
        u = _fma(s8, p2(c[0], c[1]), _fma(s4, p4a, p4b))
        u = _fma(u, s, f(0.5))
        u = _fma(u, s, f(1.0))
        u = _fma(u, s, f(1.0))
        a, b = _pow2(q, np.dtype(f))
        u = (u * a) * b
        u = np.where(d > f(709.78271114955742909217217426), f(np.inf), u)
        u = np.where(d < f(-1000), f(0), u)
        return np.where(np.isnan(d), d, u)


def _sleef_exp32(d: np.ndarray) -> np.ndarray:
    f = np.float32
    with np.errstate(all="ignore"):
        qq = np.rint(d * f(_R_LN2))
        q = np.where(np.isfinite(qq), qq, 0).astype(np.int32)
        qf = q.astype(f)
        s = _fma(qf, f(-_L2UF), d)
        s = _fma(qf, f(-_L2LF), s)
        u = np.full_like(d, f(_EXPF_C[0]))
        for c in _EXPF_C[1:]:
            u = _fma(u, s, f(c))
        u = f(1.0) + _fma(s * s, u, s)
        a, b = _pow2(q.astype(np.int64), np.dtype(f))
        u = (u * a) * b
        u = np.where(d < f(-104), f(0), u)
        u = np.where(f(100) < d, f(np.inf), u)
        return np.where(np.isnan(d), d, u).astype(f)


def sleef_exp(x: Any) -> np.ndarray:
    """SLEEF's vectorised exp (u10, FMA build) in x's type (float64 or float32)."""
    x = np.asarray(x)
    if x.dtype == np.float64:
        return _sleef_exp64(x)
    if x.dtype == np.float32:
        return _sleef_exp32(x)
    raise ValueError(f"SLEEF's exp is written for float64 and float32, not {x.dtype}")


def _getmant(d: np.ndarray) -> np.ndarray:
    """AVX-512's ``getmant`` to [0.75, 1.5) of a positive normal ``d``."""
    fr = np.frexp(d)[0]
    return np.where(fr < 0.75, fr * 2, fr).astype(d.dtype)


def _getexp(v: np.ndarray) -> np.ndarray:
    """AVX-512's ``getexp``: floor(log2(v)) of a positive normal ``v``, in v's type."""
    return (np.frexp(v)[1] - 1).astype(v.dtype)


def sleef_log(d: Any) -> np.ndarray:
    """SLEEF's vectorised log (``Sleef_logd8_u10`` / ``Sleef_logf16_u10``: ``xlog_u1``'s
    AVX-512 build, a double-double / double-float reduction) of positive normal numbers."""
    d = np.asarray(d)
    if d.dtype not in _LANES:
        raise ValueError(f"SLEEF's log is written for float64 and float32, not {d.dtype}")
    t_ = d.dtype.type
    with np.errstate(all="ignore"):
        v = d * t_(1.0 / 0.75)
        e = _getexp(v)  # (getexp(inf) is inf, which SLEEF takes as 128 / 1024: d past 2.5e38)
        e = np.where(np.isinf(v), t_(128 if t_ is np.float32 else 1024), e).astype(d.dtype)
        m = _getmant(d)

        def add2(a: Any, b: Any) -> tuple[np.ndarray, np.ndarray]:
            s = a + b
            v = s - a
            return s, (a - (s - v)) + (b - v)

        nx, ny = add2(t_(-1), m)  # x = dddiv(ddadd2(-1, m), ddadd2(1, m))
        dx, dy = add2(t_(1), m)
        t = t_(1) / dx
        xx = nx * t
        u = _fma(t, nx, -xx)
        v = _fma(-dy, t, _fma(-dx, t, t_(1)))
        xy = _fma(xx, v, _fma(ny, t, u))
        x2 = xx * xx
        if d.dtype == np.float64:
            x4 = x2 * x2
            x8 = x4 * x4
            c = [t_(v) for v in _LOG_C]
            p3 = _fma(x4, c[0], _fma(x2, c[1], c[2]))
            p4 = _fma(x4, _fma(x2, c[3], c[4]), _fma(x2, c[5], c[6]))
            poly = _fma(x8, p3, p4)
            lh, ll = t_(0.693147180559945286226764), t_(2.319046813846299558417771e-17)
        else:
            poly = t_(_LOGF_C[0])
            for cc in _LOGF_C[1:]:
                poly = _fma(poly, x2, t_(cc))
            lh, ll = t_(0.69314718246459960938), t_(-1.904654323148236017e-09)
        sx = lh * e  # ddmul((ln2 hi, lo), e)
        sy = _fma(ll, e, _fma(lh, e, -sx))
        yx, yy = xx * t_(2), xy * t_(2)  # ddadd(s, ddscale(x, 2))
        s2 = sx + yx
        sy = (((sx - s2) + yx) + sy) + yy
        sx = s2
        w = (x2 * xx) * poly  # ddadd(s, x2 * x * t)
        s2 = sx + w
        sy = ((sx - s2) + w) + sy
        return (s2 + sy).astype(d.dtype)


def _libc_exp(x: np.ndarray) -> np.ndarray:
    from tapescope.core.explain_prims import _LIBC_MATH

    return _LIBC_MATH.exp(x)


# SLEEF's float tanh (``xtanhf``, the 1-ulp one: ``Sleef_tanhf16_u10``, what ATen's
# ``Vectorized<float>::tanh`` calls: GELU's tanh form), its FMA build, in double-float
# arithmetic: pairs (hi, lo) of float32 arrays, each operation written as SLEEF's df.h writes it
# (``vfmapn(x, y, z)`` is ``fma(x, y, -z)``, ``vfmanp(x, y, z)`` is ``fma(-x, y, z)``); bit for
# bit with the copy of ``Sleef_tanhf16_u10`` in PyTorch's own library (500,000 values)
def _df_add2(x: tuple, y: Any) -> tuple:
    """dfadd2 of a pair and a float, or of two pairs."""
    yx, yy = y if isinstance(y, tuple) else (y, None)
    s = x[0] + yx
    v = s - x[0]
    t = (x[0] - (s - v)) + (yx - v)
    return s, t + (x[1] if yy is None else x[1] + yy)


def _df_add(x: tuple, y: tuple) -> tuple:
    """dfadd of two pairs (|x| >= |y|)."""
    s = x[0] + y[0]
    return s, (((x[0] - s) + y[0]) + x[1]) + y[1]


def _df_mul(x: tuple, y: Any) -> tuple:
    """dfmul of a pair and a float, or of two pairs."""
    from tapescope.core.explain_prims import fma

    f32 = np.float32
    if not isinstance(y, tuple):
        s = (x[0] * y).astype(f32)
        return s, fma(x[1], y, fma(x[0], y, -s)).astype(f32)
    s = (x[0] * y[0]).astype(f32)
    return s, fma(x[0], y[1], fma(x[1], y[0], fma(x[0], y[0], -s))).astype(f32)


def _df_squ(x: tuple) -> tuple:
    from tapescope.core.explain_prims import fma

    s = (x[0] * x[0]).astype(np.float32)
    return s, fma(x[0] + x[0], x[1], fma(x[0], x[0], -s)).astype(np.float32)


def _df_rec(d: tuple) -> tuple:
    from tapescope.core.explain_prims import fma

    f32 = np.float32
    s = (f32(1) / d[0]).astype(f32)
    return s, (s * fma(-d[1], s, fma(-d[0], s, f32(1)))).astype(f32)


def _df_div(n: tuple, d: tuple) -> tuple:
    from tapescope.core.explain_prims import fma

    f32 = np.float32
    t = (f32(1) / d[0]).astype(f32)
    s = (n[0] * t).astype(f32)
    u = fma(t, n[0], -s).astype(f32)
    v = fma(-d[1], t, fma(-d[0], t, f32(1))).astype(f32)
    return s, fma(s, v, fma(n[1], t, u)).astype(f32)


def _pow2i(q: np.ndarray) -> np.ndarray:
    return ((q.astype(np.int32) + np.int32(0x7F)) << np.int32(23)).view(np.float32)


def _sleef_expk2f(y: np.ndarray) -> tuple:
    """SLEEF's ``expk2f`` of the pair (y, 0), float32, FMA build: exp(y) in double-float (the
    -104 flush left out: its callers overwrite such results)."""
    from tapescope.core.explain_prims import fma

    f32 = np.float32
    zero = np.zeros_like(y)
    u = ((y + zero) * f32(1.442695040888963407359924681001892137426645954152985934135449406931)
         ).astype(f32)
    q = np.rint(np.nan_to_num(u)).clip(-(1 << 30), 1 << 30).astype(np.int32)
    qf = q.astype(f32)
    s = _df_add2((y, zero), (qf * f32(-0.693145751953125)).astype(f32))
    s = _df_add2(s, (qf * f32(-1.428606765330187045e-06)).astype(f32))
    u = np.full_like(y, f32(0.1980960224e-3))
    for c in (0.1394256484e-2, 0.8333456703e-2, 0.4166637361e-1):
        u = fma(u, s[0], f32(c)).astype(f32)
    t = _df_add2(_df_mul(s, u), f32(0.166666659414234244790680580464e+0))
    t = _df_add2(_df_mul(s, t), f32(0.5))
    t = _df_add2(s, _df_mul(_df_squ(s), t))
    one = np.ones_like(y)
    sx = one + t[0]
    t = (sx, ((one - sx) + t[0]) + t[1])  # dfadd_vf2_vf_vf2(1, t)
    h, lo = q >> np.int32(1), q - (q >> np.int32(1))
    return tuple(((v * _pow2i(h)).astype(f32) * _pow2i(lo)).astype(f32) for v in t)


def sleef_tanhf(x: Any) -> np.ndarray:
    """SLEEF's ``xtanhf`` (float32, FMA build): ``(e - 1/e) / (e + 1/e)``, ``e = exp(|x|)`` by
    ``expk2f``, in double-float; 1 past 8.664339742, the sign of x, NaN as NaN."""
    f32 = np.float32
    x = np.asarray(x)
    if x.dtype != f32:
        raise ValueError(f"SLEEF's tanhf is written for float32, not {x.dtype}")
    with np.errstate(all="ignore"):
        t = _sleef_expk2f(np.abs(x))
        e = _df_rec(t)
        d = _df_div(_df_add(t, (-e[0], -e[1])), _df_add(t, e))
        r = (d[0] + d[1]).astype(f32)
        r = np.where((np.abs(x) > f32(8.664339742)) | np.isnan(r), f32(1), r).astype(f32)
        bits = r.view(np.uint32) ^ (x.view(np.uint32) & np.uint32(0x80000000))
        bits = np.where(np.isnan(x), np.uint32(0xFFFFFFFF), bits)
    return bits.astype(np.uint32).view(f32)


def sleef_expm1f(a: Any) -> np.ndarray:
    """SLEEF's ``xexpm1f`` (float32, FMA build): expk2f(a) - 1 in double-float, summed; inf
    past 88.72283172607421875, -1 below -16.635532333438687426, -0 for -0."""
    f32 = np.float32
    a = np.asarray(a)
    if a.dtype != f32:
        raise ValueError(f"SLEEF's expm1f is written for float32, not {a.dtype}")
    with np.errstate(all="ignore"):
        d = _df_add2(_sleef_expk2f(a), f32(-1.0))
        x = (d[0] + d[1]).astype(f32)
        x = np.where(a > f32(88.72283172607421875), f32(np.inf), x)
        x = np.where(a < f32(-16.635532333438687426013570), f32(-1), x)
        x = np.where((a == 0) & np.signbit(a), f32(-0.0), x)
    return x.astype(f32)


def _df_add2_ff(x: Any, y: Any) -> tuple:
    """dfadd2 of two floats (the pair's low part from the two roundings' errors)."""
    f32 = np.float32
    s = (x + y).astype(f32)
    v = (s - x).astype(f32)
    return s, ((x - (s - v)) + (y - v)).astype(f32)


def _sleef_logkf(d: np.ndarray) -> tuple:
    """SLEEF's ``logkf`` (float32, AVX-512 FMA build: getexp / getmant): log(d) of d > 0 as
    a double-float pair."""
    f32 = np.float32
    e = _getexp((d * f32(1.0 / 0.75)).astype(f32))
    e = np.where(np.isposinf(e), f32(128), e).astype(f32)
    m = _getmant(d)
    x = _df_div(_df_add2_ff(f32(-1), m), _df_add2_ff(f32(1), m))
    x2 = _df_squ(x)
    t = np.full_like(d, f32(0.240320354700088500976562))
    for c in (0.285112679004669189453125, 0.400007992982864379882812):
        t = _fma(t, x2[0], f32(c)).astype(f32)
    c = (np.full_like(d, f32(0.66666662693023681640625)),
         np.full_like(d, f32(3.69183861259614332084311e-09)))
    s = _df_mul((f32(0.69314718246459960938), f32(-1.904654323148236017e-09)), e)
    s = _df_add(s, ((x[0] * f32(2)).astype(f32), (x[1] * f32(2)).astype(f32)))
    return _df_add(s, _df_mul(_df_mul(x2, x), _df_add2(_df_mul(x2, t), c)))


def _sleef_expkf(d: tuple) -> np.ndarray:
    """SLEEF's ``expkf`` (float32, FMA build): exp of a double-float pair, one float (0 below
    -104; the scaling by 2^q as one exact ``ldexp``)."""
    f32 = np.float32
    u = ((d[0] + d[1]).astype(f32)
         * f32(1.442695040888963407359924681001892137426645954152985934135449406931)).astype(f32)
    q = np.rint(np.nan_to_num(u)).clip(-(1 << 30), 1 << 30).astype(np.int32)
    qf = q.astype(f32)
    s = _df_add2(d, (qf * f32(-0.693145751953125)).astype(f32))
    s = _df_add2(s, (qf * f32(-1.428606765330187045e-06)).astype(f32))
    n = (s[0] + s[1]).astype(f32)
    s = (n, ((s[0] - n) + s[1]).astype(f32))  # (dfnormalize)
    u = np.full_like(d[0], f32(0.00136324646882712841033936))
    for c in (0.00836596917361021041870117, 0.0416710823774337768554688,
              0.166665524244308471679688, 0.499999850988388061523438):
        u = _fma(u, s[0], f32(c)).astype(f32)
    t = _df_add(s, _df_mul(_df_squ(s), u))
    sx = (f32(1) + t[0]).astype(f32)
    u = (sx + (((f32(1) - sx) + t[0]) + t[1]).astype(f32)).astype(f32)
    return np.where(d[0] < f32(-104), f32(0), np.ldexp(u, q)).astype(f32)


def sleef_powf(x: Any, y: Any) -> np.ndarray:
    """SLEEF's ``xpowf`` (``Sleef_powf16_u10``: ATen's ``Vectorized<float>::pow``), float32:
    ``expkf(logkf(|x|) * y)`` in double-float, the sign for a negative x and an integral y,
    NaN for a negative x otherwise, and C99's special cases (measured every bit against
    torch's whole vectors, exponents 1.5, 0.75, 2.5, -1.5, 0.3, 7.1)."""
    f32 = np.float32
    x = np.asarray(x, f32)
    y = np.broadcast_to(np.asarray(y, f32), x.shape)
    with np.errstate(all="ignore"):
        small = np.abs(y) < f32(1 << 24)
        yisint = (np.trunc(y) == y) | ~small
        yisodd = ((np.where(small, np.trunc(y), 0).astype(np.int64) & 1) == 1) & yisint & small
        r = _sleef_expkf(_df_mul(_sleef_logkf(np.abs(x)), y))
        r = np.where(np.isnan(r), f32(np.inf), r)
        r = (r * np.where(x > 0, f32(1), np.where(yisint, np.where(yisodd, f32(-1), f32(1)),
                                                 f32(np.nan)))).astype(f32)
        efx = ((np.abs(x) - f32(1)).astype(f32).view(np.uint32)
               ^ (y.view(np.uint32) & np.uint32(0x80000000))).view(f32)
        r = np.where(np.isinf(y), np.where(efx < 0, f32(0), np.where(efx == 0, f32(1),
                                                                   f32(np.inf))), r)
        sgn = np.where(np.signbit(x), f32(-1), f32(1))
        edge = np.where(yisodd, sgn, f32(1)) * np.where(np.where(x == 0, -y, y) < 0, f32(0),
                                                        f32(np.inf))
        r = np.where(np.isinf(x) | (x == 0), edge.astype(f32), r)
        r = np.where(np.isnan(x) | np.isnan(y), f32(np.nan), r)
        r = np.where((y == 0) | (x == 1), f32(1), r)
    return r.astype(f32)


def sleef_log1pf(d: Any) -> np.ndarray:
    """SLEEF's ``xlog1pf`` (float32, the AVX-512 FMA build: ``Sleef_log1pf16_u10``, what ATen's
    ``Vectorized<float>::log1p`` calls): ``m = d * 2^-e + (2^-e - 1)``, ``e`` the exponent of
    ``(d + 1) / 0.75``; ``ln2 * e + 2 atanh(m / (2 + m))`` in double-float; ``log(d)`` (SLEEF's
    ``xlogf_u1``) past 1e38, NaN below -1, -inf at -1, -0 for -0."""
    from tapescope.core.explain_prims import fma

    f32 = np.float32
    d = np.asarray(d)
    if d.dtype != f32:
        raise ValueError(f"SLEEF's log1pf is written for float32, not {d.dtype}")
    with np.errstate(all="ignore"):
        dp1 = (d + f32(1)).astype(f32)
        v = (dp1 * f32(1.0 / 0.75)).astype(f32)
        fr, ex = np.frexp(np.abs(v))  # (getexp: the exponent of |v|, -inf at 0, inf at inf)
        e = np.where(v == 0, f32(-np.inf), (ex - 1).astype(f32))
        e = np.where(np.isinf(v), f32(np.inf), e)
        e = np.where(e == f32(np.inf), f32(128), e).astype(f32)
        q = np.where(np.isfinite(e), e, 0).astype(np.int32)
        t = (np.int32(0x3F800000) + (-q << np.int32(23))).view(f32)  # (vldexp3(1, -e))
        m = fma(d, t, (t - f32(1)).astype(f32)).astype(f32)
        s = _df_mul((np.full_like(d, f32(0.69314718246459960938)),
                     np.full_like(d, f32(-1.904654323148236017e-09))), e)
        two = np.full_like(d, f32(2))
        den = (two + m).astype(f32)
        x = _df_div((m, np.zeros_like(m)), (den, ((two - den) + m).astype(f32)))
        x2 = (x[0] * x[0]).astype(f32)
        p = fma(fma(f32(0.3027294874), x2, f32(0.3996108174)).astype(f32), x2,
                f32(0.6666694880)).astype(f32)
        s = _df_add(s, ((x[0] * f32(2)).astype(f32), (x[1] * f32(2)).astype(f32)))
        w = ((x2 * x[0]).astype(f32) * p).astype(f32)
        hi = (s[0] + w).astype(f32)
        s = (hi, (((s[0] - hi) + w) + s[1]).astype(f32))
        r = (s[0] + s[1]).astype(f32)
        big = d > f32(float.fromhex("0x1.2ced32p+126"))  # (LOG1PF_BOUND, 1e38)
        if big.any():
            r = np.where(big & np.isfinite(d), sleef_log(np.where(big, d, f32(1))), r)
            r = np.where(d == f32(np.inf), f32(np.inf), r)
        r = np.where(f32(-1) > d, np.uint32(0xFFFFFFFF).view(f32), r)
        r = np.where(np.isnan(d), (d.view(np.uint32) | np.uint32(0x400000)).view(f32), r)
        r = np.where(d == f32(-1), f32(-np.inf), r)
        r = np.where((d == 0) & np.signbit(d), f32(-0.0), r)
    return r.astype(f32)


def mish(x: Any, dy: Any = None) -> np.ndarray:
    """``mish(x)`` (``dy`` None) or its backward as PyTorch's CPU computes them in float32
    (ATen's Activation.cpp, ``cpu_kernel_vec``): on whole register pairs ``x * tanh(log1p(exp(
    x)))`` with SLEEF's ``expf``, ``log1pf`` and ``tanhf``, and the backward ``dy * (ts + (x *
    sigmoid) * (1 - ts * ts))``, ``sigmoid = 1 / (1 + exp(-x))``, its ``1 - ts * ts`` and its
    ``ts + ...`` each one FMA; on the rest the scalar lambda, the same with the C library's
    functions (measured: bit for bit on 160,000 values each way and 200,000 strided ones)."""
    from tapescope.core.explain_prims import _LIBC_MATH as L
    from tapescope.core.explain_prims import fma

    f32 = np.float32
    x = np.asarray(x)
    if x.dtype != f32 or (dy is not None and (np.asarray(dy).dtype != f32
                                              or np.shape(dy) != x.shape)):
        raise ValueError("written for float32")

    def ts_vec(v: np.ndarray) -> np.ndarray:
        return sleef_tanhf(sleef_log1pf(_sleef_exp32(v)))

    def ts_lib(v: np.ndarray) -> np.ndarray:
        return L.tanh(L.log1p(L.exp(v))).astype(f32)

    with np.errstate(all="ignore"):
        if dy is None:
            return _vec_map(x, lambda v: (v * ts_vec(v)).astype(f32),
                            lambda v: (v * ts_lib(v)).astype(f32))
        flat_dy = np.ascontiguousarray(dy).reshape(-1)
        one = f32(1)

        def grad(v: np.ndarray, g: np.ndarray, exp: Callable, ts: np.ndarray) -> np.ndarray:
            sg = (one / (one + exp(-v))).astype(f32)
            om = fma(-ts, ts, one).astype(f32)  # (both paths contracted, as gcc builds them)
            return (g * fma((v * sg).astype(f32), om, ts).astype(f32)).astype(f32)

        flat = np.ascontiguousarray(x).reshape(-1)
        w = 2 * _LANES[flat.dtype]
        n = flat.size - flat.size % w
        out = np.empty_like(flat)
        out[:n] = grad(flat[:n], flat_dy[:n], _sleef_exp32, ts_vec(flat[:n]))
        if n < flat.size:
            out[n:] = grad(flat[n:], flat_dy[n:], L.exp, ts_lib(flat[n:]))
        return out.reshape(x.shape)


_GELU_BETA = np.float32(np.sqrt(2.0) * (2.0 / np.sqrt(np.pi)) * 0.5)
_GELU_KAPPA = np.float32(0.044715)


#: Abramowitz and Stegun 7.1.26, as ATen's ``Vectorized<float>::erf`` spells it: p, then p1-p5
_AS_ERF = (0.3275911, 0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


def aten_erf(x: Any) -> np.ndarray:
    """ATen's ``Vectorized<float>::erf`` (vec512_float.h / vec256_float.h), float32:
    ``t = 1 / fma(p, |x|, 1)``, ``r`` the degree-4 polynomial in ``t`` by fma (Horner),
    ``fma(-exp(-x^2) * t, r, 1)`` with SLEEF's expf (u10), the sign of x put back."""
    f = np.float32
    x = np.asarray(x, dtype=f)
    p, *c = (f(v) for v in _AS_ERF)
    with np.errstate(all="ignore"):
        t = (f(1) / _fma(p, np.abs(x), f(1))).astype(f)
        r = _fma(c[4], t, c[3])
        for k in (c[2], c[1], c[0]):
            r = _fma(r, t, k)
        e = sleef_exp((-(x * x)).astype(f))
        v = _fma(((-e) * t).astype(f), r, f(1))
        return np.where(np.signbit(x), -v, v).astype(f)


def _gelu_half_parts(x: np.ndarray) -> tuple[np.ndarray, Callable[[np.ndarray], np.ndarray]]:
    """``gelu_reduced``'s two computations of float16 ``x`` (flattened): every element by
    ATen's vectorised erf, and a function giving the C library's ``erff`` result for the
    elements a mask picks (the tails: few, and ``erff`` runs one element a call)."""
    if x.dtype != np.float16:
        raise ValueError("ATen's reduced-type GELU is written out for float16")
    from tapescope.core.explain_prims import _LIBC_MATH

    f = np.float32
    xf = x.astype(f).reshape(-1)
    alpha, half, one = f(0.7071067811865476), f(0.5), f(1)
    with np.errstate(all="ignore"):
        z = (xf * alpha).astype(f)
        vec = ((xf * half).astype(f) * (one + aten_erf(z)).astype(f)).astype(f)

    def scalar(mask: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            return ((xf[mask] * half).astype(f) * (one + _LIBC_MATH.erf(z[mask])).astype(f))
    return vec, scalar


def _gelu_backward_half_parts(dy: np.ndarray, x: np.ndarray
                              ) -> tuple[np.ndarray, Callable[[np.ndarray], np.ndarray]]:
    """ATen's reduced-type GeluBackwardKernel (``approximate="none"``) on float16 ``dy`` and
    ``x``, as ``_gelu_half_parts``: the vector form ``dy * (cdf + x * pdf)``, ``cdf = 0.5 *
    (1 + erf(x * sqrt(1/2)))`` by ATen's vectorised erf, ``pdf = beta * exp((x * x) * -0.5)``
    by SLEEF's expf (uncontracted; measured, every bit over 77 to 100,003 inputs at 1 and 2
    threads, oneDNN switched off); the scalar loop's the C library's ``erff`` and ``expf``."""
    if x.dtype != np.float16 or np.asarray(dy).dtype != np.float16 or np.shape(dy) != x.shape:
        raise ValueError("ATen's reduced-type GELU backward is written out for float16")
    from tapescope.core.explain_prims import _LIBC_MATH

    f = np.float32
    xf = x.astype(f).reshape(-1)
    dyf = np.asarray(dy).astype(f).reshape(-1)
    alpha, half, one, m_half = f(0.7071067811865476), f(0.5), f(1), f(-0.5)
    beta = f(2 / np.sqrt(np.pi) * 0.7071067811865476 * 0.5)  # (the scalar loop's three
    # constants multiplied as floats give the same float)
    with np.errstate(all="ignore"):
        z = (xf * alpha).astype(f)
        sq = ((xf * xf).astype(f) * m_half).astype(f)
        cdf = (half * (one + aten_erf(z)).astype(f)).astype(f)
        vec = (dyf * (cdf + (xf * (beta * sleef_exp(sq)).astype(f)).astype(f))).astype(f)

    def scalar(mask: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            c = (half * (one + _LIBC_MATH.erf(z[mask])).astype(f)).astype(f)
            pdf = (beta * _LIBC_MATH.exp(sq[mask])).astype(f)
            return (dyf[mask] * (c + (xf[mask] * pdf).astype(f))).astype(f)
    return vec, scalar


def _gelu_tails(n: int, threads: int, lanes: int) -> np.ndarray:
    """The elements of ``n`` that TensorIterator's scalar loop takes: each thread's range (as
    ``at::parallel_for`` cuts them: past ``GRAIN_SIZE`` elements ``min(threads, ceil(n /
    GRAIN_SIZE))`` even parts, else one) past its last whole pair of ``lanes``-wide vectors."""
    parts = min(max(1, threads), -(-n // GRAIN_SIZE)) if n > GRAIN_SIZE else 1
    step = -(-n // parts) if n else 1
    tail = np.zeros(n, bool)
    for s0 in range(0, n, step):
        e = min(n, s0 + step)
        tail[e - (e - s0) % (2 * lanes):e] = True
    return tail


def gelu_reduced(x: Any, threads: int = 1, lanes: int = 32) -> np.ndarray:
    """ATen's CPU GeluKernel (``approximate="none"``) for float16 (fp16 autocast's GELU on the
    CPU; measured on an Intel Xeon, AVX-512, 1 and 2 threads, 77 to 218,000 inputs: every
    bit; bfloat16's is oneDNN's gelu_erf, ``core.capture.explain._onednn_narrow``): each element
    widened to float32, ``x * 0.5 * (1 + erf(x * sqrt(1/2)))`` with ATen's vectorised erf
    (``aten_erf``) on whole pairs of vectors (``2 x lanes`` elements: 64 on AVX-512, 32 on
    AVX2), the C library's ``erff`` on the rest of each thread's range (TensorIterator's
    scalar loop, ``_gelu_tails``), rounded back."""
    x = np.asarray(x)
    vec, scalar = _gelu_half_parts(x)
    tail = _gelu_tails(vec.size, threads, lanes)
    if tail.any():
        vec[tail] = scalar(tail)
    return vec.astype(x.dtype).reshape(x.shape)


def gelu_tanh(x: np.ndarray, dy: np.ndarray | None = None) -> np.ndarray:
    """``gelu(x, approximate='tanh')`` (``dy`` None) or its backward as PyTorch's CPU computes
    them (ATen's GeluKernel, float32): ``inner = beta * fma(kappa, x^3, x)``, SLEEF's tanhf on
    whole register pairs and the C library's ``tanhf`` on the rest (``cpu_kernel_vec``);
    forward ``(0.5 * x) * (1 + t)``; backward ``dy * (0.5 * (1 + t) + ((0.5 * x) *
    fma(-t, t, 1)) * (beta * fma(3 * kappa, x^2, 1)))`` (measured: those two contracted, the
    last sum not)."""
    from tapescope.core.explain_prims import _LIBC_MATH, fma

    f32 = np.float32
    x = np.asarray(x)
    if x.dtype != f32 or (dy is not None and (np.asarray(dy).dtype != f32
                                              or np.shape(dy) != x.shape)):
        raise ValueError("written for float32")
    with np.errstate(all="ignore"):
        x_sq = (x * x).astype(f32)
        inner = (_GELU_BETA * fma(_GELU_KAPPA, (x_sq * x).astype(f32), x).astype(f32)).astype(f32)
        t = _vec_map(inner, sleef_tanhf, _LIBC_MATH.tanh)
        one, half = f32(1), f32(0.5)
        right = (one + t).astype(f32)
        left = (half * x).astype(f32)
        if dy is None:
            return (left * right).astype(f32)
        td = fma(-t, t, one).astype(f32)
        idv = (_GELU_BETA * fma((f32(3) * _GELU_KAPPA).astype(f32), x_sq, one)).astype(f32)
        return (np.asarray(dy) * ((half * right).astype(f32)
                                  + ((left * td).astype(f32) * idv).astype(f32))).astype(f32)


#: ATen's ``GRAIN_SIZE``: a TensorIterator loop of more elements is split among threads
GRAIN_SIZE = 32768


def _vec_map(x: np.ndarray, vec: Callable, scalar: Callable, threads: int = 1,
             *more: np.ndarray, lanes: int | None = None) -> np.ndarray:
    """``cpu_kernel_vec`` over a contiguous array: ``vec`` on whole pairs of registers, ``scalar``
    on the rest (elementwise functions, so applied to the flat array's two parts), in each of
    ``at::parallel_for``'s chunks (past ``GRAIN_SIZE`` elements, ``threads`` threads: chunks
    of ``ceil(n / used)``, each split into its own vectors and tail). ``more``: further
    operands of ``x``'s shape, handed to ``vec`` and ``scalar`` after it. ``lanes``: a
    register's (None: the AVX-512 build's; 8 floats / 4 doubles: the AVX2 build's)."""
    flat = np.ascontiguousarray(x).reshape(-1)
    rest = [np.ascontiguousarray(m).reshape(-1) for m in more]
    out = np.empty_like(flat)
    for lo, v, hi in vec_segments(flat.size, 2 * (lanes or _LANES[flat.dtype]), threads):
        if v > lo:
            out[lo:v] = vec(flat[lo:v], *(m[lo:v] for m in rest))
        if v < hi:
            out[v:hi] = scalar(flat[v:hi], *(m[v:hi] for m in rest))
    return out.reshape(np.shape(x))


def vec_segments(n: int, width: int, threads: int = 1,
                 row: int | None = None) -> Iterator[tuple[int, int, int]]:
    """``_vec_map``'s loops over ``n`` elements: ``(lo, v, hi)``, ``lo:v`` whole vectors of
    ``width``, ``v:hi`` the scalar tail, per ``parallel_for`` chunk (``threads``) and, where
    rows lie apart in memory (an in-place op on a chunk of a wider tensor, a GRU's gates:
    TensorIterator's 2-d loop), per row of ``row`` elements within it."""
    used = max(1, min(threads, -(-n // GRAIN_SIZE)))
    chunk = -(-n // used) if n else 0
    step = row if row else n or 1
    for c0 in range(0, n, chunk or 1):
        c1 = min(n, c0 + chunk)
        lo = c0
        while lo < c1:
            hi = min(c1, (lo // step + 1) * step)
            yield lo, lo + (hi - lo) - (hi - lo) % width, hi
            lo = hi


def softplus(x: Any, beta: float, threshold: float, dy: Any = None, threads: int = 1,
             lanes: int = 16) -> np.ndarray:
    """``softplus`` (``dy`` None) or its backward as PyTorch's CPU computes them in float32
    (ATen's Activation.cpp, ``cpu_kernel_vec``; measured on 100,000 values at 1 and 2
    threads): ``z = x * beta``; ``z > threshold ? x : log1p(exp(z)) / beta`` with SLEEF's
    ``expf`` and ``log1pf`` on whole register pairs, the C library's on the rest; the backward
    ``z > threshold ? g : (g * e) / (e + 1)``, ``e = exp(z)``. ``lanes``: 16 (the AVX-512
    build) or 8 (the AVX2 build: measured under ``ATEN_CPU_CAPABILITY=avx2``)."""
    from tapescope.core.explain_prims import _LIBC_MATH as L

    f32 = np.float32
    x = np.asarray(x)
    if x.dtype != f32 or (dy is not None and (np.asarray(dy).dtype != f32
                                              or np.shape(dy) != x.shape)):
        raise ValueError("written for float32")
    b, t = f32(beta), f32(threshold)
    one = f32(1)

    def fwd(exp: Callable, log1p: Callable) -> Callable:
        return lambda v: np.where(v * b > t, v, (log1p(exp(v * b)).astype(f32) / b)
                                  ).astype(f32)

    def bwd(exp: Callable) -> Callable:
        def run(v: np.ndarray, g: np.ndarray) -> np.ndarray:
            e = exp(v * b).astype(f32)
            return np.where(v * b > t, g, (g * e) / (e + one)).astype(f32)
        return run

    with np.errstate(all="ignore"):
        if dy is None:
            return _vec_map(x, fwd(_sleef_exp32, sleef_log1pf), fwd(L.exp, L.log1p), threads,
                            lanes=lanes)
        return _vec_map(x, bwd(_sleef_exp32), bwd(L.exp), threads, np.asarray(dy),
                        lanes=lanes)


def _softmax_chunks(shape: tuple, dim: int, itemsize: int, lanes: int):
    """ATen's ``_vec_log_softmax`` / its backward over a dimension that is not the last:
    ``(outer, dim, inner)`` with the inner positions in chunks of ``max(128 KiB / dim / item,
    lanes)`` rounded down to whole vectors; yields ``(outer, size, inner, lo, hi, v)``, ``v``
    the chunk's positions in whole vectors (the rest: the scalar loop)."""
    d = dim % len(shape)
    outer, size = math.prod(shape[:d]), shape[d]
    inner = math.prod(shape[d + 1:])
    chunk = max(128 * 1024 // max(size, 1) // itemsize, lanes) // lanes * lanes
    for lo in range(0, inner, chunk):
        hi = min(inner, lo + chunk)
        yield outer, size, inner, lo, hi, lo + (hi - lo) - (hi - lo) % lanes


def log_softmax_inner(x: np.ndarray, dim: int) -> np.ndarray:
    """ATen's CPU log_softmax over a dimension that is not the last (SoftMaxKernel.cpp's
    ``_vec_log_softmax``; a segmentation head's over channels), measured: per inner position
    the maximum over ``dim`` (``x > max``, from -inf), the sum over ``dim`` in order of
    ``exp(x - max)`` (SLEEF's on each chunk's whole vectors, the C library's on its rest),
    ``log`` of the sums by SLEEF (``vec::map``: a partial vector too), ``(x - max) - log``."""
    _check([x])
    x = np.asarray(x)
    out = np.empty_like(x)
    for outer, size, inner, lo, hi, v in _softmax_chunks(x.shape, dim, x.itemsize,
                                                         _LANES[x.dtype]):
        xs = x.reshape(outer, size, inner)[:, :, lo:hi]
        m = np.full((outer, hi - lo), -np.inf, x.dtype)
        for k in range(size):
            m = np.where(xs[:, k] > m, xs[:, k], m)
        s = np.zeros_like(m)
        for k in range(size):
            z = xs[:, k] - m
            e = np.empty_like(z)
            e[:, :v - lo], e[:, v - lo:] = sleef_exp(z[:, :v - lo]), _libc_exp(z[:, v - lo:])
            s = s + e
        out.reshape(outer, size, inner)[:, :, lo:hi] = (xs - m[:, None]) - sleef_log(s)[:, None]
    return out


def log_softmax_backward_inner(g: np.ndarray, out: np.ndarray, dim: int) -> np.ndarray:
    """Its backward (measured): per inner position the sum over ``dim`` of ``g`` in order,
    then ``fma(-exp(out), sum, g)``, the exp SLEEF's on each chunk's whole vectors and the C
    library's on the rest."""
    _check([g, out])
    g, out = np.asarray(g), np.asarray(out)
    res = np.empty_like(g)
    for outer, size, inner, lo, hi, v in _softmax_chunks(g.shape, dim, g.itemsize,
                                                         _LANES[g.dtype]):
        gs = g.reshape(outer, size, inner)[:, :, lo:hi]
        os_ = out.reshape(outer, size, inner)[:, :, lo:hi]
        s = np.zeros((outer, hi - lo), g.dtype)
        for k in range(size):
            s = s + gs[:, k]
        e = np.empty_like(os_)
        e[..., :v - lo], e[..., v - lo:] = sleef_exp(os_[..., :v - lo]), _libc_exp(
            os_[..., v - lo:])
        res.reshape(outer, size, inner)[:, :, lo:hi] = _fma(-e, s[:, None], gs)
    return res


def softmax_inner_paths(x: np.ndarray, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """ATen's CPU softmax over a dimension that is not the last (SoftMaxKernel.cpp's
    ``_vec_softmax``; a segmentation target's over channels), both ways it computes an inner
    position: (vector, scalar) results of every element. The vector path: the maximum over
    ``dim`` from the first element (``vec::maximum``), ``e = exp(x - max)`` by SLEEF, the sum
    over ``dim`` in order, ``e / sum``; the scalar path the same with ``std::max`` and the C
    library's exp. Which positions take which: ``softmax_inner_lanes``."""
    _check([x])
    x = np.asarray(x)
    d = dim % x.ndim
    outer, size = math.prod(x.shape[:d]), x.shape[d]
    xs = x.reshape(outer, size, -1)
    outs = []
    for exp, vector in ((sleef_exp, True), (_libc_exp, False)):
        m = xs[:, 0]
        for k in range(1, size):
            m = np.maximum(m, xs[:, k]) if vector else np.where(m < xs[:, k], xs[:, k], m)
        e = exp(xs - m[:, None])
        s = np.zeros_like(m)
        for k in range(size):
            s = s + e[:, k]
        outs.append((e / s[:, None]).reshape(x.shape))
    return outs[0], outs[1]


def softmax_inner_lanes(shape: tuple, dim: int, lanes: int, threads: int = 1) -> np.ndarray:
    """Which positions of ``_vec_softmax``'s loop take the vector path (True) over the
    ``outer * inner`` positions (flat, outer-major), the range cut into ``threads`` chunks of
    ``ceil(n / threads)`` (its grain is 1: any thread count cuts it): in each chunk a position
    starts a vector where ``lanes`` of them fit in its inner row and its chunk, else it and
    the rest of its row (or of its chunk) go one by one."""
    d = dim % len(shape)
    outer, inner = math.prod(shape[:d]), math.prod(shape[d + 1:])
    n = outer * inner
    vec = np.zeros(n, np.bool_)
    chunk = -(-n // max(1, min(threads, n))) if n else 1
    # per chunk, per inner row inside it: whole vectors from the piece's start (a piece
    # shorter than a vector, the chunk's last or a row's end, goes one by one)
    for b in range(0, n, chunk):
        e = min(n, b + chunk)
        for s in range(b, e, inner) if b % inner == 0 else [b, *range(b - b % inner + inner,
                                                                          e, inner)]:
            t = min(e, s - s % inner + inner)
            vec[s:s + (t - s) // lanes * lanes] = True
    return vec.reshape(outer, 1, inner)


def softmax_inner_choose(vec: np.ndarray, sca: np.ndarray, dim: int,
                         threads: int) -> np.ndarray:
    """``softmax_inner_paths``' two results, each position's by the path ``threads`` chunks
    give it (``softmax_inner_lanes``)."""
    d = dim % vec.ndim
    pick = softmax_inner_lanes(vec.shape, dim, _LANES[vec.dtype], threads)
    shape3 = (math.prod(vec.shape[:d]), vec.shape[d], -1)
    return np.where(pick, vec.reshape(shape3), sca.reshape(shape3)).reshape(vec.shape)


def softmax_inner(x: np.ndarray, dim: int, threads: int = 1) -> np.ndarray:
    """ATen's CPU softmax over a dimension that is not the last at ``threads`` chunks
    (measured, every bit, float32 and float64, at one and two threads)."""
    vec, sca = softmax_inner_paths(x, dim)
    return softmax_inner_choose(vec, sca, dim, threads)


def softmax_backward_inner(g: np.ndarray, out: np.ndarray, dim: int) -> np.ndarray:
    """Its backward (``_vec_softmax_backward``, measured likewise): per inner position
    ``sum = fma(g, out, sum)`` over ``dim`` in order (the compiler contracts the vector and
    the scalar loops alike), then ``out * (g - sum)``."""
    _check([g, out])
    g, out = np.asarray(g), np.asarray(out)
    res = np.empty_like(g)
    for outer, size, inner, lo, hi, _ in _softmax_chunks(g.shape, dim, g.itemsize,
                                                         _LANES[g.dtype]):
        gs = g.reshape(outer, size, inner)[:, :, lo:hi]
        os_ = out.reshape(outer, size, inner)[:, :, lo:hi]
        s = np.zeros((outer, hi - lo), g.dtype)
        for k in range(size):
            s = _fma(gs[:, k], os_[:, k], s)
        res.reshape(outer, size, inner)[:, :, lo:hi] = os_ * (gs - s[:, None])
    return res


def reduce_all(e: np.ndarray) -> np.ndarray:
    """ATen's ``vec::reduce_all`` sum of every row (the last axis), keepdims (module doc):
    ``_lane_sum`` in the type's lanes, folded as a tree for float32."""
    w = _LANES[np.dtype(e.dtype)]
    return _lane_sum(e, None, w, e.dtype == np.float32)[..., None]


def _cascade(a: np.ndarray) -> np.ndarray:
    """``multi_row_sum``'s cascade over axis 0 (core.explain's ``_cascade_reduce``)."""
    from tapescope.core.explain_prims import _cascade_reduce

    if a.shape[0] == 0:
        return np.zeros(a.shape[1:], dtype=a.dtype)
    return _cascade_reduce(np.moveaxis(a, 0, -1))


def _row_sum(a: np.ndarray) -> np.ndarray:
    """ATen's ``row_sum`` over axis 0: 4 interleaved partial cascades, leftovers into the
    first, then the partials added in order."""
    n = a.shape[0]
    m = n // 4
    parts = [_cascade(a[k:4 * m:4]) for k in range(4)]
    for i in range(4 * m, n):
        parts[0] = parts[0] + a[i]
    out = parts[0]
    for k in range(1, 4):
        out = out + parts[k]
    return out


def _inner_sum(f: np.ndarray) -> np.ndarray:
    """``vectorized_inner_sum`` of every row of ``f`` (the last axis)."""
    w = 32 // f.dtype.itemsize
    n = f.shape[-1]
    nv = n // w
    if nv == 0:
        return _row_sum(np.moveaxis(f, -1, 0))
    out = np.zeros(f.shape[:-1], dtype=f.dtype)
    for k in range(nv * w, n):
        out = out + f[..., k]
    vs = _row_sum(np.moveaxis(f[..., :nv * w].reshape(f.shape[:-1] + (nv, w)), -2, 0))
    for lane in range(w):
        out = out + vs[..., lane]
    return out


def _outer_sum(f: np.ndarray) -> np.ndarray:
    """``vectorized_outer_sum`` of ``f`` [R, C] over its rows; fewer columns than a vector's
    lanes: ``scalar_outer_sum`` (each group of 4 columns ``multi_row_sum``'s cascade, the
    rest ``row_sum``), one column the inner sum it is once TensorIterator drops the size-1
    dimension (measured: 12,151 of 12,162 random float32 columns, the rest all one-column
    cases before that rule)."""
    w = 32 // f.dtype.itemsize
    if f.shape[1] == 1:
        return _inner_sum(np.ascontiguousarray(f[:, 0])[None])[:1]
    # the cascade's columns: whole groups of 4 (scalar_outer_sum, fewer columns than a
    # vector) or of 4 vectors; the rest row_sum's
    group = 4 if f.shape[1] < w else 4 * w
    c = (f.shape[1] // group) * group
    out = np.empty(f.shape[1], dtype=f.dtype)
    if c:
        out[:c] = _cascade(f[:, :c])
    if c < f.shape[1]:
        out[c:] = _row_sum(f[:, c:])
    return out


def sum_column_parts(cols: int, threads: int, itemsize: int) -> list[tuple[int, int]]:
    """ATen's ``parallel_dim_reduction`` (TensorIteratorReduce.cpp) of a sum over leading
    dimensions whose ``cols`` outputs are contiguous: ``parallel_for(0, cols, 1)``'s chunks of
    ``ceil(cols / threads)`` outputs, each end but the last rounded down to 128 bytes of
    outputs, each non-empty part reduced on its own (measured against ``torch.sum`` at 2-16
    threads: a (1,024, 37) gradient at 8 threads is summed as columns 0-31 and 32-36)."""
    per = 128 // itemsize
    chunk = -(-cols // max(1, threads))
    out = []
    for b in range(0, cols, chunk):
        e = min(cols, b + chunk)
        b, e = b - b % per, e if e == cols else e - e % per
        if b < e:
            out.append((b, e))
    return out


# the largest memory span (elements) ``aten_sum_strided`` lays a value out over
_SPAN_MAX = 1 << 24


def _iterator_order(shape: list, ops: list) -> tuple[list, list]:
    """TensorIterator's ``reorder_dimensions`` then ``coalesce_dimensions`` for a reduction
    (``ops``: each operand's element strides, the output's first, 0 on reduced dimensions):
    the dimensions from the fastest, reduced ones first, each operand's strides ascending,
    ties to the smaller size; then neighbours merged where every operand steps through them as
    one. Returns (sizes, per operand its strides), at least two dimensions."""
    nd = len(shape)
    perm = list(range(nd - 1, -1, -1))

    def should_swap(d0: int, d1: int) -> int:
        for k, st in enumerate(ops):
            s0, s1 = st[d0], st[d1]
            if k == 0 and (s0 == 0) != (s1 == 0):  # (the output: reduced dimensions first)
                return 1 if s1 == 0 else -1
            if s0 == 0 or s1 == 0:
                continue
            if s0 != s1:
                return -1 if s0 < s1 else 1
            if shape[d0] > shape[d1]:
                return 1
        return 0
    for i in range(1, nd):  # (insertion sort with ambiguous comparisons, as ATen's)
        d1 = i
        for d0 in range(i - 1, -1, -1):
            c = should_swap(perm[d0], perm[d1])
            if c > 0:
                perm[d0], perm[d1] = perm[d1], perm[d0]
                d1 = d0
            elif c < 0:
                break
    sh = [shape[p] for p in perm]
    st = [[o[p] for p in perm] for o in ops]
    prev = 0
    for d in range(1, nd):
        if sh[prev] == 1 or sh[d] == 1 or all(sh[prev] * s[prev] == s[d] for s in st):
            if sh[prev] == 1:
                for s in st:
                    s[prev] = s[d]
            sh[prev] *= sh[d]
        else:
            prev += 1
            if prev != d:
                for s in st:
                    s[prev] = s[d]
                sh[prev] = sh[d]
    sh, st = sh[:prev + 1], [s[:prev + 1] for s in st]
    while len(sh) < 2:
        sh.append(1)
        for s in st:
            s.append(0)
    return sh, st


def _cascade_tile(t: np.ndarray, ins: list, w: int) -> list:
    """``cascade_sum``'s 2-d loop (SumKernel.cpp) over tile ``t`` [size0, size1] with input
    strides ``ins`` (elements), dimension 0 reduced: the sum of each column j, by
    ``vectorized_inner_sum`` (dimension 0 contiguous, a vector or more), ``vectorized_outer_sum``
    (dimension 1 contiguous: groups of 4 vectors of columns by multi_row_sum's cascade, the
    rest row_sum), ``scalar_inner_sum`` (row_sum each) or ``scalar_outer_sum`` (groups of 4
    columns cascaded, the rest row_sum)."""
    s0, s1 = t.shape
    if ins[0] == 1 and s0 >= w:
        return [_inner_sum(np.ascontiguousarray(t[:, j])[None])[0] for j in range(s1)]
    if ins[0] < ins[1] and not (ins[1] == 1 and s1 >= w):
        return [_row_sum(t[:, j]) for j in range(s1)]
    g = (s1 // (4 * w)) * 4 * w if ins[1] == 1 and s1 >= w else (s1 // 4) * 4
    res = list(_cascade(t[:, :g])) if g else []
    return res + [_row_sum(t[:, j]) for j in range(g, s1)]


def aten_sum_strided(x: Any, strides: Sequence[int], axis: Any = None,
                     keepdims: bool = False) -> np.ndarray:
    """ATen's CPU ``sum`` of ``x``'s values laid out in memory with element ``strides`` (a
    transposed view's, a slice's: the recorded layout), one thread (or below ``GRAIN_SIZE``
    elements): TensorIterator's dimension order (``_iterator_order``) with a fresh C-ordered
    output, then per outer index (the third dimension fastest) ``cascade_sum``'s 2-d loop
    (``_cascade_tile``), each tile's sums added into their outputs (filled with +0.0 first) in
    loop order; two dimensions neither reduced: each element added. Measured: every bit on
    793 random permuted and sliced float32 / float64 sums of up to 30,000 elements, 1 to 4
    dimensions, any axes (ValueError past ``_SPAN_MAX`` elements of memory)."""
    from tapescope.core.ops.reference import reduced_axes

    x = np.asarray(x)
    _check([x])
    shape, nd = list(x.shape), x.ndim
    strides = [int(s) for s in strides]
    if len(strides) != nd or any(s < 0 for s in strides):
        raise ValueError("a stride from 0 per dimension")
    axes = sorted(reduced_axes(axis, nd))
    span = 1 + sum((n - 1) * s for n, s in zip(shape, strides, strict=True)) if x.size else 1
    if span > _SPAN_MAX:
        raise ValueError(f"a layout spanning {span} elements")
    store = np.zeros(span, x.dtype)
    if x.size:
        np.lib.stride_tricks.as_strided(store, shape, [s * x.itemsize for s in strides])[...] = x
    oshape = [1 if a in axes else n for a, n in enumerate(shape)]
    ost, acc = [0] * nd, 1
    for a in range(nd - 1, -1, -1):  # (the output: C-ordered, 0 on reduced dimensions)
        ost[a] = 0 if a in axes else acc
        acc *= oshape[a]
    out = np.zeros(math.prod(oshape), x.dtype)
    sh, (so, si) = _iterator_order(shape, [ost, strides]) if nd else ([1, 1], [[0, 0], [0, 0]])
    w = 32 // x.itemsize  # (the sum kernel's vector: its AVX2 build)
    grid = np.arange(sh[0])[:, None] * si[0] + np.arange(sh[1])[None, :] * si[1]
    outer = sh[2:]
    for idx in np.ndindex(*reversed(outer)) if outer else [()]:
        idx = idx[::-1]  # (the third dimension fastest)
        ob = sum(i * s for i, s in zip(idx, so[2:], strict=True))
        ib = sum(i * s for i, s in zip(idx, si[2:], strict=True))
        t = store[ib + grid]
        ins, outs = [si[0], si[1]], [so[0], so[1]]
        if outs[0] != 0 and outs[1] == 0:  # (the reduction to the first dimension)
            ins.reverse()
            outs.reverse()
            t = t.T
        if outs[0] != 0 and outs[1] != 0:  # (no reduction here: each element added)
            pos = ob + np.arange(t.shape[0])[:, None] * outs[0] \
                + np.arange(t.shape[1])[None, :] * outs[1]
            out[pos] = out[pos] + t
            continue
        for j, r in enumerate(_cascade_tile(t, ins, w)):
            out[ob + j * outs[1]] = out[ob + j * outs[1]] + r
    r = out.reshape(oshape)
    return r if keepdims else r.reshape([n for a, n in enumerate(shape) if a not in axes])


def _reduce_vec_inner(v: np.ndarray, ufunc: np.ufunc, lanes: int,
                      out: np.ndarray | None = None) -> np.ndarray:
    """``vectorized_inner_reduction`` (Reduce.h) of every row of ``v`` [rows, n] into ``out``
    (None: the identity): with ``c = n // (4 lanes)`` > 0, four vectors of accumulators from
    the first 4 lanes elements, each then combined with its place in the next ``c - 1``
    blocks; ``(a0 . a1) . (a2 . a3)``, its lanes folded in order, into the output; the rest
    of the row (all of it where ``c`` is 0) combined into the output one by one."""
    n = v.shape[1]
    c = n // (4 * lanes)
    if c:
        acc = ufunc.accumulate(v[:, :4 * lanes * c].reshape(v.shape[0], c, 4, lanes),
                               axis=1)[:, -1]
        a = ufunc(ufunc(acc[:, 0], acc[:, 1]), ufunc(acc[:, 2], acc[:, 3]))
        part = ufunc.accumulate(a, axis=1)[:, -1]
        out = part if out is None else ufunc(out, part)
    start = 4 * lanes * c
    if start < n:
        tail = ufunc.accumulate(v[:, start:], axis=1)[:, -1] if out is None else None
        if tail is not None:
            return tail
        for i in range(start, n):
            out = ufunc(out, v[:, i])
    return out


def aten_reduce_vec(x: Any, ufunc: np.ufunc, axis: Any = None, keepdims: bool = False,
                    lanes: int | None = None) -> np.ndarray:
    """ATen's CPU ``binary_kernel_reduce_vec`` (``prod``'s kernel) of a contiguous ``x`` over
    ``axis``, one thread (below ``GRAIN_SIZE`` elements), vectors of ``lanes`` (None: 32
    bytes', its AVX2 build, which PyTorch 2.13 runs on AVX-512 CPUs too: measured, every bit
    of 600 random float32 / float64 products of 1-3 dimensions): TensorIterator's
    dimension order (``_iterator_order``); where the reduced dimension is the contiguous one,
    ``vectorized_inner_reduction`` (``_reduce_vec_inner``); elsewhere each output combines its
    elements one by one from the first (the outer reduction's vectors hold one output per
    lane), the reference's order."""
    from tapescope.core.ops.reference import reduced_axes

    x = np.asarray(x)
    _check([x])
    if x.size >= GRAIN_SIZE:
        raise ValueError("a reduction of several threads' parts")
    lanes = lanes or 32 // x.itemsize
    nd = x.ndim
    axes = sorted(reduced_axes(axis, nd))
    kept = [a for a in range(nd) if a not in axes]
    out_shape = [1 if a in axes else n for a, n in enumerate(x.shape)]
    final = out_shape if keepdims else [x.shape[a] for a in kept]
    if not x.size or not axes:
        return (np.ones(final, x.dtype) if not x.size else x.reshape(final).copy())
    ist, acc = [0] * nd, 1
    for a in range(nd - 1, -1, -1):
        ist[a] = acc
        acc *= x.shape[a]
    ost, acc = [0] * nd, 1
    for a in range(nd - 1, -1, -1):
        ost[a] = 0 if a in axes else acc
        acc *= out_shape[a]
    sh, (so, si) = _iterator_order(list(x.shape), [ost, ist])
    moved = np.transpose(x, axes + kept)  # (each output's elements in row-major order)
    flat = np.ascontiguousarray(moved).reshape(math.prod(x.shape[a] for a in axes), -1).T
    with np.errstate(all="ignore"):
        if so[0] == 0 and si[0] == 1:  # (the contiguous reduction: a block at a time)
            y = None
            for b in range(0, flat.shape[1], sh[0]):
                y = _reduce_vec_inner(flat[:, b:b + sh[0]], ufunc, lanes, y)
        else:
            y = ufunc.accumulate(flat, axis=1)[:, -1]
    return y.reshape(final).astype(x.dtype)


def aten_sum(x: Any, axis: Any = None, keepdims: bool = False, threads: int = 1) -> np.ndarray:
    """ATen's CPU ``sum`` (module doc) over trailing or leading axes; a ValueError otherwise.
    ``threads``: over leading axes of ``GRAIN_SIZE`` elements or more, the outputs cut as
    ``sum_column_parts`` (over trailing axes each output stays one thread's)."""
    from tapescope.core.ops.reference import reduced_axes

    x = np.asarray(x)
    _check([x])
    nd = x.ndim
    axes = tuple(sorted(reduced_axes(axis, nd)))
    k = len(axes)
    if k == 0:
        r = x.copy()
    elif axes == tuple(range(nd - k, nd)):
        r = _inner_sum(np.ascontiguousarray(x).reshape(x.shape[:nd - k] + (-1,)))
    elif axes == tuple(range(k)):
        rest = x.shape[k:]
        f = np.ascontiguousarray(x).reshape(-1, int(np.prod(rest)))
        parts = [(0, f.shape[1])]
        if threads > 1 and x.size >= GRAIN_SIZE and f.shape[1] > 1:
            parts = sum_column_parts(f.shape[1], threads, x.dtype.itemsize)
        r = np.empty(f.shape[1], dtype=x.dtype)
        for b, e in parts:
            r[b:e] = _outer_sum(np.ascontiguousarray(f[:, b:e]))
        r = r.reshape(rest)
    elif axes == tuple(range(axes[0], axes[0] + k)) and (x.size < GRAIN_SIZE or threads == 1):
        # a run of middle axes: the iterator's two fastest dimensions are the trailing kept
        # run and the reduced one, each leading index a leading-axis sum of its own
        lead, rest = x.shape[:axes[0]], x.shape[axes[0] + k:]
        f = np.ascontiguousarray(x).reshape(int(np.prod(lead)), -1, int(np.prod(rest)))
        r = np.stack([_outer_sum(f[i]) for i in range(f.shape[0])]).reshape(lead + rest)
    else:
        raise ValueError("ATen's sum is written here for leading, trailing or one run of "
                         "middle axes")
    if keepdims:
        r = r.reshape(tuple(1 if a in axes else x.shape[a] for a in range(nd)))
    return np.asarray(r, dtype=x.dtype)


def _rms_norm_bwd(M: Any, g: np.ndarray, xs: Sequence[np.ndarray], y: Any, at: Any,
                  nd: Sequence[bool]) -> list:
    _check([g, *xs])
    x, w = (np.asarray(v) for v in xs)
    t = x.dtype.type
    n = t(x.shape[-1])
    r = t(1) / np.sqrt(aten_sum(x * x, -1, keepdims=True) / n + t(at["eps"]))
    gw = None
    if nd[1]:
        gxr = g * (x * r)
        lead = gxr.ndim - 1
        try:
            gw = aten_sum(gxr, tuple(range(lead))) if lead else gxr
        except ValueError:  # an order not written here: the reference's (gx may still match)
            from tapescope.core.ops.reference import serial_sum
            gw = serial_sum(gxr, tuple(range(lead)))
    gx = None
    if nd[0]:
        gd = g * w
        gr = aten_sum(gd * x, -1, keepdims=True)
        # two contributions autograd adds to x's gradient separately, after those of
        # consumers made later (the engine runs later nodes first): x * r's, then pow's
        from tapescope.core.explain_prims import GradParts
        gx = GradParts((gd * r, (((t(-0.5) * gr) * ((r * r) * r)) / n) * (t(2) * x)))
    return [gx, gw]


def _check(xs: Sequence[np.ndarray]) -> None:
    for x in xs:
        if np.asarray(x).dtype not in _LANES:
            raise ValueError("ATen's AVX-512 kernels are written here for float64 and float32")


def _softmax(xs: Sequence[np.ndarray], at: dict) -> np.ndarray:
    _check(xs)
    x = np.asarray(xs[0])
    axis = int(at.get("axis", -1))
    if axis not in (-1, x.ndim - 1):
        raise ValueError("ATen's last-dim softmax kernel only")
    one = x.dtype.type(1)
    e = sleef_exp(x - np.max(x, axis=-1, keepdims=True))
    return e * (one / reduce_all(e))


def _silu_parts(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ATen's ``1 + exp(-a)`` (vector part SLEEF, tail libc) and ``silu(a) = a / that``."""
    one = a.dtype.type(1)
    den = one + _vec_map(-a, sleef_exp, _libc_exp)
    return den, a / den


def silu(a: np.ndarray) -> np.ndarray:
    """ATen's CPU ``silu`` (``a / (1 + exp(-a))``, SLEEF's exp on whole register pairs)."""
    _check([a])
    return _silu_parts(np.asarray(a))[1]


def _sigmoid(xs: Sequence[np.ndarray], at: dict) -> np.ndarray:
    """ATen's CPU sigmoid: ``1 / (1 + exp(-x))``, SLEEF's exp on whole register pairs."""
    _check(xs)
    x = np.asarray(xs[0])
    one = x.dtype.type(1)
    return one / (one + _vec_map(-x, sleef_exp, _libc_exp))


def _swiglu(xs: Sequence[np.ndarray], at: dict) -> np.ndarray:
    _check(xs)
    a, u = (np.asarray(x) for x in xs)
    return _silu_parts(a)[1] * u


def _swiglu_bwd(M: Any, g: np.ndarray, xs: Sequence[np.ndarray], y: Any, at: Any,
                nd: Sequence[bool]) -> list:
    _check([g, *xs])
    a, u = (np.asarray(x) for x in xs)
    one = a.dtype.type(1)
    den, silu = _silu_parts(a)
    s = one / den
    ga = ((g * u) * s) * _fma(a, one - s, one) if nd[0] else None
    gu = g * silu if nd[1] else None
    return [ga, gu]


def _log_softmax(x: np.ndarray) -> np.ndarray:
    """ATen's ``_vec_log_softmax_lastdim``: ``(x - max) - log(sum(exp(x - max)))``, the sum
    ``reduce_all``, exp and log SLEEF's."""
    m = np.max(x, axis=-1, keepdims=True)
    return (x - m) - sleef_log(reduce_all(sleef_exp(x - m)))


def log_softmax_reduced(x: np.ndarray) -> np.ndarray:
    """ATen's ``_vec_log_softmax_lastdim`` of a float16 / bfloat16 input (measured, every bit:
    both types, rows of 5 to 1,000, 1 and 2 threads): in float32, ``max``; the row sum of
    SLEEF's ``exp(x - max)`` by the reduced type's ``map_reduce_all`` (two accumulators of 16
    lanes, :func:`reduced_row_sum`) **stored in the input's type**; its log (SLEEF's, in float32)
    stored in the input's type too; ``(x - max) - log`` rounded to it."""
    f32 = np.float32
    xf = x.astype(f32)
    m = xf.max(axis=-1, keepdims=True)
    with np.errstate(all="ignore"):
        e = _sleef_exp32((xf - m).astype(f32))
        s = reduced_row_sum(e, np.ones_like(e), 16).astype(x.dtype)
        lg = sleef_log(s.astype(f32)).astype(x.dtype).astype(f32)
        return ((xf - m) - lg[..., None]).astype(x.dtype)


def _cross_entropy_bwd(M: Any, g: np.ndarray, xs: Sequence[np.ndarray], y: Any, at: Any,
                       nd: Sequence[bool]) -> list:
    """``F.cross_entropy``'s autograd (mean reduction): nll_loss's backward puts
    ``-(g / N)`` at each row's target, then ``_vec_log_softmax_backward``:
    ``gi - exp(out) * sum(gi)`` contracted (``fma(-exp(out), sum, gi)``), out the forward's
    log_softmax."""
    _check([g, xs[0]])
    x = np.asarray(xs[0])
    c = x.shape[-1]
    x2 = x.reshape(-1, c)
    ti = np.asarray(xs[1]).reshape(-1).astype(np.int64)
    if not nd[0]:
        return [None, None]
    t = x.dtype.type
    n = len(ti)
    gi = np.zeros_like(x2)
    gi[np.arange(n), ti] = -(t(np.asarray(g).reshape(())) / t(n))
    out = _log_softmax(x2)
    gx = _fma(-sleef_exp(out), reduce_all(gi), gi)
    return [gx.reshape(x.shape), None]


# op -> (what PyTorch's CPU computes, its label), tried by core.explain as a "libm" variant
ATEN_FORWARD: dict[str, tuple[Callable, str]] = {
    "softmax": (_softmax, "PyTorch's CPU softmax (ATen, AVX-512): SLEEF's vectorised exp, "
                          "a one-register lane sum, x * (1/sum)"),
    "swiglu": (_swiglu, "PyTorch's CPU silu(a) * u (ATen, AVX-512): a / (1 + exp(-a)), "
                        "SLEEF's vectorised exp"),
    "sigmoid": (_sigmoid, "PyTorch's CPU sigmoid (ATen, AVX-512): 1 / (1 + exp(-x)), SLEEF's "
                          "vectorised exp"),
}

# op -> (its backward rule as PyTorch's CPU autograd computes it, label)
ATEN_BACKWARD: dict[str, tuple[Callable, str]] = {
    "cross_entropy": (_cross_entropy_bwd, "PyTorch's CPU cross_entropy backward (ATen: "
                                          "nll_loss's, then log_softmax's with SLEEF's exp "
                                          "and log)"),
    "rms_norm": (_rms_norm_bwd, "PyTorch's CPU rms_norm backward (autograd of ATen's "
                                "composite, ATen's sum kernel)"),
    "swiglu": (_swiglu_bwd, "PyTorch's CPU silu backward (ATen, AVX-512): SLEEF's exp, "
                            "(g * s) * fma(a, 1 - s, 1)"),
}


def aten_moments(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(mean, population variance) over the last axis, keepdims, as ATen's CPU
    ``RowwiseMoments`` (layer_norm's statistics; the module doc), in ``x``'s type -- float32
    for float16 and bfloat16 (measured against ``native_layer_norm`` of both, every bit, rows
    of 1 to 5,000): a reduced type's vector of 16 is two float vectors of 8, each run through
    the chunk's Welford on its own and merged into the cascade's first level in turn
    (``UpdateMomentsVec``), each lane then carrying ``2 n`` elements; the scalar tail's
    ``m2`` update is contracted in float16's copy of the kernel (not in bfloat16's)."""
    from tapescope.core.explain_prims import fma

    x = np.asarray(x)
    reduced = x.dtype in (np.float16, _BF16)
    if x.dtype not in (np.float64, np.float32) and not reduced:
        raise ValueError("ATen's moments are written for float64 / float32 / float16 / bfloat16")
    lead, N = x.shape[:-1], x.shape[-1]
    X = x.reshape(-1, N)
    if reduced:
        X = X.astype(np.float32)
    dt = X.dtype.type
    R = X.shape[0]
    V = 4 if X.dtype == np.float64 else 8
    W = 2 * V if reduced else V  # the input's vector: its elements per step
    n = N // W
    m = -(-n // 16)
    depth = 1 if m <= 2 else int(m - 1).bit_length()
    z = np.zeros((R, V), dtype=X.dtype)
    m0s = [0] * depth
    m1s = [z.copy() for _ in range(depth)]
    m2s = [z.copy() for _ in range(depth)]

    def add_vec(m0a: int, m1a: np.ndarray, m2a: np.ndarray, j: int) -> None:
        nn = m0s[j] + m0a
        c = dt(0) if nn == 0 else dt(m0a) / dt(nn)
        delta = m1a - m1s[j]
        m2t = m2s[j] + m2a
        cd = c * delta
        m1s[j] = m1s[j] + cd
        m2s[j] = fma(delta * dt(m0s[j]), cd, m2t)
        m0s[j] = nn

    with np.errstate(all="ignore"):
        for i in range(m):
            base = i * 16 * W
            cnt = min(16, n - i * 16)
            for h in range(0, W, V):  # (two float halves of a reduced type's vector)
                m1, m2 = z.copy(), z.copy()
                for j in range(cnt):
                    xv = X[:, base + j * W + h: base + j * W + h + V]
                    delta = xv - m1
                    m1 = fma(dt(1) / dt(j + 1), delta, m1)
                    m2 = fma(delta, xv - m1, m2)
                add_vec(cnt, m1, m2, 0)
            mask, j = i + 1, 1
            while j < depth and (mask & 1) == 0:
                add_vec(m0s[j - 1], m1s[j - 1], m2s[j - 1], j)
                m0s[j - 1], m1s[j - 1], m2s[j - 1] = 0, z.copy(), z.copy()
                mask >>= 1
                j += 1
        for i in range(1, depth):
            add_vec(m0s[i], m1s[i], m2s[i], 0)
        k = 0
        mean = np.zeros(R, dtype=X.dtype)
        m2 = np.zeros(R, dtype=X.dtype)
        contract = x.dtype == np.float16  # (the compiler's choice in float16's copy, measured)
        for i in range(n * W, N):  # the scalar tail: plain Welford
            xi = X[:, i]
            delta = xi - mean
            k += 1
            mean = mean + delta / dt(k)
            m2 = fma(delta, xi - mean, m2) if contract else m2 + delta * (xi - mean)
        per_lane = n * W // V
        for lane in range(V):  # AddMoments, contracted
            nn = k + per_lane
            c = dt(0) if nn == 0 else dt(per_lane) / dt(nn)
            delta = m1s[0][:, lane] - mean
            mean = fma(c, delta, mean)
            m2 = m2 + fma((delta * delta) * c, dt(k), m2s[0][:, lane])
            k = nn
    return mean.reshape(lead + (1,)), (m2 / dt(N)).reshape(lead + (1,))


# ATen's Vectorized<float>::exp_u20 (vec512_float.h; vec256_float.h's is the same per lane):
# 1/1! .. 1/5! as its fitted float constants, log2(e), ln 2, and the clamps' bounds, as bits
_U20_C = (0.999999701, 0.499991506, 0.166676521, 0.0418978221, 0.00828929059)
_U20_BITS = {"log2e": 0x3FB8AA3B, "ln2": 0x3F317218, "lo": 0xC2AEAC50, "hi": 0x42B17218}


def _f32_bits(b: int) -> np.float32:
    return np.array([b], np.uint32).view(np.float32)[0]


def exp_u20(x: np.ndarray) -> np.ndarray:
    """``Vectorized<float>::exp_u20`` (what the CPU flash attention's softmax takes for whole
    vectors): ``x`` clamped to [ln FLT_MIN, ln FLT_MAX] (a NaN to the upper bound: vminps /
    vmaxps answer their second operand), ``n = floor(fma(x, log2 e, 0.5))``, ``r = fma(-n, ln 2,
    x)``, a degree-5 Horner polynomial every step an fma, times ``2^(n - 1)`` then 2 (0 below
    ln FLT_MIN). Float32 only."""
    f32 = np.float32
    x = np.asarray(x, dtype=f32)
    lo, hi = _f32_bits(_U20_BITS["lo"]), _f32_bits(_U20_BITS["hi"])
    below = x < lo
    src = np.where(np.isnan(x), hi, np.minimum(x, hi))
    src = np.maximum(src, lo)
    fx = np.floor(_fma(src, _f32_bits(_U20_BITS["log2e"]), f32(0.5)).astype(f32))
    r = _fma(-fx, _f32_bits(_U20_BITS["ln2"]), src).astype(f32)
    c1, c2, c3, c4, c5 = (f32(c) for c in _U20_C)
    y = _fma(r, c5, c4).astype(f32)
    for c in (c3, c2, c1, f32(1)):
        y = _fma(r, y, c).astype(f32)
    n = np.rint(fx - f32(1)).astype(np.int32)
    two = np.left_shift(n + 127, 23).astype(np.int32).view(f32)
    two = np.where(below, f32(0), two)
    return ((y * two).astype(f32) * f32(2)).astype(f32)


# fexp_u20's polynomial c0 .. c3 (each rounded to float32 as _mm512_set1_ps takes it) and its
# range's bounds, ln FLT_MIN and ln FLT_MAX (their bits)
_FEXP_C = (0.00010703434948458272, 0.30354260500649682, -0.22433836478672356,
           -0.079204240219773236)
_FEXP_BITS = {"lo": 0xc2aeac50, "hi": 0x42b17218, "log2e": 0x3fb8aa3b}


def fexp_u20(x: np.ndarray) -> np.ndarray:
    """``Vectorized<float>::fexp_u20`` (AVX-512 and AVX2 alike: the CPU flash attention's exp
    where its probabilities are stored to bfloat16 or float16), Malossi et al.'s fast
    exponential: ``s = x * log2 e``, ``f = s - floor(s)``, a degree-3 Horner polynomial in
    ``f`` by fma, ``s - poly``, then ``fma(2^23, s - poly, 127 * 2^23)`` truncated to an
    integer and read as a float's bits; 0 below ln FLT_MIN, +inf above ln FLT_MAX (a NaN,
    neither, reads the truncation's 0x80000000: -0.0). Float32 only."""
    f32 = np.float32
    x = np.asarray(x, dtype=f32)
    c0, c1, c2, c3 = (f32(c) for c in _FEXP_C)
    with np.errstate(all="ignore"):
        src = (x * _f32_bits(_FEXP_BITS["log2e"])).astype(f32)
        frac = (src - np.floor(src)).astype(f32)
        res = _fma(frac, c3, c2).astype(f32)
        res = _fma(frac, res, c1).astype(f32)
        res = _fma(frac, res, c0).astype(f32)
        src = (src - res).astype(f32)
        tmp = _fma(f32(1 << 23), src, f32(127 * (1 << 23))).astype(f32)
        ok = np.isfinite(tmp) & (np.abs(tmp) < f32(2 ** 31))  # (else cvttps' 0x80000000)
        bits = np.where(ok, np.trunc(np.where(ok, tmp, 0)), -(1 << 31)).astype(np.int64)
        bits = bits.astype(np.int32)
    bits = np.where(x < _f32_bits(_FEXP_BITS["lo"]), 0, bits)
    bits = np.where(x > _f32_bits(_FEXP_BITS["hi"]), 0x7F800000, bits).astype(np.int32)
    return bits.view(f32)


def _fma_acc(acc: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``fma(a, b, acc)``: in place in C where it can (``core.native.fma_into``), else numpy's
    exact emulation (``core.explain_prims.fma``); the same bits either way."""
    from tapescope.core import native

    if native.fma_into(acc, a, b):
        return acc
    return _fma(a, b, acc)


def _fma_chain(a: np.ndarray, b: np.ndarray, alpha: np.float32 | None = None,
               dtype: Any = np.float32) -> np.ndarray:
    """``a @ b`` over the last two axes (``dtype``, float32 by default; leading axes
    batched), each output one fma chain over k in order from zero (a BLAS micro-kernel's
    register lane: MKL's sgemm at the flash attention's sizes); ``alpha`` then multiplies the
    sums (beta = 0)."""
    from tapescope.core import native

    a = np.ascontiguousarray(a, dtype=dtype)
    b = np.ascontiguousarray(b, dtype=dtype)
    acc = np.zeros(a.shape[:-1] + b.shape[-1:], dtype=dtype)
    if not native.fma_chain(a, b, acc):  # (the whole product in one call; else a k at a time)
        for k in range(a.shape[-1]):
            acc = _fma_acc(acc, a[..., k:k + 1], b[..., k:k + 1, :])
    return acc if alpha is None else (acc * alpha).astype(dtype)


def _lane_sum(p1: np.ndarray, p2: np.ndarray | None, lanes: int, tree: bool,
              tail_fma: bool = True) -> np.ndarray:
    """ATen's ``vec::map2_reduce_all`` / ``reduce_all`` of ``p1 * p2`` (or ``p1``) over each row
    (the last axis): rows shorter than a vector are summed lane after lane; else one
    accumulator of ``lanes`` lanes starts from the first vector, adds each whole vector, then
    the partial last vector into its first lanes only (``Vec::set``: the others, a -0.0 lane
    included, kept as they are) -- contracted, ``fma(p1, p2, acc)``, where ``tail_fma`` (the
    compiler fuses the tail's map and add in some copies of a kernel, not the loop's:
    measured per kernel) -- then the lanes are folded (halving for ``tree``, else in
    sequence)."""
    from tapescope.core.explain_prims import _fold_lanes, fma

    t = p1 if p2 is None else p1 * p2
    n = t.shape[-1]
    if n < lanes:
        acc = t[..., 0].copy()
        for k in range(1, n):
            acc = acc + t[..., k]
        return acc
    acc = t[..., :lanes].copy()
    d = lanes
    while d + lanes <= n:
        acc = acc + t[..., d:d + lanes]
        d += lanes
    if d < n:
        k = n - d
        acc[..., :k] = fma(p1[..., d:], p2[..., d:], acc[..., :k]) \
            if p2 is not None and tail_fma else acc[..., :k] + t[..., d:]
    return _fold_lanes(acc, lanes, tree)


def _exp_reduce_sum(x: np.ndarray, lanes: int) -> tuple[np.ndarray, np.ndarray]:
    """``_exp_reduce_sum_fusion_kernel`` over rows (the last axis): whole vectors by ``exp_u20``
    summed per lane, the lanes folded as a halving tree (``vec_reduce_all``); then the
    elements past the last whole vector by the C library's double ``exp`` (the scalar loop's
    ``exp``, measured: glibc's ``expf`` is 1 ulp off on some), each rounded to float and
    added to the sum in order. (exp values, sums)."""
    f32 = np.float32

    n = x.shape[-1]
    v = n - n % lanes
    e = np.empty_like(x)
    if v:
        e[..., :v] = exp_u20(x[..., :v])
        tot = _lane_sum(e[..., :v], None, lanes, True)
    else:
        tot = np.zeros(x.shape[:-1], dtype=f32)
    return e, _exp_tail(x, e, tot, v)


def _exp_tail(x: np.ndarray, e: np.ndarray, tot: np.ndarray, start: int) -> np.ndarray:
    """The flash kernels' scalar loop past the last whole vector (the same ``exp(tmp1)`` in
    the float32 and the bfloat16 kernel): ``e[..., start:]`` by the C library's double
    ``exp`` rounded to float (in place), each added to ``tot`` in order."""
    from tapescope.core.explain_prims import _LIBC_MATH

    f32 = np.float32
    if start < x.shape[-1]:
        e[..., start:] = np.asarray(_LIBC_MATH.exp(x[..., start:].astype(np.float64))).astype(f32)
        for j in range(start, x.shape[-1]):
            tot = (tot + e[..., j]).astype(f32)
    return tot


def _exp_reduce_sum_reduced(x: np.ndarray, lanes: int) -> tuple[np.ndarray, np.ndarray]:
    """``_exp_reduce_sum_fusion_kernel<float, bfloat16>`` over rows (the last axis): pairs of
    vectors (one bfloat16 vector's worth, ``2 * lanes``) by ``fexp_u20``, each half summed in
    its own accumulator; then one more whole vector, if there is one, into a third, added to
    the first; the two folded into one (the second added to the first, then a halving tree);
    then the elements past the last whole vector by the C library's ``exp`` (as the float
    kernel's), added in order. (exp values, unrounded; sums)."""
    f32 = np.float32
    from tapescope.core.explain_prims import _fold_lanes

    n = x.shape[-1]
    pair = n - n % (2 * lanes)
    whole = n - n % lanes
    e = np.empty_like(x)
    acc = [np.zeros(x.shape[:-1] + (lanes,), f32) for _ in range(3)]
    if whole:
        e[..., :whole] = fexp_u20(x[..., :whole])
    for j in range(0, pair, 2 * lanes):
        acc[0] = (acc[0] + e[..., j:j + lanes]).astype(f32)
        acc[1] = (acc[1] + e[..., j + lanes:j + 2 * lanes]).astype(f32)
    if whole > pair:
        acc[2] = (acc[2] + e[..., pair:whole]).astype(f32)
    acc[0] = (acc[0] + acc[2]).astype(f32)
    tot = _fold_lanes((acc[0] + acc[1]).astype(f32), lanes, True).astype(f32)
    return e, _exp_tail(x, e, tot, whole)


def _map2_reduce_all(x: np.ndarray, y: np.ndarray, lanes: int) -> np.ndarray:
    """``vec::map2_reduce_all(x * y, +)`` over rows as the flash kernels' copy runs it: the
    products rounded, then ``_lane_sum`` with the partial vector added (float32, halving)."""
    return _lane_sum((x * y).astype(np.float32), None, lanes, True)


def softmax_backward(g: np.ndarray, out: np.ndarray, tail_fma: bool = True) -> np.ndarray:
    """``_softmax_backward_data`` over the last axis as PyTorch's CPU computes it
    (SoftMaxKernel.cpp's ``_vec_host_softmax_backward_lastdim``): ``(g - sum) * out`` with
    ``sum = map2_reduce_all(g * out)`` -- one vector of lanes, the first vector's products
    rounded, each later whole vector's added, the partial last vector's added into the first
    lanes, the lanes folded as a halving tree; a row shorter than a vector summed in order.
    ``tail_fma``: the partial vector's products ``fma``'d instead (measured: the compiler
    contracts that step in the copy ``parallel_for`` runs inline -- one thread, or rows
    within one grain -- and not in the one its threads run)."""
    g, out = np.asarray(g), np.asarray(out)
    if g.dtype != out.dtype or g.dtype not in _LANES or g.shape != out.shape or g.ndim < 1 \
            or g.shape[-1] < 1:
        raise ValueError("written for float32 / float64 rows of one shape")
    with np.errstate(all="ignore"):
        acc = _lane_sum(g, out, _LANES[np.dtype(g.dtype)], g.dtype == np.float32, tail_fma)
        return ((g - np.asarray(acc, g.dtype)[..., None]) * out).astype(g.dtype)


def wide_panels(k: int, n: int) -> bool:
    """Whether MKL's AVX-512 path on an Intel CPU without AMX blocks a product of ``k`` terms
    into ``n`` columns in 384-term panels (``_mkl_panels(wide=True)``, where it differs from
    the default). (The Xeon with AMX does so from 192 rows as well: ``mkl_sgemm_wide``.)"""
    return n >= 192 and k > 768


def _mkl_panels(k: int, wide: bool = False) -> list[int]:
    """The bounds of MKL's k panels (sgemm, AVX-512, one thread; measured against torch's
    products at 16 depths from 385 to 4,096 terms, outputs of up to 128 columns -- the flash
    kernels' and a Linear's of few outputs): 384 terms at a time while more than 768 are
    left, then the rest in ``ceil(rest / 384)`` equal panels (the last ones shorter by the
    rounding).

    ``wide``: up to 768 terms the same equal panels, past that 384 terms at a time and the
    rest as the last panel: MKL's AVX-512 path on an Intel CPU without AMX (an Ice Lake Xeon,
    session 40) for outputs of 192 columns or more (measured with the FPRev method at 385 to
    2,000 terms, 16 to 2,000 rows; below 192 columns that CPU runs the rule above), on the
    Xeon with AMX for outputs of 192 rows and 192 columns or more (session 41: 60 random
    products of 16-300 rows, 2-700 columns, 385-2,000 terms, and the thresholds swept), and
    on two threads for some narrower products (``mkl_sgemm_wide``)."""
    if wide and k > 768:  # (wide_panels: 192 columns or more past 768 terms)
        return [*range(0, k, 384), k]
    bounds, s = [0], 0
    while k - s > 768:
        s += 384
        bounds.append(s)
    rest = k - s
    n = max(1, -(-rest // 384))
    step = -(-rest // n) if rest else 1
    bounds += [s + i * step for i in range(1, n)] + [k]
    return bounds


def _mkl_panels_amd(k: int) -> list[int]:
    """The bounds of MKL's k panels on an AMD CPU (sgemm, Zen 4, AVX-512, one thread;
    measured with the FPRev method, then 200 random products of 32-512 rows, 16-128 columns
    and 1-1,100 terms, both layouts of the second operand, every bit): up to 192 terms one
    panel; up to 384 two panels of ``k // 2`` and the odd term as a panel of its own; beyond
    that 192 terms at a time and the rest as the last panel."""
    if k <= 192:
        return [0, k]
    if k <= 384:
        h = k // 2
        return [0, h, 2 * h] + ([k] if k > 2 * h else [])
    return [*range(0, k, 192), k]


#: MKL's products as it runs them on an AMD CPU (``_sgemm``'s panels): set by ``mkl_amd()``
_MKL_AMD: ContextVar[bool] = ContextVar("tapescope_mkl_amd", default=False)

#: MKL's products as its AVX-512 path without AMX runs them on an Intel CPU: set by
#: ``mkl_no_amx()``
_MKL_NO_AMX: ContextVar[bool] = ContextVar("tapescope_mkl_no_amx", default=False)


@contextmanager
def mkl_no_amx() -> Iterator[None]:
    """Within: ``_sgemm`` takes MKL's products as its AVX-512 path runs them on an Intel CPU
    without AMX (an Ice Lake Xeon; measured there, session 40, MKL 2024.0, one thread):
    outputs of 192 columns or more past 768 terms in ``_mkl_panels(wide=True)``'s panels. (The
    Xeon with AMX takes those panels from 192 rows and 192 columns: session 41. Both run
    2-15 rows against a transposed operand over ``k >= 24 x rows`` terms by the ``dots``
    kernel, in or out of this context: ``_mkl_mm``.)"""
    token = _MKL_NO_AMX.set(True)
    try:
        yield
    finally:
        _MKL_NO_AMX.reset(token)


@contextmanager
def mkl_amd() -> Iterator[None]:
    """Within: ``_sgemm`` (the flash kernels' products) takes k in MKL's AMD panels."""
    token = _MKL_AMD.set(True)
    try:
        yield
    finally:
        _MKL_AMD.reset(token)


def _sgemm(a: np.ndarray, b: np.ndarray, c: np.ndarray | None = None,
           alpha: np.float32 | None = None, wide: bool | None = None) -> np.ndarray:
    """MKL's sgemm (measured against ``torch.addmm`` and the flash kernels): k in panels
    (``_mkl_panels``; within ``mkl_amd()`` ``_mkl_panels_amd``), each output's panel one fma
    chain from zero (``_fma_chain``), times ``alpha`` when given, added to ``c`` (beta = 1)
    panel by panel -- or the first panel's result where there is no ``c`` (beta = 0). On an
    AMD CPU MKL multiplies ``b`` by ``alpha`` (rounded) before the chains instead (measured:
    every bit over 12 products of 24-128 columns, both layouts). ``wide``: Intel's 384-term
    panels (True) or not (False) whatever the shape and context."""
    amd = _MKL_AMD.get()
    if amd and alpha is not None:
        b, alpha = (np.asarray(b, np.float32) * np.float32(alpha)).astype(np.float32), None
    if wide is None:
        wide = _MKL_NO_AMX.get() and wide_panels(a.shape[-1], b.shape[-1])
    bounds = _mkl_panels_amd(a.shape[-1]) if amd else _mkl_panels(a.shape[-1], wide)
    for k0, k1 in pairwise(bounds):
        p = _fma_chain(a[..., k0:k1], b[..., k0:k1, :], alpha)
        c = p if c is None else (c + p).astype(np.float32)
    return c


def _mkl_bf16(a: np.ndarray, b: np.ndarray, c: np.ndarray | None = None) -> np.ndarray:
    """MKL's ``gemm_bf16bf16f32`` (the flash kernels' products in bfloat16: bfloat16 operands,
    a float32 result; AVX-512 with AMX, one thread), measured against it with the FPRev method
    and random operands, 1-1,024 terms: each product exact in float32 (two 8-bit
    significands), k in blocks of 32 terms, each block's even terms and odd terms two chains
    from zero added together, the blocks added in turn onto ``c`` (beta = 1) or from the first
    block's sum (beta = 0). ``a``, ``b``: float32 arrays of bfloat16 values (the last two axes
    multiplied, the leading batched); float32 out. PyTorch's bfloat16 ``mm`` / ``addmm`` /
    ``bmm`` on a CPU with AMX take the same order (session 41: every bit over 24 products of
    29-256 rows, 47-1,000 terms, each layout, 1 thread)."""
    f32 = np.float32
    a = np.ascontiguousarray(a, dtype=f32)
    b = np.ascontiguousarray(b, dtype=f32)
    k = a.shape[-1]
    tot = None if c is None else np.asarray(c, f32)
    shape = a.shape[:-1] + b.shape[-1:]
    for s in range(0, k, 32):
        e = min(s + 32, k)
        ev = np.zeros(shape, f32)
        od = np.zeros(shape, f32)
        for kk in range(s, e):  # (each product exact: a sum rounds once, as an fma)
            p = a[..., kk:kk + 1] * b[..., kk:kk + 1, :]
            if (kk - s) % 2:
                od = (od + p).astype(f32)
            else:
                ev = (ev + p).astype(f32)
        blk = (ev + od).astype(f32)
        tot = blk if tot is None else (tot + blk).astype(f32)
    return np.zeros(shape, f32) if tot is None else tot


def _mkl_bf16_any(a: np.ndarray, b: np.ndarray, c: np.ndarray | None = None) -> np.ndarray:
    """``_mkl_bf16`` over the last two axes, or ``_mkl_bf16_row`` per batch entry where ``a``
    has one row (MKL's one-row kernels)."""
    if a.shape[-2] != 1:
        return _mkl_bf16(a, b, c)
    lead = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    out = np.empty(lead + (1, b.shape[-1]), np.float32)
    for i in np.ndindex(*lead):
        out[i] = _mkl_bf16_row(a[i], b[i], None if c is None else c[i])
    return out


def _mkl_bf16_row(a: np.ndarray, b: np.ndarray, c: np.ndarray | None = None) -> np.ndarray:
    """MKL's ``gemm_bf16bf16f32`` for one row of ``a`` (the flash kernels' query block of one
    row), measured as ``_mkl_bf16``: each output one dot product, by ``b``'s layout.

    - ``b`` a transposed view (``q @ kᵀ``: each output a dot of two contiguous rows): 16 lanes,
      lane ``l`` taking terms ``2l + 1`` then ``2l`` of each 32-term chunk
      (``vdpbf16ps``), the lanes folded as ``l + 8``, then adjacent pairs, twice more;
    - ``b`` laid out by rows (``p @ v``): the terms in blocks of 8, each block odd then even
      term of each pair from zero, the blocks added in turn onto ``c`` (beta = 1) or from the
      first; with more than 32 outputs, k in two halves (the first ``ceil(k / 2)`` terms, then
      the rest) summed so and the halves added.

    ``a`` (1, k), ``b`` (k, n): float32 arrays of bfloat16 values; float32 (1, n) out."""
    f32 = np.float32
    x = np.asarray(a, dtype=f32)[0]
    k, n = b.shape
    if b.strides[0] < b.strides[1]:  # (a transposed view: dot products of rows)
        w = np.ascontiguousarray(np.swapaxes(b, 0, 1), dtype=f32)  # (n, k)
        lanes = np.zeros((n, 16), f32)
        for c0 in range(0, k, 32):
            for lane in range(16):
                for i in (c0 + 2 * lane + 1, c0 + 2 * lane):
                    if i < k:
                        lanes[:, lane] = (lanes[:, lane] + w[:, i] * x[i]).astype(f32)
        v = (lanes[:, :8] + lanes[:, 8:]).astype(f32)
        while v.shape[1] > 1:
            v = (v[:, 0::2] + v[:, 1::2]).astype(f32)
        out = v[:, 0]
        return out[None, :] if c is None else (c + out).astype(f32)
    w = np.asarray(b, dtype=f32)

    def chain(lo: int, hi: int, tot: np.ndarray | None) -> np.ndarray | None:
        for s in range(lo, hi, 8):
            acc = np.zeros(n, f32)
            for i in range(s, min(s + 8, hi), 2):
                for j in (i + 1, i):
                    if j < hi:
                        acc = (acc + x[j] * w[j]).astype(f32)
            tot = acc if tot is None else (tot + acc).astype(f32)
        return tot
    start = None if c is None else np.asarray(c, f32).reshape(n)
    if n > 32 and k > 1:
        half = (k + 1) // 2
        first = chain(0, half, start)
        out = (first + chain(half, k, None)).astype(f32)
    else:
        out = chain(0, k, start)
    return (np.zeros(n, f32) if out is None else out)[None, :]


def _lanes_fma(x: np.ndarray, w: np.ndarray, acc: np.ndarray, k0: int, k1: int,
               step: int) -> np.ndarray:
    """``acc[r, j, l] = fma(x[r, k + l], w[j, k + l], acc[r, j, l])`` for the whole vectors
    ``k = k0, k0 + step, ...`` below ``k1`` (``acc``'s last axis the vector's lanes)."""
    lanes = acc.shape[-1]
    for k in range(k0, k1 - lanes + 1, step):
        acc = _fma_acc(acc, x[:, None, k:k + lanes], w[None, :, k:k + lanes])
    return acc


def _few_lanes(x: np.ndarray, w: np.ndarray, two: bool, lanes: int) -> np.ndarray:
    """The lanes of MKL's few-column dot products (``_sgemm_few``): x (R, K) rows by w (N, K)
    rows, k in vectors of ``lanes``; ``two``: the whole pairs of vectors first into two
    accumulators (the even vectors', the odd's) added together; then the remaining whole
    vectors into one; the partial last vector into the first lanes. (R, N, lanes)."""
    f32 = np.float32
    r, kk = x.shape
    acc = np.zeros((r, w.shape[0], lanes), dtype=f32)
    k = 0
    if two:
        k = kk - kk % (2 * lanes)
        odd = _lanes_fma(x, w, acc.copy(), lanes, k, 2 * lanes)
        acc = (_lanes_fma(x, w, acc, 0, k, 2 * lanes) + odd).astype(f32)
    acc = _lanes_fma(x, w, acc, k, kk, lanes)
    k = kk - (kk - k) % lanes
    if k < kk:
        acc[..., :kk - k] = _fma_acc(np.ascontiguousarray(acc[..., :kk - k]), x[:, None, k:],
                                     w[None, :, k:])
    return acc


def _sgemm_few(a: np.ndarray, b: np.ndarray, kernel: str, lanes: int = 16) -> np.ndarray:
    """MKL's sgemm for 1-3 output columns with ``b`` transposed in memory (``nn.Linear``'s
    ``x @ W.t()``, as ``addmm`` calls it: each output a dot of two contiguous rows), measured
    here against ``torch.addmm`` with the FPRev method (a term ``2^40``, another ``-2^40``,
    the rest ones: the result counts the terms added after the two met, which gives each pair's
    subtree, hence the tree) and random operands for the roundings, over 2-12 rows, 1-512
    terms, 2-3 columns, one thread, AVX-512. Two kernels, by the problem's size:

    - ``pairs``: rows in pairs; the first of a pair in two ``lanes``-wide fma accumulators over
      alternate vectors of k, added together, the second in one; the partial last vector into
      the first lanes; each folded as a halving tree;
    - ``dots``: every output one ``lanes``-wide fma chain, the partial last vector into the
      first lanes, folded by its 128-bit quarters added in turn, then those four lanes in
      pairs (MKL also takes it for 2-15 rows by any columns over longer k: ``mkl_few``).

    float32 (a, b) -> (rows, columns); ``alpha`` and the bias are the caller's."""
    a = np.ascontiguousarray(a, dtype=np.float32)
    w = np.ascontiguousarray(np.swapaxes(b, -1, -2), dtype=np.float32)
    if a.ndim != 2 or w.ndim != 2 or a.shape[1] != w.shape[1]:
        raise ValueError("MKL's few-column sgemm is written out for 2-d products")
    from tapescope.core.explain_prims import _fold_lanes

    f32 = np.float32
    out = np.empty((a.shape[0], w.shape[0]), dtype=f32)
    if kernel == "pairs":
        for first in (0, 1):
            if first < a.shape[0]:
                out[first::2] = _fold_lanes(_few_lanes(a[first::2], w, first == 0, lanes),
                                            lanes, True).astype(f32)
        return out
    v = _few_lanes(a, w, False, lanes)
    g = v[..., :4]
    for j in range(4, lanes, 4):
        g = (g + v[..., j:j + 4]).astype(f32)
    return ((g[..., 0] + g[..., 1]).astype(f32) + (g[..., 2] + g[..., 3]).astype(f32)).astype(f32)


def _one_stage(x: np.ndarray, w: np.ndarray, s: np.ndarray, k: int, count: int,
               width: int) -> np.ndarray:
    """One stage of ``_sgemv``'s four-row kernel: ``count`` terms from ``k`` in vectors of
    ``width`` (the last one partial, into the first lanes), lane 0 seeded with the sum so far
    ``s``; a 16-wide stage one fma chain, a narrower one two accumulators taking the vectors
    in turn (added together); folded as a halving tree."""
    from tapescope.core.explain_prims import _fold_lanes

    f32 = np.float32
    accs = [np.zeros((x.shape[0], width), f32) for _ in range(1 if width == 16 else 2)]
    accs[0][:, 0] = s
    for i, j in enumerate(range(k, k + count, width)):
        m = min(width, k + count - j)
        acc = accs[i % len(accs)]
        acc[:, :m] = _fma_acc(np.ascontiguousarray(acc[:, :m]), x[:, j:j + m], w[None, j:j + m])
    acc = accs[0] if count <= width or len(accs) == 1 else (accs[0] + accs[1]).astype(f32)
    return _fold_lanes(acc, width, True).astype(f32)


def _gemv_args(a: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A dot-product kernel's (rows, k) matrix and (k,) vector, float32, C order; ValueError
    for any other shapes."""
    a = np.ascontiguousarray(a, dtype=np.float32)
    w = np.ascontiguousarray(w, dtype=np.float32)
    if a.ndim != 2 or w.shape != (a.shape[1],) or a.shape[1] < 1:
        raise ValueError("MKL's dot-product kernel is written out for (rows, k) @ (k,)")
    return a, w


def _sgemv(a: np.ndarray, w: np.ndarray) -> np.ndarray:
    """MKL's dot-product kernel (sgemv over contiguous rows): ``a @ w`` for a (rows, k) and w
    (k,), float32 -> (rows,). What MKL's sgemm runs for a product with one output column or
    one output row where the other operand is transposed in memory (``nn.Linear(d, 1)``'s
    ``x @ W.t()``; a batch of one's ``x @ W.t()``, rows and columns exchanged), measured as
    ``_sgemm_few`` (FPRev, then random operands: 1-256 rows, 1-1,000 terms, ``mm`` and
    ``addmm``, one thread, AVX-512). Each row's first product is set apart (rounded), then:

    - rows in groups of four: the rest in stages, each seeded with the sum so far
      (``_one_stage``): their whole 16-vectors as one 16-wide chain (with 16-31 terms left
      MKL takes sixteen as two 8-wide vectors, which folds to the same bits); then what is
      left, 8 or more as 8-wide vectors, fewer as 4-wide;
    - the last ``rows % 4``: in pairs, as ``_sgemm_few``'s ``pairs`` (the first of a pair two
      accumulators over alternate 16-vectors, the second one chain; a row left alone as a
      first), folded as a halving tree, then the first product added."""
    from tapescope.core.explain_prims import _fold_lanes

    a, w = _gemv_args(a, w)
    f32 = np.float32
    rows, kk = a.shape
    out = np.empty(rows, dtype=f32)
    first = (a[:, 0] * w[0]).astype(f32)
    four = rows - rows % 4
    if four:
        x, s, k, n = a[:four], first[:four], 1, kk - 1
        if n >= 16:
            s = _one_stage(x, w, s, k, n - n % 16, 16)
            k += n - n % 16
        if k < kk:
            s = _one_stage(x, w, s, k, kk - k, 8 if kk - k >= 8 else 4)
        out[:four] = s
    for r in range(four, rows):
        lanes = _few_lanes(a[r:r + 1, 1:], w[None, 1:], (r - four) % 2 == 0, 16)
        out[r] = (_fold_lanes(lanes[0, 0], 16, True) + first[r]).astype(f32)
    return out


def _amd_stage(x: np.ndarray, w: np.ndarray, head: int, width: int, body: int) -> np.ndarray:
    """One row group of ``_sgemv_amd``: the first ``head`` products summed in order (each
    rounded, then added), lane 0 seeded with that sum, the next ``body`` terms in vectors of
    ``width`` lanes (each product rounded, then added to its lane), folded as a halving tree;
    (rows,)."""
    from tapescope.core.explain_prims import _fold_lanes

    f32 = np.float32
    s = (x[:, 0] * w[0]).astype(f32)
    for k in range(1, head):
        s = (s + (x[:, k] * w[k]).astype(f32)).astype(f32)
    if not body:
        return s
    acc = np.zeros((x.shape[0], width), f32)
    acc[:, 0] = s
    for k in range(head, head + body, width):
        acc = (acc + (x[:, k:k + width] * w[None, k:k + width]).astype(f32)).astype(f32)
    return _fold_lanes(acc, width, True).astype(f32)


def _sgemv_amd(a: np.ndarray, w: np.ndarray) -> np.ndarray:
    """MKL's dot-product kernel (``_sgemv``'s) as it runs on an AMD CPU (measured on an AMD
    EPYC, Zen 4, AVX-512, one thread, MKL 2024.2: FPRev trees, then random operands, 400
    shapes of 1-80 rows by 1-1,200 terms, ``mv`` and ``mm`` with one output row, every bit):
    no FMA -- each product rounded, then added. ``a @ w`` for a (rows, k), w (k,) -> (rows,):

    - rows in groups of four: the first ``(k - 1) % 4 + 1`` products summed in order, the rest
      in 4-lane vectors (lane 0 seeded with that sum), folded ``(l0 + l2) + (l1 + l3)``;
    - the last ``rows % 4``, in pairs: the first four products in order, then whole 8-term
      blocks in 8 lanes (the first of a pair) or 4 (the second), folded as a halving tree, then
      the terms past the last block added in order."""
    a, w = _gemv_args(a, w)
    f32 = np.float32
    rows, kk = a.shape
    out = np.empty(rows, dtype=f32)
    four = rows - rows % 4
    if four:
        head = (kk - 1) % 4 + 1
        out[:four] = _amd_stage(a[:four], w, head, 4, kk - head)
    head = min(kk, 4)
    body = (kk - head) // 8 * 8
    for r in range(four, rows):
        s = _amd_stage(a[r:r + 1], w, head, 8 if (r - four) % 2 == 0 else 4, body)[0]
        for k in range(head + body, kk):
            s = f32(s + f32(a[r, k] * w[k]))
        out[r] = s
    return out


def _lanes_dot_amd(x: np.ndarray, wt: np.ndarray, peel: int, width: int) -> np.ndarray:
    """``x @ wt.T`` for x (r, k), wt (c, k) -> (r, c), each output as MKL's small-product
    kernel sums it on an AMD CPU (``mkl_small_amd``): every product rounded, then added; the
    first ``peel`` in order, then whole ``width``-term blocks in ``width`` lanes (lane 0 seeded
    with the peel's sum), folded as a halving tree, then the rest in order."""
    from tapescope.core.explain_prims import _fold_lanes

    f32 = np.float32
    k = x.shape[1]
    p = (x[:, None, :] * wt[None, :, :]).astype(f32)
    peel = min(peel, k)
    blocks = (k - peel) // width
    if not blocks:
        peel = k
    s = p[..., 0].copy() if peel else None
    for t in range(1, peel):
        s = (s + p[..., t]).astype(f32)
    if not blocks:
        return s
    acc = p[..., peel:peel + width].copy()
    if s is not None:
        acc[..., 0] = (s + acc[..., 0]).astype(f32)
    for t in range(peel + width, peel + blocks * width, width):
        acc = (acc + p[..., t:t + width]).astype(f32)
    s = _fold_lanes(acc, width, True)
    for t in range(peel + blocks * width, k):
        s = (s + p[..., t]).astype(f32)
    return s


def _chain_rows_amd(a: np.ndarray, b: np.ndarray, peel: np.ndarray,
                    seed: np.ndarray | None = None) -> np.ndarray:
    """``a @ b`` for b laid out by rows, as ``mkl_small_amd`` sums it: each output one chain
    of rounded products in order, but an output row's first ``peel[i]`` columns (those before
    its 16-byte boundary) take k in 8-term blocks, each block's second half its own chain
    added to the first's (then the rest in order). ``seed`` (r, n): each chain's start (beta
    = 1's ``c``), else the first product."""
    f32 = np.float32
    k = a.shape[1]
    p = (a[:, :, None] * b[None, :, :]).astype(f32)   # (r, k, n)
    out = p[:, 0].copy() if seed is None else (seed + p[:, 0]).astype(f32)
    for t in range(1, k):
        out = (out + p[:, t]).astype(f32)
    for i in np.flatnonzero(peel):
        q = p[i, :, :peel[i]]
        s, t = (None if seed is None else seed[i, :peel[i]].copy()), 0
        while t + 8 <= k:
            h = q[t].copy() if s is None else (s + q[t]).astype(f32)
            for u in range(t + 1, t + 4):
                h = (h + q[u]).astype(f32)
            g = q[t + 4].copy()
            for u in range(t + 5, t + 8):
                g = (g + q[u]).astype(f32)
            s, t = (h + g).astype(f32), t + 8
        for u in range(t, k):
            s = q[u].copy() if s is None else (s + q[u]).astype(f32)
        out[i, :peel[i]] = s
    return out


def _small_block_amd(a: np.ndarray, b: np.ndarray, rows: range, by_rows: bool,
                     starts: np.ndarray, seed: np.ndarray | None = None) -> np.ndarray:
    """``mkl_small_amd``'s kernel over output rows ``rows``; ``starts``: each of those rows'
    offset in floats from a 16-byte boundary (mod 4) -- the output's rows (``by_rows``) or
    ``a``'s; ``seed``: the rows' ``c`` to add onto (``by_rows``)."""
    f32 = np.float32
    k, n = a.shape[1], b.shape[1]
    idx = np.arange(rows.start, rows.stop)
    out = np.empty((idx.size, n), dtype=f32)
    chunk = max(1, (1 << 22) // max(1, n * k))  # rows a pass (r * n * k products at most)
    if by_rows:
        peel = (-starts) % 4
        peel[n - peel < 4] = 0
        for lo in range(0, idx.size, chunk):
            out[lo:lo + chunk] = _chain_rows_amd(
                a[idx[lo:lo + chunk]], b, peel[lo:lo + chunk],
                None if seed is None else seed[lo:lo + chunk])
        return out
    wt = np.ascontiguousarray(b.T)
    four = n // 4 * 4
    for peel in range(4):
        sel = np.flatnonzero((-starts) % 4 == peel)
        for lo in range(0, sel.size, chunk):
            r = sel[lo:lo + chunk]
            if four:
                out[np.ix_(r, np.arange(four))] = _lanes_dot_amd(a[idx[r]], wt[:four], peel, 4)
            if four < n:
                out[np.ix_(r, np.arange(four, n))] = _lanes_dot_amd(a[idx[r]], wt[four:], peel,
                                                                    8)
    return out


#: multiply-adds ``mkl_dgemm_amd`` runs at most (its k loop is Python's, each step a numpy
#: pass over the output); its last columns' products are held whole: a 64th of it (37 MB)
_DGEMM_AMD_TERMS = 3 * 10 ** 8


def _dgemm_amd_quad(t: np.ndarray, head: np.ndarray) -> np.ndarray:
    """A 4-column group of ``mkl_dgemm_amd`` over the products ``t`` (rows, k, cols): per row
    two sums without FMA, of the even terms and of the odd ones (up to an even count), added,
    the last term of an odd count after; a row with ``head`` (its terms start off a 16-byte
    boundary) has its first term peeled into the even sum first."""
    out = np.empty((t.shape[0], t.shape[2]))
    k = t.shape[1]
    for h in (0, 1):
        sel = np.nonzero(head == h)[0]
        if not len(sel) or k == 0:
            out[sel] = 0.0
            continue
        tt = t[sel]
        even, odd = np.zeros(out[sel].shape), np.zeros(out[sel].shape)
        if h:
            even = even + tt[:, 0]
        pairs = h + (k - h) // 2 * 2
        for j in range(h, pairs, 2):
            even = even + tt[:, j]
            odd = odd + tt[:, j + 1]
        out[sel] = even + odd if pairs == k else (even + odd) + tt[:, k - 1]
    return out


def _dgemm_amd_lanes(t: np.ndarray, head: np.ndarray) -> np.ndarray:
    """The last 1-3 columns of ``mkl_dgemm_amd`` over the products ``t`` (rows, k, cols): 8
    lanes without FMA over the terms up to a multiple of 8 (term j in lane j % 8), folded
    ``((0 + 2) + (4 + 6)) + ((1 + 3) + (5 + 7))``, the rest added in order after; a row with
    ``head`` has its first term peeled as lane 0's start, the lanes from its second."""
    out = np.empty((t.shape[0], t.shape[2]))
    k = t.shape[1]
    for h in (0, 1):
        sel = np.nonzero(head == h)[0]
        if not len(sel):
            continue
        tt = t[sel]
        lanes = [np.zeros(out[sel].shape) for _ in range(8)]
        if h and k:
            lanes[0] = lanes[0] + tt[:, 0]
        h = min(h, k)
        whole = h + (k - h) // 8 * 8
        for j in range(h, whole):
            lanes[(j - h) % 8] = lanes[(j - h) % 8] + tt[:, j]
        r = ((lanes[0] + lanes[2]) + (lanes[4] + lanes[6])) + \
            ((lanes[1] + lanes[3]) + (lanes[5] + lanes[7]))
        for j in range(whole, k):
            r = r + tt[:, j]
        out[sel] = r
    return out


def _dgemm_amd_pairs(t: np.ndarray) -> np.ndarray:
    """``mkl_dgemm_amd`` for one output row or column: the products ``t`` (..., k, n) summed
    as two sums without FMA: the first term (and the second where k is even) the first sum's
    start, then the rest in pairs, the first of each into the first sum and the second into
    the second, the two added."""
    k = t.shape[-2]
    if k == 0:
        return np.zeros(t.shape[:-2] + t.shape[-1:])
    s0 = t[..., 0, :] + t[..., 1, :] if k % 2 == 0 else t[..., 0, :].copy()
    s1 = np.zeros_like(s0)
    for j in range(2 if k % 2 == 0 else 1, k, 2):
        s0 = s0 + t[..., j, :]
        s1 = s1 + t[..., j + 1, :]
    return s0 + s1


def mkl_dgemm_amd(a: np.ndarray, b: np.ndarray, c: np.ndarray | None = None) -> np.ndarray:
    """``c + a @ b`` (float64, 2-d; ``b`` a weight's transposed view, as ``nn.Linear`` hands
    it to ``addmm`` or ``mm``) as MKL's dgemm runs it on an AMD CPU (measured on an AMD EPYC,
    Zen 4, MKL 2024.2, torch 2.13 at two threads: FPRev trees, then random products of 8-1,000
    rows, 1-100 columns, 1-512 terms, every bit but where written below). The rows in groups
    of 4, and in them:

    - the columns in groups of 12: each output one fma chain over k in order, from ``c``
      (from zero without one);
    - then groups of 4 columns (``_dgemm_amd_quad``): two sums without FMA (each product
      rounded, then added), of the even terms and of the odd ones, added, then ``c``;
    - the last 1-3 columns (``_dgemm_amd_lanes``): 8 lanes without FMA, folded, then ``c``.

    Past 256 terms the 4-column groups take k in two halves (of an even k: an odd one's
    split is not written out), each its own sums, ``c`` onto the first's, the second's added.
    A row of ``a`` whose terms start off a 16-byte boundary (torch's allocations are 64-byte
    aligned: an odd row of an odd k, or a half that starts there) has its first term peeled.
    The main columns' last 1-3 rows (past the groups of 4), and every row of a product of one
    column (a regression head's): ``_dgemm_amd_pairs``, then ``c``. One term: its product,
    then ``c`` (torch's own path). Every accumulator starts at +0.0. (``core.explain``'s
    ``_mm_tiles(12, ...)`` is its main columns and a 2-lane edge, for a tape's products.)

    Not written out (ValueError, or bits that differ: ``--explain`` says ``unknown``): the
    last 1-3 columns past 256 terms; an odd k past 256 in a 4-column group; the last 1-3 rows
    in the last columns of some widths (measured: 41-62 columns) and a product of 8 rows
    past 256 terms (the threads' split, likely); layouts other than a transposed weight's.
    """
    from tapescope.core.explain_prims import fma

    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    m, k = a.shape
    n = b.shape[1]
    rows = 0 if n == 1 else m // 4 * 4
    main = n // 12 * 12
    quads = (n - main) // 4 * 4 if n > 1 else 0
    if n > 1 and k > 256 and (n - main - quads or (quads and k % 2)):
        raise ValueError("MKL's AMD dgemm past 256 terms: its last columns' order is not "
                         "written out")
    if k <= 1:  # (torch's own: the product of one term, c added after)
        with np.errstate(all="ignore"):
            y = a @ b if k else np.zeros((m, n))
            return y if c is None else y + np.broadcast_to(np.asarray(c, np.float64), (m, n))
    if m * k * n > _DGEMM_AMD_TERMS or m * k * (n - main) > _DGEMM_AMD_TERMS // 64:
        raise ValueError("MKL's AMD dgemm: past the search's budget")
    out = np.empty((m, n))
    start = np.arange(m) * k  # each row's first term, in doubles from the aligned start
    with np.errstate(all="ignore"):
        if rows < m:  # (the main columns' last rows; every column of a one-column product)
            last = main if n > 1 else 1
            out[rows:, :last] = _dgemm_amd_pairs(a[rows:, :, None] * b[None, :, :last])
        t = a[:, :, None] * b[None, :, main:]  # (m, k, the last columns): each product rounded
        if main and rows:
            acc = np.zeros((rows, main)) if c is None else \
                np.array(np.broadcast_to(np.asarray(c, np.float64), (m, n))[:rows, :main])
            for j in range(k):
                acc = fma(a[:rows, j:j + 1], b[j:j + 1, :main], acc)
            out[:rows, :main] = acc
        cc = None if c is None else np.broadcast_to(np.asarray(c, np.float64), (m, n))
        halves = [(0, k)] if k <= 256 else [(0, k // 2), (k // 2, k)]
        for col in range(main, main + quads, 4):
            r = None
            for k0, k1 in halves:
                part = _dgemm_amd_quad(t[:, k0:k1, col - main:col - main + 4],
                                       (start + k0) % 2)
                if r is None:  # (c onto the first half's sums)
                    r = part if cc is None else part + cc[:, col:col + 4]
                else:
                    r = r + part
            out[:, col:col + 4] = r
        if n > 1 and main + quads < n:
            out[:, main + quads:] = _dgemm_amd_lanes(t[:, :, quads:], start % 2)
        if cc is not None:  # (the rest: c after; the fma chains started from it)
            after = np.ones((m, n), bool)
            after[:rows, :main] = False
            after[:, main:main + quads] = False
            out = np.where(after, out + cc, out)
    return out


def mkl_small_amd(a: np.ndarray, b: np.ndarray, by_rows: bool = False, threads: int = 1,
                  c: np.ndarray | None = None, alpha: np.float32 | None = None,
                  starts: np.ndarray | None = None) -> np.ndarray:
    """``a @ b`` (float32, 2-d) as MKL runs a product of at most 11 output columns (a
    classifier's) or at most 3 rows on an AMD CPU: its small-product kernel, not sgemm's fma
    chains (measured on an AMD EPYC, Zen 4, MKL 2024.2, one and two threads: FPRev trees, then
    random products of 2-90 rows, 2-200 columns, 1-800 terms, every bit). No FMA: each product
    rounded, then added. Memory is taken as torch allocates it: rows one after another from a
    64-byte aligned start.

    - ``b`` a transposed view (a weight's ``.t()``, as ``nn.Linear`` hands it to ``addmm``):
      each output is ``a``'s row against ``b``'s column: the products before ``a``'s row
      reaches a 16-byte boundary in order, then 4-lane vectors -- 8 lanes for the last
      ``n % 4`` columns -- lane 0 seeded with that sum, folded as a halving tree, then the
      terms past the last whole vector in order;
    - ``b`` laid out by rows (``by_rows``: a weight's gradient ``dy.T @ x``, ``dy @ W``): one
      chain in order an output, but the columns before an output row's 16-byte boundary (where
      four columns remain after them) in 8-term blocks, each block's second half its own chain
      added to the first's.

    Every accumulator starts at +0.0 (an output of -0.0 products only is +0.0). With ``c``
    (beta = 1) and ``alpha``: against a transposed view ``c + alpha * (a @ b)``,
    each step rounded; by rows ``alpha * a`` rounded first, ``c`` each chain's start (the
    one-row kernel's forms: measured with ``torch.addmm``). ``starts``: each row's offset in
    floats past a 16-byte boundary, where the rows are views into other memory (the flash
    kernels' blocks); by default ``i * k`` (``a``'s rows) or ``i * n`` (the output's).

    At two threads MKL splits the rows at ``ceil(m / 2)`` rounded up to a multiple of four,
    and each part is its own product: a part of 4 or more rows by 12 or more columns is
    sgemm's (``_sgemm`` as on an AMD CPU), any other this kernel (one row included: not the
    row kernel a one-row product runs). MKL splits only past a size it picks (16 terms by 12
    columns stay whole, 8 by 24 are split): where it did not, the one-thread variant's bits
    are the product's. ValueError where this kernel runs no row, or where the split changes
    nothing (the one-thread variant then), and for other dtypes."""
    a, b = _float32_2d(a, b)
    m, n = a.shape[0], b.shape[1]
    if threads not in (1, 2) or m < 2 or n < 2:
        raise ValueError("MKL's small-product kernel: 2 or more rows and columns, 1 or 2 "
                         "threads (measured)")

    cols = -(-n // 16) * 16  # (one column part)
    if threads == 2:
        half = (m + 1) // 2
        cut = (half + 3) // 4 * 4
        if cut >= m or _small_part(cut, n) == _small_part(m - cut, n):
            raise ValueError("two threads split these rows into parts of one kernel: the "
                             "one-thread variant")
        return _GridParts(a, b, by_rows, c, alpha, starts).assemble(cut, cols)
    if not _small_part(m, n):
        raise ValueError("4 or more rows by 12 or more columns: MKL's sgemm (_sgemm)")
    return _GridParts(a, b, by_rows, c, alpha, starts).assemble(-(-m // 4) * 4, cols)


def _small_part(rows: int, cols: int) -> bool:
    """Whether MKL on an AMD CPU runs a (part of a) product of ``rows`` x ``cols`` outputs by
    its small-product kernel (at most 3 rows or 11 columns), else by sgemm's chains."""
    return rows <= 3 or cols <= 11


def _grid_cuts(size: int, part: int) -> list[tuple[int, int]]:
    """``size`` cut into parts of ``part``, the last the rest."""
    return [(s, min(size, s + part)) for s in range(0, size, part)]


def _grid_sizes(size: int, unit: int, most: int) -> list[int]:
    """The part sizes (multiples of ``unit``) that cut ``size`` differently, largest first,
    into at most ``most`` parts; each the largest size giving its cuts."""
    seen: dict[tuple, int] = {}
    for p in range(-(-size // unit) * unit, 0, -unit):
        if -(-size // p) > most:
            break
        seen.setdefault(tuple(_grid_cuts(size, p)), p)
    return list(seen.values())


#: the most multiply-adds a threads' grid is assembled from (sgemm's chains over the whole
#: product, in numpy): a 4,096-token batch through a 64 -> 193 layer is 5 x 10^7
_GRID_WORK = 1 << 28


class _GridParts:
    """The pieces every grid of one product is assembled from (``mkl_grid_amd``): sgemm's
    outputs (the same whatever part an output lies in: one fma chain a panel), and the
    small-product kernel's over a part's rows and columns -- against a transposed view the same
    in every part (a part's last ``n % 4`` columns are the product's: parts of 16 columns), by
    rows each part's own (its first columns before the output row's 16-byte boundary)."""

    def __init__(self, a: np.ndarray, b: np.ndarray, by_rows: bool, c: np.ndarray | None,
                 alpha: np.float32 | None, starts: np.ndarray | None = None) -> None:
        f32 = np.float32
        m, k, n = a.shape[0], a.shape[1], b.shape[1]
        self.a, self.b, self.by_rows, self.alpha = a, b, by_rows, alpha
        # each row's offset in floats: the output's (by rows) or a's, as torch allocates them
        self.starts = np.arange(m) * (n if by_rows else k) if starts is None else starts
        self.c = None if c is None else np.broadcast_to(np.asarray(c, f32), (m, n))
        self.la = a if alpha is None or not by_rows else (a * f32(alpha)).astype(f32)
        self._wide: np.ndarray | None = None
        self._small: dict[tuple[int, ...], np.ndarray] = {}

    def wide(self) -> np.ndarray:
        if self._wide is None:
            with mkl_amd():
                self._wide = _sgemm(self.a, self.b, None if self.c is None else
                                    np.array(self.c), self.alpha)
        return self._wide

    def small(self, r0: int, r1: int, c0: int, c1: int) -> np.ndarray:
        """The small kernel's outputs of rows ``r0:r1`` over columns ``c0:c1`` as one part."""
        f32 = np.float32
        key = (r0, r1, c0, c1) if self.by_rows else (r0, r1)
        got = self._small.get(key)
        if got is None:
            # (MKL's accumulators start at +0.0: an output whose products are all -0.0 is
            # +0.0, not the -0.0 a chain from its first product keeps; measured: a row against
            # a column of -0.0, both layouts; an attention's masked gradient rows)
            if self.by_rows:
                got = _small_block_amd(self.la[r0:r1], self.b[:, c0:c1], range(r1 - r0), True,
                                       self.starts[r0:r1] + c0,
                                       None if self.c is None else self.c[r0:r1, c0:c1])
                if self.c is None:
                    got = (got + f32(0)).astype(f32)
            else:
                got = _small_block_amd(self.a[r0:r1], self.b, range(r1 - r0), False,
                                       self.starts[r0:r1])
                if self.alpha is not None:
                    got = (got * f32(self.alpha)).astype(f32)
                got = ((f32(0) if self.c is None else self.c[r0:r1]) + got).astype(f32)
            self._small[key] = got
        return got if self.by_rows else got[:, c0:c1]

    def assemble(self, h: int, w: int) -> np.ndarray:
        m, n = self.a.shape[0], self.b.shape[1]
        out = np.empty((m, n), dtype=np.float32)
        for c0, c1 in _grid_cuts(n, w):
            for r0, r1 in _grid_cuts(m, h):
                if _small_part(r1 - r0, c1 - c0):
                    out[r0:r1, c0:c1] = self.small(r0, r1, c0, c1)
                else:
                    out[r0:r1, c0:c1] = self.wide()[r0:r1, c0:c1]
        return out


def mkl_grid_amd(a: np.ndarray, b: np.ndarray, by_rows: bool, rows: int, cols: int,
                 c: np.ndarray | None = None, alpha: np.float32 | None = None) -> np.ndarray:
    """``a @ b`` (float32, 2-d; ``c + alpha * ...`` as ``mkl_small_amd``) as MKL runs a
    product on several threads on an AMD CPU (measured on an AMD EPYC, Zen 4, MKL 2024.2, at
    2-64 threads): the output cut in a grid, rows in parts of ``rows`` (a multiple of 4),
    columns in parts of ``cols`` (a multiple of 16), the last of each the rest; each part its
    own one-thread product: MKL's small-product kernel for a part of at most 3 rows or 11
    columns (a last part of ``m % 4`` rows or ``n % 16`` columns; by rows, each part's first
    columns before the output row's 16-byte boundary take its 8-term blocks), sgemm's fma
    chains for the rest. A product of many rows and few columns (4,096 tokens through a layer
    of 20 or 193 outputs) is cut so; one of more than a few hundred columns comes out as on one
    thread (each thread then takes whole 16-column blocks of sgemm's)."""
    a, b = _float32_2d(a, b)
    if rows < 4 or rows % 4 or cols < 16 or cols % 16:
        raise ValueError("MKL's threads cut rows in multiples of 4, columns of 16")
    return _GridParts(a, b, by_rows, c, alpha).assemble(rows, cols)


def mkl_grid_amd_fit(a: np.ndarray, b: np.ndarray, by_rows: bool, recorded: np.ndarray,
                     c: np.ndarray | None = None, alpha: np.float32 | None = None,
                     most: int = 256) -> tuple[np.ndarray, int, int] | None:
    """The grid of ``mkl_grid_amd`` (at most ``most`` column parts, one that cuts the
    product) whose output is ``recorded`` bit for bit -- ``(output, rows, cols)``, the
    coarsest such -- or None. MKL picks its grid from the thread count and the shape by a rule
    not written out here, and only the parts a grid makes small decide its bits: the last
    ``m % 4`` rows a part or not (whatever the part size that cuts them so), and the columns'
    cuts -- against a transposed view only whether the last ``n % 16`` columns are a part,
    by rows also where each part starts. Those are tried. ValueError past ``_GRID_WORK``
    multiply-adds (sgemm's chains rebuilt in numpy, many grids tried)."""
    a, b = _float32_2d(a, b)
    m, n, k = a.shape[0], b.shape[1], a.shape[1]
    if m * n * k > _GRID_WORK:
        raise ValueError(f"a {m} x {k} x {n} product is past the threads' grid's budget")
    want = np.asarray(recorded)
    if want.shape != (m, n) or want.dtype != np.float32:
        return None
    want = want.view(np.uint32)
    whole = -(-m // 4) * 4
    hs = [whole] + ([m - m % 4] if m > 4 and m % 4 else [])
    ws = _grid_sizes(n, 16, most)
    tail = [w for w in ws if w < n and 1 <= n % w <= 11]  # (its last part small)
    if not by_rows:
        ws = [ws[0]] + tail[:1]  # (the cuts of wide parts change nothing there)
    parts = _GridParts(a, b, by_rows, c, alpha)
    small_rows = m <= 3
    for h in hs:
        for w in ws:
            # a grid changes bits where it makes a part small, or cuts small rows' columns
            # (by rows: each part's own boundary blocks); any other is one thread's
            if not (h < m or w in tail or by_rows and w < n and (small_rows or n <= 11)):
                continue
            y = parts.assemble(h, w)
            if np.array_equal(y.view(np.uint32), want):
                return y, h, w
    return None


def sdot_amd(x: np.ndarray, y: np.ndarray) -> np.float32:
    """MKL's ``sdot`` as it runs on an AMD CPU (``torch.dot`` / ``vdot`` of float32; measured
    on an AMD EPYC, Zen 4, MKL 2024.2: FPRev trees, then 600 random lengths of 1-2,000 terms,
    every bit): no FMA; 16 lanes over whole vectors, what is left as one 8-wide vector, one
    4-wide, then single terms, each into the first lanes; the 16 lanes folded by 128-bit
    quarters added in turn, then ``(q0 + q2) + (q1 + q3)``."""
    f32 = np.float32
    x = np.ascontiguousarray(x, dtype=f32).ravel()
    y = np.ascontiguousarray(y, dtype=f32).ravel()
    if x.shape != y.shape:
        raise ValueError("sdot of two vectors of one length")
    n, k = x.size, 0
    acc = np.zeros(16, f32)
    for width in (16, 8, 4, 1):
        while k + width <= n:
            acc[:width] = (acc[:width] + (x[k:k + width] * y[k:k + width]).astype(f32)).astype(f32)
            k += width
            if width != 16 and width != 1:
                break
    q = acc[0:4]
    for j in (4, 8, 12):
        q = (q + acc[j:j + 4]).astype(f32)
    return f32(f32(q[0] + q[2]) + f32(q[1] + q[3]))


def _sgemv_rows(x: np.ndarray, b: np.ndarray, c: np.ndarray | None = None) -> np.ndarray:
    """MKL's kernel for one row times a matrix laid out by rows (``x @ B``, B (k, n) not
    transposed: attention's ``p @ v`` on a one-row query block, a batch of one through an
    untransposed weight; sgemv's axpy form), ``+ c`` (beta = 1) where given; measured with the
    FPRev method and random operands (1-1,000 terms, 1-256 columns, AVX-512, one thread).
    Over the whole 16-column vectors, with ``a ⊕ b`` for ``fma(x_a, B_a, x_b * B_b)`` (b's
    product rounded first), k in blocks of eight: the first block ``((t0 ⊕ t2) + (t1 ⊕ t3))
    + ((t4 ⊕ (t6 ⊕ c)) + (t5 ⊕ t7))`` (``c``, or zero, the accumulator t6 is fma'd onto);
    each later block ``t6`` and ``t4`` fma'd onto the sum, then ``+ (t5 ⊕ t7)``, then
    ``+ ((t0 ⊕ t2) + (t1 ⊕ t3))``; the terms past the last block one fma each. Fewer than 8
    terms, and the columns past the last whole vector: one fma chain from ``c`` (or zero).
    float32 (k,) @ (k, n) -> (n,)."""
    from tapescope.core.explain_prims import fma

    f32 = np.float32
    x = np.ascontiguousarray(x, dtype=f32)
    b = np.ascontiguousarray(b, dtype=f32)
    kk, n = b.shape
    seed = np.zeros(n, f32) if c is None else np.array(np.broadcast_to(c, (n,)), dtype=f32)
    out = np.empty(n, dtype=f32)
    v = n - n % 16 if kk >= 8 else 0
    if v < n:
        acc = seed[v:].copy()
        for k in range(kk):
            acc = _fma_acc(acc, x[k], b[k, v:])
        out[v:] = acc
    if not v:
        return out
    bv = b[:, :v]

    def pair(i: int, j: int, first: np.ndarray | None = None) -> np.ndarray:
        inner = (x[j] * bv[j]).astype(f32) if first is None else \
            fma(x[j], bv[j], first).astype(f32)
        return fma(x[i], bv[i], inner).astype(f32)

    def half(o: int) -> np.ndarray:
        return (pair(o, o + 2) + pair(o + 1, o + 3)).astype(f32)

    acc = (half(0) + (pair(4, 6, seed[:v]) + pair(5, 7)).astype(f32)).astype(f32)
    for o in range(8, kk - kk % 8, 8):
        acc = _fma_acc(acc, x[o + 6], bv[o + 6])
        acc = _fma_acc(acc, x[o + 4], bv[o + 4])
        acc = ((acc + pair(o + 5, o + 7)).astype(f32) + half(o)).astype(f32)
    for k in range(kk - kk % 8, kk):
        acc = _fma_acc(acc, x[k], bv[k])
    out[:v] = acc
    return out


def mkl_row_gemv(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` by MKL's row-vector kernel (``_sgemv_rows``) where ``a`` is one row;
    ValueError otherwise."""
    a, b = _float32_2d(a, b)
    if a.shape[0] != 1:
        raise ValueError("MKL's row-vector kernel: one row only")
    return _sgemv_rows(a[0], b)[None, :]


def mkl_col_gemv_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` where ``b`` is one column and ``a`` a transposed view of a matrix laid out by
    rows (``x.t() @ g``: the weight gradient of ``nn.Linear(d, 1)`` as autograd may order it,
    a bmm's transposed operand): MKL runs the same kernel as for ``(g.t() @ x).t()``, the
    row-vector kernel over ``x``'s rows (measured: the two products' bits equal on 6 shapes);
    ValueError otherwise."""
    a, b = _float32_2d(a, b)
    if b.shape[1] != 1:
        raise ValueError("MKL's row-vector kernel by columns: one output column only")
    return _sgemv_rows(b[:, 0], np.ascontiguousarray(a.T))[:, None]


def _float32_2d(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != np.float32 or b.dtype != np.float32 or a.ndim != 2 or b.ndim != 2 or \
            a.shape[1] != b.shape[0] or a.shape[1] == 0:
        raise ValueError("MKL's sgemm kernels are written out for float32 2-d products")
    return a, b


def mkl_gemv(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` by MKL's dot-product kernel (``_sgemv``) where the output is one column (each
    row of ``a`` against ``b``) or one row (each column of ``b`` against ``a``: rows and
    columns exchanged); ValueError for any other product or dtype (the table's ``mm``
    primitive: such a variant explains nothing there)."""
    return _gemv_by(_sgemv, a, b)


def mkl_sgemm(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` (float32, 2-d) as MKL's sgemm runs it on an Intel CPU past 384 terms
    (``_sgemm``: ``_mkl_panels``' k panels, each one fma chain, added in turn); ValueError
    for other dtypes and ranks, and up to 384 terms (one fma chain: the table's first
    variant already)."""
    a, b = _float32_2d(a, b)
    if a.shape[1] <= 384:
        raise ValueError("one fma chain: the table's first variant")
    return _sgemm(a, b)


def mkl_sgemm_wide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` (float32, 2-d) in MKL's 384-term panels, the rest last (``_sgemm`` with
    ``wide``): how MKL's AVX-512 path runs it past 768 terms on an Intel CPU without AMX for
    outputs of 192 columns or more (session 40), on the Xeon with AMX for outputs of 192 rows
    and 192 columns or more, and on two threads for some narrower products (session 41,
    measured with the FPRev method: 512 x 1,000 x 128); a transformer's weight gradients over
    1,024 tokens. ValueError up to 768 terms (``mkl_sgemm``'s panels there)."""
    a, b = _float32_2d(a, b)
    if a.shape[1] <= 768:
        raise ValueError("MKL's equal panels (mkl_sgemm)")
    return _sgemm(a, b, wide=True)


def mkl_sgemm_amd(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` (float32, 2-d) as MKL's sgemm runs it on an AMD CPU past 192 terms
    (``_sgemm`` within ``mkl_amd()``); ValueError for other dtypes and ranks, and up to 192
    terms (one fma chain: the table's first variant already)."""
    a, b = _float32_2d(a, b)
    if a.shape[1] <= 192:
        raise ValueError("one fma chain: the table's first variant")
    with mkl_amd():
        return _sgemm(a, b)


def mkl_gemv_amd(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``mkl_gemv`` by the kernel MKL runs on an AMD CPU (``_sgemv_amd``)."""
    return _gemv_by(_sgemv_amd, a, b)


def _gemv_by(kernel: Callable, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = _float32_2d(a, b)
    if b.shape[1] == 1:
        return kernel(a, b[:, 0])[:, None]
    if a.shape[0] == 1:
        return kernel(np.swapaxes(b, 0, 1), a[0])[None, :]
    raise ValueError("MKL's dot-product kernel: one output column or row only")


def mkl_few(kernel: str) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """``a @ b`` by MKL's small kernel ``kernel`` (``_sgemm_few``): "pairs" for 2-3 output
    columns; "dots" (each output a dot of its own, so either side may be the weight) for 2-3
    columns, and for 2-15 rows by any columns (MKL's choice there over longer k: measured
    from about 64 terms at 2 rows to 385 at 12); ValueError for other shapes and dtypes."""
    def mm(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        a, b = _float32_2d(a, b)
        m, n = a.shape[0], b.shape[1]
        if not (m >= 2 and 2 <= n <= 3 or kernel == "dots" and 2 <= m < 16 and n >= 2):
            raise ValueError(f"not a product MKL's {kernel} kernel computes")
        return _sgemm_few(a, b, kernel)
    return mm


def _row_chain(x: np.ndarray, b: np.ndarray, c: np.ndarray | None) -> np.ndarray:
    """MKL's one-row product by rows on an AMD CPU: ``x @ b`` as one chain over k of rounded
    products added in order onto ``c`` (or zero); float32 (k,) @ (k, n) -> (n,)."""
    f32 = np.float32
    b = np.asarray(b, dtype=f32)
    acc = np.zeros(b.shape[-1], f32) if c is None else np.array(c, dtype=f32)
    for k in range(b.shape[0]):
        acc = (acc + (x[k] * b[k]).astype(f32)).astype(f32)
    return acc


def _mkl_mm(a: np.ndarray, b: np.ndarray, c: np.ndarray | None = None,
            alpha: np.float32 | None = None) -> np.ndarray:
    """``alpha * a @ b (+ c)`` over the last two axes as MKL's sgemm computes it where the
    layout is known from the views handed in (the flash kernels'), measured against
    ``torch.addmm``: over one term, ``alpha * a`` rounded first, then one fma onto ``c`` (or
    one rounded product); one row of ``a`` by the dot-product kernel when ``b`` is a transposed
    view (``_sgemv``, times alpha and ``+ c`` after) or the row-vector kernel when it is laid
    out by rows (``_sgemv_rows``: the row times alpha first, ``c`` its accumulator); one column
    of ``b`` by the dot-product kernel (alpha and ``c`` after); otherwise ``_sgemm``.
    Within ``mkl_amd()`` MKL's AMD kernels (measured as ``_sgemm``'s): over one term
    ``c + (alpha * a) * b`` (no fma); one row by rows one chain of rounded products added in
    order onto ``c`` (or zero); the dot-product kernel ``_sgemv_amd``."""
    from tapescope.core.explain_prims import fma

    f32 = np.float32
    amd = _MKL_AMD.get()
    one_row, one_col = a.shape[-2] == 1, b.shape[-1] == 1
    if a.shape[-1] == 1:
        la = a if alpha is None else (a * f32(alpha)).astype(f32)
        if c is None:
            return (la * b).astype(f32)
        return (c + (la * b).astype(f32)).astype(f32) if amd else fma(la, b, c).astype(f32)
    m, n = a.shape[-2], b.shape[-1]
    if amd and not one_row and not one_col and (m <= 3 or n <= 11):
        return _small_by_views(a, b, c, alpha)
    if not one_row and not one_col:
        if not amd and 2 <= m <= 15 and a.shape[-1] >= 24 * m and \
                b.strides[-2] < b.strides[-1]:
            return _dots_by_views(a, b, c, alpha)
        return _sgemm(a, b, c, alpha)
    dot = _sgemv_amd if amd else _sgemv
    lead = a.shape[:-2]
    out = np.empty(lead + (a.shape[-2], b.shape[-1]), dtype=f32)
    transposed = b.strides[-2] < b.strides[-1]
    for i in np.ndindex(*lead):
        if one_row and not transposed:
            x = a[i][0] if alpha is None else (a[i][0] * f32(alpha)).astype(f32)
            seed = None if c is None else c[i][0]
            out[i][0] = _row_chain(x, b[i], seed) if amd else _sgemv_rows(x, b[i], seed)
            continue
        r = dot(np.swapaxes(b[i], -1, -2), a[i][0])[None, :] if one_row else \
            dot(a[i], b[i][:, 0])[:, None]
        if alpha is not None:
            r = (r * f32(alpha)).astype(f32)
        out[i] = r if c is None else (c[i] + r).astype(f32)
    return out


def _dots_by_views(a: np.ndarray, b: np.ndarray, c: np.ndarray | None,
                   alpha: np.float32 | None) -> np.ndarray:
    """``_mkl_mm``'s 2-15 rows against a transposed ``b`` over long k on an Intel CPU (with
    AMX and without: measured on both, 300 random shapes each): each of the leading axes'
    products by the ``dots`` kernel, times ``alpha`` and ``+ c`` after (as the one-row
    dot-product kernel)."""
    f32 = np.float32
    lead = a.shape[:-2]
    out = np.empty(lead + (a.shape[-2], b.shape[-1]), dtype=f32)
    for i in np.ndindex(*lead):
        r = _sgemm_few(a[i], b[i], "dots")
        if alpha is not None:
            r = (r * f32(alpha)).astype(f32)
        out[i] = r if c is None else (c[i] + r).astype(f32)
    return out


def _row_starts(x: np.ndarray) -> np.ndarray:
    """Each row of the 2-d view ``x``: its offset in floats from the start of the array it is
    a view of (taken as aligned, as torch allocates)."""
    root = x
    while isinstance(root.base, np.ndarray):
        root = root.base
    off = (x.__array_interface__["data"][0] - root.__array_interface__["data"][0]) // 4
    return off + np.arange(x.shape[0]) * (x.strides[0] // 4)


def _small_by_views(a: np.ndarray, b: np.ndarray, c: np.ndarray | None,
                    alpha: np.float32 | None) -> np.ndarray:
    """``_mkl_mm``'s products of at most 11 columns or 2-3 rows on an AMD CPU
    (``mkl_small_amd``), each of the leading axes' products with its layout from the views
    handed in: a transposed ``b`` against ``a``'s rows where they lie, one by rows with the
    output's rows where ``c`` lies (a fresh output: rows one after another)."""
    f32 = np.float32
    lead = a.shape[:-2]
    m, n = a.shape[-2], b.shape[-1]
    out = np.empty(lead + (m, n), dtype=f32)
    for i in np.ndindex(*lead):
        bi = b[i]
        by_rows = not bi.strides[-2] < bi.strides[-1]
        ci = None if c is None else c[i]
        starts = _row_starts(a[i]) if not by_rows else \
            (np.arange(m) * n if ci is None else _row_starts(ci))
        out[i] = mkl_small_amd(np.ascontiguousarray(a[i]), np.ascontiguousarray(bi), by_rows,
                               1, None if ci is None else np.ascontiguousarray(ci), alpha,
                               starts)
    return out


def _flash_check(q: np.ndarray, k: np.ndarray, v: np.ndarray, reduced: bool = False,
                 groups: bool = False) -> None:
    """``groups``: k and v may have fewer heads (axis -3) than q, a divisor of its."""
    wants = (_BF16, np.dtype(np.float16)) if reduced else (np.dtype(np.float32),)
    if not any(all(np.asarray(t).dtype == w for t in (q, k, v)) for w in wants):
        raise ValueError("the flash kernels are written out for float32, bfloat16 and float16")
    grouped = groups and q.ndim >= 3 and q.ndim == k.ndim and q.shape[:-3] == k.shape[:-3] \
        and k.shape[-3] > 0 and q.shape[-3] % k.shape[-3] == 0
    if q.ndim < 3 or (q.shape[:-2] != k.shape[:-2] and not grouped) \
            or k.shape[:-1] != v.shape[:-1]:
        raise ValueError("grouped heads or mismatched shapes")
    if 0 in q.shape or 0 in k.shape or 0 in v.shape:
        raise ValueError("an empty query, key or value")


def _reduced_product(dt: np.dtype) -> Callable:
    """The reduced flash kernels' product for ``dt``: MKL's ``gemm_bf16bf16f32`` for bfloat16
    (``_mkl_bf16_any``), MKL's float16 gemm for float16 (``_mkl_f16``: its sgemm's kernels on
    the widened values, each product exact in float32, so its fma chains are chains of
    sums; measured on an Intel Xeon: plain chains over k, the ``dots`` kernel for a last
    query block of 4 rows over 96 terms and more, FPRev trees and torch's bits)."""
    return _mkl_bf16_any if dt == _BF16 else _mkl_f16


def _mkl_f16(a: np.ndarray, b: np.ndarray, c: np.ndarray | None = None) -> np.ndarray:
    """MKL's float16 gemm as the flash kernels call it (float16 operands widened exactly, a
    float32 result; measured on an Intel Xeon, session 41): ``_mkl_mm``'s kernels, but a
    product of one row (a query block of one row) or one column (a key block of one key)
    by ``_sgemm``'s panels of chains, not MKL's float32 one-row and one-column kernels."""
    if a.shape[-2] != 1 and b.shape[-1] != 1:
        return _mkl_mm(a, b, c)
    return _sgemm(a, b, c)


def _flash_blocks(lq: int, lk: int, causal: bool):
    """The kernels' (query rows, key columns, causal cut, last) blocks: queries in blocks of 32
    / 64 / 256 rows (as the query length), each over the key blocks of 512 up to its last
    row's key (causal) or all; the cut (hidden where a key is past its row) on its last key
    block; ``last`` whether the block is its query block's last."""
    split = 256 if lq >= 768 else 64 if lq >= 192 else 32
    for m in range(0, lq, split):
        rows = slice(m, min(m + split, lq))
        keys = min(rows.stop, lk) if causal else lk
        for n in range(0, keys, 512):
            cols = slice(n, min(n + 512, lk))
            last = keys - n <= 512
            cut = None
            if causal and last:
                cut = (np.arange(n, cols.stop)[None, :]
                       > np.arange(m, rows.stop)[:, None])
            yield rows, cols, cut, last


def flash_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool,
                    scale: np.float32, lanes: int = 16, mask: np.ndarray | None = None,
                    reduced: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """``cpu_flash_attention`` (ATen's FlashAttentionKernel.cpp, float32) on ``[..., L, E]``
    arrays, query block by key block (``_flash_blocks``): ``q @ kᵀ`` (``_sgemm``), the causal
    cut ``-inf``, times ``scale`` -- or, with an additive float ``mask`` (broadcast to
    ``[..., L, S]``; a boolean one arrives as 0 / -inf), ``fma(s, scale, mask)``
    (``_scale_attn_mask_fusion_kernel``, measured: a mask of random floats with a scale that
    is no power of two); the running row max ``M``;
    ``exp(s - M)`` and its sum (``_exp_reduce_sum``); the previous sum and output rescaled by
    ``expf(M_old - M)`` (the sum as one fma); ``p @ v`` added to the output (``_sgemm``,
    beta = 1 after the first key block). At the end the output times ``1 / sum`` --
    normalised after the product, by the reciprocal -- and the logsumexp ``M + logf(sum)``;
    a row with every key hidden is 0 and its logsumexp 0. (out, logsumexp).

    ``reduced``: the bfloat16 or float16 kernel (q, k, v of that type, an autocast's): the
    same steps in float32, its two products MKL's for that type (``_reduced_product``), the
    exponentials by ``fexp_u20`` (``_exp_reduce_sum_reduced``), the probabilities rounded to
    the type for ``p @ v`` (their sum from the unrounded ones), the output rounded to it at
    the end; the logsumexp float32 (float16: measured on an Intel Xeon with AVX-512 FP16,
    session 41)."""
    from tapescope.core.explain_prims import _LIBC_MATH, fma

    f32 = np.float32
    _flash_check(q, k, v, reduced, groups=True)
    dt = np.asarray(q).dtype
    if reduced:
        q, k, v = (np.asarray(t).astype(f32) for t in (q, k, v))
    if k.shape[:-2] != q.shape[:-2]:  # grouped-query attention: head h reads key head h // G
        g = q.shape[-3] // k.shape[-3]
        k, v = np.repeat(k, g, axis=-3), np.repeat(v, g, axis=-3)
    prod = _reduced_product(dt) if reduced else _mkl_mm
    lead, lq = q.shape[:-2], q.shape[-2]
    out = np.empty(lead + (lq, v.shape[-1]), dtype=f32)
    lse = np.empty(lead + (lq,), dtype=f32)
    mask_all = None if mask is None else np.broadcast_to(mask, lead + (lq, k.shape[-2]))
    state: dict[int, list] = {}
    for rows, cols, cut, last in _flash_blocks(lq, k.shape[-2], causal):
        st = state.get(rows.start)
        if st is None:  # (max, sum, output) of this query block, from -inf, 0, nothing
            st = state[rows.start] = [np.full(lead + (rows.stop - rows.start,), -np.inf, f32),
                                      np.zeros(lead + (rows.stop - rows.start,), f32), None]
        mx, sm, dst = st
        s = prod(q[..., rows, :], np.swapaxes(k[..., cols, :], -1, -2))
        if cut is not None:
            s[..., cut] = -np.inf
        if mask is None:
            s = (s * f32(scale)).astype(f32)
        else:
            s = fma(s, np.broadcast_to(f32(scale), s.shape),
                    np.ascontiguousarray(mask_all[..., rows, cols])).astype(f32)
        top = np.maximum(mx, np.max(s, axis=-1))
        dead = top == -np.inf  # (a row with no visible key yet: left as it was, its p 0)
        safe = np.where(dead, f32(0), top)
        with np.errstate(invalid="ignore", over="ignore"):
            e, tot = (_exp_reduce_sum_reduced if reduced else _exp_reduce_sum)(
                (s - safe[..., None]).astype(f32), lanes)
            ex = np.asarray(_LIBC_MATH.exp((mx - safe).astype(f32))).astype(f32)
        e[dead] = 0
        st[1] = np.where(dead, sm, fma(ex, sm, tot).astype(f32))
        st[0] = np.where(dead, mx, top)
        if dst is not None:  # (a later key block: the output so far rescaled)
            dst = np.where(dead[..., None], dst, (dst * ex[..., None]).astype(f32))
        if reduced:  # (stored to bfloat16 for the product; summed unrounded above)
            e = e.astype(dt).astype(f32)
        st[2] = prod(e, v[..., cols, :], dst)
        if last:
            mx, sm, dst = st
            mx = np.where(mx == -np.inf, f32(0), mx)
            sm = np.where(sm == 0, f32(1), sm)
            out[..., rows, :] = (dst * (f32(1) / sm)[..., None]).astype(f32)
            lse[..., rows] = (mx + np.asarray(_LIBC_MATH.log(sm)).astype(f32)).astype(f32)
    return (out.astype(dt) if reduced else out), lse


def flash_attention_backward(g: np.ndarray, q: np.ndarray, k: np.ndarray, v: np.ndarray,
                             out: np.ndarray, lse: np.ndarray, causal: bool, scale: np.float32,
                             lanes: int = 16, key_scaled: bool = False,
                             mask: np.ndarray | None = None, reduced: bool = False
                             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``cpu_flash_attention_backward`` (float32), block by block as the forward
    (``_flash_blocks``): per query block ``dsum = map2_reduce_all(g * out)``; per key block
    ``p = exp(scale * q @ kᵀ - lse)`` (SLEEF's exp; an additive ``mask`` added to the scaled
    product first: the fusion kernel's scale is 1 there, measured), hidden keys 0; ``gv += pᵀ @ g``;
    ``ga = p * (g @ vᵀ - dsum)``; ``gq += scale * ga @ k``; ``gk += scale * gaᵀ @ q`` -- each
    product ``_sgemm``, the gradients from zero. ``key_scaled``: MKL takes the scores' scale
    into k's panel (times k, rounded, before the chains) instead of multiplying the sums; it
    picks one or the other by the block's shape (measured, no rule found), so this is one
    way for every block. ``reduced``: the bfloat16 or float16 kernel
    (``_flash_backward_reduced``). (gq, gk, gv)."""
    f32 = np.float32
    if reduced:
        return _flash_backward_reduced(g, q, k, v, out, lse, causal, scale, mask, key_scaled)
    _flash_check(q, k, v, groups=True)
    sc = f32(scale)
    gq, gk, gv = (np.zeros(t.shape, dtype=f32) for t in (q, k, v))
    mask_all = None if mask is None else \
        np.broadcast_to(mask, q.shape[:-2] + (q.shape[-2], k.shape[-2]))
    # grouped-query attention (k and v with fewer heads, axis -3): query head h reads key
    # head h // G; each key head's gradients gather its G query heads' terms, head j + 1's
    # after all of head j's blocks (measured: not block by block across the heads)
    G = q.shape[-3] // k.shape[-3] if q.ndim >= 3 and k.shape[-3] != q.shape[-3] else 1
    dsum: dict[tuple[int, int], np.ndarray] = {}
    heads = [slice(None)] if G == 1 else [slice(j, None, G) for j in range(G)]
    order = [(h, b) for h in heads for b in _flash_blocks(q.shape[-2], k.shape[-2], causal)]
    for h, (rows, cols, cut, _) in order:
        ix = (Ellipsis, h, rows, slice(None)) if G > 1 else (Ellipsis, rows, slice(None))
        qb, gb = q[ix], g[ix]
        d = dsum.get((h.start or 0, rows.start))
        if d is None:
            d = dsum[(h.start or 0, rows.start)] = _map2_reduce_all(gb, out[ix], lanes)
        kt = np.swapaxes(k[..., cols, :], -1, -2)
        p = _mkl_mm(qb, (kt * sc).astype(f32)) if key_scaled else _mkl_mm(qb, kt, alpha=sc)
        if mask is not None:  # (after the scaled product: the fusion kernel's scale is 1)
            mb = mask_all[..., h, rows, cols] if G > 1 else mask_all[..., rows, cols]
            p = (p + mb).astype(f32)
        lb = lse[..., h, rows, None] if G > 1 else lse[..., rows, None]
        p = sleef_exp((p - lb).astype(f32)).astype(f32)
        if cut is not None:
            p[..., cut] = 0
        gv[..., cols, :] = _mkl_mm(np.swapaxes(p, -1, -2), gb, gv[..., cols, :])
        ga = _mkl_mm(gb, np.swapaxes(v[..., cols, :], -1, -2))
        ga = (p * (ga - d[..., None]).astype(f32)).astype(f32)
        gq[ix] = _mkl_mm(ga, k[..., cols, :], gq[ix], sc)
        gk[..., cols, :] = _mkl_mm(np.swapaxes(ga, -1, -2), qb, gk[..., cols, :], sc)
    return gq, gk, gv


def reduced_row_sum(x: np.ndarray, y: np.ndarray, lanes: int, contract: bool = False
                    ) -> np.ndarray:
    """Each row's (last axis) ``sum(x * y)`` as ATen's reduced-type ``map2_reduce_all`` forms
    it (float32 arrays; a bfloat16 / float16 vector is two float halves of ``lanes``): a row
    of ``2 x lanes`` or more in two accumulators from its first vector's products, each
    later whole or partial half added into its accumulator's first lanes, the two added,
    folded as a halving tree; a shorter row its two halves added lane-wise past ``lanes``
    (``Vec::set``) and folded, or its products added in order. ``contract``: the products
    after the first vector fused into their adds (``fma``; measured in layer_norm's
    mixed-type backward for ``ds``, not ``db``)."""
    from tapescope.core.explain_prims import _fold_lanes, fma

    f32 = np.float32
    t = (x * y).astype(f32)
    n = t.shape[-1]

    def into(acc: np.ndarray, s: slice) -> np.ndarray:
        return fma(x[..., s], y[..., s], acc) if contract else (acc + t[..., s]).astype(f32)
    if n < 2 * lanes:
        if n <= lanes:
            acc = t[..., 0].copy()
            for i in range(1, n):
                acc = (acc + t[..., i]).astype(f32)
            return acc
        a0 = t[..., :lanes].copy()
        a0[..., :n - lanes] = into(a0[..., :n - lanes], slice(lanes, n))
        return _fold_lanes(a0, lanes, True)
    acc = [t[..., :lanes].copy(), t[..., lanes:2 * lanes].copy()]
    for off in range(2 * lanes, n, lanes):
        h, w = (off // lanes) % 2, min(lanes, n - off)
        acc[h][..., :w] = into(acc[h][..., :w], slice(off, off + w))
    return _fold_lanes((acc[0] + acc[1]).astype(f32), lanes, True)


def onednn_f16(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """oneDNN's float16 matmul (``brg_matmul:avx10_1_512`` on an Intel Xeon with AVX-512 FP16:
    ATen's products into float16 outputs) over the last two axes, float16 values widened
    exactly, a float32 result: each product exact, summed in chains from zero over k split
    at the largest power of two below it, 512 at least (up to 512 terms one chain, 513-1,024
    as 512 and the rest, 1,025-2,048 as 1,024 and the rest), the two parts added. Read with
    the FPRev method and held to ``torch.mm``'s bits at 100-2,000 terms (session 41); past
    2,048 terms oneDNN takes the terms in pairs (not written out: ValueError)."""
    f32 = np.float32
    k = a.shape[-1]
    if k > 2048:
        raise ValueError("oneDNN's float16 matmul past 2,048 terms is not written out")
    split = 512
    while split * 2 < k:
        split *= 2
    tot = None
    for k0, k1 in ((0, min(k, split)), (split, k)):
        if k1 <= k0:
            continue
        acc = np.zeros(a.shape[:-1] + b.shape[-1:], f32)
        for kk in range(k0, k1):
            acc = (acc + a[..., kk:kk + 1] * b[..., kk:kk + 1, :]).astype(f32)
        tot = acc if tot is None else (tot + acc).astype(f32)
    return tot


def _flash_backward_reduced(g: np.ndarray, q: np.ndarray, k: np.ndarray, v: np.ndarray,
                            out: np.ndarray, lse: np.ndarray, causal: bool, scale: np.float32,
                            mask: np.ndarray | None = None, key_scaled: bool = False
                            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``cpu_flash_attention_backward`` for bfloat16 or float16 (an autocast's SDPA backward;
    measured on an Intel Xeon with AMX and AVX-512 FP16, session 41: bfloat16 every bit of
    the three gradients over 7 geometries, causal and not, query lengths 33-600, head sizes
    8-128; float16 over 5 of 6): the float32 kernel's steps (``flash_attention_backward``)
    with the type's products (``_reduced_product``: the scores and ``g @ vᵀ``), each scaled
    after; ``dsum`` by the reduced ``map2_reduce_all`` (``reduced_row_sum``); the
    probabilities (float32) rounded to the type for ``pᵀ @ g``, ``ga = p * (g @ vᵀ - dsum)``
    rounded to the type for its two products; and each gradient kept in the type: every
    block's product from zero added to it and rounded back (ATen's gemm into a reduced
    output with beta = 1). Float16's products into its gradients are oneDNN's float16 matmul
    (``onednn_f16``), and MKL takes the scores' scale into k before the product for some
    block shapes (``key_scaled``, as the float32 kernel's: one way for every block).
    (gq, gk, gv) in the type."""
    f32 = np.float32
    _flash_check(q, k, v, True)
    dt = np.asarray(q).dtype
    if np.asarray(g).dtype != dt or np.asarray(out).dtype != dt:
        raise ValueError("the reduced kernel takes gradients and outputs of its type")
    if key_scaled and dt == _BF16:
        raise ValueError("bfloat16's scores are scaled after (measured)")
    g, q, k, v, out = (np.asarray(t).astype(f32) for t in (g, q, k, v, out))
    prod = _reduced_product(dt)
    into = prod if dt == _BF16 else onednn_f16  # (the products into the gradients)

    def bf(x: np.ndarray) -> np.ndarray:
        return np.asarray(x, f32).astype(dt).astype(f32)

    sc = f32(scale)
    gq, gk, gv = (np.zeros(t.shape, dtype=f32) for t in (q, k, v))
    mask_all = None if mask is None else \
        np.broadcast_to(np.asarray(mask, f32), q.shape[:-2] + (q.shape[-2], k.shape[-2]))
    dsum: dict[int, np.ndarray] = {}
    with np.errstate(over="ignore", invalid="ignore"):
        for rows, cols, cut, _ in _flash_blocks(q.shape[-2], k.shape[-2], causal):
            qb, gb = q[..., rows, :], g[..., rows, :]
            d = dsum.get(rows.start)
            if d is None:
                d = dsum[rows.start] = reduced_row_sum(gb, out[..., rows, :], 16)
            kt = np.swapaxes(k[..., cols, :], -1, -2)
            p = prod(qb, (kt * sc).astype(f32)) if key_scaled else \
                (prod(qb, kt) * sc).astype(f32)
            if mask is not None:
                p = (p + mask_all[..., rows, cols]).astype(f32)
            p = sleef_exp((p - lse[..., rows, None]).astype(f32)).astype(f32)
            if cut is not None:
                p[..., cut] = 0
            gv[..., cols, :] = bf(gv[..., cols, :]
                                  + into(np.swapaxes(bf(p), -1, -2), gb))
            ga = prod(gb, np.swapaxes(v[..., cols, :], -1, -2))
            ga = bf((p * (ga - d[..., None]).astype(f32)).astype(f32))
            gq[..., rows, :] = bf(gq[..., rows, :]
                                  + (into(ga, k[..., cols, :]) * sc).astype(f32))
            gk[..., cols, :] = bf(gk[..., cols, :] + (into(np.swapaxes(ga, -1, -2), qb)
                                                      * sc).astype(f32))
    return gq.astype(dt), gk.astype(dt), gv.astype(dt)
