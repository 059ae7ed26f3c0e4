/* The serial sums' loops (docs/reference-order.md, serial_sum), one source for the ctypes
 * library (refkernels.c: ts_colsum_*, ts_chansum_*) and the CPython extension (refmath_py.c:
 * colsum, chansum, one call per array without ctypes' argument conversion). Each macro is the
 * body of a function of x (const T *), out (T *) and the sizes (long long): r, n for COLSUM;
 * b, n, l for CHANSUM. */
#ifndef TS_SERIAL_SUMS_H
#define TS_SERIAL_SUMS_H

/* Serial sums of the rows of x (r x n): out[j] = acc = +0.0; for i = 0..r-1: acc = acc + x[i][j]
 * (docs/reference-order.md, serial_sum). Vector lanes hold different j: no chain reordered. */
#define COLSUM(T)                                                                       \
    if (n == 1) { /* one chain (a full sum): keep it in a register */                  \
        T acc = (T)0;                                                                   \
        for (long long i = 0; i < r; ++i) acc = acc + x[i];                             \
        out[0] = acc;                                                                   \
        return;                                                                         \
    }                                                                                   \
    for (long long j = 0; j < n; ++j) out[j] = (T)0;                                    \
    for (long long i = 0; i < r; ++i) {                                                 \
        const T *xi = x + i * n;                                                        \
        for (long long j = 0; j < n; ++j) out[j] = out[j] + xi[j];                      \
    }

/* Serial sums over all axes but the second of x (b x n x l, contiguous: a batch-norm channel
 * sum of NCHW): out[j] = acc = +0.0; for i = 0..b-1: for k = 0..l-1: acc = acc + x[i][j][k],
 * COLSUM's order on x transposed to ((b, l), n) without the transposed copy. Eight channels'
 * chains run side by side (each its own row, in its own order): no chain reordered. */
#define CHANSUM(T)                                                                      \
    for (long long j = 0; j < n; ++j) out[j] = (T)0;                                    \
    for (long long i = 0; i < b; ++i) {                                                 \
        const T *xi = x + i * n * l;                                                    \
        long long j = 0;                                                                \
        for (; j + 8 <= n; j += 8) {                                                    \
            T a0 = out[j], a1 = out[j + 1], a2 = out[j + 2], a3 = out[j + 3];           \
            T a4 = out[j + 4], a5 = out[j + 5], a6 = out[j + 6], a7 = out[j + 7];       \
            const T *r = xi + j * l;                                                    \
            for (long long k = 0; k < l; ++k) {                                         \
                a0 = a0 + r[k]; a1 = a1 + r[l + k]; a2 = a2 + r[2 * l + k];             \
                a3 = a3 + r[3 * l + k]; a4 = a4 + r[4 * l + k];                         \
                a5 = a5 + r[5 * l + k]; a6 = a6 + r[6 * l + k];                         \
                a7 = a7 + r[7 * l + k];                                                 \
            }                                                                           \
            out[j] = a0; out[j + 1] = a1; out[j + 2] = a2; out[j + 3] = a3;             \
            out[j + 4] = a4; out[j + 5] = a5; out[j + 6] = a6; out[j + 7] = a7;         \
        }                                                                               \
        for (; j < n; ++j) {                                                            \
            T acc = out[j];                                                             \
            const T *r = xi + j * l;                                                    \
            for (long long k = 0; k < l; ++k) acc = acc + r[k];                         \
            out[j] = acc;                                                               \
        }                                                                               \
    }

#endif
