"""Hand-written grid-stride kernels and what their author states of them (test_host_lanes,
test_kernel_facts)."""

from __future__ import annotations

from tapescope.gpu.kernel_facts import LANES, PLAIN

GUARD = """#ifndef TS_GRID_STRIDE
#define TS_GRID_STRIDE(i, n)                                                          \\
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < (n);    \\
         i += (long long)gridDim.x * blockDim.x)
#endif
"""


# per element: a serial sum of K products (the reference order of a dot product), and a
# multiply-add pair written so that a contraction would change the bits
SRC = GUARD + r"""
extern "C" __global__ void rowdot(const double* a, const double* b, double* y, long long n,
                                  long long K) {
    TS_GRID_STRIDE(i, n) {
        double acc = 0.0;
        for (long long k = 0; k < K; ++k) acc = __dadd_rn(acc, __dmul_rn(a[i * K + k], b[k]));
        y[i] = acc;
    }
}
extern "C" __global__ void muladd(const double* a, const double* b, const double* c,
                                  double* y, double* z, long long n) {
    TS_GRID_STRIDE(i, n) {
        y[i] = __dadd_rn(__dmul_rn(a[i], b[i]), c[i]);
        z[i] = __dsub_rn(__dmul_rn(a[i], c[i]), __dmul_rn(b[i], c[i]));
    }
}
extern "C" __global__ void racy(const double* x, double* y, long long n) {
    TS_GRID_STRIDE(i, n) { y[i % 7] = x[i]; }  /* planted: threads write one element */
}
extern "C" __global__ void by_thread(double* y, long long n) {
    if (threadIdx.x == 3) return;  /* tells threads apart outside the loop: never lanes */
    TS_GRID_STRIDE(i, n) { y[i] = 1.0; }
}
"""


#: what SRC's author states of its kernels (the generators' role in these tests)
SRC_FACTS = {"rowdot": LANES, "muladd": LANES, "racy": LANES, "by_thread": PLAIN}


SQRT_SRC = GUARD + r"""
extern "C" __global__ void sqrts(const double* x, double* y, const float* xf, float* yf,
                                 long long n) {
    TS_GRID_STRIDE(i, n) {
        y[i] = __dsqrt_rn(x[i]);
        yf[i] = __fsqrt_rn(xf[i]);
    }
}
"""
