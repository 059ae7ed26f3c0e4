"""exp, expm1, log, log1p on float64 arrays: fdlibm's algorithms as whole-array numpy.

Each kernel takes a 1-D float64 array and returns a new one. fdlibm's branches become masks:
every branch is computed on a sanitized copy of the input (so no integer cast ever sees NaN or
inf) and the right one is picked per element with ``np.where``. Each numpy operation is one IEEE
operation in the order the C twin (gpu/kernels/refmath.cuh) spells it, and products are never
fused, so both produce the same bits. Callers wrap these in ``np.errstate(all="ignore")``.
"""

from __future__ import annotations

import numpy as np

from core.refmath._bits import INF, NAN, add_exponent, from_hi_word, hi_word, with_hi_word

# fdlibm constants (decimal as in fdlibm; hex words in the comments are the intended bits).
LN2_HI = 6.93147180369123816490e-01  # 0x3fe62e42 fee00000: k*LN2_HI exact for |k| < 2**20
LN2_LO = 1.90821492927058770002e-10  # 0x3dea39ef 35793c76
INVLN2 = 1.44269504088896338700e00  # 0x3ff71547 652b82fe
TWO54 = 1.80143985094819840000e16  # 0x43500000 00000000
TWOM1000 = 9.33263618503218878990e-302  # 2**-1000
O_THRESHOLD = 7.09782712893383973096e02  # 0x40862E42 FEFA39EF: exp overflows above
U_THRESHOLD = -7.45133219101941108420e02  # 0xc0874910 D52D3051: exp underflows to 0 below

# exp: c(r) = r - r^2*P(r^2) approximates the Remez form of exp on [-ln2/2, ln2/2].
P1 = 1.66666666666666019037e-01
P2 = -2.77777777770155933842e-03
P3 = 6.61375632143793436117e-05
P4 = -1.65339022054652515390e-06
P5 = 4.13813679705723846039e-08

# expm1: scaled coefficients of the rational approximation.
Q1 = -3.33333333333331316428e-02
Q2 = 1.58730158725481460165e-03
Q3 = -7.93650757867487942473e-05
Q4 = 4.00821782732936239552e-06
Q5 = -2.01099218183624371326e-07

# log / log1p: R(z) for log(1+f) = 2s + s*R(s^2), s = f/(2+f).
LG1 = 6.666666666666735130e-01
LG2 = 3.999999999940941908e-01
LG3 = 2.857142874366239149e-01
LG4 = 2.222219843214978396e-01
LG5 = 1.818357216161805012e-01
LG6 = 1.531383769920937332e-01
LG7 = 1.479819860511658591e-01


def _exp_reduce(xr: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                                           np.ndarray]:
    """fdlibm's exp reduction for finite xr: (ix, k, hi, lo, q) with x = k*ln2 + (hi - lo) and
    exp(hi - lo) = 1 - ((lo - q) - hi). In-place numpy, one IEEE operation per step."""
    ix = xr.view(np.int64) >> 32
    ix &= 0x7FFFFFFF
    # k = trunc(x/ln2 +- 1/2). fdlibm forces k = +-1 for 0.5ln2 < |x| < 1.5ln2; this formula
    # already gives +-1 on that whole band (its edges are 1e-9 inside), so only the k = 0 band
    # (|x| <= 0.5ln2 by high word, where the formula could give +-1) needs forcing.
    kf = INVLN2 * xr
    kf += np.copysign(0.5, xr)
    k = kf.astype(np.int64)
    np.putmask(k, ix <= 0x3FD62E42, 0)
    t = k.astype(np.float64)
    hi = t * LN2_HI
    np.subtract(xr, hi, out=hi)  # exact: LN2_HI has 32 trailing zero bits
    lo = np.multiply(t, LN2_LO, out=t)
    r = hi - lo
    rr = r * r
    # c = r - rr*(P1 + rr*(P2 + rr*(P3 + rr*(P4 + rr*P5)))), innermost first
    p = rr * P5
    for coef in (P4, P3, P2, P1):
        p += coef
        p *= rr
    c = np.subtract(r, p, out=p)
    q = r * c
    q /= np.subtract(2.0, c, out=c)  # q = (r*c)/(2-c)
    # NOTE: for k == 0 fdlibm writes 1-((r*c)/(c-2)-r); with hi = r, lo = +0 the general form
    # 1-((lo-q)-hi) rounds identically (c-2 == -(2-c) exactly), so one formula serves both.
    return ix, k, hi, lo, q


def exp64(x: np.ndarray) -> np.ndarray:
    """exp(x), fdlibm e_exp.c: x = k*ln2 + r, exp(r) by a rational form, then scale by 2**k."""
    ok = (x >= U_THRESHOLD) & (x <= O_THRESHOLD)  # False for NaN
    allok = bool(ok.all())
    xr = x if allok else np.where(ok, x, 0.0)
    ix, k, hi, lo, q = _exp_reduce(xr)
    y = np.subtract(lo, q, out=lo)
    y -= hi
    np.subtract(1.0, y, out=y)
    deep = k < -1021  # result subnormal: scale by 2**(k+1000), then one rounding by 2**-1000
    anydeep = bool(deep.any())
    if anydeep:
        k[deep] += 1000
    k <<= 52
    yi = y.view(np.int64)
    yi += k  # add k to the exponent field
    if anydeep:
        y[deep] *= TWOM1000
    tiny = ix < 0x3E300000  # |x| < 2**-28: exp(x) rounds as 1 + x
    if tiny.any():
        y[tiny] = 1.0 + xr[tiny]
    if not allok:
        bad = ~ok
        xb = x[bad]
        y[bad] = np.where(np.isnan(xb), NAN, np.where(xb > 0.0, INF, 0.0))
    return y


def _log64_all_branches(x: np.ndarray) -> np.ndarray:
    """log64 for any input, every fdlibm branch spelled out (used on the rare elements)."""
    nan = ~(x >= 0.0)  # NaN or negative
    zero = x == 0.0
    pinf = x == INF
    xs = np.where(nan | zero | pinf, 1.0, x)
    sub = xs < 2.2250738585072014e-308  # subnormal: scale up by 2**54 (exact)
    xs = np.where(sub, xs * TWO54, xs)
    hx = hi_word(xs)
    k = np.where(sub, -54, 0) + (hx >> 20) - 1023
    hx = hx & 0x000FFFFF
    i = (hx + 0x95F64) & 0x100000  # 1 when the mantissa is above sqrt(2): use x/2 instead
    xn = with_hi_word(xs, hx | (i ^ 0x3FF00000))
    k = k + (i >> 20)
    f = xn - 1.0
    dk = k.astype(np.float64)
    k0 = k == 0
    # |f| < 2**-20: a short series
    tiny = (0x000FFFFF & (2 + hx)) < 3
    rt = f * f * (0.5 - 0.33333333333333333 * f)
    yt = np.where(k0, f - rt, dk * LN2_HI - ((rt - dk * LN2_LO) - f))
    yt = np.where(f == 0.0, np.where(k0, 0.0, dk * LN2_HI + dk * LN2_LO), yt)
    # general case
    s = f / (2.0 + f)
    z = s * s
    w = z * z
    t1 = w * (LG2 + w * (LG4 + w * LG6))
    t2 = z * (LG1 + w * (LG3 + w * (LG5 + w * LG7)))
    big = ((hx - 0x6147A) | (0x6B851 - hx)) > 0  # f far from 0: subtract hfsq separately
    R = t2 + t1
    hfsq = 0.5 * f * f
    sr = s * (hfsq + R)
    ya = np.where(k0, f - (hfsq - sr), dk * LN2_HI - ((hfsq - (sr + dk * LN2_LO)) - f))
    sf = s * (f - R)
    yb = np.where(k0, f - sf, dk * LN2_HI - ((sf - dk * LN2_LO) - f))
    y = np.where(tiny, yt, np.where(big, ya, yb))
    y = np.where(pinf, INF, y)
    y = np.where(zero, -INF, y)
    return np.where(nan, NAN, y)


def log64(x: np.ndarray) -> np.ndarray:
    """log(x), fdlibm e_log.c: x = 2**k * (1+f), sqrt(2)/2 < 1+f < sqrt(2), log(1+f) by R(s^2).

    Fast path for positive normal x with |f| >= 2**-20; the rest goes to the all-branch form.
    """
    hx = x.view(np.int64) >> 32
    common = (hx >= 0x00100000) & (hx < 0x7FF00000)  # positive, normal, finite (not NaN)
    common &= (0x000FFFFF & (2 + (hx & 0x000FFFFF))) >= 3  # |f| >= 2**-20
    allc = bool(common.all())
    xs = x if allc else np.where(common, x, 1.5)
    bits = xs.view(np.int64)
    hx = bits >> 32
    k = hx >> 20
    k -= 1023
    hx &= 0x000FFFFF
    i = hx + 0x95F64
    i &= 0x100000  # set when the mantissa is above sqrt(2): use x/2 instead
    top = i ^ 0x3FF00000
    top |= hx
    top <<= 32
    xb = bits & 0xFFFFFFFF
    xb |= top
    f = xb.view(np.float64)  # the normalized mantissa, then f = it - 1
    f -= 1.0
    i >>= 20
    k += i
    dk = k.astype(np.float64)
    s = f + 2.0
    np.divide(f, s, out=s)  # s = f/(2+f)
    z = s * s
    w = z * z
    t1 = w * LG6
    t1 += LG4
    t1 *= w
    t1 += LG2
    t1 *= w  # w*(LG2 + w*(LG4 + w*LG6))
    t2 = w * LG7
    for coef in (LG5, LG3):
        t2 += coef
        t2 *= w
    t2 += LG1
    t2 *= z  # z*(LG1 + w*(LG3 + w*(LG5 + w*LG7)))
    R = np.add(t2, t1, out=t2)
    hfsq = 0.5 * f
    hfsq *= f
    lo = dk * LN2_LO
    # NOTE: for k == 0 fdlibm writes f - (...); with dk = +0 the forms below round to the same
    # bits (0 - v == -v, and the result is never 0 on this path).
    ya = hfsq + R
    ya *= s
    ya += lo
    np.subtract(hfsq, ya, out=ya)  # hfsq - (s*(hfsq+R) + dk*ln2_lo)
    yb = f - R
    yb *= s
    yb -= lo  # s*(f-R) - dk*ln2_lo
    big = hx - 0x6147A
    big |= 0x6B851 - hx  # > 0: f far from 0, hfsq subtracted apart
    y = np.where(big > 0, ya, yb)
    y -= f
    np.multiply(dk, LN2_HI, out=dk)
    y = np.subtract(dk, y, out=y)
    if not allc:
        rare = ~common
        y[rare] = _log64_all_branches(x[rare])
    return y


def expm1_64(x: np.ndarray) -> np.ndarray:
    """exp(x) - 1, fdlibm s_expm1.c: the exp reduction plus a correction term c, no cancellation."""
    bits = x.view(np.int64)
    ix = (bits >> 32) & 0x7FFFFFFF
    neg = bits < 0
    nan = np.isnan(x)
    over = x > O_THRESHOLD
    minus1 = neg & (ix >= 0x4043687A) & ~nan  # x <= -56 ln2: exp(x) - 1 rounds to -1
    xr = np.where(nan | over | minus1, 0.0, x)
    k = (INVLN2 * xr + np.where(neg, -0.5, 0.5)).astype(np.int64)
    k = np.where(ix < 0x3FF0A2B2, np.where(neg, -1, 1), k)
    k = np.where(ix <= 0x3FD62E42, 0, k)
    t = k.astype(np.float64)
    hi = xr - t * LN2_HI  # k == 0: hi = x, lo = +0, r = x exactly (c unused)
    lo = t * LN2_LO
    r = hi - lo
    c = (hi - r) - lo  # what the rounding of r lost
    hfx = 0.5 * r
    hxs = r * hfx
    r1 = 1.0 + hxs * (Q1 + hxs * (Q2 + hxs * (Q3 + hxs * (Q4 + hxs * Q5))))
    tt = 3.0 - r1 * hfx
    e = hxs * ((r1 - tt) / (6.0 - r * tt))
    y0 = r - (r * e - hxs)  # k == 0
    e = (r * (e - c) - c) - hxs
    ym1 = 0.5 * (r - e) - 0.5  # k == -1
    yp1 = np.where(r < -0.25, -2.0 * (e - (r + 0.5)), 1.0 + 2.0 * (r - e))  # k == 1
    yfar = add_exponent(1.0 - (e - r), k) - 1.0  # k <= -2 or k > 56: the -1 is negligible
    kc = np.clip(k, 2, 56)
    t_lo = from_hi_word(0x3FF00000 - (0x200000 >> np.minimum(kc, 19)))  # 1 - 2**-k
    ymid = add_exponent(t_lo - (e - r), k)  # 2 <= k < 20
    t_hi = from_hi_word((0x3FF - kc) << 20)  # 2**-k
    yhigh = add_exponent((r - (e + t_hi)) + 1.0, k)  # 20 <= k <= 56
    y = np.where(k < 20, ymid, yhigh)
    y = np.where((k <= -2) | (k > 56), yfar, y)
    y = np.where(k == 1, yp1, y)
    y = np.where(k == -1, ym1, y)
    y = np.where(k == 0, y0, y)
    y = np.where(ix < 0x3C900000, xr, y)  # |x| < 2**-54: expm1(x) rounds to x
    y = np.where(over, INF, y)
    y = np.where(minus1, -1.0, y)
    return np.where(nan, NAN, y)


def log1p64(x: np.ndarray) -> np.ndarray:
    """log(1 + x), fdlibm s_log1p.c: u = 1+x reduced like log, plus the rounding error c of 1+x."""
    bits = x.view(np.int64)
    hx = bits >> 32
    ax = hx & 0x7FFFFFFF
    nan = ~(x >= -1.0)  # NaN or below -1
    m1 = x == -1.0
    pinf = x == INF
    xr = np.where(nan | m1 | pinf, 0.5, x)
    # -0.2929 < x < 0.41422: no reduction (k = 0, f = x). (Signed compare on the high word.)
    direct = (hx < 0x3FDA827A) & ((hx > 0) | (hx <= -0x402D413D))
    near = hx < 0x43400000  # x < 2**53: u = 1+x, c = its rounding error divided by u
    u = np.where(near, 1.0 + xr, xr)
    hu = hi_word(u)
    k = (hu >> 20) - 1023
    c = np.where(k > 0, 1.0 - (u - xr), xr - (u - 1.0)) / u
    c = np.where(near, c, 0.0)
    hu = hu & 0x000FFFFF
    low = hu < 0x6A09E  # mantissa below sqrt(2): normalize u, else u/2
    u = np.where(low, with_hi_word(u, hu | 0x3FF00000), with_hi_word(u, hu | 0x3FE00000))
    k = np.where(low, k, k + 1)
    hu = np.where(low, hu, (0x00100000 - hu) >> 2)
    f = np.where(direct, xr, u - 1.0)
    k = np.where(direct, 0, k)
    hu = np.where(direct, 1, hu)
    k0 = k == 0
    dk = k.astype(np.float64)
    hfsq = 0.5 * f * f
    # hu == 0: |f| < 2**-20
    rs = hfsq * (1.0 - 0.66666666666666666 * f)
    ys = np.where(k0, f - rs, dk * LN2_HI - ((rs - (dk * LN2_LO + c)) - f))
    yz = np.where(k0, 0.0, dk * LN2_HI + (c + dk * LN2_LO))
    ys = np.where(f == 0.0, yz, ys)
    s = f / (2.0 + f)
    z = s * s
    R = z * (LG1 + z * (LG2 + z * (LG3 + z * (LG4 + z * (LG5 + z * (LG6 + z * LG7))))))
    sr = s * (hfsq + R)
    yg = np.where(k0, f - (hfsq - sr), dk * LN2_HI - ((hfsq - (sr + (dk * LN2_LO + c))) - f))
    y = np.where(hu == 0, ys, yg)
    # |x| < 2**-29: x - x*x/2 (x itself below 2**-54)
    y = np.where(ax < 0x3E200000, np.where(ax < 0x3C900000, xr, xr - xr * xr * 0.5), y)
    y = np.where(pinf, INF, y)
    y = np.where(m1, -INF, y)
    return np.where(nan, NAN, y)


def exp_dd64(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """exp(a) as an unevaluated sum eh + el (relative error ~2**-58), for -708 <= a <= 0.

    fdlibm's exp with the last two roundings captured exactly (TwoSum / Fast2Sum), so that
    sigmoid and tanh can divide with ~1 ulp total error. ``eh`` equals exp64(a) there (up to the
    |a| < 2**-28 shortcut exp64 takes). Out-of-range inputs give garbage; callers mask them.
    """
    _, k, hi, lo, q = _exp_reduce(a)
    s1 = np.subtract(lo, q, out=lo)
    big = s1 - hi  # TwoSum(s1, -hi): big + err == s1 - hi exactly
    bb = big - s1
    err = big - bb
    np.subtract(s1, err, out=err)
    np.negative(hi, out=hi)
    hi -= bb
    err += hi  # (s1 - (big - bb)) + (-hi - bb)
    yh = np.subtract(1.0, big, out=bb)
    yl = np.subtract(1.0, yh, out=s1)
    yl -= big
    yl -= err  # Fast2Sum (|big| < 1): 1 - big == yh + yl
    k += 0x3FF
    k <<= 52
    scale = k.view(np.float64)  # 2**k, normal for k >= -1022
    yh *= scale
    yl *= scale
    return yh, yl
