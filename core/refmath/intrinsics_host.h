/* intrinsics_host.h: the CUDA arithmetic and bit intrinsics, defined for gcc on the host.
 *
 * Each intrinsic is one IEEE-754 operation rounded to nearest-even, exactly what the CUDA
 * intrinsic of the same name computes on the device. Compile with -ffp-contract=off (and never
 * -ffast-math): after inlining, gcc could otherwise fuse __dmul_rn + __dadd_rn into an FMA.
 * With FMA in the target (-march=native) also -fno-tree-vectorize: gcc 12's vectorizer forms
 * vfmaddsub from a mul/sub + mul/add pair even under -ffp-contract=off (gpu/host.py).
 * Also assumes SSE2 double arithmetic (x86-64; no x87 excess precision) and the default
 * rounding mode. __builtin_sqrt/__builtin_fma are one instruction where the target has it,
 * with a libm fallback (errno path, no-FMA targets): executables link -lm, shared objects
 * loaded into Python need nothing. Self-contained (no headers: gcc builtins only), valid C99
 * and C++, and harmless when included twice or after a prelude that already defines
 * __device__ and friends.
 */
#ifndef TS_INTRINSICS_HOST_H
#define TS_INTRINSICS_HOST_H

#if defined(__FAST_MATH__)
#error "intrinsics_host.h: -ffast-math breaks the one-rounding-per-operation contract"
#endif

#ifndef __device__
#define __device__
#endif
#ifndef __host__
#define __host__
#endif
#ifndef __forceinline__
#define __forceinline__ inline
#endif

/* double precision: +, -, *, /, sqrt and the fused multiply-add (one rounding each). */
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dsub_rn(double a, double b) { return a - b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline double __ddiv_rn(double a, double b) { return a / b; }
static inline double __dsqrt_rn(double a) { return __builtin_sqrt(a); }
static inline double __fma_rn(double a, double b, double c) { return __builtin_fma(a, b, c); }

/* single precision, for kernels that compute in float. */
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __fsqrt_rn(float a) { return __builtin_sqrtf(a); }
static inline float __fmaf_rn(float a, float b, float c) { return __builtin_fmaf(a, b, c); }

/* bit casts (memcpy is the type-pun that is defined in both C and C++). */
static inline long long __double_as_longlong(double x) {
    long long r;
    __builtin_memcpy(&r, &x, sizeof r);
    return r;
}
static inline double __longlong_as_double(long long x) {
    double r;
    __builtin_memcpy(&r, &x, sizeof r);
    return r;
}
static inline int __float_as_int(float x) {
    int r;
    __builtin_memcpy(&r, &x, sizeof r);
    return r;
}
static inline float __int_as_float(int x) {
    float r;
    __builtin_memcpy(&r, &x, sizeof r);
    return r;
}

#endif /* TS_INTRINSICS_HOST_H */
