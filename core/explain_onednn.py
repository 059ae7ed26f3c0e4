"""oneDNN's float32 eltwise kernels written out in numpy: what PyTorch's CPU ``gelu`` and
``gelu_backward`` compute (ATen hands a contiguous float32 GELU with ``approximate="none"``
to oneDNN's ``eltwise_gelu_erf``), for ``--explain`` to name (core/capture/explain.py).

The algorithms and constants are those of oneDNN's x64 eltwise injector for AVX-512
(``jit_uni_eltwise_injector``, Apache-2.0), read to learn and written here fresh; every step
is one IEEE float32 rounding as the JIT code's instructions make it (``fma`` where it emits
``vfmadd``):

- ``gelu_erf`` forward, ``gelu_erf_minimax_approx``: the index of ``|x|`` among 25 intervals
  (its bits plus a bias, shifted right by 21, clamped to [1, 24], 23 past ``rbound``), a
  degree-5 polynomial in ``|x|`` of that interval by Horner's rule with fma (erf(x / sqrt 2)),
  its sign set from x, then ``(1 + p) * x * 0.5``.
- ``gelu_erf`` backward: ``R = x / sqrt 2``, ``Q = exp(-R^2)`` (oneDNN's own exp: a range
  reduction by ``floor(x * log2(e) + 0.5)``, a degree-5 polynomial with fma, ``2 * 2^(n-1)``),
  erf(R) by Abramowitz and Stegun 7.1.26 (``W = 1 / fma(p, |R|, 1)``, a degree-5 polynomial
  in W), ``fma(erf, 0.5, R / sqrt(pi) * Q + 0.5)``; the gradient is that times dy.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tapescope.core.explain_prims import fma

__all__ = ["gelu_backward", "gelu_forward"]

_F = np.float32


def _f(bits: int) -> np.float32:
    return np.array([bits], dtype=np.uint32).view(np.float32)[0]


def _table(rows: str) -> np.ndarray:
    vals = [int(h, 16) for h in rows.split()]
    return np.array(vals + [0] * (32 - len(vals)), dtype=np.uint32).view(np.float32)


# gelu_erf_minimax_pol: coefficients of degree 0..5, one per interval (25 used of 32)
_GELU_POL = [_table(r) for r in (
    "a6f2cb94 32827792 3381cc0c 34523d4a 351ac44d 35f36d88 36ee8229 37b8a3bb 3867a213 "
    "3940033b 3a2a5a1d 3ae35863 3b7828f2 3c08b14b 3c515ed3 bb503236 bd8d8e5e be8abcd9 "
    "bf0c19a2 beccb328 3e176ced 3f470d99 3f7abb28 3f800000 00000000",
    "3f4c422a 3f4c421f 3f4c4207 3f4c41cb 3f4c413b 3f4c3fad 3f4c3a2f 3f4c2d40 3f4c146a "
    "3f4bc341 3f4ad08c 3f48f8cf 3f45fac7 3f404e07 3f3b980f 3f48dff3 3f78b21b 3fbb0704 "
    "40019c32 3fe536d6 3f81331e 3e6c8684 3c98f936 00000000 3f800000",
    "b62173f4 3735e4cf 37f2ff89 388c23be 3917535c 39ab2ab0 3a60fadb 3af9b960 3b6e5491 "
    "3c0a4ec5 3ca5aa8c 3d2138d9 3d8737d4 3ddfb660 3e0f27ab 3d94004b be0efdeb bf1d96c3 "
    "bf89db58 bf6d9897 bef69fb8 bdc4f8a8 bbde6422 00000000 00000000",
    "be081a19 be084570 be08639b be089837 be08f409 be09ab95 be0b66d0 be0e400a be124df8 "
    "be1bde02 be2f19c9 be4931bf be685fbc be89c95f be96cbca be8044aa be0550f2 3dcfd6a1 "
    "3e94c826 3e79345f 3decec91 3ca46568 3aa1e00a 00000000 00000000",
    "ba3d61db 39f097a3 3a5845dc 3ab1fa35 3b0cefb8 3b653ab6 3bcae527 3c221712 3c6c5840 "
    "3cc0a703 3d1dcc19 3d63656d 3d955907 3dbf9910 3dd53f69 3db7dcef 3d639ebe ba6ede48 "
    "bd22be69 bd041cf1 bc64f5ab bb097a32 b8ebf380 00000000 00000000",
    "3cb7d80c 3c9b6050 3c978d11 3c92e850 3c8d058b 3c848454 3c6cd623 3c4c824b 3c2a7935 "
    "3be0b390 3b0651ac bb232f53 bbd42fa0 bc2c5366 bc492c9e bc2a7aa6 bbd55d04 ba823a76 "
    "3b102aa8 3ae25a7e 3a31f792 38b84375 3689bb5a 00000000 00000000")]
_IDX_BIAS, _RBOUND = 0xC21FFFFF, _f(0x40B15CEE)

# exp: log2(e), ln(FLT_MAX), ln(FLT_MIN), ln 2, p1..p5
_LOG2E, _LN_MAX, _LN_MIN, _LN2 = _f(0x3FB8AA3B), _f(0x42B17218), _f(0xC2AEAC50), _f(0x3F317218)
_EXP_POL = [_f(b) for b in (0x3F7FFFFB, 0x3EFFFEE3, 0x3E2AAD40, 0x3D2B9D0D, 0x3C07CFCE)]
# Abramowitz and Stegun 7.1.26: p, a1..a5; 1/sqrt(2), 1/sqrt(pi)
_AS_P = _f(0x3EA7BA05)
_AS_POL = [_f(b) for b in (0x3E827906, 0xBE91A98E, 0x3FB5F0E3, 0xBFBA00E3, 0x3F87DC22)]
_INV_SQRT2, _INV_SQRT_PI = _f(0x3F3504F3), _f(0x3F106EBA)


def _f32(x: Any) -> np.ndarray:
    x = np.asarray(x)
    if x.dtype != np.float32:
        raise ValueError(f"oneDNN's eltwise kernels are written for float32, not {x.dtype}")
    return x


def gelu_forward(x: Any) -> np.ndarray:
    """oneDNN's ``gelu_erf`` forward (AVX-512: the piecewise minimax polynomial)."""
    x = _f32(x)
    with np.errstate(all="ignore"):
        bits = x.view(np.uint32)
        pos = (bits & np.uint32(0x7FFFFFFF)).view(np.float32)
        idx = ((pos.view(np.uint32).astype(np.int64) + _IDX_BIAS) & 0xFFFFFFFF)
        idx = idx.astype(np.uint32).view(np.int32) >> 21  # arithmetic: denormals map low
        idx = np.minimum(np.maximum(idx, 1), 24)
        idx = np.where(_RBOUND < pos, 23, idx)
        pol = _GELU_POL[5][idx]
        for deg in (4, 3, 2, 1, 0):
            pol = fma(pol, pos, _GELU_POL[deg][idx])
        pol = (pol.view(np.uint32) ^ (bits & np.uint32(0x80000000))).view(np.float32)
        return ((x * (pol + _F(1))) * _F(0.5)).astype(np.float32)


def _exp(x: np.ndarray) -> np.ndarray:
    """oneDNN's float32 exp (``exp_compute_vector_fwd``)."""
    under = x < _LN_MIN
    x = np.maximum(np.minimum(x, _LN_MAX), _LN_MIN)
    fx = np.floor(x * _LOG2E + _F(0.5)).astype(np.float32)
    r = fma(-fx, np.broadcast_to(_LN2, fx.shape), x)
    n = np.rint(fx - _F(1)).astype(np.int32) + 127  # cvtps2dq: to nearest
    two_n1 = (n.astype(np.uint32) << np.uint32(23)).view(np.float32)
    two_n1 = np.where(under, _F(0), two_n1)
    p = np.full_like(r, _EXP_POL[4])
    for c in (_EXP_POL[3], _EXP_POL[2], _EXP_POL[1], _EXP_POL[0]):
        p = fma(p, r, c)
    p = fma(p, r, _F(1))
    return (p * two_n1) * _F(2)


def gelu_backward(dy: Any, x: Any) -> np.ndarray:
    """oneDNN's ``gelu_erf`` backward: its derivative at x (Abramowitz and Stegun's erf, its own
    exp), times dy."""
    x, dy = _f32(x), _f32(dy)
    with np.errstate(all="ignore"):
        r = x * _INV_SQRT2
        q = _exp(-(r * r))
        t = (r * _INV_SQRT_PI) * q
        w = _F(1) / fma(np.broadcast_to(_AS_P, r.shape), np.abs(r), _F(1))
        pol = np.full_like(w, _AS_POL[4])
        for c in (_AS_POL[3], _AS_POL[2], _AS_POL[1], _AS_POL[0]):
            pol = fma(pol, w, c)
        erf = fma(-q * w, pol, _F(1))
        erf = np.where(np.signbit(r), -erf, erf)
        d = fma(erf, np.broadcast_to(_F(0.5), erf.shape), t + _F(0.5))
        return (d * dy).astype(np.float32)
