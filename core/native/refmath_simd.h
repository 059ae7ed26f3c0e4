/* Branch-free spellings of refmath.cuh's exp, log, tanh and rsqrt, for loops gcc vectorises.
 *
 * Each tsb_f(x) runs, for every x, exactly the IEEE operations ts_f(x) runs -- the same
 * operations in the same order on the same values -- but computes every branch's candidate
 * and selects the one ts_f would return, so a loop over them has no control flow and gcc
 * (-O3, -fno-trapping-math: the unselected candidates may raise flags nobody reads) vectorises
 * it. Lanes whose argument would make a candidate ill-defined in C (a NaN or huge value cast to
 * int) compute on a harmless stand-in and are overwritten by the select. Include after
 * refmath.cuh. tests/core/test_refmath_native.py holds these loops to the numpy spelling bit
 * for bit (1e6 inputs per function and dtype, every special value and branch boundary).
 */
#ifndef TS_REFMATH_SIMD_H
#define TS_REFMATH_SIMD_H

static inline double tsb__sel(int c, double a, double b) { return c ? a : b; }

/* NOTE: the others (expm1, log1p, sigmoid, erf) keep ts_f's branches: their loops stay scalar
 * (a branch-free sigmoid did not vectorise with gcc 12; expm1/log1p/erf have many more cases).
 * float tanh uses ts_tanhf itself: gcc 12 if-converts and vectorises that loop as it is, and
 * measured it ~2x quicker than the float loop over tsb_tanh. */

static inline double tsb_exp(double x) {
    TS_EXP_CONSTANTS
    int hx = ts__hi(x);
    int ix = hx & 0x7fffffff;
    int special = (x != x) | (x > o_threshold) | (x < u_threshold);
    double xs = tsb__sel(special, 0.0, x);
    int kb = (int)__dadd_rn(__dmul_rn(invln2, xs), hx < 0 ? -0.5 : 0.5);
    int k = ix <= 0x3fd62e42 ? 0 : (ix < 0x3ff0a2b2 ? (hx < 0 ? -1 : 1) : kb);
    k = special ? 0 : k;
    double t = (double)k;
    double hi = __dsub_rn(xs, __dmul_rn(t, ln2_hi));
    double lo = __dmul_rn(t, ln2_lo);
    double r = __dsub_rn(hi, lo);
    double rr = __dmul_rn(r, r);
    double c = __dsub_rn(r, __dmul_rn(rr, __dadd_rn(P1, __dmul_rn(rr, __dadd_rn(P2, __dmul_rn(rr,
            __dadd_rn(P3, __dmul_rn(rr, __dadd_rn(P4, __dmul_rn(rr, P5))))))))));
    double y = __dsub_rn(1.0, __dsub_rn(__dsub_rn(lo, __ddiv_rn(__dmul_rn(r, c),
                                                                  __dsub_rn(2.0, c))), hi));
    double rn = ts__add_exponent(y, k);
    double rs = __dmul_rn(ts__add_exponent(y, k + 1000), twom1000);
    double res = tsb__sel(k >= -1021, rn, rs);
    res = tsb__sel(ix < 0x3e300000, __dadd_rn(1.0, xs), res);
    res = tsb__sel(x < u_threshold, 0.0, res);
    res = tsb__sel(x > o_threshold, TS_INF64, res);
    return tsb__sel(x != x, TS_NAN64, res);
}

static inline double tsb_log(double x0) {
    TS_LOG_CONSTANTS
    int special = !(x0 >= 0.0) | (x0 == 0.0) | (x0 == TS_INF64);
    double x = tsb__sel(special, 1.0, x0);
    int sub = x < 2.2250738585072014e-308;
    x = tsb__sel(sub, __dmul_rn(x, two54), x);
    int hx = ts__hi(x);
    int k = (sub ? -54 : 0) + (hx >> 20) - 1023;
    hx &= 0x000fffff;
    int i = (hx + 0x95f64) & 0x100000;
    x = ts__with_hi(x, hx | (i ^ 0x3ff00000));
    k += i >> 20;
    double f = __dsub_rn(x, 1.0);
    double dk = (double)k;
    /* |f| < 2**-20 */
    double a0 = __dadd_rn(__dmul_rn(dk, ln2_hi), __dmul_rn(dk, ln2_lo));
    double Ra = __dmul_rn(__dmul_rn(f, f), __dsub_rn(0.5, __dmul_rn(0.33333333333333333, f)));
    double a1 = __dsub_rn(f, Ra);
    double a2 = __dsub_rn(__dmul_rn(dk, ln2_hi), __dsub_rn(__dsub_rn(Ra, __dmul_rn(dk, ln2_lo)), f));
    double ra = tsb__sel(f == 0.0, tsb__sel(k == 0, 0.0, a0), tsb__sel(k == 0, a1, a2));
    /* the general case */
    double s = __ddiv_rn(f, __dadd_rn(2.0, f));
    double z = __dmul_rn(s, s);
    double w = __dmul_rn(z, z);
    double t1 = __dmul_rn(w, __dadd_rn(Lg2, __dmul_rn(w, __dadd_rn(Lg4, __dmul_rn(w, Lg6)))));
    double t2 = __dmul_rn(z, __dadd_rn(Lg1, __dmul_rn(w, __dadd_rn(Lg3, __dmul_rn(w,
                    __dadd_rn(Lg5, __dmul_rn(w, Lg7)))))));
    double R = __dadd_rn(t2, t1);
    double hfsq = __dmul_rn(__dmul_rn(0.5, f), f);
    double b1 = __dsub_rn(f, __dsub_rn(hfsq, __dmul_rn(s, __dadd_rn(hfsq, R))));
    double b2 = __dsub_rn(__dmul_rn(dk, ln2_hi),
                          __dsub_rn(__dsub_rn(hfsq, __dadd_rn(__dmul_rn(s, __dadd_rn(hfsq, R)),
                                                              __dmul_rn(dk, ln2_lo))), f));
    double c1 = __dsub_rn(f, __dmul_rn(s, __dsub_rn(f, R)));
    double c2 = __dsub_rn(__dmul_rn(dk, ln2_hi),
                          __dsub_rn(__dsub_rn(__dmul_rn(s, __dsub_rn(f, R)), __dmul_rn(dk, ln2_lo)),
                                    f));
    int far = ((hx - 0x6147a) | (0x6b851 - hx)) > 0;
    double rb = tsb__sel(far, tsb__sel(k == 0, b1, b2), tsb__sel(k == 0, c1, c2));
    double res = tsb__sel((0x000fffff & (2 + hx)) < 3, ra, rb);
    res = tsb__sel(x0 == TS_INF64, TS_INF64, res);
    res = tsb__sel(x0 == 0.0, TS_NINF64, res);
    return tsb__sel(!(x0 >= 0.0), TS_NAN64, res);
}

static inline double tsb_rsqrt(double x) {
    int bad = (x != x) | (x < 0.0);
    double r = __ddiv_rn(1.0, __dsqrt_rn(tsb__sel(bad, 1.0, x)));
    return tsb__sel(bad, TS_NAN64, r);
}

static inline double tsb_tanh(double x) {
    TS_TANH_CONSTANTS
    double eh, el;
    int hx = ts__hi(x);
    int ix = hx & 0x7fffffff;
    int nan = x != x;
    double xs = tsb__sel(nan, 0.0, x);
    /* |x| < 1/8: the odd series */
    double z = __dmul_rn(xs, xs);
    double p = __dadd_rn(T1, __dmul_rn(z, __dadd_rn(T2, __dmul_rn(z, __dadd_rn(T3, __dmul_rn(z,
                 __dadd_rn(T4, __dmul_rn(z, __dadd_rn(T5, __dmul_rn(z, __dadd_rn(T6,
                 __dmul_rn(z, __dadd_rn(T7, __dmul_rn(z, __dadd_rn(T8, __dmul_rn(z,
                 T9))))))))))))))));
    double rs = __dadd_rn(xs, __dmul_rn(xs, __dmul_rn(z, p)));
    /* 1/8 <= |x| < 22: (1 - e) / (1 + e), e = exp(-2|x|) as a double-double */
    int mid = (ix >= 0x3fc00000) & (ix < 0x40360000);
    ts__exp_dd(tsb__sel(mid, __dmul_rn(-2.0, ts__with_hi(xs, ix)), -1.0), &eh, &el);
    double nh = __dsub_rn(1.0, eh);
    double nl = __dsub_rn(__dsub_rn(__dsub_rn(1.0, nh), eh), el);
    double dh = __dadd_rn(1.0, eh);
    double dl = __dadd_rn(__dsub_rn(eh, __dsub_rn(dh, 1.0)), el);
    double y = ts__ratio_dd(nh, nl, dh, dl);
    double res = tsb__sel(ix < 0x3fc00000, rs, tsb__sel(hx < 0, -y, y));
    res = tsb__sel(ix >= 0x40360000, hx < 0 ? -1.0 : 1.0, res);
    res = tsb__sel(ix < 0x3c800000, __dmul_rn(xs, __dadd_rn(1.0, xs)), res);
    return tsb__sel(nan, TS_NAN64, res);
}

/* float: the double routine, rounded once (NaN canonical), as ts__to_float */
static inline float tsb__to_float(double r) {
    return r != r ? __int_as_float(0x7fc00000) : (float)r;
}

static inline float tsb_expf(float x) { return tsb__to_float(tsb_exp((double)x)); }
static inline float tsb_logf(float x) { return tsb__to_float(tsb_log((double)x)); }
static inline float tsb_rsqrtf(float x) { return tsb__to_float(tsb_rsqrt((double)x)); }

/* Every function the CPU tape runs in C, in the order of core.native.REFMATH: X(name, the
 * double spelling, the float spelling), a branch-free twin where one exists so the loops
 * vectorise. refmath_host.c (ctypes) and refmath_py.c (the CPython extension) expand it. */
#define TS_REFMATH_FUNCS(X)                 \
    X(exp, tsb_exp, tsb_expf)               \
    X(expm1, ts_expm1, ts_expm1f)           \
    X(log, tsb_log, tsb_logf)               \
    X(log1p, ts_log1p, ts_log1pf)           \
    X(tanh, tsb_tanh, ts_tanhf)             \
    X(sigmoid, ts_sigmoid, ts_sigmoidf)     \
    X(erf, ts_erf, ts_erff)                 \
    X(rsqrt, tsb_rsqrt, tsb_rsqrtf)

#endif /* TS_REFMATH_SIMD_H */
