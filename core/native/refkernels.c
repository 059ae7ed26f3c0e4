/* Reference-order kernels for the CPU tape, compiled with gcc -O3 -ffp-contract=off.
 *
 * Same order as core/ops/reference.py: every c[i][j] is acc = 0.0; for k in order:
 * acc = acc + a[i][k] * b[k][j], one rounding for the product and one for the add (no FMA:
 * -ffp-contract=off). The loops are i-k-j so the compiler vectorises over j; vector lanes hold
 * different (i, j) chains, so no chain is ever reordered.
 */
#include <stddef.h>

/* Four rows at a time: each loaded b[k][j..] feeds four independent chains (one per row),
 * which is what makes this fast; every chain still runs k = 0, 1, 2, ... in order. */
#define MM_BODY(T)                                                                      \
    long long i = 0;                                                                    \
    for (; i + 4 <= m; i += 4) {                                                        \
        T *c0 = c + i * n, *c1 = c0 + n, *c2 = c1 + n, *c3 = c2 + n;                    \
        const T *a0 = a + i * k, *a1 = a0 + k, *a2 = a1 + k, *a3 = a2 + k;              \
        for (long long j = 0; j < n; ++j) c0[j] = c1[j] = c2[j] = c3[j] = (T)0;         \
        for (long long kk = 0; kk < k; ++kk) {                                          \
            const T x0 = a0[kk], x1 = a1[kk], x2 = a2[kk], x3 = a3[kk];                 \
            const T *bk = b + kk * n;                                                   \
            for (long long j = 0; j < n; ++j) {                                         \
                const T bj = bk[j];                                                     \
                T p0 = x0 * bj, p1 = x1 * bj, p2 = x2 * bj, p3 = x3 * bj;               \
                c0[j] = c0[j] + p0; c1[j] = c1[j] + p1;                                 \
                c2[j] = c2[j] + p2; c3[j] = c3[j] + p3;                                 \
            }                                                                           \
        }                                                                               \
    }                                                                                   \
    for (; i < m; ++i) {                                                                \
        T *ci = c + i * n;                                                              \
        for (long long j = 0; j < n; ++j) ci[j] = (T)0;                                 \
        const T *ai = a + i * k;                                                        \
        for (long long kk = 0; kk < k; ++kk) {                                          \
            const T aik = ai[kk];                                                       \
            const T *bk = b + kk * n;                                                   \
            for (long long j = 0; j < n; ++j) {                                         \
                T p = aik * bk[j];                                                      \
                ci[j] = ci[j] + p;                                                      \
            }                                                                           \
        }                                                                               \
    }

void ts_mm_f64(const double *a, const double *b, double *c, long long m, long long k,
               long long n) { MM_BODY(double) }

void ts_mm_f32(const float *a, const float *b, float *c, long long m, long long k,
               long long n) { MM_BODY(float) }
