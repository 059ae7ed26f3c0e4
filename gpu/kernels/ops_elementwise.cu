/* ops_elementwise.cu: forward and backward kernels of the elementwise, unary and data-movement
 * ops (template: real_t / _T / ADD ... see gpu/source.py). Every line follows
 * docs/reference-order.md: one IEEE operation per written operation, in the written order.
 *
 * Broadcasting is resolved on the host into int64 index maps (ia[i], ib[i]: the input element
 * read at output position i). A broadcast input's gradient reduces in the reference order: perm
 * lists, for each input slot j, the R output positions that reduce into it in row-major order.
 */

#define TS_GRID_STRIDE(i, n)                                                             \
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < (n);       \
         i += (long long)gridDim.x * blockDim.x)

/* op codes (gpu/library_ew.py): 0 add, 1 sub, 2 mul, 3 div */
__device__ __forceinline__ real_t ts_bin_T(long long op, real_t a, real_t b) {
    switch (op) {
        case 0: return ADD(a, b);
        case 1: return SUB(a, b);
        case 2: return MUL(a, b);
        default: return DIV(a, b);
    }
}

/* The contribution of output position (a, b, y, g) to input `which` before unb. */
__device__ __forceinline__ real_t ts_bin_term_T(long long op, long long which, real_t a,
                                                 real_t b, real_t y, real_t g) {
    switch (op) {
        case 0: return g;
        case 1: return which == 0 ? g : -g;              /* negation is exact */
        case 2: return which == 0 ? MUL(g, b) : MUL(g, a);
        default: return which == 0 ? DIV(g, b) : -(DIV(MUL(g, y), b)); /* -((g*y)/b) */
    }
}

/* flags: bit0 a is broadcast (read through ia), bit1 b is broadcast (through ib). */
extern "C" __global__ void binary_fwd_T(long long op, const real_t* a, const real_t* b,
                                        real_t* y, const long long* ia, const long long* ib,
                                        long long flags, long long n) {
    TS_GRID_STRIDE(i, n) {
        long long ja = (flags & 1) ? ia[i] : i;
        long long jb = (flags & 2) ? ib[i] : i;
        y[i] = ts_bin_T(op, a[ja], b[jb]);
    }
}

/* flags bit2: this input is reduced (unb over perm, R terms per slot); else m == n. */
extern "C" __global__ void binary_bwd_T(long long op, long long which, const real_t* a,
                                        const real_t* b, const real_t* y, const real_t* g,
                                        real_t* gx, const long long* ia, const long long* ib,
                                        long long flags, const long long* perm, long long R,
                                        long long m) {
    TS_GRID_STRIDE(j, m) {
        if (!(flags & 4)) {
            long long ja = (flags & 1) ? ia[j] : j;
            long long jb = (flags & 2) ? ib[j] : j;
            gx[j] = ADD(gx[j], ts_bin_term_T(op, which, a[ja], b[jb], y[j], g[j]));
        } else {
            real_t acc = (real_t)0;
            for (long long r = 0; r < R; ++r) {
                long long i = perm[j * R + r];
                long long ja = (flags & 1) ? ia[i] : i;
                long long jb = (flags & 2) ? ib[i] : i;
                acc = ADD(acc, ts_bin_term_T(op, which, a[ja], b[jb], y[i], g[i]));
            }
            gx[j] = ADD(gx[j], acc);
        }
    }
}

/* sigmoid under math="platform" (and refmath's fallback): 1 / (1 + exp(-x)), core.mathlib's. */
__device__ __forceinline__ real_t ts_psigmoid_T(real_t x) {
    return DIV((real_t)1, ADD((real_t)1, PEXP(-x)));
}

/* s * (1 + x * (1 - s)): d/dx x*sigmoid(x) in the reference order. */
__device__ __forceinline__ real_t ts_silu_slope_T(real_t x, real_t s) {
    return MUL(s, ADD((real_t)1, MUL(x, SUB((real_t)1, s))));
}

/* op codes: 0 neg 1 adds 2 muls 3 relu 4 sigmoid 5 tanh 6 exp 7 log 8 sqrt 9 silu 10 erf
 * (erf's s is T(2/sqrt(pi)), rounded once on the host) */
__device__ __forceinline__ real_t ts_un_T(long long op, real_t x, real_t s) {
    switch (op) {
        case 0: return -x;
        case 1: return ADD(x, s);
        case 2: return MUL(x, s);
        case 3: return (x > (real_t)0 || x != x) ? x : (real_t)0; /* NaN propagates */
        case 4: return SIGMOID(x);
        case 5: return TANH(x);
        case 6: return EXP(x);
        case 7: return LOG(x);
        case 8: return SQRT(x);
        case 9: return MUL(x, SIGMOID(x));
        default: return ERF(x);
    }
}

__device__ __forceinline__ real_t ts_un_term_T(long long op, real_t x, real_t y, real_t g,
                                                real_t s) {
    switch (op) {
        case 0: return -g;
        case 1: return g;
        case 2: return MUL(g, s);
        case 3: return x > (real_t)0 ? g : (real_t)0;
        case 4: return MUL(g, MUL(y, SUB((real_t)1, y)));
        case 5: return MUL(g, SUB((real_t)1, MUL(y, y)));
        case 6: return MUL(g, y);
        case 7: return DIV(g, x);
        case 8: return DIV(g, ADD(y, y));
        case 9: return MUL(g, ts_silu_slope_T(x, SIGMOID(x)));
        default: return MUL(g, MUL(s, EXP(-(MUL(x, x))))); /* g * (c * exp(-(x*x))) */
    }
}

extern "C" __global__ void unary_fwd_T(long long op, const real_t* x, real_t* y, real_t s,
                                       long long n) {
    TS_GRID_STRIDE(i, n) { y[i] = ts_un_T(op, x[i], s); }
}

extern "C" __global__ void unary_bwd_T(long long op, const real_t* x, const real_t* y,
                                       const real_t* g, real_t* gx, real_t s, long long n) {
    TS_GRID_STRIDE(i, n) { gx[i] = ADD(gx[i], ts_un_term_T(op, x[i], y[i], g[i], s)); }
}

/* swiglu(a, u): s = sigmoid(a); y = (a * s) * u */
extern "C" __global__ void swiglu_fwd_T(const real_t* a, const real_t* u, real_t* y,
                                        long long n) {
    TS_GRID_STRIDE(i, n) { y[i] = MUL(MUL(a[i], SIGMOID(a[i])), u[i]); }
}

extern "C" __global__ void swiglu_bwd_T(long long which, const real_t* a, const real_t* u,
                                        const real_t* g, real_t* gx, long long n) {
    TS_GRID_STRIDE(i, n) {
        real_t s = SIGMOID(a[i]);
        real_t c = which == 0 ? MUL(MUL(g[i], u[i]), ts_silu_slope_T(a[i], s))
                              : MUL(g[i], MUL(a[i], s));
        gx[i] = ADD(gx[i], c);
    }
}

/* ---- data movement: exact copies; backward adds (+0.0 where idx < 0: slice padding) ---- */
extern "C" __global__ void gather_T(const real_t* x, real_t* y, const long long* idx,
                                    long long n) {
    TS_GRID_STRIDE(i, n) { y[i] = x[idx[i]]; }
}

extern "C" __global__ void scatter_T(const real_t* x, real_t* y, const long long* idx,
                                     long long n) {
    TS_GRID_STRIDE(i, n) { y[idx[i]] = x[i]; }
}

extern "C" __global__ void copy_T(const real_t* x, real_t* y, long long n) {
    TS_GRID_STRIDE(i, n) { y[i] = x[i]; }
}

extern "C" __global__ void gather_add_T(const real_t* g, real_t* gx, const long long* idx,
                                        long long n) {
    TS_GRID_STRIDE(i, n) {
        long long k = idx[i];
        gx[i] = ADD(gx[i], k >= 0 ? g[k] : (real_t)0);
    }
}

extern "C" __global__ void add_into_T(const real_t* g, real_t* gx, long long n) {
    TS_GRID_STRIDE(i, n) { gx[i] = ADD(gx[i], g[i]); }
}

/* gather along an axis: x [outer, D, inner], idx [K] (integers in the dtype, negative from the
 * end, read at run time so new indices can be uploaded), y [outer, K, inner]. */
__device__ __forceinline__ long long ts_index_T(real_t v, long long D) {
    long long d = (long long)v;
    return d < 0 ? d + D : d;
}

extern "C" __global__ void take_T(const real_t* x, const real_t* idx, real_t* y,
                                  long long outer, long long D, long long K, long long inner) {
    TS_GRID_STRIDE(o, outer * K * inner) {
        long long in = o % inner, k = (o / inner) % K, ou = o / (inner * K);
        y[o] = x[(ou * D + ts_index_T(idx[k], D)) * inner + in];
    }
}

/* gx[ou, d, in] += (+0.0 + every g[ou, k, in] with idx[k] == d, k ascending) */
extern "C" __global__ void take_bwd_T(const real_t* g, const real_t* idx, real_t* gx,
                                      long long outer, long long D, long long K,
                                      long long inner) {
    TS_GRID_STRIDE(e, outer * D * inner) {
        long long in = e % inner, d = (e / inner) % D, ou = e / (inner * D);
        real_t acc = (real_t)0;
        for (long long k = 0; k < K; ++k)
            if (ts_index_T(idx[k], D) == d) acc = ADD(acc, g[(ou * K + k) * inner + in]);
        gx[e] = ADD(gx[e], acc);
    }
}
