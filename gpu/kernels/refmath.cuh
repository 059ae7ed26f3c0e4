/* refmath.cuh: the CUDA C twin of core/refmath (numpy). Same algorithms (fdlibm's), same
 * constants, the same IEEE operations in the same order, so both give the same bits.
 *
 * CUDA intrinsics used (and nothing else: no libm, no implicit FMA):
 *   __dadd_rn __dsub_rn __dmul_rn __ddiv_rn __dsqrt_rn
 *   __double_as_longlong __longlong_as_double __int_as_float
 * plus C comparisons, integer arithmetic, and the conversions int<->double (exact / truncating)
 * and double->float (round to nearest even). On the host, include intrinsics_host.h first and
 * compile with gcc -O2 -ffp-contract=off. On the device, compile without --use_fast_math and
 * without --ftz=true (float subnormals must survive the float<->double conversions).
 *
 * Public functions: ts_exp ts_expm1 ts_log ts_log1p ts_tanh ts_sigmoid ts_erf ts_rsqrt (double)
 * and the same names with an f suffix (float: computed in double, rounded once to float).
 * Every NaN result is the canonical quiet NaN (0x7ff8000000000000 / 0x7fc00000).
 * Algorithms, accuracy and special values: docs/refmath.md.
 */
#ifndef TS_REFMATH_CUH
#define TS_REFMATH_CUH

#define TS_RM_FN static __device__ __forceinline__

#define TS_NAN64 __longlong_as_double(0x7ff8000000000000LL)
#define TS_INF64 __longlong_as_double(0x7ff0000000000000LL)
#define TS_NINF64 __longlong_as_double((long long)0xfff0000000000000ULL)

/* ---- bit helpers (fdlibm's __HI / SET_HIGH_WORD), all exact ---- */

TS_RM_FN int ts__hi(double x) { return (int)(__double_as_longlong(x) >> 32); }

TS_RM_FN double ts__with_hi(double x, int hi) {
    unsigned long long lo = (unsigned long long)__double_as_longlong(x) & 0xffffffffULL;
    return __longlong_as_double((long long)(((unsigned long long)(unsigned int)hi << 32) | lo));
}

TS_RM_FN double ts__from_hi(int hi) {
    return __longlong_as_double((long long)((unsigned long long)(unsigned int)hi << 32));
}

TS_RM_FN double ts__low_cleared(double x) {
    return __longlong_as_double(
        (long long)((unsigned long long)__double_as_longlong(x) & 0xffffffff00000000ULL));
}

/* y * 2**k by adding k to the exponent field (exact while the result stays normal). */
TS_RM_FN double ts__add_exponent(double y, int k) {
    return __longlong_as_double(__double_as_longlong(y) + ((long long)k << 52));
}

/* float result of a double computation: one rounding; NaN made canonical. */
TS_RM_FN float ts__to_float(double r) {
    if (r != r) return __int_as_float(0x7fc00000);
    return (float)r;
}

/* ---- exp: fdlibm e_exp.c. x = k*ln2 + r, |r| <= ln2/2; exp(r) = 1 + r + r*c/(2-c) ---- */

TS_RM_FN double ts_exp(double x) {
    const double ln2_hi = 6.93147180369123816490e-01; /* 0x3fe62e42 fee00000 */
    const double ln2_lo = 1.90821492927058770002e-10; /* 0x3dea39ef 35793c76 */
    const double invln2 = 1.44269504088896338700e+00;
    const double o_threshold = 7.09782712893383973096e+02;
    const double u_threshold = -7.45133219101941108420e+02;
    const double twom1000 = 9.33263618503218878990e-302;
    const double P1 = 1.66666666666666019037e-01;
    const double P2 = -2.77777777770155933842e-03;
    const double P3 = 6.61375632143793436117e-05;
    const double P4 = -1.65339022054652515390e-06;
    const double P5 = 4.13813679705723846039e-08;
    int hx, ix, k;
    double t, hi, lo, r, rr, c, y;

    if (x != x) return TS_NAN64;
    if (x > o_threshold) return TS_INF64;
    if (x < u_threshold) return 0.0;
    hx = ts__hi(x);
    ix = hx & 0x7fffffff;
    if (ix < 0x3e300000) return __dadd_rn(1.0, x); /* |x| < 2**-28 */
    if (ix <= 0x3fd62e42) {
        k = 0; /* |x| <= ln2/2: no reduction (hi = x, lo = +0 below) */
    } else if (ix < 0x3ff0a2b2) {
        k = hx < 0 ? -1 : 1; /* |x| < 1.5 ln2 */
    } else {
        k = (int)__dadd_rn(__dmul_rn(invln2, x), hx < 0 ? -0.5 : 0.5);
    }
    t = (double)k;
    hi = __dsub_rn(x, __dmul_rn(t, ln2_hi)); /* exact: ln2_hi has 32 trailing zeros */
    lo = __dmul_rn(t, ln2_lo);
    r = __dsub_rn(hi, lo);
    rr = __dmul_rn(r, r);
    c = __dsub_rn(r, __dmul_rn(rr, __dadd_rn(P1, __dmul_rn(rr, __dadd_rn(P2, __dmul_rn(rr,
            __dadd_rn(P3, __dmul_rn(rr, __dadd_rn(P4, __dmul_rn(rr, P5))))))))));
    /* y = 1 - ((lo - (r*c)/(2-c)) - hi); for k == 0 this equals fdlibm's 1-((r*c)/(c-2)-r). */
    y = __dsub_rn(1.0, __dsub_rn(__dsub_rn(lo, __ddiv_rn(__dmul_rn(r, c), __dsub_rn(2.0, c))),
                                 hi));
    if (k >= -1021) return ts__add_exponent(y, k);
    return __dmul_rn(ts__add_exponent(y, k + 1000), twom1000); /* subnormal: one rounding */
}

/* ---- log: fdlibm e_log.c. x = 2**k (1+f), log(1+f) = f - hfsq + s*(hfsq+R), s = f/(2+f) ---- */

TS_RM_FN double ts_log(double x) {
    const double ln2_hi = 6.93147180369123816490e-01;
    const double ln2_lo = 1.90821492927058770002e-10;
    const double two54 = 1.80143985094819840000e+16;
    const double Lg1 = 6.666666666666735130e-01;
    const double Lg2 = 3.999999999940941908e-01;
    const double Lg3 = 2.857142874366239149e-01;
    const double Lg4 = 2.222219843214978396e-01;
    const double Lg5 = 1.818357216161805012e-01;
    const double Lg6 = 1.531383769920937332e-01;
    const double Lg7 = 1.479819860511658591e-01;
    int hx, k, i;
    double f, dk, R, s, z, w, t1, t2, hfsq;

    if (!(x >= 0.0)) return TS_NAN64; /* NaN or negative */
    if (x == 0.0) return TS_NINF64;
    if (x == TS_INF64) return TS_INF64;
    k = 0;
    if (x < 2.2250738585072014e-308) { /* subnormal: scale up by 2**54 (exact) */
        k = -54;
        x = __dmul_rn(x, two54);
    }
    hx = ts__hi(x);
    k += (hx >> 20) - 1023;
    hx &= 0x000fffff;
    i = (hx + 0x95f64) & 0x100000; /* mantissa above sqrt(2): normalize x/2 instead */
    x = ts__with_hi(x, hx | (i ^ 0x3ff00000));
    k += i >> 20;
    f = __dsub_rn(x, 1.0);
    dk = (double)k;
    if ((0x000fffff & (2 + hx)) < 3) { /* |f| < 2**-20 */
        if (f == 0.0) {
            if (k == 0) return 0.0;
            return __dadd_rn(__dmul_rn(dk, ln2_hi), __dmul_rn(dk, ln2_lo));
        }
        R = __dmul_rn(__dmul_rn(f, f), __dsub_rn(0.5, __dmul_rn(0.33333333333333333, f)));
        if (k == 0) return __dsub_rn(f, R);
        return __dsub_rn(__dmul_rn(dk, ln2_hi),
                         __dsub_rn(__dsub_rn(R, __dmul_rn(dk, ln2_lo)), f));
    }
    s = __ddiv_rn(f, __dadd_rn(2.0, f));
    z = __dmul_rn(s, s);
    w = __dmul_rn(z, z);
    t1 = __dmul_rn(w, __dadd_rn(Lg2, __dmul_rn(w, __dadd_rn(Lg4, __dmul_rn(w, Lg6)))));
    t2 = __dmul_rn(z, __dadd_rn(Lg1, __dmul_rn(w, __dadd_rn(Lg3, __dmul_rn(w,
             __dadd_rn(Lg5, __dmul_rn(w, Lg7)))))));
    R = __dadd_rn(t2, t1);
    if (((hx - 0x6147a) | (0x6b851 - hx)) > 0) { /* f far from 0: hfsq subtracted apart */
        hfsq = __dmul_rn(__dmul_rn(0.5, f), f);
        if (k == 0) return __dsub_rn(f, __dsub_rn(hfsq, __dmul_rn(s, __dadd_rn(hfsq, R))));
        return __dsub_rn(__dmul_rn(dk, ln2_hi),
                         __dsub_rn(__dsub_rn(hfsq, __dadd_rn(__dmul_rn(s, __dadd_rn(hfsq, R)),
                                                             __dmul_rn(dk, ln2_lo))),
                                   f));
    }
    if (k == 0) return __dsub_rn(f, __dmul_rn(s, __dsub_rn(f, R)));
    return __dsub_rn(__dmul_rn(dk, ln2_hi),
                     __dsub_rn(__dsub_rn(__dmul_rn(s, __dsub_rn(f, R)), __dmul_rn(dk, ln2_lo)),
                               f));
}

/* ---- expm1: fdlibm s_expm1.c. The exp reduction keeps the rounding error c of r = hi - lo ---- */

TS_RM_FN double ts_expm1(double x) {
    const double ln2_hi = 6.93147180369123816490e-01;
    const double ln2_lo = 1.90821492927058770002e-10;
    const double invln2 = 1.44269504088896338700e+00;
    const double o_threshold = 7.09782712893383973096e+02;
    const double Q1 = -3.33333333333331316428e-02;
    const double Q2 = 1.58730158725481460165e-03;
    const double Q3 = -7.93650757867487942473e-05;
    const double Q4 = 4.00821782732936239552e-06;
    const double Q5 = -2.01099218183624371326e-07;
    int hx, ix, k;
    double t, hi, lo, r, c, hfx, hxs, r1, tt, e, y;

    if (x != x) return TS_NAN64;
    if (x > o_threshold) return TS_INF64;
    hx = ts__hi(x);
    ix = hx & 0x7fffffff;
    if (hx < 0 && ix >= 0x4043687a) return -1.0; /* x <= -56 ln2 (and -inf) */
    if (ix < 0x3c900000) return x;                /* |x| < 2**-54 */
    if (ix <= 0x3fd62e42) {
        k = 0;
    } else if (ix < 0x3ff0a2b2) {
        k = hx < 0 ? -1 : 1;
    } else {
        k = (int)__dadd_rn(__dmul_rn(invln2, x), hx < 0 ? -0.5 : 0.5);
    }
    t = (double)k;
    hi = __dsub_rn(x, __dmul_rn(t, ln2_hi));
    lo = __dmul_rn(t, ln2_lo);
    r = __dsub_rn(hi, lo);
    c = __dsub_rn(__dsub_rn(hi, r), lo);
    hfx = __dmul_rn(0.5, r);
    hxs = __dmul_rn(r, hfx);
    r1 = __dadd_rn(1.0, __dmul_rn(hxs, __dadd_rn(Q1, __dmul_rn(hxs, __dadd_rn(Q2, __dmul_rn(hxs,
             __dadd_rn(Q3, __dmul_rn(hxs, __dadd_rn(Q4, __dmul_rn(hxs, Q5))))))))));
    tt = __dsub_rn(3.0, __dmul_rn(r1, hfx));
    e = __dmul_rn(hxs, __ddiv_rn(__dsub_rn(r1, tt), __dsub_rn(6.0, __dmul_rn(r, tt))));
    if (k == 0) return __dsub_rn(r, __dsub_rn(__dmul_rn(r, e), hxs));
    e = __dsub_rn(__dsub_rn(__dmul_rn(r, __dsub_rn(e, c)), c), hxs);
    if (k == -1) return __dsub_rn(__dmul_rn(0.5, __dsub_rn(r, e)), 0.5);
    if (k == 1) {
        if (r < -0.25) return __dmul_rn(-2.0, __dsub_rn(e, __dadd_rn(r, 0.5)));
        return __dadd_rn(1.0, __dmul_rn(2.0, __dsub_rn(r, e)));
    }
    if (k <= -2 || k > 56) { /* exp(x) - 1 with the -1 negligible or exact */
        y = ts__add_exponent(__dsub_rn(1.0, __dsub_rn(e, r)), k);
        return __dsub_rn(y, 1.0);
    }
    if (k < 20) {
        t = ts__from_hi(0x3ff00000 - (0x200000 >> k)); /* 1 - 2**-k */
        return ts__add_exponent(__dsub_rn(t, __dsub_rn(e, r)), k);
    }
    t = ts__from_hi((0x3ff - k) << 20); /* 2**-k */
    y = __dadd_rn(__dsub_rn(r, __dadd_rn(e, t)), 1.0);
    return ts__add_exponent(y, k);
}

/* ---- log1p: fdlibm s_log1p.c. u = 1+x reduced as in log, plus c = rounding error of 1+x ---- */

TS_RM_FN double ts_log1p(double x) {
    const double ln2_hi = 6.93147180369123816490e-01;
    const double ln2_lo = 1.90821492927058770002e-10;
    const double Lp1 = 6.666666666666735130e-01;
    const double Lp2 = 3.999999999940941908e-01;
    const double Lp3 = 2.857142874366239149e-01;
    const double Lp4 = 2.222219843214978396e-01;
    const double Lp5 = 1.818357216161805012e-01;
    const double Lp6 = 1.531383769920937332e-01;
    const double Lp7 = 1.479819860511658591e-01;
    int hx, ax, k, hu;
    double f, c, u, dk, hfsq, R, s, z;

    if (!(x >= -1.0)) return TS_NAN64; /* NaN or x < -1 */
    if (x == -1.0) return TS_NINF64;
    if (x == TS_INF64) return TS_INF64;
    hx = ts__hi(x);
    ax = hx & 0x7fffffff;
    if (ax < 0x3e200000) { /* |x| < 2**-29 */
        if (ax < 0x3c900000) return x;
        return __dsub_rn(x, __dmul_rn(__dmul_rn(x, x), 0.5));
    }
    c = 0.0;
    if (hx < 0x3fda827a && (hx > 0 || hx <= (int)0xbfd2bec3)) { /* -0.2929 < x < 0.41422 */
        k = 0;
        f = x;
        hu = 1;
    } else {
        if (hx < 0x43400000) {
            u = __dadd_rn(1.0, x);
            hu = ts__hi(u);
            k = (hu >> 20) - 1023;
            c = (k > 0) ? __dsub_rn(1.0, __dsub_rn(u, x)) : __dsub_rn(x, __dsub_rn(u, 1.0));
            c = __ddiv_rn(c, u);
        } else {
            u = x;
            hu = ts__hi(u);
            k = (hu >> 20) - 1023;
        }
        hu &= 0x000fffff;
        if (hu < 0x6a09e) {
            u = ts__with_hi(u, hu | 0x3ff00000);
        } else {
            k += 1;
            u = ts__with_hi(u, hu | 0x3fe00000);
            hu = (0x00100000 - hu) >> 2;
        }
        f = __dsub_rn(u, 1.0);
    }
    dk = (double)k;
    hfsq = __dmul_rn(__dmul_rn(0.5, f), f);
    if (hu == 0) { /* |f| < 2**-20 */
        if (f == 0.0) {
            if (k == 0) return 0.0;
            c = __dadd_rn(c, __dmul_rn(dk, ln2_lo));
            return __dadd_rn(__dmul_rn(dk, ln2_hi), c);
        }
        R = __dmul_rn(hfsq, __dsub_rn(1.0, __dmul_rn(0.66666666666666666, f)));
        if (k == 0) return __dsub_rn(f, R);
        return __dsub_rn(__dmul_rn(dk, ln2_hi),
                         __dsub_rn(__dsub_rn(R, __dadd_rn(__dmul_rn(dk, ln2_lo), c)), f));
    }
    s = __ddiv_rn(f, __dadd_rn(2.0, f));
    z = __dmul_rn(s, s);
    R = __dmul_rn(z, __dadd_rn(Lp1, __dmul_rn(z, __dadd_rn(Lp2, __dmul_rn(z, __dadd_rn(Lp3,
            __dmul_rn(z, __dadd_rn(Lp4, __dmul_rn(z, __dadd_rn(Lp5, __dmul_rn(z,
            __dadd_rn(Lp6, __dmul_rn(z, Lp7)))))))))))));
    if (k == 0) return __dsub_rn(f, __dsub_rn(hfsq, __dmul_rn(s, __dadd_rn(hfsq, R))));
    return __dsub_rn(__dmul_rn(dk, ln2_hi),
                     __dsub_rn(__dsub_rn(hfsq, __dadd_rn(__dmul_rn(s, __dadd_rn(hfsq, R)),
                                                         __dadd_rn(__dmul_rn(dk, ln2_lo), c))),
                               f));
}

/* ---- float versions: the double routine, rounded once to float ---- */

TS_RM_FN float ts_expf(float x) { return ts__to_float(ts_exp((double)x)); }
TS_RM_FN float ts_logf(float x) { return ts__to_float(ts_log((double)x)); }
TS_RM_FN float ts_expm1f(float x) { return ts__to_float(ts_expm1((double)x)); }
TS_RM_FN float ts_log1pf(float x) { return ts__to_float(ts_log1p((double)x)); }

#endif /* TS_REFMATH_CUH */
