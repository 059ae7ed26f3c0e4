/* half.cuh: the storage types of half-precision episodes, for CUDA (NVRTC) and the host (g++).
 *
 * A half kernel stores float16 / bfloat16 and computes in float (docs/reference-order.md,
 * "Half precision"): ts_f16 and ts_bf16 are 2-byte storage types, bit-compatible with CUDA's
 * __half and __nv_bfloat16, whose only operations are the exact widening to float and the
 * rounding of a float to nearest even. The conversions are written here in integer arithmetic,
 * once, and compiled as they are by both backends: no cuda_fp16.h (the NVRTC wheel has none),
 * no approximate or flush-to-zero conversion instruction, subnormals kept, and the same bits
 * as numpy's float32 -> float16 and ml_dtypes' float32 -> bfloat16 casts
 * (tests/gpu/test_half_kernels.py checks every boundary and a million random floats).
 * NaN becomes the canonical quiet NaN of the type (the NaN policy leaves NaN bits free).
 */
#ifndef TS_HALF_CUH
#define TS_HALF_CUH

/* float -> float16 bits, round to nearest even (overflow to inf, subnormals exact). */
__device__ __forceinline__ unsigned short ts_f2h_bits(float f) {
    unsigned int x = (unsigned int)__float_as_int(f);
    unsigned int sign = (x >> 16) & 0x8000u;
    unsigned int ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return (unsigned short)(sign | 0x7e00u);      /* NaN */
    if (ax >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u);     /* >= 65520: inf */
    if (ax < 0x38800000u) {                                              /* below 2^-14 */
        if (ax <= 0x33000000u) return (unsigned short)sign;             /* <= 2^-25: 0 */
        unsigned int e = ax >> 23;                                       /* 102 .. 112 */
        unsigned int m = (ax & 0x7fffffu) | 0x800000u;
        unsigned int shift = 126u - e;                                   /* 14 .. 24 */
        unsigned int h = m >> shift;
        unsigned int rem = m & ((1u << shift) - 1u);
        unsigned int mid = 1u << (shift - 1u);
        if (rem > mid || (rem == mid && (h & 1u))) h += 1u;
        return (unsigned short)(sign | h);
    }
    unsigned int h = (ax - 0x38000000u) >> 13;                           /* rebias 127 -> 15 */
    unsigned int rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h += 1u;          /* may carry to inf */
    return (unsigned short)(sign | h);
}

/* float16 bits -> float, exact. */
__device__ __forceinline__ float ts_h2f_bits(unsigned short b) {
    unsigned int sign = ((unsigned int)b & 0x8000u) << 16;
    unsigned int e = ((unsigned int)b >> 10) & 0x1fu;
    unsigned int m = (unsigned int)b & 0x3ffu;
    if (e == 0x1fu) return __int_as_float((int)(sign | 0x7f800000u | (m << 13)));
    if (e == 0u) {
        /* subnormal or zero: m * 2^-24, exact in float (m < 2^10); the sign kept for -0 */
        float v = (float)m * 5.9604644775390625e-08f;
        return __int_as_float((int)(sign | (unsigned int)__float_as_int(v)));
    }
    return __int_as_float((int)(sign | ((e + 112u) << 23) | (m << 13)));
}

/* float -> bfloat16 bits, round to nearest even (bfloat16 has float's exponent range). */
__device__ __forceinline__ unsigned short ts_f2bf_bits(float f) {
    unsigned int x = (unsigned int)__float_as_int(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((x >> 16) | 0x0040u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (unsigned short)(x >> 16);
}

/* bfloat16 bits -> float, exact. */
__device__ __forceinline__ float ts_bf2f_bits(unsigned short b) {
    return __int_as_float((int)((unsigned int)b << 16));
}

/* The storage types: read as float (exact), assigned from a float (one rounding). The
 * constructor is explicit so that `cond ? h : 0.0f` reads h as a float, never the reverse. */
struct ts_f16 {
    unsigned short bits;
    ts_f16() = default;
    __device__ explicit ts_f16(float f) : bits(ts_f2h_bits(f)) {}
    __device__ ts_f16& operator=(float f) {
        bits = ts_f2h_bits(f);
        return *this;
    }
    __device__ operator float() const { return ts_h2f_bits(bits); }
};

struct ts_bf16 {
    unsigned short bits;
    ts_bf16() = default;
    __device__ explicit ts_bf16(float f) : bits(ts_f2bf_bits(f)) {}
    __device__ ts_bf16& operator=(float f) {
        bits = ts_f2bf_bits(f);
        return *this;
    }
    __device__ operator float() const { return ts_bf2f_bits(bits); }
};

/* RND(x) of a half template: x rounded to the storage type and widened back, where the tape
 * rounds a value that the kernel keeps in a register (a backward contribution before it is
 * added, a fused node's value). */
__device__ __forceinline__ float ts_rnd_f16(float x) { return ts_h2f_bits(ts_f2h_bits(x)); }
__device__ __forceinline__ float ts_rnd_bf16(float x) { return ts_bf2f_bits(ts_f2bf_bits(x)); }

#endif /* TS_HALF_CUH */
