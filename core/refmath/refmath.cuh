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
    /* unsigned arithmetic: shifting a negative k left is undefined in C99/C++ */
    unsigned long long bits = (unsigned long long)__double_as_longlong(y);
    return __longlong_as_double((long long)(bits + ((unsigned long long)(long long)k << 52)));
}

/* float result of a double computation: one rounding; NaN made canonical. */
TS_RM_FN float ts__to_float(double r) {
    if (r != r) return __int_as_float(0x7fc00000);
    return (float)r;
}

/* ---- exp: fdlibm e_exp.c. x = k*ln2 + r, |r| <= ln2/2; exp(r) = 1 + r + r*c/(2-c) ---- */

/* exp's constants: one spelling, shared with core/native/refmath_simd.h's branch-free twin */
#define TS_EXP_CONSTANTS \
    const double ln2_hi = 6.93147180369123816490e-01; /* 0x3fe62e42 fee00000 */ \
    const double ln2_lo = 1.90821492927058770002e-10; /* 0x3dea39ef 35793c76 */ \
    const double invln2 = 1.44269504088896338700e+00; \
    const double o_threshold = 7.09782712893383973096e+02; \
    const double u_threshold = -7.45133219101941108420e+02; \
    const double twom1000 = 9.33263618503218878990e-302; \
    const double P1 = 1.66666666666666019037e-01; \
    const double P2 = -2.77777777770155933842e-03; \
    const double P3 = 6.61375632143793436117e-05; \
    const double P4 = -1.65339022054652515390e-06; \
    const double P5 = 4.13813679705723846039e-08;

TS_RM_FN double ts_exp(double x) {
    TS_EXP_CONSTANTS
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

/* log's constants: one spelling, shared with core/native/refmath_simd.h's branch-free twin */
#define TS_LOG_CONSTANTS \
    const double ln2_hi = 6.93147180369123816490e-01; \
    const double ln2_lo = 1.90821492927058770002e-10; \
    const double two54 = 1.80143985094819840000e+16; \
    const double Lg1 = 6.666666666666735130e-01; \
    const double Lg2 = 3.999999999940941908e-01; \
    const double Lg3 = 2.857142874366239149e-01; \
    const double Lg4 = 2.222219843214978396e-01; \
    const double Lg5 = 1.818357216161805012e-01; \
    const double Lg6 = 1.531383769920937332e-01; \
    const double Lg7 = 1.479819860511658591e-01;

TS_RM_FN double ts_log(double x) {
    TS_LOG_CONSTANTS
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

/* expm1's constants: one spelling, shared with core/native/refmath_simd.h's branch-free twin */
#define TS_EXPM1_CONSTANTS \
    const double ln2_hi = 6.93147180369123816490e-01; \
    const double ln2_lo = 1.90821492927058770002e-10; \
    const double invln2 = 1.44269504088896338700e+00; \
    const double o_threshold = 7.09782712893383973096e+02; \
    const double Q1 = -3.33333333333331316428e-02; \
    const double Q2 = 1.58730158725481460165e-03; \
    const double Q3 = -7.93650757867487942473e-05; \
    const double Q4 = 4.00821782732936239552e-06; \
    const double Q5 = -2.01099218183624371326e-07;

TS_RM_FN double ts_expm1(double x) {
    TS_EXPM1_CONSTANTS
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

/* ---- exp as a double-double, for -708 <= a <= 0: *eh + *el, relative error <= ~2**-54 ----
 * fdlibm's exp with its last two roundings captured exactly (TwoSum, then Fast2Sum). */

TS_RM_FN void ts__exp_dd(double a, double* eh, double* el) {
    const double ln2_hi = 6.93147180369123816490e-01;
    const double ln2_lo = 1.90821492927058770002e-10;
    const double invln2 = 1.44269504088896338700e+00;
    const double P1 = 1.66666666666666019037e-01;
    const double P2 = -2.77777777770155933842e-03;
    const double P3 = 6.61375632143793436117e-05;
    const double P4 = -1.65339022054652515390e-06;
    const double P5 = 4.13813679705723846039e-08;
    int ix, k;
    double t, hi, lo, r, rr, c, s1, big, bb, err, yh, yl, scale;

    ix = ts__hi(a) & 0x7fffffff;
    if (ix <= 0x3fd62e42) {
        k = 0;
    } else if (ix < 0x3ff0a2b2) {
        k = -1;
    } else {
        k = (int)__dsub_rn(__dmul_rn(invln2, a), 0.5);
    }
    t = (double)k;
    hi = __dsub_rn(a, __dmul_rn(t, ln2_hi));
    lo = __dmul_rn(t, ln2_lo);
    r = __dsub_rn(hi, lo);
    rr = __dmul_rn(r, r);
    c = __dsub_rn(r, __dmul_rn(rr, __dadd_rn(P1, __dmul_rn(rr, __dadd_rn(P2, __dmul_rn(rr,
            __dadd_rn(P3, __dmul_rn(rr, __dadd_rn(P4, __dmul_rn(rr, P5))))))))));
    s1 = __dsub_rn(lo, __ddiv_rn(__dmul_rn(r, c), __dsub_rn(2.0, c)));
    big = __dsub_rn(s1, hi); /* TwoSum(s1, -hi) */
    bb = __dsub_rn(big, s1);
    err = __dadd_rn(__dsub_rn(s1, __dsub_rn(big, bb)), __dsub_rn(-hi, bb));
    yh = __dsub_rn(1.0, big); /* Fast2Sum(1, -big) */
    yl = __dsub_rn(__dsub_rn(__dsub_rn(1.0, yh), big), err);
    scale = ts__from_hi((0x3ff + k) << 20); /* 2**k */
    *eh = __dmul_rn(yh, scale);
    *el = __dmul_rn(yl, scale);
}

/* (nh + nl) / (dh + dl) to first order: q + (nl - q*dl)/dh with q = nh/dh. */
TS_RM_FN double ts__ratio_dd(double nh, double nl, double dh, double dl) {
    double q = __ddiv_rn(nh, dh);
    return __dadd_rn(q, __ddiv_rn(__dsub_rn(nl, __dmul_rn(q, dl)), dh));
}

/* ---- tanh: odd Taylor series for |x| < 1/8, else (1-e)/(1+e), e = exp(-2|x|) double-double ---- */

/* tanh's series: one spelling, shared with core/native/refmath_simd.h's branch-free twin */
#define TS_TANH_CONSTANTS \
    const double T1 = -0.3333333333333333, T2 = 0.13333333333333333, \
                 T3 = -0.05396825396825397, T4 = 0.021869488536155203, \
                 T5 = -0.008863235529902197, T6 = 0.003592128036572481, \
                 T7 = -0.0014558343870513183, T8 = 0.000590027440945586, \
                 T9 = -0.00023912911424355248;

TS_RM_FN double ts_tanh(double x) {
    TS_TANH_CONSTANTS
    int hx, ix;
    double z, p, eh, el, nh, nl, dh, dl, y;

    if (x != x) return TS_NAN64;
    hx = ts__hi(x);
    ix = hx & 0x7fffffff;
    if (ix < 0x3c800000) return __dmul_rn(x, __dadd_rn(1.0, x)); /* |x| < 2**-55 */
    if (ix >= 0x40360000) return hx < 0 ? -1.0 : 1.0;            /* |x| >= 22, inf */
    if (ix < 0x3fc00000) {                                       /* |x| < 1/8 */
        z = __dmul_rn(x, x);
        p = __dadd_rn(T1, __dmul_rn(z, __dadd_rn(T2, __dmul_rn(z, __dadd_rn(T3, __dmul_rn(z,
                __dadd_rn(T4, __dmul_rn(z, __dadd_rn(T5, __dmul_rn(z, __dadd_rn(T6,
                __dmul_rn(z, __dadd_rn(T7, __dmul_rn(z, __dadd_rn(T8, __dmul_rn(z,
                T9))))))))))))))));
        return __dadd_rn(x, __dmul_rn(x, __dmul_rn(z, p)));
    }
    ts__exp_dd(__dmul_rn(-2.0, ts__with_hi(x, ix)), &eh, &el);
    nh = __dsub_rn(1.0, eh); /* Fast2Sum: 1 - eh == nh + ((1 - nh) - eh) */
    nl = __dsub_rn(__dsub_rn(__dsub_rn(1.0, nh), eh), el);
    dh = __dadd_rn(1.0, eh); /* Fast2Sum: 1 + eh == dh + (eh - (dh - 1)) */
    dl = __dadd_rn(__dsub_rn(eh, __dsub_rn(dh, 1.0)), el);
    y = ts__ratio_dd(nh, nl, dh, dl);
    return hx < 0 ? -y : y;
}

/* ---- sigmoid: n/(1+e), e = exp(-|x|) double-double, n = 1 (x >= 0) or e (x < 0) ---- */

TS_RM_FN double ts_sigmoid(double x) {
    double eh, el, d, s;

    if (x != x) return TS_NAN64;
    if (x > 708.0) return 1.0;
    if (x < -708.0) return ts_exp(x); /* 1 + e rounds to 1 */
    ts__exp_dd(x < 0.0 ? x : -x, &eh, &el);
    d = __dadd_rn(1.0, eh); /* Fast2Sum: 1 + eh == d + (eh - (d - 1)) */
    s = __dadd_rn(__dsub_rn(eh, __dsub_rn(d, 1.0)), el);
    if (x < 0.0) return ts__ratio_dd(eh, el, d, s);
    return ts__ratio_dd(1.0, 0.0, d, s);
}

/* ---- erf: fdlibm s_erf.c ---- */

/* erf's constants: one spelling, shared with core/native/refmath_simd.h's branch-free twin */
#define TS_ERF_CONSTANTS \
    const double erx = 8.45062911510467529297e-01; \
    const double efx = 1.28379167095512586316e-01; \
    const double efx8 = 1.02703333676410069053e+00; \
    const double pp0 = 1.28379167095512558561e-01, pp1 = -3.25042107247001499370e-01, \
                 pp2 = -2.84817495755985104766e-02, pp3 = -5.77027029648944159157e-03, \
                 pp4 = -2.37630166566501626084e-05; \
    const double qq1 = 3.97917223959155352819e-01, qq2 = 6.50222499887672944485e-02, \
                 qq3 = 5.08130628187576562776e-03, qq4 = 1.32494738004321644526e-04, \
                 qq5 = -3.96022827877536812320e-06; \
    const double pa0 = -2.36211856075265944077e-03, pa1 = 4.14856118683748331666e-01, \
                 pa2 = -3.72207876035701323847e-01, pa3 = 3.18346619901161753674e-01, \
                 pa4 = -1.10894694282396677476e-01, pa5 = 3.54783043256182359371e-02, \
                 pa6 = -2.16637559486879084300e-03; \
    const double qa1 = 1.06420880400844228286e-01, qa2 = 5.40397917702171048937e-01, \
                 qa3 = 7.18286544141962662868e-02, qa4 = 1.26171219808761642112e-01, \
                 qa5 = 1.36370839120290507362e-02, qa6 = 1.19844998467991074170e-02; \
    const double ra0 = -9.86494403484714822705e-03, ra1 = -6.93858572707181764372e-01, \
                 ra2 = -1.05586262253232909814e+01, ra3 = -6.23753324503260060396e+01, \
                 ra4 = -1.62396669462573470355e+02, ra5 = -1.84605092906711035994e+02, \
                 ra6 = -8.12874355063065934246e+01, ra7 = -9.81432934416914548592e+00; \
    const double sa1 = 1.96512716674392571292e+01, sa2 = 1.37657754143519042600e+02, \
                 sa3 = 4.34565877475229228821e+02, sa4 = 6.45387271733267880336e+02, \
                 sa5 = 4.29008140027567833386e+02, sa6 = 1.08635005541779435134e+02, \
                 sa7 = 6.57024977031928170135e+00, sa8 = -6.04244152148580987438e-02; \
    const double rb0 = -9.86494292470009928597e-03, rb1 = -7.99283237680523006574e-01, \
                 rb2 = -1.77579549177547519889e+01, rb3 = -1.60636384855821916062e+02, \
                 rb4 = -6.37566443368389627722e+02, rb5 = -1.02509513161107724954e+03, \
                 rb6 = -4.83519191608651397019e+02; \
    const double sb1 = 3.03380607434824582924e+01, sb2 = 3.25792512996573918826e+02, \
                 sb3 = 1.53672958608443695994e+03, sb4 = 3.19985821950859553908e+03, \
                 sb5 = 2.55305040643316442583e+03, sb6 = 4.74528541206955367215e+02, \
                 sb7 = -2.24409524465858183362e+01;

TS_RM_FN double ts_erf(double x) {
    TS_ERF_CONSTANTS
    int hx, ix;
    double z, r, s, y, P, Q, R, S, ax;

    if (x != x) return TS_NAN64;
    hx = ts__hi(x);
    ix = hx & 0x7fffffff;
    if (ix >= 0x40180000) return hx < 0 ? -1.0 : 1.0; /* |x| >= 6 (and inf) */
    if (ix < 0x3feb0000) {                            /* |x| < 0.84375 */
        if (ix < 0x3e300000) {                        /* |x| < 2**-28 */
            if (ix < 0x00800000) /* scaled so that efx*x cannot underflow */
                return __dmul_rn(0.125, __dadd_rn(__dmul_rn(8.0, x), __dmul_rn(efx8, x)));
            return __dadd_rn(x, __dmul_rn(efx, x));
        }
        z = __dmul_rn(x, x);
        r = __dadd_rn(pp0, __dmul_rn(z, __dadd_rn(pp1, __dmul_rn(z, __dadd_rn(pp2,
                __dmul_rn(z, __dadd_rn(pp3, __dmul_rn(z, pp4))))))));
        s = __dadd_rn(1.0, __dmul_rn(z, __dadd_rn(qq1, __dmul_rn(z, __dadd_rn(qq2,
                __dmul_rn(z, __dadd_rn(qq3, __dmul_rn(z, __dadd_rn(qq4,
                __dmul_rn(z, qq5))))))))));
        y = __ddiv_rn(r, s);
        return __dadd_rn(x, __dmul_rn(x, y));
    }
    ax = ts__with_hi(x, ix);
    if (ix < 0x3ff40000) { /* 0.84375 <= |x| < 1.25 */
        s = __dsub_rn(ax, 1.0);
        P = __dadd_rn(pa0, __dmul_rn(s, __dadd_rn(pa1, __dmul_rn(s, __dadd_rn(pa2,
                __dmul_rn(s, __dadd_rn(pa3, __dmul_rn(s, __dadd_rn(pa4, __dmul_rn(s,
                __dadd_rn(pa5, __dmul_rn(s, pa6))))))))))));
        Q = __dadd_rn(1.0, __dmul_rn(s, __dadd_rn(qa1, __dmul_rn(s, __dadd_rn(qa2,
                __dmul_rn(s, __dadd_rn(qa3, __dmul_rn(s, __dadd_rn(qa4, __dmul_rn(s,
                __dadd_rn(qa5, __dmul_rn(s, qa6))))))))))));
        if (hx >= 0) return __dadd_rn(erx, __ddiv_rn(P, Q));
        return __dsub_rn(-erx, __ddiv_rn(P, Q));
    }
    s = __ddiv_rn(1.0, __dmul_rn(ax, ax)); /* 1.25 <= |x| < 6 */
    if (ix < 0x4006db6e) { /* |x| < 1/0.35 */
        R = __dadd_rn(ra0, __dmul_rn(s, __dadd_rn(ra1, __dmul_rn(s, __dadd_rn(ra2,
                __dmul_rn(s, __dadd_rn(ra3, __dmul_rn(s, __dadd_rn(ra4, __dmul_rn(s,
                __dadd_rn(ra5, __dmul_rn(s, __dadd_rn(ra6, __dmul_rn(s, ra7))))))))))))));
        S = __dadd_rn(1.0, __dmul_rn(s, __dadd_rn(sa1, __dmul_rn(s, __dadd_rn(sa2,
                __dmul_rn(s, __dadd_rn(sa3, __dmul_rn(s, __dadd_rn(sa4, __dmul_rn(s,
                __dadd_rn(sa5, __dmul_rn(s, __dadd_rn(sa6, __dmul_rn(s, __dadd_rn(sa7,
                __dmul_rn(s, sa8))))))))))))))));
    } else {
        R = __dadd_rn(rb0, __dmul_rn(s, __dadd_rn(rb1, __dmul_rn(s, __dadd_rn(rb2,
                __dmul_rn(s, __dadd_rn(rb3, __dmul_rn(s, __dadd_rn(rb4, __dmul_rn(s,
                __dadd_rn(rb5, __dmul_rn(s, rb6))))))))))));
        S = __dadd_rn(1.0, __dmul_rn(s, __dadd_rn(sb1, __dmul_rn(s, __dadd_rn(sb2,
                __dmul_rn(s, __dadd_rn(sb3, __dmul_rn(s, __dadd_rn(sb4, __dmul_rn(s,
                __dadd_rn(sb5, __dmul_rn(s, __dadd_rn(sb6, __dmul_rn(s, sb7))))))))))))));
    }
    z = ts__low_cleared(ax); /* z*z exact: z has 21 significant bits */
    r = __dmul_rn(ts_exp(__dsub_rn(__dmul_rn(-z, z), 0.5625)),
                  ts_exp(__dadd_rn(__dmul_rn(__dsub_rn(z, ax), __dadd_rn(z, ax)),
                                   __ddiv_rn(R, S))));
    if (hx >= 0) return __dsub_rn(1.0, __ddiv_rn(r, ax));
    return __dsub_rn(__ddiv_rn(r, ax), 1.0);
}

/* ---- rsqrt: 1/sqrt(x), two correctly rounded operations ---- */

TS_RM_FN double ts_rsqrt(double x) {
    if (x != x || x < 0.0) return TS_NAN64;
    return __ddiv_rn(1.0, __dsqrt_rn(x));
}

/* ---- float versions: the double routine, rounded once to float ---- */

TS_RM_FN float ts_expf(float x) { return ts__to_float(ts_exp((double)x)); }
TS_RM_FN float ts_logf(float x) { return ts__to_float(ts_log((double)x)); }
TS_RM_FN float ts_expm1f(float x) { return ts__to_float(ts_expm1((double)x)); }
TS_RM_FN float ts_log1pf(float x) { return ts__to_float(ts_log1p((double)x)); }
TS_RM_FN float ts_tanhf(float x) { return ts__to_float(ts_tanh((double)x)); }
TS_RM_FN float ts_sigmoidf(float x) { return ts__to_float(ts_sigmoid((double)x)); }
TS_RM_FN float ts_erff(float x) { return ts__to_float(ts_erf((double)x)); }
TS_RM_FN float ts_rsqrtf(float x) { return ts__to_float(ts_rsqrt((double)x)); }

#endif /* TS_REFMATH_CUH */
