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
 * The host backend compiles its own body (below; a user's --kernel file runs the tile there
 * too); CUDA's is the tile. */
#define TS_MM 4
#if defined(TS_HOST_PRELUDE_H) && !defined(TS_USER_KERNEL)
/* The host body: core/native/refkernels.c's packed-panel scheme. A unit (one thread of the
 * launch; the launch keeps its 4x4 thread count, threads past the last unit do nothing) owns
 * TS_HRB rows x one 64-byte vector of columns; k runs in blocks of TS_HKC steps, and each
 * block's panel of b (TS_HKC x 64 bytes, whatever b's strides) is packed once and serves every
 * row tile of the unit (6, 4, 2 or 1 rows x the vector, in registers), which keep their
 * chains in a local buffer between k-blocks (a store and a reload: exact). A product whose
 * output has fewer columns than a vector and more rows (a late conv's 2x2 or 4x4 image) runs
 * transposed: y^T = b^T a^T, the vector over y's rows, so its lanes are not mostly idle. Every
 * output is still its own chain, acc = +0.0; acc = acc + a * b for k = 0, 1, ... in order
 * (GCC vector types: lane-wise IEEE mul and add, one rounding each, no FMA under
 * -ffp-contract=off): the same bits as the tile below. */
#define TS_HRB 48  /* rows per unit */
#define TS_HKC 128 /* k-steps of b packed at a time */
#define TS_HJ(t) ((int)(64 / sizeof(t))) /* columns per unit: one 64-byte vector */
#ifndef TS_HVN
/* 64 bytes of columns: one vector with AVX-512, two of 32 bytes without (gcc -O2 lowered a
 * 64-byte vector on AVX2 through memory and general registers every k-step, ~10x slower
 * products on a znver3, measured), four of 16 bytes without AVX (the same lowering had been
 * left there: TAPESCOPE_ISA=c, issue 49); the same lanes, the same chains */
#if defined(__AVX512F__)
#define TS_HVN 1
#elif defined(__AVX__)
#define TS_HVN 2
#else
#define TS_HVN 4
#endif
#endif
typedef acc_t ts_hv_T __attribute__((vector_size(64 / TS_HVN), aligned(sizeof(acc_t)),
                                     may_alias));

/* R rows of a unit: row r of a at a + ra[r] (k stride sak), k-steps [k0, k0 + kc) against the
 * packed panel pan (kc rows of TS_HJ columns); chains start at +0.0 (k0 == 0) or continue
 * from acc rows accb, and are left there. */
template <int R>
static inline void ts_mm_tile_T(const real_t* a, const long long* ra, long long sak,
                                long long k0, long long kc, const acc_t* pan, acc_t* accb) {
    const int hv = (int)(sizeof(ts_hv_T) / sizeof(acc_t)), hj = TS_HJ(acc_t);
    ts_hv_T acc[R][TS_HVN];
    for (int r = 0; r < R; ++r)
        for (int h = 0; h < TS_HVN; ++h) {
            ts_hv_T z = {0};
            acc[r][h] = k0 == 0 ? z : *(const ts_hv_T*)(accb + r * hj + h * hv);
        }
    for (long long kk = 0; kk < kc; ++kk) {
        ts_hv_T bv[TS_HVN];
        for (int h = 0; h < TS_HVN; ++h) bv[h] = *(const ts_hv_T*)(pan + kk * hj + h * hv);
        for (int r = 0; r < R; ++r) {
            const acc_t av = a[ra[r] + (k0 + kk) * sak];
            for (int h = 0; h < TS_HVN; ++h) {
                ts_hv_T prod = av * bv[h];
                acc[r][h] = acc[r][h] + prod;
            }
        }
    }
    for (int r = 0; r < R; ++r)
        for (int h = 0; h < TS_HVN; ++h) *(ts_hv_T*)(accb + r * hj + h * hv) = acc[r][h];
}
#endif
extern "C" __global__ void mm_T(const real_t* a, const real_t* b, real_t* y, long long B,
                                long long M, long long N, long long K, long long sab,
                                long long sam, long long sak, long long sbb, long long sbk,
                                long long sbn, long long syb, long long accumulate) {
#if defined(TS_HOST_PRELUDE_H) && !defined(TS_USER_KERNEL)
    /* the host body (above): x is the product as computed, y's rows or (transposed) columns */
    const int hj = TS_HJ(acc_t);
    const int tr = N < hj && M > N;
    const long long xm = tr ? N : M, xn = tr ? M : N;
    const real_t* const xa = tr ? b : a;
    const real_t* const xb = tr ? a : b;
    const long long xab = tr ? sbb : sab, xam = tr ? sbn : sam, xak = tr ? sbk : sak;
    const long long xbb = tr ? sab : sbb, xbk = tr ? sak : sbk, xbn = tr ? sam : sbn;
    const long long ysr = tr ? 1 : N, ysc = tr ? N : 1;
    const long long um = (xm + TS_HRB - 1) / TS_HRB, un = (xn + hj - 1) / hj;
    TS_GRID_STRIDE(t, B * um * un) {
        long long bi = t / (um * un);
        long long rem = t - bi * (um * un);
        /* rows fastest: consecutive units read the same columns of b (still in cache) */
        long long j0 = (rem / um) * hj;
        long long i0 = (rem - (rem / um) * um) * TS_HRB;
        long long nj = xn - j0 < hj ? xn - j0 : hj;
        long long ni = xm - i0 < TS_HRB ? xm - i0 : TS_HRB;
        long long ra[TS_HRB];
        for (long long p = 0; p < ni; ++p) ra[p] = bi * xab + (i0 + p) * xam;
        alignas(64) acc_t accb[TS_HRB * TS_HJ(acc_t)];
        for (long long q = 0; K == 0 && q < ni * hj; ++q) accb[q] = (acc_t)0; /* no k-block */
        alignas(64) acc_t pan[TS_HKC * TS_HJ(acc_t)];
        const real_t* bp = xb + bi * xbb + j0 * xbn;
        for (long long k0 = 0; k0 < K; k0 += TS_HKC) {
            long long kc = K - k0 < TS_HKC ? K - k0 : TS_HKC;
            /* the panel b[k0:k0+kc, j0:j0+hj], zeros past the last column (lanes nobody
             * stores); a copy (for a half b: the conversion), along b's contiguous axis */
            if (xbn == 1) {
                for (long long kk = 0; kk < kc; ++kk)
                    for (long long q = 0; q < hj; ++q)
                        pan[kk * hj + q] = q < nj ? (acc_t)bp[(k0 + kk) * xbk + q] : (acc_t)0;
            } else {
                for (long long q = 0; q < hj; ++q)
                    for (long long kk = 0; kk < kc; ++kk)
                        pan[kk * hj + q] = q < nj ? (acc_t)bp[(k0 + kk) * xbk + q * xbn]
                                                  : (acc_t)0;
            }
            long long p = 0;
            for (; p + 6 <= ni; p += 6) ts_mm_tile_T<6>(xa, ra + p, xak, k0, kc, pan, accb + p * hj);
            if (ni - p >= 4) {
                ts_mm_tile_T<4>(xa, ra + p, xak, k0, kc, pan, accb + p * hj);
                p += 4;
            }
            if (ni - p >= 2) {
                ts_mm_tile_T<2>(xa, ra + p, xak, k0, kc, pan, accb + p * hj);
                p += 2;
            }
            if (ni - p >= 1) ts_mm_tile_T<1>(xa, ra + p, xak, k0, kc, pan, accb + p * hj);
        }
        for (long long p = 0; p < ni; ++p) {
            real_t* yo = y + bi * syb + (i0 + p) * ysr + j0 * ysc;
            const acc_t* ar = accb + p * hj;
            if (ysc == 1) { /* a row of y: contiguous (vectorised) */
                for (long long q = 0; q < nj; ++q)
                    yo[q] = accumulate ? ADD(yo[q], RND(ar[q])) : ar[q]; /* as the tile */
            } else {
                for (long long q = 0; q < nj; ++q)
                    yo[q * ysc] = accumulate ? ADD(yo[q * ysc], RND(ar[q])) : ar[q];
            }
        }
    }
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
