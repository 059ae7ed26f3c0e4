/* Branch-free spellings of refmath.cuh's exp, log, tanh and rsqrt, for loops gcc vectorises,
 * and the float32 loops (below: a quick double, certified per element, else ts_f itself).
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

/* NOTE: erf sorts each block's elements by ts_erf's range and runs each range's own
 * operations over its elements (tsl_erf below); sigmoid's twin leaves |x| > 708 and NaN to
 * ts_sigmoid (its loop redoes them). */

/* fdlibm's reduction shared by exp and expm1: x = k ln2 + r, r = hi - lo (k = 0 for |x| <=
 * 0.5 ln2, +-1 below 1.5 ln2, else round(x / ln2)); `special` lanes reduce a harmless 0.0 (k = 0)
 * and are overwritten by the caller's selects. Returns k; *xs is the (possibly replaced) x. */
static inline int tsb__reduce_ln2(double x, int hx, int ix, int special, double invln2,
                                  double ln2_hi, double ln2_lo, double *xs, double *hi,
                                  double *lo, double *r) {
    *xs = tsb__sel(special, 0.0, x);
    int kb = (int)__dadd_rn(__dmul_rn(invln2, *xs), hx < 0 ? -0.5 : 0.5);
    int k = ix <= 0x3fd62e42 ? 0 : (ix < 0x3ff0a2b2 ? (hx < 0 ? -1 : 1) : kb);
    k = special ? 0 : k;
    double t = (double)k;
    *hi = __dsub_rn(*xs, __dmul_rn(t, ln2_hi));
    *lo = __dmul_rn(t, ln2_lo);
    *r = __dsub_rn(*hi, *lo);
    return k;
}

static inline double tsb_exp(double x) {
    TS_EXP_CONSTANTS
    int hx = ts__hi(x);
    int ix = hx & 0x7fffffff;
    int special = (x != x) | (x > o_threshold) | (x < u_threshold);
    double xs, hi, lo, r;
    int k = tsb__reduce_ln2(x, hx, ix, special, invln2, ln2_hi, ln2_lo, &xs, &hi, &lo, &r);
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

/* fdlibm log's polynomial R(s) = t2 + t1 of s = f / (2 + f) (z = s^2, w = z^2), shared by
 * log's branch-free twin and float32's quick log: the same operations in ts_log's order. */
static inline double tsb__log_R(double s) {
    TS_LOG_CONSTANTS
    (void)ln2_hi, (void)ln2_lo, (void)two54;
    double z = __dmul_rn(s, s);
    double w = __dmul_rn(z, z);
    double t1 = __dmul_rn(w, __dadd_rn(Lg2, __dmul_rn(w, __dadd_rn(Lg4, __dmul_rn(w, Lg6)))));
    double t2 = __dmul_rn(z, __dadd_rn(Lg1, __dmul_rn(w, __dadd_rn(Lg3, __dmul_rn(w,
                    __dadd_rn(Lg5, __dmul_rn(w, Lg7)))))));
    return __dadd_rn(t2, t1);
}

static inline double tsb_log(double x0) {
    TS_LOG_CONSTANTS
    (void)Lg1, (void)Lg2, (void)Lg3, (void)Lg4, (void)Lg5, (void)Lg6, (void)Lg7; /* in tsb__log_R */
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
    double R = tsb__log_R(s);
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

static inline double tsb_expm1(double x) {
    TS_EXPM1_CONSTANTS
    int hx = ts__hi(x);
    int ix = hx & 0x7fffffff;
    int low = (hx < 0) & (ix >= 0x4043687a); /* x <= -56 ln2 (and -inf): -1 */
    int special = (x != x) | (x > o_threshold) | low;
    double xs, hi, lo, r;
    int k = tsb__reduce_ln2(x, hx, ix, special, invln2, ln2_hi, ln2_lo, &xs, &hi, &lo, &r);
    double c = __dsub_rn(__dsub_rn(hi, r), lo);
    double hfx = __dmul_rn(0.5, r);
    double hxs = __dmul_rn(r, hfx);
    double r1 = __dadd_rn(1.0, __dmul_rn(hxs, __dadd_rn(Q1, __dmul_rn(hxs, __dadd_rn(Q2,
                    __dmul_rn(hxs, __dadd_rn(Q3, __dmul_rn(hxs, __dadd_rn(Q4,
                    __dmul_rn(hxs, Q5))))))))));
    double tt = __dsub_rn(3.0, __dmul_rn(r1, hfx));
    double e = __dmul_rn(hxs, __ddiv_rn(__dsub_rn(r1, tt), __dsub_rn(6.0, __dmul_rn(r, tt))));
    double r0 = __dsub_rn(r, __dsub_rn(__dmul_rn(r, e), hxs)); /* k == 0 */
    double e2 = __dsub_rn(__dsub_rn(__dmul_rn(r, __dsub_rn(e, c)), c), hxs);
    double rm1 = __dsub_rn(__dmul_rn(0.5, __dsub_rn(r, e2)), 0.5); /* k == -1 */
    double rp1 = tsb__sel(r < -0.25, __dmul_rn(-2.0, __dsub_rn(e2, __dadd_rn(r, 0.5))),
                          __dadd_rn(1.0, __dmul_rn(2.0, __dsub_rn(r, e2)))); /* k == 1 */
    /* k <= -2 or k > 56 */
    double rf = __dsub_rn(ts__add_exponent(__dsub_rn(1.0, __dsub_rn(e2, r)), k), 1.0);
    /* 2 <= k < 20, 20 <= k <= 56: the shifts on a k kept in range (C leaves the rest undefined) */
    int k2 = (k >= 2) & (k < 20) ? k : 2;
    double rn = ts__add_exponent(__dsub_rn(ts__from_hi(0x3ff00000 - (0x200000 >> k2)),
                                           __dsub_rn(e2, r)), k);
    int k3 = (k >= 20) & (k <= 56) ? k : 20;
    double rb = ts__add_exponent(__dadd_rn(__dsub_rn(r, __dadd_rn(e2,
                                          ts__from_hi((0x3ff - k3) << 20))), 1.0), k);
    double res = tsb__sel((k <= -2) | (k > 56), rf, tsb__sel(k < 20, rn, rb));
    res = tsb__sel(k == 1, rp1, res);
    res = tsb__sel(k == -1, rm1, res);
    res = tsb__sel(k == 0, r0, res);
    res = tsb__sel(ix < 0x3c900000, x, res); /* |x| < 2**-54 */
    res = tsb__sel(low, -1.0, res);
    res = tsb__sel(x > o_threshold, TS_INF64, res);
    return tsb__sel(x != x, TS_NAN64, res);
}

static inline double tsb_log1p(double x0) {
    TS_LOG_CONSTANTS /* ts_log1p's Lp1..Lp7 are log's Lg1..Lg7 */
    (void)two54;
    /* NaN, x <= -1 and inf run through too (integer and double arithmetic only, nothing C
     * leaves undefined) and are replaced at the end */
    double x = x0;
    int hx = ts__hi(x);
    int ax = hx & 0x7fffffff;
    /* |x| < 2**-29 */
    double rt = tsb__sel(ax < 0x3c900000, x, __dsub_rn(x, __dmul_rn(__dmul_rn(x, x), 0.5)));
    /* -0.2929 < x < 0.41422: k = 0, f = x, c = 0 (hu = 1: the general formula) */
    int k0 = (hx < 0x3fda827a) & ((hx > 0) | (hx <= (int)0xbfd2bec3));
    /* else u = 1 + x with c its rounding error over u (x < 2**53), or u = x (c = 0) */
    int small = hx < 0x43400000;
    double u = tsb__sel(small, __dadd_rn(1.0, x), x);
    int hu = ts__hi(u);
    int k = (hu >> 20) - 1023;
    double cu = tsb__sel(k > 0, __dsub_rn(1.0, __dsub_rn(u, x)), __dsub_rn(x, __dsub_rn(u, 1.0)));
    double c = tsb__sel(k0, 0.0, tsb__sel(small, __ddiv_rn(cu, u), 0.0));
    hu &= 0x000fffff;
    int up = hu >= 0x6a09e; /* normalize u/2 instead */
    double un = ts__with_hi(u, hu | (up ? 0x3fe00000 : 0x3ff00000));
    k = k0 ? 0 : k + up;
    hu = k0 ? 1 : (up ? (0x00100000 - hu) >> 2 : hu);
    double f = tsb__sel(k0, x, __dsub_rn(un, 1.0));
    double dk = (double)k;
    double hfsq = __dmul_rn(__dmul_rn(0.5, f), f);
    /* hu == 0: |f| < 2**-20 */
    double rz = tsb__sel(k == 0, 0.0, __dadd_rn(__dmul_rn(dk, ln2_hi),
                                                __dadd_rn(c, __dmul_rn(dk, ln2_lo))));
    double R0 = __dmul_rn(hfsq, __dsub_rn(1.0, __dmul_rn(0.66666666666666666, f)));
    double a1 = __dsub_rn(f, R0);
    double a2 = __dsub_rn(__dmul_rn(dk, ln2_hi),
                          __dsub_rn(__dsub_rn(R0, __dadd_rn(__dmul_rn(dk, ln2_lo), c)), f));
    double ra = tsb__sel(f == 0.0, rz, tsb__sel(k == 0, a1, a2));
    /* the general case */
    double s = __ddiv_rn(f, __dadd_rn(2.0, f));
    double z = __dmul_rn(s, s);
    double R = __dmul_rn(z, __dadd_rn(Lg1, __dmul_rn(z, __dadd_rn(Lg2, __dmul_rn(z, __dadd_rn(Lg3,
                   __dmul_rn(z, __dadd_rn(Lg4, __dmul_rn(z, __dadd_rn(Lg5, __dmul_rn(z,
                   __dadd_rn(Lg6, __dmul_rn(z, Lg7)))))))))))));
    double b1 = __dsub_rn(f, __dsub_rn(hfsq, __dmul_rn(s, __dadd_rn(hfsq, R))));
    double b2 = __dsub_rn(__dmul_rn(dk, ln2_hi),
                          __dsub_rn(__dsub_rn(hfsq, __dadd_rn(__dmul_rn(s, __dadd_rn(hfsq, R)),
                                                              __dadd_rn(__dmul_rn(dk, ln2_lo), c))),
                                    f));
    double res = tsb__sel(hu == 0, ra, tsb__sel(k == 0, b1, b2));
    res = tsb__sel(ax < 0x3e200000, rt, res);
    res = tsb__sel(x0 == TS_INF64, TS_INF64, res);
    res = tsb__sel(x0 == -1.0, TS_NINF64, res);
    return tsb__sel(!(x0 >= -1.0), TS_NAN64, res);
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

/* ts_sigmoid for |x| <= 708 (the rest: any value; the double loop hands those lanes to
 * ts_sigmoid): exp_dd and the ratio as ts_sigmoid runs them, its two numerators selected */
static inline double tsb_sigmoid(double x) {
    double eh, el;
    int neg = x < 0.0;
    double xs = tsb__sel(__builtin_fabs(x) <= 708.0, x, 0.0); /* NaN too */
    ts__exp_dd(neg ? xs : -xs, &eh, &el);
    double d = __dadd_rn(1.0, eh); /* Fast2Sum: 1 + eh == d + (eh - (d - 1)) */
    double s = __dadd_rn(__dsub_rn(eh, __dsub_rn(d, 1.0)), el);
    double y = ts__ratio_dd(tsb__sel(neg, eh, 1.0), tsb__sel(neg, el, 0.0), d, s);
    return tsb__sel(x > 708.0, 1.0, y);
}

/* ts_sigmoid's rare lanes: x < -708 (ts_exp(x)) and NaN */
static inline int tsb_sigmoid_rare(double x) { return !(x >= -708.0); }

/* float: the double routine, rounded once (NaN canonical), as ts__to_float */
static inline float tsb__to_float(double r) {
    return r != r ? __int_as_float(0x7fc00000) : (float)r;
}

static inline float tsb_rsqrtf(float x) { return tsb__to_float(tsb_rsqrt((double)x)); }

/* ---- float32: a quick double, certified per element, else ts_f itself ----
 *
 * The float result is (float)ts_f((double)x): ts_f's double, within ~1 ulp of f(x), rounded
 * once. Any other double r close to f(x) rounds to the same float unless f(x) lies near a
 * float rounding midpoint. tsq_f(x) computes such an r with fewer operations than ts_f and no
 * branches (exp, expm1: Chebyshev polynomials, no division; tanh, sigmoid: one quotient of
 * those; log, log1p: fdlibm's reduction and polynomial, rearranged), and the loop keeps
 * (float)r only when r is a normal float (or a zero or infinity tsq_f gives on purpose) whose
 * 29 bits below the float mantissa are more than TSQ_SLACK double ulps from the midpoint
 * pattern: far more than tsq_f and ts_f ever differ (<= 124 ulps, measured on all 2**32
 * floats). Every other element -- NaN, the specials, float subnormals, ~1 in 2**14 near a
 * midpoint -- is recomputed by ts_f itself. So the bits are ts_f's: tests/core/
 * test_refmath_native.py and test_refmath_simd_f32.py hold them to the numpy spelling, and
 * `python benchmarks/bench_refmath.py --exhaustive NAMES` to the scalar C routine on every
 * float input. (Not for double: there the result is ts_f's double itself, no slack.)
 */
#define TSQ_SLACK 16384ULL

/* x = k ln2 + r, |r| <= ln2/2 + 2**-40 (as fdlibm's exp: k*ln2_hi exact), for |x| <= 2**20.
 * k is rounded by adding 1.5 * 2**52 (v holds k in its low mantissa bits; kd = k as a double):
 * no float-to-int conversion, so a NaN x runs through harmlessly and comes out NaN. */
static inline double tsq__reduce(double x, double *v, double *kd) {
    TS_EXP_CONSTANTS
    (void)o_threshold, (void)u_threshold, (void)twom1000;
    (void)P1, (void)P2, (void)P3, (void)P4, (void)P5;
    *v = __dadd_rn(__dmul_rn(x, invln2), 6755399441055744.0);
    *kd = __dsub_rn(*v, 6755399441055744.0);
    return __dsub_rn(__dsub_rn(x, __dmul_rn(*kd, ln2_hi)), __dmul_rn(*kd, ln2_lo));
}

/* 2**k * p, the result normal, k from tsq__reduce's v: k's low 12 bits added to the exponent */
static inline double tsq__scale(double p, double v) {
    unsigned long long b = (unsigned long long)__double_as_longlong(p);
    unsigned long long k = (unsigned long long)__double_as_longlong(v);
    return __longlong_as_double((long long)(b + (k << 52)));
}

/* exp(x) for -160 <= x <= 160: a degree-9 Chebyshev fit of exp on |r| <= 0.3466 (mpmath
 * chebyfit; relative error 2**-45.6 with these double coefficients) */
static inline double tsq__exp(double x) {
    double v, kd, r = tsq__reduce(x, &v, &kd);
    double p = __dadd_rn(2.48844724010672e-05, __dmul_rn(r, 2.763265216957956e-06));
    p = __dadd_rn(0.00019841190623382567, __dmul_rn(r, p));
    p = __dadd_rn(0.0013888801723066747, __dmul_rn(r, p));
    p = __dadd_rn(0.008333333367327151, __dmul_rn(r, p));
    p = __dadd_rn(0.041666667040723006, __dmul_rn(r, p));
    p = __dadd_rn(0.16666666666615615, __dmul_rn(r, p));
    p = __dadd_rn(0.4999999999943825, __dmul_rn(r, p));
    p = __dadd_rn(1.0000000000000013, __dmul_rn(r, p));
    p = __dadd_rn(1.0000000000000135, __dmul_rn(r, p));
    return tsq__scale(p, v);
}

/* expm1(x) for -160 <= x <= 160 (+0 for +-0): r + r*r*P(r), P a degree-8 Chebyshev fit of
 * (expm1(r) - r) / r**2 (2**-48.3 relative), then 2**k (expm1(r) + 1) - 1 */
static inline double tsq__expm1(double x) {
    double v, kd, r = tsq__reduce(x, &v, &kd);
    double p = __dadd_rn(2.7625112348132093e-06, __dmul_rn(r, 2.761380417063004e-07));
    p = __dadd_rn(2.4801536393539694e-05, __dmul_rn(r, p));
    p = __dadd_rn(0.0001984120873835699, __dmul_rn(r, p));
    p = __dadd_rn(0.0013888888905879116, __dmul_rn(r, p));
    p = __dadd_rn(0.008333333353726484, __dmul_rn(r, p));
    p = __dadd_rn(0.04166666666665136, __dmul_rn(r, p));
    p = __dadd_rn(0.16666666666648292, __dmul_rn(r, p));
    p = __dadd_rn(0.5, __dmul_rn(r, p));
    double q = __dadd_rn(r, __dmul_rn(__dmul_rn(r, r), p));
    double t = tsq__scale(1.0, v);
    /* k = 0: q (+ 0); else no cancellation worse than 3.5x: |x| >= ln2/2 */
    return __dadd_rn(__dmul_rn(t, q), __dsub_rn(t, 1.0));
}

/* lo <= x <= hi ? x : the bound; NaN stays NaN */
static inline double tsq__clamp(double x, double lo, double hi) {
    double y = x < lo ? lo : x;
    return y > hi ? hi : y;
}

/* NOTE: a NaN x runs through the quick twins as NaN (unsure: ts_f decides) */
static inline double tsq_exp(double x) {
    /* x > 100: exp(100), an infinity as a float like ts_exp's */
    double r = tsq__exp(tsq__clamp(x, -104.0, 100.0));
    return tsb__sel(x < -104.0, 0.0, r); /* ts_exp < 2**-150: +0 as a float */
}

static inline double tsq_expm1(double x) {
    /* x > 100: an infinity as a float; x < -104: -1, as ts_expm1; expm1 has x's sign (+-0) */
    return __builtin_copysign(tsq__expm1(tsq__clamp(x, -104.0, 100.0)), x);
}

/* log(u) for a positive normal double u: fdlibm's general formula, ~1 ulp */
static inline double tsq__log(double u) {
    TS_LOG_CONSTANTS
    (void)two54;
    (void)Lg1, (void)Lg2, (void)Lg3, (void)Lg4, (void)Lg5, (void)Lg6, (void)Lg7; /* in tsb__log_R */
    /* as ts_log's hx, k, i on the high word, in 64-bit lanes (no packing to 32 bits) */
    long long b = __double_as_longlong(u);
    long long m = b & 0x000fffffffffffffLL;
    long long i = (m + (0x95f64LL << 32)) & (1LL << 52); /* mantissa above sqrt(2): u/2 */
    double x = __longlong_as_double(m | (i ^ (0x3ffLL << 52)));
    double dk = (double)((b >> 52) - 1023 + (i >> 52));
    double f = __dsub_rn(x, 1.0);
    double s = __ddiv_rn(f, __dadd_rn(2.0, f));
    /* log(1 + f) = 2s + s R: fdlibm's f - (hfsq - s (hfsq + R)) rearranged, a few ulps */
    double l = __dadd_rn(__dmul_rn(2.0, s), __dadd_rn(__dmul_rn(s, tsb__log_R(s)),
                                                      __dmul_rn(dk, ln2_lo)));
    return __dadd_rn(__dmul_rn(dk, ln2_hi), l);
}

static inline double tsq_log(double x) {
    int ok = (x >= 1.1754943508222875e-38) & (x < TS_INF64); /* a normal float */
    double r = tsq__log(tsb__sel(ok, x, 1.0));
    r = tsb__sel(ok, r, TS_NAN64); /* NaN: ts_log decides */
    return tsb__sel(x == 0.0, TS_NINF64, r);
}

static inline double tsq_log1p(double x) {
    /* for |x| >= 2**-29 a float x makes 1 + x exact (below 2**53), so log1p(x) = log(1 + x) */
    int ok = (x > -1.0) & (x < TS_INF64);
    double r = tsq__log(__dadd_rn(1.0, tsb__sel(ok, x, 0.0)));
    int tiny = __builtin_fabs(x) < 1.862645149230957e-09; /* 2**-29: ts_log1p's own formula */
    r = tsb__sel(tiny, __dsub_rn(x, __dmul_rn(__dmul_rn(x, x), 0.5)), r);
    r = tsb__sel(ok, r, TS_NAN64);
    return tsb__sel(x == -1.0, TS_NINF64, r);
}

static inline double tsq_tanh(double x) {
    /* tanh|x| = -m / (2 + m), m = expm1(-2|x|) in (-1, 0]: relative error <= ~2x expm1's;
     * |x| >= 22: 1 - 2**-62 rounds to 1, as ts_tanh; tanh has x's sign (+-0) */
    double a = __builtin_fabs(x);
    double m = tsq__expm1(__dmul_rn(-2.0, a > 22.0 ? 22.0 : a));
    return __builtin_copysign(__ddiv_rn(-m, __dadd_rn(2.0, m)), x);
}

static inline double tsq_sigmoid(double x) {
    /* x >= 0: 1 / (1 + e), else e / (1 + e), e = exp(-|x|) */
    double a = __builtin_fabs(x);
    double e = tsq__exp(-(a > 104.0 ? 104.0 : a));
    double y = __ddiv_rn(x < 0.0 ? e : 1.0, __dadd_rn(1.0, e));
    return tsb__sel(x < -104.0, 0.0, y); /* ts_sigmoid < 2**-150: +0 as a float */
}

/* 1 when (float)r may differ from the float of ts_f: NaN, a float subnormal, or r within
 * TSQ_SLACK double ulps of a float rounding midpoint */
static inline int tsq__unsure(double r) {
    unsigned long long b = (unsigned long long)__double_as_longlong(r);
    int tiny = (__builtin_fabs(r) < 1.1754943508222875e-38) & (r != 0.0);
    int mid = ((b & 0x1fffffffULL) - (0x10000000ULL - TSQ_SLACK)) <= 2 * TSQ_SLACK;
    return (r != r) | tiny | mid;
}

/* tsq__unsure, cheaper, for a twin whose zero and infinite results are rare enough to leave
 * to ts_f too: 1 unless r is a normal float far from a midpoint (exponent field only) */
static inline int tsq__unsure_normal(double r) {
    unsigned long long b = (unsigned long long)__double_as_longlong(r);
    int odd = (((b >> 52) & 0x7ffULL) - 897ULL) >= 1150ULL; /* below 2**-126, inf or NaN */
    int mid = ((b & 0x1fffffffULL) - (0x10000000ULL - TSQ_SLACK)) <= 2 * TSQ_SLACK;
    return odd | mid;
}

/* the float loop of a function with a quick twin: blocks of TSQ_BLOCK, the unsure redone */
#define TSQ_BLOCK 512
#define TSQ_LOOP(name, unsure_fn)                                                           \
    static void tsl_##name##f(const float *restrict x, float *restrict y, long long n) {    \
        unsigned char unsure[TSQ_BLOCK];                                                    \
        for (long long i0 = 0; i0 < n; i0 += TSQ_BLOCK) {                                   \
            int m = n - i0 < TSQ_BLOCK ? (int)(n - i0) : TSQ_BLOCK, any = 0;                \
            const float *restrict xb = x + i0;                                              \
            float *restrict yb = y + i0;                                                    \
            for (int i = 0; i < m; ++i) {                                                   \
                double r = tsq_##name((double)xb[i]);                                       \
                unsure[i] = (unsigned char)unsure_fn(r);                                    \
                yb[i] = (float)r;                                                           \
            }                                                                               \
            /* NOTE: a loop apart: with `any |=` in the first, gcc 12 vectorises neither */ \
            for (int i = 0; i < m; ++i) any |= unsure[i];                                   \
            if (any)                                                                        \
                for (int i = 0; i < m; ++i)                                                 \
                    if (unsure[i]) yb[i] = ts_##name##f(xb[i]);                             \
        }                                                                                   \
    }
/* the float loop of a function without one: its per-element spelling */
#define TSQ_PLAIN_LOOP(name, ffn)                                                           \
    static void tsl_##name##f(const float *restrict x, float *restrict y, long long n) {    \
        for (long long i = 0; i < n; ++i) y[i] = ffn(x[i]);                                 \
    }

TSQ_LOOP(exp, tsq__unsure)     /* exp(x < -104) = +0: attention masks */
TSQ_LOOP(expm1, tsq__unsure)   /* expm1(+-0): ELU's min(x, 0) */
TSQ_LOOP(log, tsq__unsure)     /* log(1) = 0 */
TSQ_LOOP(log1p, tsq__unsure)
TSQ_LOOP(tanh, tsq__unsure_normal) /* zero only for +-0, never infinite */
TSQ_LOOP(sigmoid, tsq__unsure) /* sigmoid(x < -104) = +0 */
TSQ_PLAIN_LOOP(rsqrt, tsb_rsqrtf)

/* ---- erf by ranges: ts_erf's branches mispredict on mixed inputs (a GELU's) and a twin
 * computing every range's candidate costs all of them (two exps, four polynomials, eight
 * divisions: no faster). Each range's formula below is ts_erf's own operations on it, in its
 * order; the loop (TSE_LOOP) runs each over the elements of its range, vectorised. */
static inline double tse_small(double x) { /* 2**-28 <= |x| < 0.84375 */
    TS_ERF_CONSTANTS
    double z = __dmul_rn(x, x);
    double r = __dadd_rn(pp0, __dmul_rn(z, __dadd_rn(pp1, __dmul_rn(z, __dadd_rn(pp2,
            __dmul_rn(z, __dadd_rn(pp3, __dmul_rn(z, pp4))))))));
    double s = __dadd_rn(1.0, __dmul_rn(z, __dadd_rn(qq1, __dmul_rn(z, __dadd_rn(qq2,
            __dmul_rn(z, __dadd_rn(qq3, __dmul_rn(z, __dadd_rn(qq4,
            __dmul_rn(z, qq5))))))))));
    return __dadd_rn(x, __dmul_rn(x, __ddiv_rn(r, s)));
}

static inline double tse_mid(double x) { /* 0.84375 <= |x| < 1.25 */
    TS_ERF_CONSTANTS
    int hx = ts__hi(x);
    double s = __dsub_rn(ts__with_hi(x, hx & 0x7fffffff), 1.0);
    double P = __dadd_rn(pa0, __dmul_rn(s, __dadd_rn(pa1, __dmul_rn(s, __dadd_rn(pa2,
            __dmul_rn(s, __dadd_rn(pa3, __dmul_rn(s, __dadd_rn(pa4, __dmul_rn(s,
            __dadd_rn(pa5, __dmul_rn(s, pa6))))))))))));
    double Q = __dadd_rn(1.0, __dmul_rn(s, __dadd_rn(qa1, __dmul_rn(s, __dadd_rn(qa2,
            __dmul_rn(s, __dadd_rn(qa3, __dmul_rn(s, __dadd_rn(qa4, __dmul_rn(s,
            __dadd_rn(qa5, __dmul_rn(s, qa6))))))))))));
    double pq = __ddiv_rn(P, Q);
    return tsb__sel(hx >= 0, __dadd_rn(erx, pq), __dsub_rn(-erx, pq));
}

/* 1.25 <= |x| < 6 once R and S are known (ax = |x|) */
static inline double tse__tail(int hx, double ax, double R, double S) {
    double z = ts__low_cleared(ax); /* z*z exact: z has 21 significant bits */
    double r = __dmul_rn(tsb_exp(__dsub_rn(__dmul_rn(-z, z), 0.5625)),
                         tsb_exp(__dadd_rn(__dmul_rn(__dsub_rn(z, ax), __dadd_rn(z, ax)),
                                           __ddiv_rn(R, S))));
    double ra = __ddiv_rn(r, ax);
    return tsb__sel(hx >= 0, __dsub_rn(1.0, ra), __dsub_rn(ra, 1.0));
}

static inline double tse_near(double x) { /* 1.25 <= |x| < 1/0.35 */
    TS_ERF_CONSTANTS
    int hx = ts__hi(x);
    double ax = ts__with_hi(x, hx & 0x7fffffff);
    double s = __ddiv_rn(1.0, __dmul_rn(ax, ax));
    double R = __dadd_rn(ra0, __dmul_rn(s, __dadd_rn(ra1, __dmul_rn(s, __dadd_rn(ra2,
            __dmul_rn(s, __dadd_rn(ra3, __dmul_rn(s, __dadd_rn(ra4, __dmul_rn(s,
            __dadd_rn(ra5, __dmul_rn(s, __dadd_rn(ra6, __dmul_rn(s, ra7))))))))))))));
    double S = __dadd_rn(1.0, __dmul_rn(s, __dadd_rn(sa1, __dmul_rn(s, __dadd_rn(sa2,
            __dmul_rn(s, __dadd_rn(sa3, __dmul_rn(s, __dadd_rn(sa4, __dmul_rn(s,
            __dadd_rn(sa5, __dmul_rn(s, __dadd_rn(sa6, __dmul_rn(s, __dadd_rn(sa7,
            __dmul_rn(s, sa8))))))))))))))));
    return tse__tail(hx, ax, R, S);
}

static inline double tse_far(double x) { /* 1/0.35 <= |x| < 6 */
    TS_ERF_CONSTANTS
    int hx = ts__hi(x);
    double ax = ts__with_hi(x, hx & 0x7fffffff);
    double s = __ddiv_rn(1.0, __dmul_rn(ax, ax));
    double R = __dadd_rn(rb0, __dmul_rn(s, __dadd_rn(rb1, __dmul_rn(s, __dadd_rn(rb2,
            __dmul_rn(s, __dadd_rn(rb3, __dmul_rn(s, __dadd_rn(rb4, __dmul_rn(s,
            __dadd_rn(rb5, __dmul_rn(s, rb6))))))))))));
    double S = __dadd_rn(1.0, __dmul_rn(s, __dadd_rn(sb1, __dmul_rn(s, __dadd_rn(sb2,
            __dmul_rn(s, __dadd_rn(sb3, __dmul_rn(s, __dadd_rn(sb4, __dmul_rn(s,
            __dadd_rn(sb5, __dmul_rn(s, __dadd_rn(sb6, __dmul_rn(s, sb7))))))))))))));
    return tse__tail(hx, ax, R, S);
}

/* one range's listed elements of a block: gathered, computed (vectorised), put back */
#define TSE_LISTED(fn, list, cnt)                                                           \
    for (int j = 0; j < cnt; ++j) t[j] = (double)xb[list[j]];                              \
    for (int j = 0; j < cnt; ++j) t[j] = fn(t[j]);                                          \
    for (int j = 0; j < cnt; ++j) buf[list[j]] = t[j];
/* a block of erf: the small range (a GELU's inputs, nearly all) computed for every element;
 * the other ranges' elements listed by index, branch-free, and computed alone (the rare
 * ones by ts_erf); then the block rounded once to T (float: NaN canonical) */
#define TSE_LOOP(lname, T, OUT)                                                             \
    static void lname(const T *restrict x, T *restrict y, long long n) {                    \
        int rest[TSQ_BLOCK], mid[TSQ_BLOCK], near[TSQ_BLOCK], far[TSQ_BLOCK], rare[TSQ_BLOCK]; \
        double buf[TSQ_BLOCK], t[TSQ_BLOCK];                                                \
        for (long long i0 = 0; i0 < n; i0 += TSQ_BLOCK) {                                   \
            int m = n - i0 < TSQ_BLOCK ? (int)(n - i0) : TSQ_BLOCK;                         \
            int no = 0, nm = 0, nn = 0, nf = 0, nr = 0;                                     \
            const T *restrict xb = x + i0;                                                  \
            T *restrict yb = y + i0;                                                        \
            for (int i = 0; i < m; ++i) buf[i] = tse_small((double)xb[i]);                  \
            for (int i = 0; i < m; ++i) { /* the others, then by range */                   \
                int ix = ts__hi((double)xb[i]) & 0x7fffffff;                                \
                rest[no] = i, no += (ix >= 0x3feb0000) | (ix < 0x3e300000);                 \
            }                                                                               \
            for (int j = 0; j < no; ++j) { /* NaN: ix >= 0x7ff00000, rare */                \
                int i = rest[j], ix = ts__hi((double)xb[i]) & 0x7fffffff;                   \
                mid[nm] = i, nm += (ix >= 0x3feb0000) & (ix < 0x3ff40000);                  \
                near[nn] = i, nn += (ix >= 0x3ff40000) & (ix < 0x4006db6e);                 \
                far[nf] = i, nf += (ix >= 0x4006db6e) & (ix < 0x40180000);                  \
                rare[nr] = i, nr += (ix < 0x3e300000) | (ix >= 0x40180000);                 \
            }                                                                               \
            TSE_LISTED(tse_mid, mid, nm)                                                    \
            TSE_LISTED(tse_near, near, nn)                                                  \
            TSE_LISTED(tse_far, far, nf)                                                    \
            for (int j = 0; j < nr; ++j) buf[rare[j]] = ts_erf((double)xb[rare[j]]);        \
            for (int i = 0; i < m; ++i) yb[i] = OUT(buf[i]);                                \
        }                                                                                   \
    }
#define TSE_DOUBLE(r) (r)
TSE_LOOP(tsl_erf, double, TSE_DOUBLE)
/* ---- erf for float inputs: a quick double, certified per element, else ts_erff ----
 * As the TSQ loops above: (float)ts_erf((double)x) is kept from a quick r wherever r is a
 * normal float far from a rounding midpoint (tsq__unsure), else recomputed by ts_erff. r is
 * division-free (ts_erf's ranges run one or two divisions and, past 1.25, two exps): for
 * |x| < 0.84375, x P(x x) with P a degree-10 Chebyshev fit (mpmath chebyfit) of erf(sqrt
 * z) / sqrt z; for 0.84375 <= |x| < 4, a degree-12 fit of erf over the half-unit range of |x|
 * holding it, in |x| minus the range's middle (exact); past 4, +-1 (every float |x| from
 * 3.9192058 on rounds to 1: ts_erf's float is 1 there). r is within 2 double ulps of ts_erf's
 * on every float (measured: all floats from 0.84375 to 4, 119M of those below); the small
 * range is computed for every element, the others' elements listed by range (as TSE_LOOP)
 * and computed range by range. `python benchmarks/bench_refmath.py --exhaustive erf` holds
 * the loop to the scalar C on all 2**32 floats. */
static inline double tsq__erf_small(double x) {
    double z = __dmul_rn(x, x);
    double p = __dadd_rn(-1.571446067260244e-07, __dmul_rn(z, 1.0726571432176348e-08));
    p = __dadd_rn(1.640162967934702e-06, __dmul_rn(z, p));
    p = __dadd_rn(-1.4922121574443055e-05, __dmul_rn(z, p));
    p = __dadd_rn(0.00012055199941321885, __dmul_rn(z, p));
    p = __dadd_rn(-0.000854832379116413, __dmul_rn(z, p));
    p = __dadd_rn(0.005223977576377844, __dmul_rn(z, p));
    p = __dadd_rn(-0.02686617064077985, __dmul_rn(z, p));
    p = __dadd_rn(0.11283791670935311, __dmul_rn(z, p));
    p = __dadd_rn(-0.376126389031834, __dmul_rn(z, p));
    p = __dadd_rn(1.1283791670955126, __dmul_rn(z, p));
    return __dmul_rn(x, p);
}

#define TSQ_ERF_NR 7 /* ranges of |x| in [0.84375, 4), half a unit wide (the last cut at 4) */
/* erf(|x|) on range k: a degree-12 polynomial in t = |x| - (1.09375 + k / 2), its
 * coefficients highest degree first (mpmath chebyfit), evaluated by Horner's rule */
static const double tsq__erf_c[TSQ_ERF_NR][13] = {
    {-0.00015770093416837589, -0.0001114884937286676, 0.0012043257395165953,
     -0.0007297873789846382, -0.005878445400752477, 0.011097796139250642, 0.013271566516882785,
     -0.06402956901355761, 0.03777205074103987, 0.15834765451534266, -0.3731052729028445,
     0.34112482093973306, 0.87808757515181},
    {8.63405240540297e-05, -0.00015866389482120598, -0.000306899823442193, 0.0015145695735005395,
     -0.0009882567376187396, -0.0059892731090673, 0.015748138352544714, -0.004963364587962422,
     -0.04916756548217484, 0.12102562523387334, -0.14182418888093992, 0.08898772635666935,
     0.9757977205900914},
    {-1.0220367384049605e-05, 9.765007104340465e-05, -0.00015633700688763848,
     -0.0002460581815878923, 0.0014589692787935395, -0.00222480767409529, -0.0013739698227852475,
     0.012796265215331278, -0.02833783841802059, 0.03645558191155604, -0.029479796688565017,
     0.014079902896032628, 0.9969336766479546},
    {-8.53496338584462e-06, -6.605719589196643e-06, 7.704576435184707e-05,
     -0.00017628779972886098, 8.086198938301812e-05, 0.000666570732128648, -0.002394420284353007,
     0.004653046911802277, -0.006106974601075751, 0.00560979729896893, -0.0035046938117647033,
     0.0013512072527277737, 0.999755656079938},
    {2.8307246259539943e-06, -7.480538640540819e-06, 6.2448043440875235e-06,
     2.3884473157419943e-05, -0.00011821820051245413, 0.0002951752791847724,
     -0.0005137146464768332, 0.0006674287180917968, -0.0006546420491796384,
     0.00047563606987766695, -0.00024332248941519947, 7.864969354841816e-05,
     0.9999878691717033},
    {1.6250276095168428e-07, 7.252789140814115e-07, -3.990334551196199e-06,
     1.1262913130864265e-05, -2.3084550093554625e-05, 3.69036663771367e-05,
     -4.699867345069491e-05, 4.768590055037485e-05, -3.796897473224334e-05,
     2.2981675698688573e-05, -9.97867143448351e-06, 2.776673790497177e-06, 0.9999996271670344},
    {-9.584776305089646e-08, 2.8301659587288697e-07, -6.222415484099616e-07,
     1.126188744466704e-06, -1.6880745838630616e-06, 2.1042788672238056e-06,
     -2.1723820844565613e-06, 1.8339069489327905e-06, -1.2380140631847622e-06,
     6.444695237598686e-07, -2.434034689445089e-07, 5.945733592146426e-08, 0.9999999929377165},
};
static inline double tsq__erf_range(int k, double t) {
    const double *c = tsq__erf_c[k];
    double p = __dadd_rn(c[1], __dmul_rn(t, c[0]));
    for (int q = 2; q < 13; ++q)
        p = __dadd_rn(c[q], __dmul_rn(t, p));
    return p;
}

/* one range's listed elements: |x| gathered, the range's polynomial (vectorised), put back
 * with x's sign */
#define TSQ_ERF_RANGE(k)                                                                   \
    {                                                                                      \
        const int *lk = list[k];                                                           \
        const double mid = 1.09375 + 0.5 * (k);                                           \
        for (int j = 0; j < cnt[k]; ++j) t[j] = (double)xb[lk[j]];                         \
        for (int j = 0; j < cnt[k]; ++j)                                                   \
            t[j] = __builtin_copysign(tsq__erf_range(k, __dsub_rn(__builtin_fabs(t[j]), mid)), t[j]); \
        for (int j = 0; j < cnt[k]; ++j) buf[lk[j]] = t[j];                                \
    }

static void tsl_erff(const float *restrict x, float *restrict y, long long n) {
    int rest[TSQ_BLOCK], list[TSQ_ERF_NR + 1][TSQ_BLOCK], cnt[TSQ_ERF_NR + 1];
    double buf[TSQ_BLOCK], t[TSQ_BLOCK];
    unsigned char unsure[TSQ_BLOCK];
    for (long long i0 = 0; i0 < n; i0 += TSQ_BLOCK) {
        int m = n - i0 < TSQ_BLOCK ? (int)(n - i0) : TSQ_BLOCK, no = 0, any = 0;
        const float *restrict xb = x + i0;
        float *restrict yb = y + i0;
        for (int i = 0; i < m; ++i) buf[i] = tsq__erf_small((double)xb[i]);
        for (int i = 0; i < m; ++i) { /* NaN: not listed, NaN from the small range: unsure */
            rest[no] = i;
            no += __builtin_fabs((double)xb[i]) >= 0.84375;
        }
        for (int k = 0; k <= TSQ_ERF_NR; ++k) cnt[k] = 0;
        for (int j = 0; j < no; ++j) {
            int i = rest[j];
            double a = __builtin_fabs((double)xb[i]);
            int k = a >= 4.0 ? TSQ_ERF_NR : (int)__dmul_rn(__dsub_rn(a, 0.84375), 2.0);
            list[k][cnt[k]++] = i;
        }
        TSQ_ERF_RANGE(0) TSQ_ERF_RANGE(1) TSQ_ERF_RANGE(2) TSQ_ERF_RANGE(3)
        TSQ_ERF_RANGE(4) TSQ_ERF_RANGE(5) TSQ_ERF_RANGE(6)
        for (int j = 0; j < cnt[TSQ_ERF_NR]; ++j) {
            int i = list[TSQ_ERF_NR][j];
            buf[i] = __builtin_copysign(1.0, (double)xb[i]);
        }
        for (int i = 0; i < m; ++i) {
            double r = buf[i];
            unsure[i] = (unsigned char)tsq__unsure(r);
            yb[i] = (float)r;
        }
        for (int i = 0; i < m; ++i) any |= unsure[i];
        if (any)
            for (int i = 0; i < m; ++i)
                if (unsure[i]) yb[i] = ts_erff(xb[i]);
    }
}

/* the double loop of a twin that leaves rare lanes to ts_f: blocks, those lanes redone */
#define TSB_RARE_LOOP(name)                                                                 \
    static void tsl_##name(const double *restrict x, double *restrict y, long long n) {     \
        unsigned char rare[TSQ_BLOCK];                                                      \
        for (long long i0 = 0; i0 < n; i0 += TSQ_BLOCK) {                                   \
            int m = n - i0 < TSQ_BLOCK ? (int)(n - i0) : TSQ_BLOCK, any = 0;                \
            const double *restrict xb = x + i0;                                             \
            double *restrict yb = y + i0;                                                   \
            for (int i = 0; i < m; ++i) {                                                   \
                yb[i] = tsb_##name(xb[i]);                                                  \
                rare[i] = (unsigned char)tsb_##name##_rare(xb[i]);                          \
            }                                                                               \
            for (int i = 0; i < m; ++i) any |= rare[i];                                     \
            if (any)                                                                        \
                for (int i = 0; i < m; ++i)                                                 \
                    if (rare[i]) yb[i] = ts_##name(xb[i]);                                  \
        }                                                                                   \
    }


/* the double loop of the others: their per-element spelling */
#define TSB_PLAIN_LOOP(name, dfn)                                                           \
    static void tsl_##name(const double *restrict x, double *restrict y, long long n) {     \
        for (long long i = 0; i < n; ++i) y[i] = dfn(x[i]);                                 \
    }

TSB_PLAIN_LOOP(exp, tsb_exp)
TSB_PLAIN_LOOP(expm1, tsb_expm1)
TSB_PLAIN_LOOP(log, tsb_log)
TSB_PLAIN_LOOP(log1p, tsb_log1p)
TSB_PLAIN_LOOP(tanh, tsb_tanh)
TSB_RARE_LOOP(sigmoid)
TSB_PLAIN_LOOP(rsqrt, tsb_rsqrt)

/* Every function the CPU tape runs in C, in the order of core.native.REFMATH: X(name, the
 * double loop, the float loop). refmath_host.c (ctypes) and refmath_py.c (the CPython
 * extension) expand it. */
#define TS_REFMATH_FUNCS(X)                 \
    X(exp, tsl_exp, tsl_expf)               \
    X(expm1, tsl_expm1, tsl_expm1f)         \
    X(log, tsl_log, tsl_logf)               \
    X(log1p, tsl_log1p, tsl_log1pf)         \
    X(tanh, tsl_tanh, tsl_tanhf)            \
    X(sigmoid, tsl_sigmoid, tsl_sigmoidf)   \
    X(erf, tsl_erf, tsl_erff)               \
    X(rsqrt, tsl_rsqrt, tsl_rsqrtf)

#endif /* TS_REFMATH_SIMD_H */
