"""oneDNN's float32 eltwise kernels written out in numpy: what PyTorch's CPU ``gelu`` and
``gelu_backward`` compute (ATen hands a contiguous float32 GELU with ``approximate="none"``
to oneDNN's ``eltwise_gelu_erf``), and the LSTM layer it runs on the CPU (``mkldnn_rnn_layer``:
oneDNN's ``ref_rnn`` with its jit LSTM postgemm, whose ``logistic`` and ``tanh`` are the
injector's), for ``--explain`` to name (core/capture/explain.py).

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
- ``logistic``: ``e = exp(-|x|)``, ``y = e / (e + 1)``, ``1 - y`` where x's sign bit is clear.
- ``tanh``: on |x|, the degree-6 polynomial of its interval (32 intervals: the index from the
  bits of |x| less a bias, masked, shifted right by 22) at |x| less its interval's start (the
  bits masked), by fma from degree 6; |x| itself below the linear bound, 1 from the
  saturation bound; x's sign put back.
- The LSTM layer forward, per step t: ``scratch = (x_t · W_ihᵀ) + (h · W_hhᵀ)`` (each product
  one fma chain over k from zero, its jit sgemm; the second added to the first, ``beta = 1``);
  ``G = scratch + (b_ih + b_hh)`` (PyTorch hands oneDNN the biases summed); ``i, f, o =
  logistic``, ``g = tanh`` of their quarters; ``c = fma(i, g, f * c)``; ``h = tanh(c) * o``.
  Held to torch's outputs and to the gates oneDNN's workspace keeps (tests/capture/
  test_lstm_ref.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tapescope.core.explain_prims import fma

__all__ = ["gelu_backward", "gelu_forward", "lstm_layer_backward", "lstm_layer_forward",
           "onednn_logistic", "onednn_tanh"]

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
# tanh: the table's index bias and mask, x where tanh(x) = x ends, and where it is 1
_TANH_IDX_BIAS, _TANH_IDX_MASK = 0x39800000, 0xffc00000
_TANH_LINEAR, _TANH_SATURATION = _f(0x39ddb3d7), _f(0x41102cb3)
# tanh's 32 degree-6 polynomials, one per interval, coefficients by degree (0 .. 6)
_TANH_TABLE = np.array([int(h, 16) for h in """
00000000 39bfffff 39ffffff 3a3ffffe 3a7ffffb 3abffff7 3affffeb 3b3fffdc 3b7fffab 3bbfff70
3bfffeab 3c3ffdc0 3c7ffaab 3cbff701 3cffeaad 3d3fdc08 3d7faacd 3dbf7081 3dfeacc9 3e3dc7fd
3e7acbf5 3eb77a9f 3eec9a9f 3f22991f 3f42f7d6 3f67b7cc 3f76ca83 3f7ebbe9 3f7fd40c 3f7fff32
3f7ffffc 3f800000
3f800000 3f800018 3f7fffe8 3f7fffda 3f7fffdc 3f7fffdc 3f7fffac 3f7fff70 3f7ffeec 3f7ffdc0
3f7ffbed 3f7ff704 3f7feff5 3f7fdbca 3f7fbfff 3f7f7041 3f7f009b 3f7dc36c 3f7c0aa8 3f7734b8
3f70a4de 3f5f1fd8 3f495493 3f18b9ec 3ed706cb 3e390b06 3d90b11f 3c21a053 3aaf7fdb 37ccc1a3
355c6733 00000000
00000000 be4e0ff1 3d25b1b1 3d6b6dab 3c9fb1d5 babff06f 3c07b3f6 bb3fc1bc 3a9f5921 bbbf06f2
bbb0f402 bc47db9e bc73d5e7 bca25bda bcfca780 bd40e07c bd7dab03 bdbe4a0f bdfb14a5 be36cc8d
be6bd102 be9fe7c5 beba0f10 bec206a8 bea3c388 be277d62 bd8b7960 bc209f49 baad44ca b7c6eeac
b663aa41 00000000
00000000 45b3ae96 c414eb20 c450e02e c3152b4e bead2f56 c2162e02 beb4bd5a c11a59a4 bed2f507
c020d32c 3dd0f506 bf2a75e2 bff950e3 bed47334 be809b8c beb64532 be961a5b be9b63ac bea0d4b2
be828a77 be378612 bdc20908 3d2d3957 3dd46e89 3db3f629 3d2c5e7b 3bd20403 3a59dfae 3770af45
372cc014 00000000
00000000 cc981a1b 4a7edd3d 4ab1007c 48fedd9c 41a557b5 477ee32a 422557f5 45ff3ce4 42a55641
446e0867 c33dc19a 42915214 43af4fad 4110fe88 c1099b75 3fc8a8dc bfbeaef5 be365aad 3f4d9652
3ddfa08f 3e34e9b8 3e2d07a6 3dc63567 3cdaeb78 bcd17537 bc92829c bb43ab99 b9b471dd b6baad5a
b78bafc7 00000000
00000000 52f688d5 d0505c72 d08f98e3 ce505cc9 c7162b8a cc5061d6 c7162bdf ca50b37f c7162a3a
c8422086 471a714e c5ece1f1 c70e3d90 c3eba94a 43e0c424 c21f4552 42217cc8 405e7dc4 c10dd401
3e96b602 bd1a6d2f bd393883 bd674682 bd310016 b961e269 3ba32495 3a7680d5 38b3173c 35a9deea
375c3f2a 00000000
00000000 d8995ed1 558285ea 55b2cd69 53028625 4bc9991f 5082898a 4b4999b3 4e02c07c 4ac99764
4b72c822 ca40c0e1 489413e4 49b12224 46134c4e c60c2d57 43c83910 c3c872d1 c186bc9e 42325bc3
bf2ffa4a 3d9a203c bc545a43 bae08fee 3c80225d 3b1fd1df ba36b9d1 b91de544 b71f100f b408e2ed
b685fec8 00000000""".split()], np.uint32).view(np.float32).reshape(7, 32)


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


def onednn_logistic(x: Any) -> np.ndarray:
    """The injector's ``logistic`` (module doc)."""
    x = _f32(x)
    with np.errstate(all="ignore"):
        e = _exp((x.view(np.uint32) | np.uint32(0x80000000)).view(np.float32))
        y = (e / (e + _F(1))).astype(np.float32)
        return np.where(np.signbit(x), y, (_F(1) - y).astype(np.float32))


def onednn_tanh(x: Any) -> np.ndarray:
    """The injector's ``tanh`` (module doc)."""
    x = _f32(x)
    with np.errstate(all="ignore"):
        ax = np.abs(x)
        bits = ax.view(np.uint32)
        idx = (((bits.astype(np.int64) - _TANH_IDX_BIAS) & _TANH_IDX_MASK) >> 22) & 31
        r = (ax - (bits & np.uint32(_TANH_IDX_MASK)).view(np.float32)).astype(np.float32)
        pol = _TANH_TABLE[6][idx]
        for deg in range(5, -1, -1):
            pol = fma(pol, r, _TANH_TABLE[deg][idx])
        y = np.where(_TANH_SATURATION > ax, pol, _F(1)).astype(np.float32)
        y = np.where(_TANH_LINEAR > ax, ax, y).astype(np.float32)
        return (y.view(np.uint32) ^ (x.view(np.uint32) & np.uint32(0x80000000))).view(np.float32)


_K_BLOCK = 384  # oneDNN's jit sgemm: k past this runs in even blocks, their sums added


def _k_blocks(k: int) -> list[tuple[int, int]]:
    """The k ranges oneDNN's sgemm sums apart: ceil(k / 384) blocks as even as can be."""
    n = max(1, -(-k // _K_BLOCK))
    bounds = [round(k * j / n) for j in range(n + 1)]
    return list(zip(bounds, bounds[1:], strict=False))


def _chain_product(a: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``a · wᵀ`` (a [rows, k], w [cols, k]) as oneDNN's jit sgemm sums it: each output one fma
    chain over k from zero, per block of ``_k_blocks``, the blocks' sums added in order."""
    from tapescope.core.explain_aten import _fma_chain

    out = None
    for lo, hi in _k_blocks(a.shape[1]):
        part = _fma_chain(a[:, lo:hi], np.ascontiguousarray(w[:, lo:hi].T))
        out = part if out is None else (out + part).astype(np.float32)
    return out


def _outer_chain(rows: list, dg: dict, src: dict, shape: tuple) -> np.ndarray:
    """``Σ dG[s][b] ⊗ src[s][b]`` over ``rows`` [(step, batch row)] as oneDNN's merged weight
    gemm sums it: an fma chain over the rows in order from zero, per block of ``_k_blocks``,
    the blocks' sums added in order."""
    out = None
    for lo, hi in _k_blocks(len(rows)):
        acc = np.zeros(shape, np.float32)
        for s, b in rows[lo:hi]:
            acc = fma(dg[s][b][:, None], src[s][b][None, :], acc).astype(np.float32)
        out = acc if out is None else (out + acc).astype(np.float32)
    return out if out is not None else np.zeros(shape, np.float32)


def lstm_layer_forward(x: Any, w_ih: Any, w_hh: Any, bias: tuple | None, h: Any, c: Any,
                       steps: Any, hidden: int) -> tuple:
    """oneDNN's LSTM layer on float32 (module doc): ``(every step's h, the last h, the last
    c)`` of a time-major ``x`` [T, batch, input], the steps in ``steps``' order; ``bias``
    ``(b_ih, b_hh)`` or None."""
    x, w_ih, w_hh, h, c = (_f32(v) for v in (x, w_ih, w_hh, h, c))
    b = np.zeros(4 * hidden, np.float32) if bias is None else \
        (_f32(bias[0]) + _f32(bias[1])).astype(np.float32)
    ys, h, c, _ = _lstm_steps(x, w_ih, w_hh, b, h, c, steps, hidden)
    return ys, h, c


def _lstm_steps(x, w_ih, w_hh, b, h, c, steps, hidden) -> tuple:
    """The forward's steps (``lstm_layer_forward``), each step's (i, f, g, o, c_prev, c,
    h_prev) kept by step."""
    ys = np.empty((x.shape[0], x.shape[1], hidden), np.float32)
    kept = {}
    with np.errstate(all="ignore"):
        for s in steps:
            g = ((_chain_product(x[s], w_ih) + _chain_product(h, w_hh)).astype(np.float32)
                 + b).astype(np.float32)
            i, f, gg, o = (g[:, k * hidden:(k + 1) * hidden] for k in range(4))
            i, f, o, gg = (onednn_logistic(i), onednn_logistic(f), onednn_logistic(o),
                           onednn_tanh(gg))
            c_prev, h_prev = c, h
            c = fma(i, gg, (f * c).astype(np.float32)).astype(np.float32)
            h = (onednn_tanh(c) * o).astype(np.float32)
            ys[s] = h
            kept[s] = (i, f, gg, o, c_prev, c, h_prev)
    return ys, h, c, kept


def lstm_layer_backward(x: Any, w_ih: Any, w_hh: Any, bias: tuple | None, h: Any, c: Any,
                        gy: Any, ghy: Any, gcy: Any, steps: Any, hidden: int,
                        reverse: bool) -> tuple:
    """oneDNN's LSTM layer backward on float32 (``ref_rnn``'s backward cells and its jit LSTM
    backward postgemm): ``(dx, dW_ih, dW_hh, db, db, dhx, dcx)`` (one bias gradient, given
    for both). The forward's steps re-run (``lstm_layer_forward``), then per step, last
    first: ``dH = dy_t + dh``; ``dC = dc + ((fnma(tc, tc, 1) · dH) · o)`` (tc = tanh(c_t));
    ``dG_o = (fnma(o, o, o) · dH) · tc``; ``dG_i = (fnma(i, i, i) · dC) · g``; ``dG_f =
    (fnma(f, f, f) · dC) · c_prev``; ``dG_g = fnma(g, g, 1) · (i · dC)``; ``dc = dC · f``;
    ``dh = dG · W_hh`` (its sgemm: ``_chain_product``); the bias gradient each batch row's dG
    added in turn. After the steps, merged: ``dx_t = dG_t · W_ih``; ``dW_ih`` one chain over
    (step in the forward's order, batch row) of ``dG ⊗ x`` (``_outer_chain``); ``dW_hh`` of
    ``dG ⊗ h_prev`` the same, but for a forward layer the first step's (h0's) chain is summed
    apart and added last (fnma(a, b, c) = c - a·b, one rounding)."""
    x, w_ih, w_hh, h, c = (_f32(v) for v in (x, w_ih, w_hh, h, c))
    b = np.zeros(4 * hidden, np.float32) if bias is None else \
        (_f32(bias[0]) + _f32(bias[1])).astype(np.float32)
    steps = list(steps)
    _, _, _, kept = _lstm_steps(x, w_ih, w_hh, b, h, c, steps, hidden)
    one = np.float32(1)
    dh = np.zeros_like(h) if ghy is None else _f32(ghy).copy()
    dc = np.zeros_like(c) if gcy is None else _f32(gcy).copy()
    gy = None if gy is None else _f32(gy)
    db = np.zeros(4 * hidden, np.float32)
    dg: dict = {}

    def fnma(a: np.ndarray, bb: np.ndarray, cc: Any) -> np.ndarray:
        return fma(-a, bb, np.broadcast_to(np.float32(cc), a.shape)).astype(np.float32)

    with np.errstate(all="ignore"):
        for s in reversed(steps):
            i, f, g, o, c_prev, c_t, _ = kept[s]
            tc = onednn_tanh(c_t)
            d_h = dh if gy is None else (gy[s] + dh).astype(np.float32)
            d_c = (dc + ((fnma(tc, tc, one) * d_h).astype(np.float32) * o)
                   .astype(np.float32)).astype(np.float32)
            go = ((fnma(o, o, o) * d_h).astype(np.float32) * tc).astype(np.float32)
            gi = ((fnma(i, i, i) * d_c).astype(np.float32) * g).astype(np.float32)
            gf = ((fnma(f, f, f) * d_c).astype(np.float32) * c_prev).astype(np.float32)
            gg = (fnma(g, g, one) * (i * d_c).astype(np.float32)).astype(np.float32)
            dc = (d_c * f).astype(np.float32)
            dg[s] = np.concatenate([gi, gf, gg, go], axis=1)
            dh = _chain_product(dg[s], np.ascontiguousarray(w_hh.T))
            for row in dg[s]:
                db = (db + row).astype(np.float32)
        dx = np.zeros(x.shape, np.float32)
        w_ih_t = np.ascontiguousarray(w_ih.T)
        for s in steps:
            dx[s] = _chain_product(dg[s], w_ih_t)
        rows = [(s, r) for s in steps for r in range(x.shape[1])]
        xs = {s: x[s] for s in steps}
        hs = {s: kept[s][6] for s in steps}
        dw_ih = _outer_chain(rows, dg, xs, w_ih.shape)
        if reverse:
            dw_hh = _outer_chain(rows, dg, hs, w_hh.shape)
        else:
            first = [r for r in rows if r[0] == steps[0]]
            rest = [r for r in rows if r[0] != steps[0]]
            dw_hh = (_outer_chain(rest, dg, hs, w_hh.shape)
                     + _outer_chain(first, dg, hs, w_hh.shape)).astype(np.float32)
    return dx, dw_ih, dw_hh, db, db.copy(), dh, dc
