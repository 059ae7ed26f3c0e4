/* ops_rows.cu: reductions, matmul/bmm, and the row ops of the op table, forward and backward
 * (template: see gpu/source.py). Every sum is serial from +0.0 in the order
 * docs/reference-order.md fixes, inside one thread.
 */

#ifndef TS_GRID_STRIDE /* the host backend's prelude defines its own (lanes: docs/devices.md) */
#define TS_GRID_STRIDE(i, n)                                                             \
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < (n);       \
         i += (long long)gridDim.x * blockDim.x)
#endif

/* sum / mean: perm lists, per output slot j, the R input positions in row-major order. */
extern "C" __global__ void reduce_fwd_T(const real_t* x, real_t* y, const long long* perm,
                                        long long R, long long m, long long mean, real_t n) {
    TS_GRID_STRIDE(j, m) {
        real_t acc = (real_t)0;
        for (long long r = 0; r < R; ++r) acc = ADD(acc, x[perm[j * R + r]]);
        y[j] = mean ? DIV(acc, n) : acc;
    }
}

/* ga = g (sum) or g / n (mean), broadcast back: slot[i] is the output slot of input i. */
extern "C" __global__ void reduce_bwd_T(const real_t* g, real_t* gx, const long long* slot,
                                        long long mean, real_t n, long long count) {
    TS_GRID_STRIDE(i, count) {
        real_t v = g[slot[i]];
        if (mean) v = DIV(v, n);
        gx[i] = ADD(gx[i], RND(v));
    }
}

/* y[b, i, j] (= or +=) dot over k of a[b, i, k] * b[b, k, j], strided operands, serial in k.
 * matmul, bmm, conv2d and all their backward products are this kernel with different strides;
 * y is [B, M, N] with rows contiguous and batch stride syb.
 * One thread owns a TS_MM x TS_MM tile of outputs: each output still accumulates alone, from
 * +0.0, in k order (the tile only shares the loads), so the bits do not depend on the tile.
 * The host backend compiles its own body (wider per thread, below; a user's --kernel file
 * runs the tile there too); CUDA's is the tile. */
#define TS_MM 4
#define TS_HMI 6   /* host body: rows per thread */
#define TS_HKC 64  /* host body: k-steps of b packed at a time */
extern "C" __global__ void mm_T(const real_t* a, const real_t* b, real_t* y, long long B,
                                long long M, long long N, long long K, long long sab,
                                long long sam, long long sak, long long sbb, long long sbk,
                                long long sbn, long long syb, long long accumulate) {
#if defined(TS_HOST_PRELUDE_H) && !defined(TS_USER_KERNEL)
    /* The host backend's body (not in a user's --kernel file, whose edits are to the body
     * below): one thread owns TS_HMI rows x one 64-byte vector of columns
     * (GCC vector types, lane-wise IEEE mul and add, one rounding each, no FMA under
     * -ffp-contract=off), with b's panel packed KC k-steps at a time into a local buffer so the
     * vector load is contiguous whatever b's strides. Every output is still its own chain,
     * acc = +0.0; acc = acc + a * b for k = 0, 1, ... in order: the same bits as the tile
     * below (the launch keeps its 4x4 thread count; threads past the last unit do nothing). */
    /* 64 bytes of columns a row: one vector with AVX-512, two of 32 bytes without (gcc -O2
     * lowered a 64-byte vector on AVX2 through memory and general registers every k-step,
     * ~10x slower products on a znver3, measured); the same lanes, the same chains */
#if defined(__AVX512F__) || !defined(__AVX__)
    typedef real_t ts_hv __attribute__((vector_size(64), aligned(sizeof(real_t)), may_alias));
#define TS_HVN 1
#else
    typedef real_t ts_hv __attribute__((vector_size(32), aligned(sizeof(real_t)), may_alias));
#define TS_HVN 2
#endif
    const int hv = (int)(sizeof(ts_hv) / sizeof(real_t));
    const int hj = (int)(64 / sizeof(real_t));
    const long long tm = (M + TS_HMI - 1) / TS_HMI, tn = (N + hj - 1) / hj;
    const long long total = B * tm * tn;
    TS_GRID_STRIDE(t, total) {
        long long bi = t / (tm * tn);
        long long rem = t - bi * (tm * tn);
        /* rows fastest: consecutive units read the same panel of b (still in cache) */
        long long j0 = (rem / tm) * hj;
        long long i0 = (rem - (rem / tm) * tm) * TS_HMI;
        long long nj = N - j0 < hj ? N - j0 : hj;
        long long ia[TS_HMI];
        for (int p = 0; p < TS_HMI; ++p) /* rows past the edge re-read the last valid one */
            ia[p] = bi * sab + (i0 + p < M ? i0 + p : M - 1) * sam;
        ts_hv acc[TS_HMI][TS_HVN];
        for (int p = 0; p < TS_HMI; ++p)
            for (int h = 0; h < TS_HVN; ++h) {
                ts_hv z = {0};
                acc[p][h] = z;
            }
        alignas(64) real_t pan[TS_HKC * (64 / sizeof(real_t))];
        /* a whole panel of a b whose rows are contiguous is read in place (the pack would
         * load the same elements, store and reload them); the others are packed, and so is
         * every panel of a half-precision b (stored in 2 bytes, computed in float: the pack
         * is the conversion) */
        const int direct = sizeof(b[0]) == sizeof(pan[0]) && sbn == 1 && nj == hj;
        for (long long k0 = 0; k0 < K; k0 += TS_HKC) {
            long long kc = K - k0 < TS_HKC ? K - k0 : TS_HKC;
            const acc_t* src = pan;
            long long sst = hj;
            if (direct) {  /* (the cast is the identity where direct: the same element type) */
                src = (const acc_t*)(b + bi * sbb + k0 * sbk + j0);
                sst = sbk;
            } else {
                for (long long kk = 0; kk < kc; ++kk) {
                    const real_t* bk = b + bi * sbb + (k0 + kk) * sbk + j0 * sbn;
                    for (int q = 0; q < hj; ++q)
                        pan[kk * hj + q] = q < nj ? bk[q * sbn] : (real_t)0;
                }
            }
            for (long long kk = 0; kk < kc; ++kk) {
                ts_hv bv[TS_HVN];
                for (int h = 0; h < TS_HVN; ++h) bv[h] = *(const ts_hv*)(src + kk * sst + h * hv);
                for (int p = 0; p < TS_HMI; ++p) {
                    const real_t av = a[ia[p] + (k0 + kk) * sak];
                    for (int h = 0; h < TS_HVN; ++h) {
                        ts_hv prod = av * bv[h];
                        acc[p][h] = acc[p][h] + prod;
                    }
                }
            }
        }
        for (int p = 0; p < TS_HMI && i0 + p < M; ++p) {
            alignas(64) real_t row[64 / sizeof(real_t)];
            for (int h = 0; h < TS_HVN; ++h) *(ts_hv*)(row + h * hv) = acc[p][h];
            for (long long q = 0; q < nj; ++q) {
                long long o = bi * syb + (i0 + p) * N + j0 + q;
                y[o] = accumulate ? ADD(y[o], RND(row[q])) : row[q];  /* as the tile */
            }
        }
    }
#undef TS_HVN
#else
    long long tm = (M + TS_MM - 1) / TS_MM, tn = (N + TS_MM - 1) / TS_MM;
    long long total = B * tm * tn;
    TS_GRID_STRIDE(t, total) {
        long long bi = t / (tm * tn);
        long long rem = t - bi * (tm * tn);
        long long i0 = (rem / tn) * TS_MM;
        long long j0 = (rem - (rem / tn) * tn) * TS_MM;
        long long ia[TS_MM], jb[TS_MM];
        for (int p = 0; p < TS_MM; ++p) {
            /* rows / columns past the edge re-read the last valid one and are not stored */
            ia[p] = bi * sab + (i0 + p < M ? i0 + p : M - 1) * sam;
            jb[p] = bi * sbb + (j0 + p < N ? j0 + p : N - 1) * sbn;
        }
        real_t acc[TS_MM][TS_MM];
        for (int p = 0; p < TS_MM; ++p)
            for (int q = 0; q < TS_MM; ++q) acc[p][q] = (real_t)0;
        for (long long k = 0; k < K; ++k) {
            real_t av[TS_MM], bv[TS_MM];
            for (int p = 0; p < TS_MM; ++p) av[p] = a[ia[p] + k * sak];
            for (int q = 0; q < TS_MM; ++q) bv[q] = b[jb[q] + k * sbk];
            for (int p = 0; p < TS_MM; ++p)
                for (int q = 0; q < TS_MM; ++q) acc[p][q] = ADD(acc[p][q], MUL(av[p], bv[q]));
        }
        for (int p = 0; p < TS_MM && i0 + p < M; ++p)
            for (int q = 0; q < TS_MM && j0 + q < N; ++q) {
                long long o = bi * syb + (i0 + p) * N + j0 + q;
                y[o] = accumulate ? ADD(y[o], RND(acc[p][q])) : acc[p][q];
            }
    }
#endif
}

/* The row ops (every op of the table with a row form, core/optable/rows.py) are generated here by
 * gpu/rowtable.py, one kernel per pass. */
/* @@ROW_TABLE_KERNELS@@ */
