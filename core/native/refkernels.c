/* Reference-order kernels for the CPU tape, compiled with gcc -O3 -ffp-contract=off.
 *
 * Same order as core/ops/reference.py: every c[i][j] is acc = 0.0; for k in order:
 * acc = acc + a[i][k] * b[k][j], one rounding for the product and one for the add (no FMA:
 * -ffp-contract=off). The loops are i-k-j so the compiler vectorises over j; vector lanes hold
 * different (i, j) chains, so no chain is ever reordered.
 *
 * Threads: the work is split into blocks of whole output rows (per batch for the batched
 * product); each output element is computed by exactly one thread, with the same serial k-loop
 * as one thread would run, and no two threads ever add into the same element. So the bits do not
 * depend on the thread count (deterministic by construction; tests/core/test_native.py checks).
 * The threads are a persistent pool (pool_run below), created once and reused by every product
 * and Adam update; the blocks are claimed from a shared counter, never split inside.
 *
 * Convolutions (ts_conv_ep): the product w @ im2col(x) without the im2col matrix. MM_ROWS reads
 * b only through ROWS_GET / ROWS_LINE / ROWS_PACK / ROWS_PACK_WIDE, so the same loops either
 * pack b from a matrix (the plain products) or build each packed row straight from the image
 * (mm_rows_cv: zero padding, strides, dilations); with few rows per group the shifted conv
 * (conv_shift) packs nothing and reads b's vectors from zero-padded phase planes of the image
 * over a widened output grid; onto a small output plane (conv_small.h) the lanes run over
 * output channels instead. A packing or layout changes which values sit where, never a
 * chain: every output is still acc = 0; acc = acc + w*x over (c, kh, kw) in order.
 */
#define _GNU_SOURCE /* clock_gettime, pthread_atfork, getpid under -std=c99 */
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

/* Rows [i0, i1) of one product, in register tiles: R rows x JB columns of c live in local
 * accumulators for the whole k-loop (so c is not reloaded and stored once per k), each loaded
 * b[k][j..] feeds R independent chains; every chain still runs k = 0, 1, 2, ... in order, one
 * rounding for the product and one for the add. JB is a compile-time constant so gcc keeps the
 * tile in vector registers. Columns past the last whole tile take the plain i-k-j loop. */
/* GCC vector types of 64 bytes (16 floats, 8 doubles): lane-wise IEEE operations, one rounding
 * each (no FMA under -ffp-contract=off), loadable from any element-aligned address. */
typedef float v16f32 __attribute__((vector_size(64), aligned(4), may_alias));
typedef double v8f64 __attribute__((vector_size(64), aligned(8), may_alias));
/* A thread's own buffer (a __thread array), its address taken once: the empty asm makes the
 * pointer a value gcc cannot recompute, so it stays in a register or a stack slot. Without it,
 * in a shared object (-fPIC: the general-dynamic TLS model), gcc re-derived the address inside
 * the loops that use it, a __tls_get_addr call (and a vzeroupper before it) per output row's
 * tail: 20 % of the shifted conv's time on squeezenet's first conv (perf annotate, Intel Xeon;
 * the same code on every x86-64). */
#define TLS_BUF(buf) tls_buf_((void *)(buf))
static inline void *tls_buf_(void *p) {
    __asm__("" : "+r"(p));
    return p;
}

/* The product's tile is sized to the register file: with AVX-512 (32 registers of 64 bytes)
 * R rows x 4 vectors of 64 bytes; without it (AVX2: 16 registers of 32 bytes) a 64-byte tile
 * of 6 x 4 vectors is 48 registers of accumulators, which gcc spills to the stack on every
 * k-step (measured on a znver3: 2.4 GFLOP/s float32), so there the tile is R rows x 2
 * vectors of 32 bytes (12 accumulators, 2 of b, 1 of a). The tile shape only decides which
 * chains run side by side; every chain is the same serial k-loop, so the bits are the same. */
#if defined(__AVX512F__)
typedef v16f32 vmf32;
typedef v8f64 vmf64;
#define MM_Q 4
#define JB64 32
#define JB32 64
/* narrower tiles (one vector register wide) for the columns past the last whole JB panel */
#define JS64 8
#define JS32 16
#elif defined(__AVX__)
typedef float v8f32 __attribute__((vector_size(32), aligned(4), may_alias));
typedef double v4f64 __attribute__((vector_size(32), aligned(8), may_alias));
typedef v8f32 vmf32;
typedef v4f64 vmf64;
#define MM_Q 2
#define JB64 8
#define JB32 16
#define JS64 4
#define JS32 8
#else
/* no AVX (TAPESCOPE_ISA=c, or a CPU without it): the 16 registers of 16 bytes that SSE2 has.
 * The 64-byte tiles this branch once shared with AVX-512 took gcc over two minutes to
 * allocate and spilled every k-step; the build timed out and numpy ran instead, unnoticed,
 * because no test ran this path (issue 49). */
typedef float v4f32 __attribute__((vector_size(16), aligned(4), may_alias));
typedef double v2f64 __attribute__((vector_size(16), aligned(8), may_alias));
typedef v4f32 vmf32;
typedef v2f64 vmf64;
#define MM_Q 2
#define JB64 4
#define JB32 8
#define JS64 2
#define JS32 4
#endif

/* p = x * bv, lane-wise, x a scalar read from memory at xp: with AVX-512 the broadcast rides
 * the multiply's memory operand ({1to16}); a separate vbroadcastss into a register cost one
 * FP-pipe slot per row on a Zen 4 (a 6 x 4-vector tile ran at 90.6 GFLOP/s against 115.5 with
 * the operand form, its mul + add peak: docs/benchmarks.md, session 11). The same one rounding
 * per product (vmulps); only which NaN's payload a NaN x NaN keeps may differ, outside the
 * contract (docs/reference-order.md, NaN policy). */
#if defined(__AVX512F__) && !defined(TS_NO_EMBCAST)
#define BMUL(T, V, p, xp, bv)                                                           \
    do {                                                                                \
        if (sizeof(V) == 64 && sizeof(T) == 4)                                          \
            __asm__("vmulps %1%{1to16%}, %2, %0" : "=v"(p) : "m"(*(const float *)(xp)), "v"(bv)); \
        else if (sizeof(V) == 64 && sizeof(T) == 8)                                     \
            __asm__("vmulpd %1%{1to8%}, %2, %0" : "=v"(p) : "m"(*(const double *)(xp)), "v"(bv)); \
        else                                                                            \
            (p) = *(xp) * (bv);                                                         \
    } while (0)
#else
#define BMUL(T, V, p, xp, bv) ((p) = *(xp) * (bv))
#endif

/* One tile: R rows from i, JB columns of the panel bp (row stride bs), k-steps [k0, k1), nv <= JB
 * of the columns stored at column j of c. A tile starts its chains at +0.0 (k0 == 0) or
 * continues them from what the previous k-block stored in c: storing and reloading a double is
 * exact, so every chain is still acc = 0; acc = acc + a*b for k = 0, 1, ... in order. */
#define MM_TILE(T, R, JB, bp, bs, nv)                                                   \
    {                                                                                   \
        T acc[R][JB];                                                                   \
        for (int r = 0; r < R; ++r)                                                     \
            for (int jj = 0; jj < JB; ++jj)                                             \
                acc[r][jj] = (k0 == 0 || jj >= (nv)) ? (T)0 : c[(i + r) * n + j + jj];  \
        for (long long kk = k0; kk < k1; ++kk) {                                        \
            const T *bk = (bp) + kk * (bs);                                             \
            for (int r = 0; r < R; ++r) {                                               \
                const T x = a[(i + r) * sar + kk * sac];                                        \
                for (int jj = 0; jj < JB; ++jj) {                                       \
                    T p = x * bk[jj];                                                   \
                    acc[r][jj] = acc[r][jj] + p;                                        \
                }                                                                       \
            }                                                                           \
        }                                                                               \
        for (int r = 0; r < R; ++r)                                                     \
            for (long long jj = 0; jj < (nv); ++jj) c[(i + r) * n + j + jj] = acc[r][jj]; \
    }

/* A whole JB-wide tile (MM_Q vectors per row) with GCC vector types: the panel's vectors
 * of b[k] are loaded once per k and feed all R rows' chains (gcc otherwise reloads them per
 * row). Same chains, same order, one rounding per mul and per add. */
#if MM_Q == 4
#define MM_TILE4(T, V, R, bp, bs)                                                       \
    {                                                                                   \
        V acc[R][4];                                                                    \
        const long long lanes = (long long)(sizeof(V) / sizeof(T));                     \
        for (int r = 0; r < R; ++r)                                                     \
            for (int q = 0; q < 4; ++q) {                                               \
                if (k0 == 0) {                                                          \
                    V z = {0};                                                          \
                    acc[r][q] = z;                                                      \
                } else {                                                                \
                    acc[r][q] = *(const V *)(c + (i + r) * n + j + q * lanes);          \
                }                                                                       \
            }                                                                           \
        for (long long kk = k0; kk < k1; ++kk) {                                        \
            const V *bk = (const V *)((bp) + (kk - k0) * (bs));                         \
            const V b0 = bk[0], b1 = bk[1], b2 = bk[2], b3 = bk[3];                     \
            for (int r = 0; r < R; ++r) {                                               \
                const T *xp = &a[(i + r) * sar + kk * sac];                             \
                V p0, p1, p2, p3;                                                       \
                BMUL(T, V, p0, xp, b0);                                                 \
                BMUL(T, V, p1, xp, b1);                                                 \
                BMUL(T, V, p2, xp, b2);                                                 \
                BMUL(T, V, p3, xp, b3);                                                 \
                acc[r][0] = acc[r][0] + p0;                                             \
                acc[r][1] = acc[r][1] + p1;                                             \
                acc[r][2] = acc[r][2] + p2;                                             \
                acc[r][3] = acc[r][3] + p3;                                             \
            }                                                                           \
        }                                                                               \
        for (int r = 0; r < R; ++r)                                                     \
            for (int q = 0; q < 4; ++q)                                                 \
                *(V *)(c + (i + r) * n + j + q * lanes) = acc[r][q];                    \
    }
#else
#define MM_TILE4(T, V, R, bp, bs)                                                       \
    {                                                                                   \
        V acc[R][2];                                                                    \
        const long long lanes = (long long)(sizeof(V) / sizeof(T));                     \
        for (int r = 0; r < R; ++r)                                                     \
            for (int q = 0; q < 2; ++q) {                                               \
                if (k0 == 0) {                                                          \
                    V z = {0};                                                          \
                    acc[r][q] = z;                                                      \
                } else {                                                                \
                    acc[r][q] = *(const V *)(c + (i + r) * n + j + q * lanes);          \
                }                                                                       \
            }                                                                           \
        for (long long kk = k0; kk < k1; ++kk) {                                        \
            const V *bk = (const V *)((bp) + (kk - k0) * (bs));                         \
            const V b0 = bk[0], b1 = bk[1];                                             \
            for (int r = 0; r < R; ++r) {                                               \
                const T x = a[(i + r) * sar + kk * sac];                                        \
                V p0 = x * b0, p1 = x * b1;                                             \
                acc[r][0] = acc[r][0] + p0;                                             \
                acc[r][1] = acc[r][1] + p1;                                             \
            }                                                                           \
        }                                                                               \
        for (int r = 0; r < R; ++r)                                                     \
            for (int q = 0; q < 2; ++q)                                                 \
                *(V *)(c + (i + r) * n + j + q * lanes) = acc[r][q];                    \
    }
#endif

/* The same tile R rows x one vector of JS columns, written with GCC vector types (lane-wise
 * IEEE mul and add, one rounding each) so gcc keeps the R accumulators in registers. */
#define MM_TILEV(T, V, R, JS, bp, bs, nv, KB)                                             \
    {                                                                                   \
        V acc[R];                                                                       \
        for (int r = 0; r < R; ++r) {                                                   \
            V t0 = {0};                                                                 \
            for (int jj = 0; jj < JS; ++jj)                                             \
                t0[jj] = (k0 == 0 || jj >= (nv)) ? (T)0 : c[(i + r) * n + j + jj];      \
            acc[r] = t0;                                                                \
        }                                                                               \
        for (long long kk = k0; kk < k1; ++kk) {                                        \
            const V bk = *(const V *)((bp) + (kk - (KB)) * (bs));                       \
            for (int r = 0; r < R; ++r) {                                               \
                const T x = a[(i + r) * sar + kk * sac];                                        \
                V p = x * bk; /* BMUL here measured slower: 76.7 against 101.8 GFLOP/s */  \
                acc[r] = acc[r] + p;                                                    \
            }                                                                           \
        }                                                                               \
        for (int r = 0; r < R; ++r)                                                     \
            for (long long jj = 0; jj < (nv); ++jj) c[(i + r) * n + j + jj] = acc[r][jj]; \
    }

#define MM_TAIL(T, R, J0)                                                               \
    for (int r = 0; r < R; ++r) {                                                       \
        T *ci = c + (i + r) * n;                                                        \
        for (long long jj = J0; jj < n; ++jj) ci[jj] = (T)0;                            \
        for (long long kk = 0; kk < k; ++kk) {                                          \
            const T aik = a[(i + r) * sar + kk * sac];                                  \
            for (long long jj = J0; jj < n; ++jj) {                                     \
                T p = aik * ROWS_GET(kk, jj);                                           \
                ci[jj] = ci[jj] + p;                                                    \
            }                                                                           \
        }                                                                               \
    }

/* k-blocks outside (a KC x JB panel of b stays in L1 while every row tile of the block uses it;
 * chains continue across k-blocks through c, see MM_TILE), column panels next, rows inside.
 * The last, narrower panel is copied into a zero-filled k x JB buffer so it runs as a whole
 * tile too (the extra lanes compute products nobody stores); when that buffer cannot be had,
 * those columns take the plain i-k-j loop. */
#define KC 128
/* b[k0:k1, j:j+W] into bpk, W to a row: a copy, from b's strides (sbr, sbc) */
#define MM_PACK(W)                                                                      \
    if (sbc == 1)                                                                       \
        for (long long kk = k0; kk < k1; ++kk)                                          \
            for (int jj = 0; jj < (W); ++jj) bpk[(kk - k0) * (W) + jj] = b[kk * sbr + j + jj]; \
    else                                                                                \
        for (int jj = 0; jj < (W); ++jj)                                                \
            for (long long kk = k0; kk < k1; ++kk)                                      \
                bpk[(kk - k0) * (W) + jj] = b[kk * sbr + (j + jj) * sbc];
/* b[k0:k1, jc:jce] into wide as consecutive KC x JB panels (panel p at wide + p * KC * JB,
 * W to a row): each row of b read jce - jc elements in a run; a copy, so exact */
#define NCW (256 / JB32) /* 256 floats (128 doubles) of each row of b */
#define MC 96             /* rows of a a packed block serves before the next (a multiple of 6) */
#define MM_PACK_WIDE(T, W)                                                               \
    if (sbc == 1)                                                                       \
        for (long long kk = k0; kk < k1; ++kk) {                                        \
            const T *bk_ = b + kk * sbr + jc;                                           \
            T *wk_ = wide + (kk - k0) * (W);                                            \
            for (long long p_ = 0; p_ < (jce - jc) / (W); ++p_)                         \
                for (int jj = 0; jj < (W); ++jj)                                        \
                    wk_[p_ * KC * (W) + jj] = bk_[p_ * (W) + jj];                       \
        }                                                                               \
    else                                                                                \
        for (long long jj = jc; jj < jce; ++jj)                                         \
            for (long long kk = k0; kk < k1; ++kk)                                      \
                wide[((jj - jc) / (W)) * KC * (W) + (kk - k0) * (W) + (jj - jc) % (W)] = \
                    b[kk * sbr + jj * sbc];
/* Ask for the block the next MM_PACK_WIDE copies (the next k-block of these columns, or the
 * first of the next columns) while this one is computed: it reads each of up to KC rows of b
 * in runs of NCW * JB elements, and fetched on demand those runs came at the memory's latency
 * (m = 32 products of a 3 MB b at half the speed of the same with b in L2). A hint only: no
 * value depends on it. */
#define MM_PREFETCH_NEXT(T, W)                                                          \
    if (sbc == 1) {                                                                     \
        const long long nk0 = k1 < k ? k1 : 0, njc = k1 < k ? jc : jce;                 \
        const long long nk1 = nk0 + KC < k ? nk0 + KC : k;                              \
        const long long njce = njc + NCW * (W) < jfull ? njc + NCW * (W) : jfull;       \
        if (njc < jfull)                                                                \
            for (long long kk = nk0; kk < nk1; ++kk)                                    \
                for (long long jj = njc; jj < njce; jj += 64 / (long long)sizeof(T))    \
                    __builtin_prefetch(b + kk * sbr + jj, 0, 2);                        \
    }
#define MM_ROWS(T, V, JB, JS, EPC)                                                      \
    long long i, j, k0, k1, jc, jce, ib, ie;                                            \
    long long jfull = n - n % JB, jmid = n - n % JS;                                    \
    T *pack = NULL;                                                                     \
    T bpk[KC * JB] __attribute__((aligned(64)));                                        \
    /* NCW whole panels of b are packed together, b's rows read NCW * JB long: a panel \
     * alone read JB elements from each of k rows n apart, a latency-bound gather the  \
     * hardware prefetcher does not follow (measured: m = 64 products at half the      \
     * speed of m = 256 ones of the same k and n) */                                    \
    T *wide = jfull > JB ? (T *)TLS_BUF(wide_buf) : NULL;                               \
    if (jmid < n && k > 0) {                                                            \
        pack = (T *)malloc((size_t)k * JS * sizeof(T));                                 \
        if (pack)                                                                       \
            for (long long kk = 0; kk < k; ++kk)                                        \
                ROWS_LINE(T, kk, jmid, n - jmid, pack + kk * JS, JS)                    \
    }                                                                                   \
    /* column blocks outside, k-blocks inside: a block's columns are finished (every     \
     * k-block done) before the next block starts, so the epilogue (E) takes them while \
     * they are still in cache (a pass of its own re-read the whole output from memory) */ \
    for (jc = 0; jc < jfull; jc = jce) {                                                \
        jce = wide && jc + NCW * JB < jfull ? jc + NCW * JB : (wide ? jfull : jc + JB); \
        for (k0 = 0; k0 < k || (k == 0 && k0 == 0); k0 += KC) {                        \
            k1 = k0 + KC < k ? k0 + KC : k;                                             \
            /* the panels b[k0:k1, j:j+JB] copied contiguous (exact): read in place,    \
             * their rows are n apart, and at n of a multiple of 1 KiB they fall in a   \
             * few L1 sets and evict each other every k-step (measured 3-4x slower) */  \
            if (wide) {                                                                 \
                ROWS_PACK_WIDE(T, JB)                                                   \
                ROWS_PREFETCH(T, JB)                                                    \
            }                                                                           \
            /* rows MC at a time across the packed panels: those rows of a stay in L2   \
             * (a product of 1000 rows re-read all of a from L3 for every panel) */     \
            for (ib = i0; ib < i1; ib = ie) {                                           \
                ie = wide && ib + MC < i1 ? ib + MC : i1;                               \
                for (j = jc; j < jce; j += JB) {                                        \
                    T *bp = wide ? wide + (j - jc) * KC : bpk;                          \
                    if (!wide) { ROWS_PACK(JB) }                                          \
                    for (i = ib; i + 6 <= ie; i += 6) MM_TILE4(T, V, 6, bp, JB)         \
                    for (; i + 4 <= ie; i += 4) MM_TILE4(T, V, 4, bp, JB)               \
                    for (; i + 2 <= ie; i += 2) MM_TILE4(T, V, 2, bp, JB)               \
                    for (; i < ie; ++i) MM_TILE4(T, V, 1, bp, JB)                       \
                }                                                                       \
            }                                                                           \
            if (k == 0) break;                                                          \
        }                                                                               \
        if (E) EPC(E, c + i0 * n, res, img, ch0, i1 - i0, n, jc, jce);                  \
    }                                                                                   \
    for (j = jfull; j < jmid; j += JS)                                                  \
        for (k0 = 0; k0 < k || (k == 0 && k0 == 0); k0 += KC) {                        \
            k1 = k0 + KC < k ? k0 + KC : k;                                             \
            ROWS_PACK(JS)                                                               \
            for (i = i0; i + 8 <= i1; i += 8) MM_TILEV(T, V, 8, JS, bpk, JS, JS, k0)    \
            for (; i + 4 <= i1; i += 4) MM_TILEV(T, V, 4, JS, bpk, JS, JS, k0)          \
            for (; i + 2 <= i1; i += 2) MM_TILEV(T, V, 2, JS, bpk, JS, JS, k0)          \
            for (; i < i1; ++i) MM_TILEV(T, V, 1, JS, bpk, JS, JS, k0)                  \
            if (k == 0) break;                                                          \
        }                                                                               \
    if (pack) {                                                                         \
        j = jmid;                                                                       \
        k0 = 0;                                                                         \
        k1 = k;                                                                         \
        for (i = i0; i + 8 <= i1; i += 8) MM_TILEV(T, V, 8, JS, pack, JS, n - jmid, 0) \
        for (; i + 4 <= i1; i += 4) MM_TILEV(T, V, 4, JS, pack, JS, n - jmid, 0)       \
        for (; i + 2 <= i1; i += 2) MM_TILEV(T, V, 2, JS, pack, JS, n - jmid, 0)       \
        for (; i < i1; ++i) MM_TILEV(T, V, 1, JS, pack, JS, n - jmid, 0)               \
    } else if (jmid < n) {                                                              \
        j = jmid;                                                                       \
        for (i = i0; i + 4 <= i1; i += 4) MM_TAIL(T, 4, j)                              \
        for (; i < i1; ++i) MM_TAIL(T, 1, j)                                            \
    }                                                                                   \
    if (E && jfull < n) EPC(E, c + i0 * n, res, img, ch0, i1 - i0, n, jfull, n);        \
    free(pack);

/* A convolution's epilogue: the ops that follow it in an ONNX graph (Conv's bias, then
 * BatchNormalization's inference formula, then a two-input Sum with a same-shape tensor, then
 * Relu), applied to rows of the product while they are still in cache. Each op is its own
 * rounding, in the order and with the operand order of the separate ops' numpy spelling:
 *   y = y + bias[ch]; y = ((y - mean[ch]) / den[ch]) * scale[ch] + beta[ch];
 *   y = res + y (res_first) or y + res; y = (y <= 0) ? +0 : y (NaN stays, -0 becomes +0).
 * A NULL pointer skips its op (mean, den, scale and beta come together). Rows belong to output
 * channel ch = (q % groups) * m + i for row i of batch entry q; res has the output's layout.
 * mul2/add2 (after BN, before the residual): a per-channel Mul then Add by constants (a BN
 * written out as ops), y = y * mul2[ch] (or mul2[ch] * y with bit 0 of aff_first) then
 * y = y + add2[ch] (add2[ch] + y with bit 1), each its own rounding; NULL skips it. */
typedef struct {
    const void *bias, *mean, *den, *scale, *beta, *res;
    long long groups;
    int res_first, relu;
    /* when dst is set, each finished row (image img, channel ch) is then copied to row
     * dst_row[img * channels + ch] of dst (a channel shuffle: a copy, so exact) */
    void *dst;
    const long long *dst_row;
    long long channels;
    const void *mul2, *add2;
    int aff_first;
} ep_t;

/* One pass over an element for the usual epilogues (bias, BatchNormalization, the residual,
 * Relu, the copy to dst, in that order; no Mul/Add pair; a residual without dst): each op's
 * own rounding, in the order of the passes below, each element finished before the next is
 * loaded (the passes each loaded and stored a row again: a shufflenet run spent 12 % of its
 * time there; a residual block's last conv, BN + Sum + Relu, still made three passes, resnet's
 * bias + BN + Sum + Relu four, until the residual joined the one pass). */
#define EP_ONE(T, BIAS, BN, RELU, DST) EP_ONE_R(T, BIAS, BN, 0, RELU, DST)
#define EP_ONE_R(T, BIAS, BN, RES, RELU, DST)                                           \
    for (long long j = j0; j < j1; ++j) {                                               \
        T v = y[j];                                                                     \
        if (BIAS) v = v + bb;                                                           \
        if (BN) {                                                                       \
            v = v - bm;                                                                 \
            v = v / bd;                                                                 \
            v = v * bg;                                                                 \
            v = v + bt;                                                                 \
        }                                                                               \
        if (RES) v = rfirst ? rr[j] + v : v + rr[j];                                    \
        if (RELU) v = v <= (T)0 ? (T)0 : v;                                             \
        if (DST) /* y is scratch then (the caller keeps dst only): one store, not two */ \
            dd[j] = v;                                                                  \
        else                                                                            \
            y[j] = v;                                                                   \
    }
/* columns [j0, j1) of each row (an element's ops need only that element) */
#define EP_ROWS(T, NAME, COLS)                                                          \
    static void COLS(const ep_t *E, T *c, const T *res, long long img, long long ch0,   \
                     long long rows, long long n, long long j0, long long j1) {         \
        const int one = !E->mul2 && !E->add2 && !(res && E->dst);                       \
        const int rfirst = E->res_first;                                                \
        for (long long r = 0; r < rows; ++r) {                                          \
            const long long ch = ch0 + r;                                               \
            T *y = c + r * n;                                                           \
            if (one) {                                                                  \
                const T bb = E->bias ? ((const T *)E->bias)[ch] : (T)0;                 \
                const T bm = E->mean ? ((const T *)E->mean)[ch] : (T)0;                 \
                const T bd = E->mean ? ((const T *)E->den)[ch] : (T)1;                  \
                const T bg = E->mean ? ((const T *)E->scale)[ch] : (T)1;                \
                const T bt = E->mean ? ((const T *)E->beta)[ch] : (T)0;                 \
                T *dd = E->dst ? (T *)E->dst + E->dst_row[img * E->channels + ch] * n : y; \
                const T *rr = res ? res + r * n : NULL;                                 \
                if (res) { /* (no dst here) */                                          \
                    switch ((E->bias != NULL) | (E->mean != NULL) << 1 | (E->relu != 0) << 2) { \
                    case 0: EP_ONE_R(T, 0, 0, 1, 0, 0) break;                           \
                    case 1: EP_ONE_R(T, 1, 0, 1, 0, 0) break;                           \
                    case 2: EP_ONE_R(T, 0, 1, 1, 0, 0) break;                           \
                    case 3: EP_ONE_R(T, 1, 1, 1, 0, 0) break;                           \
                    case 4: EP_ONE_R(T, 0, 0, 1, 1, 0) break;                           \
                    case 5: EP_ONE_R(T, 1, 0, 1, 1, 0) break;                           \
                    case 6: EP_ONE_R(T, 0, 1, 1, 1, 0) break;                           \
                    default: EP_ONE_R(T, 1, 1, 1, 1, 0) break;                          \
                    }                                                                   \
                    continue;                                                           \
                }                                                                       \
                switch ((E->bias != NULL) | (E->mean != NULL) << 1 | (E->relu != 0) << 2 | \
                        (E->dst != NULL) << 3) {                                        \
                case 0: break;                                                          \
                case 1: EP_ONE(T, 1, 0, 0, 0) break;                                    \
                case 2: EP_ONE(T, 0, 1, 0, 0) break;                                    \
                case 3: EP_ONE(T, 1, 1, 0, 0) break;                                    \
                case 4: EP_ONE(T, 0, 0, 1, 0) break;                                    \
                case 5: EP_ONE(T, 1, 0, 1, 0) break;                                    \
                case 6: EP_ONE(T, 0, 1, 1, 0) break;                                    \
                case 7: EP_ONE(T, 1, 1, 1, 0) break;                                    \
                case 8: EP_ONE(T, 0, 0, 0, 1) break;                                    \
                case 9: EP_ONE(T, 1, 0, 0, 1) break;                                    \
                case 10: EP_ONE(T, 0, 1, 0, 1) break;                                   \
                case 11: EP_ONE(T, 1, 1, 0, 1) break;                                   \
                case 12: EP_ONE(T, 0, 0, 1, 1) break;                                   \
                case 13: EP_ONE(T, 1, 0, 1, 1) break;                                   \
                case 14: EP_ONE(T, 0, 1, 1, 1) break;                                   \
                default: EP_ONE(T, 1, 1, 1, 1) break;                                   \
                }                                                                       \
                continue;                                                               \
            }                                                                           \
            if (E->bias) {                                                              \
                const T b = ((const T *)E->bias)[ch];                                   \
                for (long long j = j0; j < j1; ++j) y[j] = y[j] + b;                      \
            }                                                                           \
            if (E->mean) {                                                              \
                const T m = ((const T *)E->mean)[ch], d = ((const T *)E->den)[ch];      \
                const T g = ((const T *)E->scale)[ch], b = ((const T *)E->beta)[ch];    \
                for (long long j = j0; j < j1; ++j) {                                     \
                    T t = y[j] - m;                                                     \
                    t = t / d;                                                          \
                    t = t * g;                                                          \
                    y[j] = t + b;                                                       \
                }                                                                       \
            }                                                                           \
            if (E->mul2) {                                                              \
                const T g = ((const T *)E->mul2)[ch];                                   \
                if (E->aff_first & 1)                                                   \
                    for (long long j = j0; j < j1; ++j) y[j] = g * y[j];                  \
                else                                                                    \
                    for (long long j = j0; j < j1; ++j) y[j] = y[j] * g;                  \
            }                                                                           \
            if (E->add2) {                                                              \
                const T b = ((const T *)E->add2)[ch];                                   \
                if (E->aff_first & 2)                                                   \
                    for (long long j = j0; j < j1; ++j) y[j] = b + y[j];                  \
                else                                                                    \
                    for (long long j = j0; j < j1; ++j) y[j] = y[j] + b;                  \
            }                                                                           \
            if (res) {                                                                  \
                const T *rr = res + r * n;                                              \
                if (E->res_first)                                                       \
                    for (long long j = j0; j < j1; ++j) y[j] = rr[j] + y[j];              \
                else                                                                    \
                    for (long long j = j0; j < j1; ++j) y[j] = y[j] + rr[j];              \
            }                                                                           \
            if (E->relu)                                                                \
                for (long long j = j0; j < j1; ++j) y[j] = y[j] <= (T)0 ? (T)0 : y[j];    \
            if (E->dst) {                                                               \
                T *d = (T *)E->dst + E->dst_row[img * E->channels + ch] * n;            \
                for (long long j = j0; j < j1; ++j) d[j] = y[j];                          \
            }                                                                           \
        }                                                                               \
    } \
    static void NAME(const ep_t *E, T *c, const T *res, long long img, long long ch0,   \
                     long long rows, long long n) {                                     \
        COLS(E, c, res, img, ch0, rows, n, 0, n);                                       \
    }

EP_ROWS(double, ep_rows_f64, ep_cols_f64)
EP_ROWS(float, ep_rows_f32, ep_cols_f32)

/* The epilogue alone, on a copy of x (images x channels planes of `plane` elements, y of the
 * same layout; res, when E->res is set, too): ops that follow a node other than a Conv (a
 * BatchNormalization, its Mul/Add, a Relu) in one pass, a cache-sized block of a plane at a
 * time. The copy is exact, so each element takes the ops' roundings exactly as after a Conv.
 * BatchNormalization [-> Mul -> Add] [-> Relu] alone (densenet's pre-activation before every
 * conv, over all the features so far) runs EP_BN: each element's ops in registers, the same
 * roundings in the same order as ep_cols, one read and one write instead of a pass per op
 * (measured 1x992x14x14: 76 -> ~45 us). */
#define EP_BN(T, AFF, MF, AF, RELU)                                                     \
    for (long long j = 0; j < plane; ++j) {                                             \
        T t = xr[j] - m;                                                                \
        t = t / d;                                                                      \
        t = t * g;                                                                      \
        t = t + b;                                                                      \
        if (AFF) {                                                                      \
            t = (MF) ? g2 * t : t * g2;                                                 \
            t = (AF) ? b2 + t : t + b2;                                                 \
        }                                                                               \
        if (RELU) t = t <= (T)0 ? (T)0 : t;                                             \
        yr[j] = t;                                                                      \
    }
#define EP_APPLY(T, NAME, COLS)                                                         \
    void NAME(const T *x, T *y, long long images, long long channels, long long plane,  \
              const ep_t *E) {                                                          \
        if (E->mean && !E->bias && !E->res && !E->dst && !E->mul2 == !E->add2) {        \
            const int sel = E->mul2 ? 2 + (E->aff_first & 3) * 2 + !!E->relu : !!E->relu; \
            for (long long q = 0; q < images * channels; ++q) {                         \
                const long long ch = q % channels;                                      \
                const T *xr = x + q * plane;                                            \
                T *yr = y + q * plane;                                                  \
                const T m = ((const T *)E->mean)[ch], d = ((const T *)E->den)[ch];      \
                const T g = ((const T *)E->scale)[ch], b = ((const T *)E->beta)[ch];    \
                const T g2 = E->mul2 ? ((const T *)E->mul2)[ch] : (T)1;                 \
                const T b2 = E->add2 ? ((const T *)E->add2)[ch] : (T)0;                 \
                switch (sel) {                                                          \
                case 0: EP_BN(T, 0, 0, 0, 0) break;                                     \
                case 1: EP_BN(T, 0, 0, 0, 1) break;                                     \
                case 2: EP_BN(T, 1, 0, 0, 0) break;                                     \
                case 3: EP_BN(T, 1, 0, 0, 1) break;                                     \
                case 4: EP_BN(T, 1, 1, 0, 0) break;                                     \
                case 5: EP_BN(T, 1, 1, 0, 1) break;                                     \
                case 6: EP_BN(T, 1, 0, 1, 0) break;                                     \
                case 7: EP_BN(T, 1, 0, 1, 1) break;                                     \
                case 8: EP_BN(T, 1, 1, 1, 0) break;                                     \
                default: EP_BN(T, 1, 1, 1, 1) break;                                    \
                }                                                                       \
            }                                                                           \
            return;                                                                     \
        }                                                                               \
        for (long long q = 0; q < images * channels; ++q) {                             \
            const T *xr = x + q * plane;                                                \
            T *yr = y + q * plane;                                                      \
            const T *rr = E->res ? (const T *)E->res + q * plane : NULL;                \
            for (long long j0 = 0; j0 < plane; j0 += 1024) {                            \
                long long j1 = j0 + 1024 < plane ? j0 + 1024 : plane;                   \
                for (long long j = j0; j < j1; ++j) yr[j] = xr[j];                      \
                COLS(E, yr, rr, q / channels, q % channels, 1, plane, j0, j1);          \
            }                                                                           \
        }                                                                               \
    }

EP_APPLY(double, ts_ep_apply_f64, ep_cols_f64)
EP_APPLY(float, ts_ep_apply_f32, ep_cols_f32)

/* A product of few rows (a Gemm on one image: m = 1) in the reference order, c[i][j]: acc =
 * +0.0; acc = acc + a[i][k] * b[k][j] for k = 0, 1, ..., with b (k x n, contiguous) streamed
 * once in memory order: row k of b updates the accumulators of every row of c (each a column
 * block of JW that stays in L1). A packed product reads a weight of 10^7-10^8 elements three
 * times for one output row; this reads it once. Single-threaded. */
#define GEMV_JW 4096
#define GEMV(T, NAME)                                                                   \
    void NAME(const T *a, const T *b, T *c, long long m, long long k, long long n) {    \
        for (long long i = 0; i < m * n; ++i) c[i] = (T)0;                              \
        for (long long j0 = 0; j0 < n; j0 += GEMV_JW) {                                  \
            const long long j1 = j0 + GEMV_JW < n ? j0 + GEMV_JW : n;                   \
            for (long long kk = 0; kk < k; ++kk) {                                      \
                const T *br = b + kk * n;                                               \
                for (long long i = 0; i < m; ++i) {                                     \
                    const T ai = a[i * k + kk];                                         \
                    T *ci = c + i * n;                                                  \
                    for (long long j = j0; j < j1; ++j) ci[j] = ci[j] + ai * br[j];     \
                }                                                                       \
            }                                                                           \
        }                                                                               \
    }

GEMV(double, ts_gemv_f64)
GEMV(float, ts_gemv_f32)

/* the wide packs' buffer, one per thread (a malloc of its 128 KiB per product was an mmap, and
 * its 32 pages faulted in again every call) */
static __thread double wide_buf[KC * NCW * JB32 / 2] __attribute__((aligned(64)));

/* a[i][kk] is a[i * sar + kk * sac], b[kk][j] is b[kk * sbr + j * sbc] (a transposed operand
 * read in place, no copy first); c is contiguous */
/* E (or NULL): the epilogue, taken by rows [i0, i1) as each block of their columns is done;
 * res is the residual's row i0, img and ch0 as for ep_rows */
/* MM_ROWS reads b through these: the plain products from b itself (its strides) */
#define ROWS_GET(kk, jj) b[(kk) * sbr + (jj) * sbc]
/* dst[0, W) = b[kk][j0, j0 + L) and +0.0 past L */
#define ROWS_LINE(T, kk, j0, L, dst, W)                                                 \
    for (long long jj = 0; jj < (W); ++jj) (dst)[jj] = jj < (L) ? ROWS_GET(kk, (j0) + jj) : (T)0;
#define ROWS_PACK(W) MM_PACK(W)
#define ROWS_PACK_WIDE(T, W) MM_PACK_WIDE(T, W)
#define ROWS_PREFETCH(T, W) MM_PREFETCH_NEXT(T, W)
static void mm_rows_f64(const double *a, const double *b, double *c, long long i0,
                        long long i1, long long k, long long n, long long sar, long long sac,
                        long long sbr, long long sbc, const ep_t *E, const double *res,
                        long long img, long long ch0) {
    MM_ROWS(double, vmf64, JB64, JS64, ep_cols_f64)
}

static void mm_rows_f32(const float *a, const float *b, float *c, long long i0,
                        long long i1, long long k, long long n, long long sar, long long sac,
                        long long sbr, long long sbc, const ep_t *E, const float *res,
                        long long img, long long ch0) {
    MM_ROWS(float, vmf32, JB32, JS32, ep_cols_f32)
}
#undef ROWS_GET
#undef ROWS_LINE
#undef ROWS_PACK
#undef ROWS_PACK_WIDE
#undef ROWS_PREFETCH

/* An implicit-GEMM convolution: the product w @ im2col(x) of one (image, group), with the
 * panels of the im2col matrix packed straight from the image x (zero padding, strides,
 * dilations), so that matrix never exists in memory (written by im2col, read again by the
 * pack, megabytes each way: the small-m conv products' cost). b[kk][jj] is
 * x[ci][r*sh + u*dh - ph][s*sw + v*dw - pw] for kk = (ci, u, v) and jj = (r, s) in row-major
 * order, +0.0 outside the image: the same matrix, element for element, as ts_im2col's, and
 * the same tiles, chains and epilogue as MM_ROWS over it, so the same bits. */
typedef struct {
    long long c, g, h, w, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw; /* c: all input channels */
    int shift; /* try conv_shift (below) first */
} conv_t;

/* Window geometry comes from files (an ONNX model's strides, pads, dilations). Python checks
 * it before it gets here (core.ops.nn.check_window; core.native's wrappers), and every entry
 * point that takes it checks again, cheaply, and does nothing with what no checked caller
 * passes: a size below 0; a stride, dilation or kernel extent below 1; any value past
 * GEOM_MAX in size; windows reaching past 2 * GEOM_MAX. So no index product below can
 * overflow (issue 49: strides of 2**32 read out of bounds). */
#define GEOM_MAX ((1LL << 31) - 1)
static int geom_ok(long long nb, long long c, long long h, long long w, long long kh,
                   long long kw, long long oh, long long ow, long long sh, long long sw,
                   long long ph, long long pw, long long dh, long long dw) {
    const long long size[] = {nb, c, h, w, oh, ow}, one[] = {kh, kw, sh, sw, dh, dw};
    for (int i = 0; i < 6; ++i)
        if (size[i] < 0 || (i >= 2 && size[i] > GEOM_MAX) || one[i] < 1 || one[i] > GEOM_MAX)
            return 0;
    if (ph < -GEOM_MAX || ph > GEOM_MAX || pw < -GEOM_MAX || pw > GEOM_MAX) return 0;
    /* each product below 2**62, so the sums cannot overflow */
    if (oh > 0 && (oh - 1) * sh + (kh - 1) * dh > 2 * GEOM_MAX) return 0;
    if (ow > 0 && (ow - 1) * sw + (kw - 1) * dw > 2 * GEOM_MAX) return 0;
    return 1;
}
#define GEOM_OK geom_ok(nb, c, h, wd, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw)

/* dst[0, L) = row kk of the image's im2col matrix, columns [j0, j0 + L): output row by
 * output row, a run of contiguous input for stride 1 and +0.0 where the window is off the
 * image; a copy, so exact */
#define CV_LINE_FN(T, NAME)                                                             \
    static inline void NAME(const conv_t *cv, const T *xq, long long kk, long long j0,  \
                            long long L, T *dst) {                                      \
        const long long khw = cv->kh * cv->kw, rem = kk % khw, ow = cv->ow, sw = cv->sw;    \
        const long long offy = (rem / cv->kw) * cv->dh - cv->ph;                        \
        const long long offx = (rem % cv->kw) * cv->dw - cv->pw;                        \
        const T *xc = xq + (kk / khw) * cv->h * cv->w;                                  \
        /* s in [lo, hi) reads inside the row: 0 <= s*sw + offx < w */                  \
        long long lo = offx >= 0 ? 0 : (-offx + sw - 1) / sw;                           \
        long long hi = cv->w - offx <= 0 ? 0 : (cv->w - offx + sw - 1) / sw;            \
        if (hi > ow) hi = ow;                                                           \
        if (lo > hi) lo = hi;                                                           \
        long long t = 0, r = j0 / ow, s0 = j0 % ow;                                     \
        while (t < L) {                                                                 \
            const long long e = s0 + (L - t) < ow ? s0 + (L - t) : ow;                  \
            const long long iy = r * cv->sh + offy;                                     \
            T *ln = dst + t - s0; /* ln[s], s in [s0, e) */                             \
            if (iy < 0 || iy >= cv->h) {                                                \
                for (long long s = s0; s < e; ++s) ln[s] = (T)0;                        \
            } else {                                                                    \
                const T *xr = xc + iy * cv->w + offx;                                   \
                /* [s0, a0) off the left edge, [a0, a1) inside, [z, e) off the right */ \
                const long long a0 = s0 > lo ? s0 : (lo < e ? lo : e);                  \
                const long long a1 = e < hi ? e : hi, z = a1 > a0 ? a1 : a0;            \
                for (long long s = s0; s < a0; ++s) ln[s] = (T)0;                       \
                if (sw == 1)                                                            \
                    for (long long s = a0; s < a1; ++s) ln[s] = xr[s];                  \
                else                                                                    \
                    for (long long s = a0; s < a1; ++s) ln[s] = xr[s * sw];             \
                for (long long s = z; s < e; ++s) ln[s] = (T)0;                         \
            }                                                                           \
            t += e - s0;                                                                \
            s0 = 0;                                                                     \
            ++r;                                                                        \
        }                                                                               \
    }
CV_LINE_FN(double, cv_line_f64)
CV_LINE_FN(float, cv_line_f32)
#define CV_LINE(T, kk, j0, L, dst, W)                                                   \
    {                                                                                   \
        CV_LINE_T(cv, b, kk, j0, L, dst);                                               \
        for (long long jj = (L); jj < (W); ++jj) (dst)[jj] = (T)0;                      \
    }
/* the element of the im2col matrix (MM_TAIL, without memory for a tail pack) */
#define CV_GET(kk, jj)                                                                  \
    ({                                                                                  \
        __typeof__(*b + 0) v_;                                                          \
        CV_LINE_T(cv, b, kk, jj, 1, &v_);                                               \
        v_;                                                                             \
    })
#define CV_PACK(W)                                                                      \
    for (long long kk = k0; kk < k1; ++kk) CV_LINE_T(cv, b, kk, j, (W), bpk + (kk - k0) * (W));
/* row kk of the block [jc, jce) built in `line`, then dealt out to the block's KC x W
 * panels as MM_PACK_WIDE does */
#define CV_PACK_WIDE(T, W)                                                              \
    {                                                                                   \
        T line[256] __attribute__((aligned(64)));                                       \
        for (long long kk = k0; kk < k1; ++kk) {                                        \
            CV_LINE_T(cv, b, kk, jc, jce - jc, line);                                   \
            T *wk_ = wide + (kk - k0) * (W);                                            \
            for (long long p_ = 0; p_ < (jce - jc) / (W); ++p_)                         \
                for (int jj = 0; jj < (W); ++jj) wk_[p_ * KC * (W) + jj] = line[p_ * (W) + jj]; \
        }                                                                               \
    }
#define ROWS_GET(kk, jj) CV_GET(kk, jj)
#define ROWS_LINE(T, kk, j0, L, dst, W) CV_LINE(T, kk, j0, L, dst, W)
#define ROWS_PACK(W) CV_PACK(W)
#define ROWS_PACK_WIDE(T, W) CV_PACK_WIDE(T, W)
#define ROWS_PREFETCH(T, W) /* the image is small and read in runs: nothing to ask for */

/* The phase planes of a strided, dilated window (the direct depthwise conv and the shifted
 * conv below share them). PHASE_TOFF: toff[(ci*kh + u)*kw + v], where tap (ci, u, v) starts in
 * the planes P[ci][a][b] (pl elements each, wq to a row). PHASE_COPY: the image plane xc of
 * input channel ci into its sh*sw zero-padded phase planes, P[ci][a][b][R][S] =
 * xpad[R*sh + a][S*sw + b]: only the cells inside the image are written (the padding stays
 * the +0.0 of calloc). Copies, so exact. */
#define PHASE_TOFF(toff, cgc, kh, kw, dh, dw, sh, sw, pl, wq)                           \
    for (long long ci = 0; ci < (cgc); ++ci)                                            \
        for (long long u = 0; u < (kh); ++u)                                            \
            for (long long v = 0; v < (kw); ++v)                                        \
                (toff)[(ci * (kh) + u) * (kw) + v] =                                    \
                    ((ci * (sh) + (u * (dh)) % (sh)) * (sw) + (v * (dw)) % (sw)) * (pl) + \
                    ((u * (dh)) / (sh)) * (wq) + (v * (dw)) / (sw);
#define PHASE_COPY(T, P, xc, ci, sh, sw, pl, hq, wq, h, wd, ph, pw)                     \
    for (long long pa = 0; pa < (sh); ++pa)                                             \
        for (long long pb = 0; pb < (sw); ++pb) {                                       \
            T *pp = (P) + (((ci) * (sh) + pa) * (sw) + pb) * (pl);                      \
            /* S in [lo, hi): 0 <= S*sw + pb - pw < wd */                               \
            long long lo = (pw) - pb <= 0 ? 0 : ((pw) - pb + (sw) - 1) / (sw);          \
            long long hi = (wd) + (pw) - pb <= 0 ? 0 : ((wd) + (pw) - pb + (sw) - 1) / (sw); \
            if (hi > (wq)) hi = (wq);                                                   \
            if (lo > hi) lo = hi;                                                       \
            for (long long R = 0; R < (hq); ++R) {                                      \
                long long iy = R * (sh) + pa - (ph);                                    \
                if (iy < 0 || iy >= (h)) continue;                                      \
                const T *xr = (xc) + iy * (wd) + pb - (pw);                             \
                T *prow = pp + R * (wq);                                                \
                if ((sw) == 1)                                                          \
                    for (long long S = lo; S < hi; ++S) prow[S] = xr[S];                \
                else if ((sw) == 2) /* a constant stride: gcc deinterleaves by vectors */ \
                    for (long long S = lo; S < hi; ++S) prow[S] = xr[2 * S];            \
                else                                                                    \
                    for (long long S = lo; S < hi; ++S) prow[S] = xr[S * (sw)];         \
            }                                                                           \
        }

/* The shifted conv: no packed matrix at all. The group's input channels are copied once into
 * zero-padded phase planes (PHASE_COPY, as the direct depthwise conv: P[ci][a][b][R][S] =
 * xpad[R*sh + a][S*sw + b]), so row kk = (ci, u, v) of the im2col matrix, over the output grid
 * widened to Wq columns (R*Wq + S), is the contiguous run P + toff[kk] + (R*Wq + S): the tile
 * loads its b vectors straight from there, k-step by k-step. Outputs with S >= ow are values
 * nobody keeps (the Wq - ow extra columns of each output row); each kept output's chain is
 * the same acc = 0; acc = acc + w*x over kk in order, the padding's +0.0 included, so the bits
 * of im2col + MM_ROWS. Rows MC at a time (a stays in L2), columns NB at a time into a block
 * buffer; each finished block is copied to its outputs and the epilogue takes them there. */
#define CV_SHIFT_TILE(T, V, R)                                                          \
    {                                                                                   \
        V acc[R][MM_Q];                                                                 \
        const long long lanes = (long long)(sizeof(V) / sizeof(T));                     \
        T *cb = cbuf + (i - ib) * NB + (j - jc);                                        \
        for (int r = 0; r < R; ++r)                                                     \
            for (int q = 0; q < MM_Q; ++q) {                                            \
                if (k0 == 0) {                                                          \
                    V z = {0};                                                          \
                    acc[r][q] = z;                                                      \
                } else {                                                                \
                    acc[r][q] = *(const V *)(cb + r * NB + q * lanes);                  \
                }                                                                       \
            }                                                                           \
        for (long long kk = k0; kk < k1; ++kk) {                                        \
            const V *bk = (const V *)(bj + toff[kk]);                                   \
            V bq[MM_Q];                                                                 \
            for (int q = 0; q < MM_Q; ++q) bq[q] = bk[q];                               \
            for (int r = 0; r < R; ++r) {                                               \
                const T *xp = &a[(i + r) * k + kk];                                     \
                for (int q = 0; q < MM_Q; ++q) {                                        \
                    V p;                                                                \
                    BMUL(T, V, p, xp, bq[q]);                                           \
                    acc[r][q] = acc[r][q] + p;                                          \
                }                                                                       \
            }                                                                           \
        }                                                                               \
        for (int r = 0; r < R; ++r)                                                     \
            for (int q = 0; q < MM_Q; ++q) *(V *)(cb + r * NB + q * lanes) = acc[r][q]; \
    }
#define CV_SHIFT(T, V, JB, EPC)                                                         \
    const long long NB = NCW * JB;                                                      \
    const long long cgc = cv->c / cv->g, sh = cv->sh, sw = cv->sw, h = cv->h, wd = cv->w; \
    const long long oh = cv->oh, ow = cv->ow, n = oh * ow;                              \
    /* the phase planes are sized by the dilated window, not by the arrays: a model's huge \
     * dilation or padding would make them far larger than the image and the output   \
     * together; then (checked in doubles, before any product can overflow) the packed \
     * conv runs instead */                                                             \
    if ((double)sh * (double)sw *                                                       \
            ((double)oh + (double)(cv->kh - 1) * (double)cv->dh / (double)sh + 1.0) *   \
            ((double)ow + (double)(cv->kw - 1) * (double)cv->dw / (double)sw + 1.0) >   \
        4.0 * ((double)h * (double)wd + (double)n) + 4096.0)                            \
        return 0;                                                                       \
    const long long hq = oh + ((cv->kh - 1) * cv->dh) / sh;                             \
    const long long wq = ow + ((cv->kw - 1) * cv->dw) / sw;                             \
    const long long pl = hq * wq + wq + JB, np = oh * wq;                               \
    /* k-blocks of equal size up to CV_KC (nothing is packed, so a block is bounded only by \
     * the b lines a panel touches staying in L1): no short last block whose tiles store \
     * and reload their accumulators for a few k-steps (k = 144 = 128 + 16) */         \
    const long long nkb = (k + CV_KC - 1) / CV_KC, kc = nkb > 0 ? (k + nkb - 1) / nkb : 1; \
    T *P = (T *)calloc((size_t)(cgc * sh * sw * pl), sizeof(T));                        \
    long long *toff = (long long *)malloc((size_t)(k > 0 ? k : 1) * sizeof(long long)); \
    T *cbuf = (T *)TLS_BUF(c_buf);                                                      \
    if (!P || !toff) {                                                                  \
        free(P);                                                                        \
        free(toff);                                                                     \
        return 0;                                                                       \
    }                                                                                   \
    PHASE_TOFF(toff, cgc, cv->kh, cv->kw, cv->dh, cv->dw, sh, sw, pl, wq);              \
    for (long long ci = 0; ci < cgc; ++ci) {                                            \
        const T *xc = x + ci * h * wd;                                                  \
        PHASE_COPY(T, P, xc, ci, sh, sw, pl, hq, wq, h, wd, cv->ph, cv->pw)             \
    }                                                                                   \
    for (long long ib = i0, ie; ib < i1; ib = ie) {                                     \
        ie = ib + MC < i1 ? ib + MC : i1;                                               \
        for (long long jc = 0, jce; jc < np; jc = jce) {                                \
            jce = jc + NB < np ? jc + NB : np;                                          \
            for (long long k0 = 0, k1; k0 < k || (k == 0 && k0 == 0); k0 += kc) {       \
                k1 = k0 + kc < k ? k0 + kc : k;                                         \
                for (long long j = jc; j < jce; j += JB) {                              \
                    const T *bj = P + j;                                                \
                    long long i = ib;                                                   \
                    for (; i + 6 <= ie; i += 6) CV_SHIFT_TILE(T, V, 6)                  \
                    for (; i + 4 <= ie; i += 4) CV_SHIFT_TILE(T, V, 4)                  \
                    for (; i + 2 <= ie; i += 2) CV_SHIFT_TILE(T, V, 2)                  \
                    for (; i < ie; ++i) CV_SHIFT_TILE(T, V, 1)                          \
                }                                                                       \
                if (k == 0) break;                                                      \
            }                                                                           \
            /* the block's kept columns (S < ow) to their outputs: one run per row */   \
            for (long long jr = jc; jr < jce;) {                                        \
                const long long R = jr / wq, S = jr % wq;                               \
                const long long re = (R + 1) * wq < jce ? (R + 1) * wq : jce;           \
                const long long se = re - R * wq < ow ? re - R * wq : ow;               \
                for (long long i = ib; i < ie; ++i)                                     \
                    for (long long s = S; s < se; ++s)                                  \
                        c[i * n + R * ow + s] = cbuf[(i - ib) * NB + R * wq + s - jc];  \
                jr = re;                                                                \
            }                                                                           \
            if (E) {                                                                    \
                const long long f0 = (jc / wq) * ow + (jc % wq < ow ? jc % wq : ow);    \
                const long long f1 = (jce / wq) * ow + (jce % wq < ow ? jce % wq : ow); \
                EPC(E, c + ib * n, res ? res + (ib - i0) * n : NULL, img, ch0 + (ib - i0), \
                    ie - ib, n, f0, f1);                                                \
            }                                                                           \
        }                                                                               \
    }                                                                                   \
    free(toff);                                                                         \
    free(P);                                                                            \
    return 1;

#ifndef CV_KC
#define CV_KC 256
#endif
/* the shifted conv's block buffer (MC rows x NB columns), one per thread */
static __thread double c_buf[MC * NCW * JB64] __attribute__((aligned(64)));

static int conv_shift_f64(const double *a, const double *x, double *c, long long i0, long long i1,
                          long long k, const conv_t *cv, const ep_t *E, const double *res,
                          long long img, long long ch0) {
    CV_SHIFT(double, vmf64, JB64, ep_cols_f64)
}

static int conv_shift_f32(const float *a, const float *x, float *c, long long i0, long long i1,
                          long long k, const conv_t *cv, const ep_t *E, const float *res,
                          long long img, long long ch0) {
    CV_SHIFT(float, vmf32, JB32, ep_cols_f32)
}

/* rows [i0, i1) of one (image, group)'s product: a is its weights (k = cg*kh*kw to a row),
 * b its first input channel's plane */
static void mm_rows_cv_f64(const double *a, const double *b, double *c, long long i0,
                           long long i1, long long k, long long n, const conv_t *cv,
                           const ep_t *E, const double *res, long long img, long long ch0) {
    if (cv->shift && conv_shift_f64(a, b, c, i0, i1, k, cv, E, res, img, ch0)) return;
    const long long sar = k, sac = 1;
#define CV_LINE_T cv_line_f64
    MM_ROWS(double, vmf64, JB64, JS64, ep_cols_f64)
#undef CV_LINE_T
}

static void mm_rows_cv_f32(const float *a, const float *b, float *c, long long i0,
                           long long i1, long long k, long long n, const conv_t *cv,
                           const ep_t *E, const float *res, long long img, long long ch0) {
    if (cv->shift && conv_shift_f32(a, b, c, i0, i1, k, cv, E, res, img, ch0)) return;
    const long long sar = k, sac = 1;
#define CV_LINE_T cv_line_f32
    MM_ROWS(float, vmf32, JB32, JS32, ep_cols_f32)
#undef CV_LINE_T
}
#undef ROWS_GET
#undef ROWS_LINE
#undef ROWS_PACK
#undef ROWS_PACK_WIDE
#undef ROWS_PREFETCH


/* A batched product c[q] = a[q] @ b[q], q < batch, a[q] at a + q*sa, b[q] at b + q*sb (a
 * stride of 0 broadcasts one operand), c contiguous. Work unit u = one block of ROWS rows of one
 * batch entry; a thread takes a contiguous range of units. */
#define ROWS 16

typedef struct {
    const void *a, *b;
    void *c;
    long long batch, m, k, n, sa, sb, u0, u1;
    long long sar, sac, sbr, sbc; /* element strides inside one batch entry */
    int f32;
    const ep_t *ep; /* NULL: the plain product */
    const conv_t *cv; /* set: b is the image of an implicit-GEMM conv (mm_rows_cv) */
    long long ag; /* > 0: batch entry q uses a's entry q % ag (a conv's groups) */
} job_t;

static void run_units(const job_t *J) {
    long long blocks = (J->m + ROWS - 1) / ROWS;
    /* consecutive units of one batch entry run as one row range: each packed panel of b then
     * serves all of their rows (a 16-row unit alone re-read all of b from L2/L3 per unit, the
     * conv products' cost; measured). Which rows share a call changes no chain. */
    for (long long u = J->u0, ue; u < J->u1; u = ue) {
        long long q = u / blocks, i0 = (u % blocks) * ROWS;
        ue = (q + 1) * blocks < J->u1 ? (q + 1) * blocks : J->u1;
        long long i1 = (ue - q * blocks) * ROWS < J->m ? (ue - q * blocks) * ROWS : J->m;
        const long long off = q * J->m * J->n + i0 * J->n;
        const long long ch0 = J->ep ? (q % J->ep->groups) * J->m + i0 : 0;
        const long long img = J->ep ? q / J->ep->groups : 0;
        if (J->cv) {
            /* batch entry q = (image q / g, group q % g): the group's weights, and its first
             * input channel's plane of that image */
            const conv_t *cv = J->cv;
            const long long qa = (q % cv->g) * J->sa;
            const long long qb = ((q / cv->g) * cv->c + (q % cv->g) * (cv->c / cv->g)) * cv->h * cv->w;
            if (J->f32)
                mm_rows_cv_f32((const float *)J->a + qa, (const float *)J->b + qb,
                               (float *)J->c + q * J->m * J->n, i0, i1, J->k, J->n, cv, J->ep,
                               J->ep && J->ep->res ? (const float *)J->ep->res + off : NULL,
                               img, ch0);
            else
                mm_rows_cv_f64((const double *)J->a + qa, (const double *)J->b + qb,
                               (double *)J->c + q * J->m * J->n, i0, i1, J->k, J->n, cv, J->ep,
                               J->ep && J->ep->res ? (const double *)J->ep->res + off : NULL,
                               img, ch0);
        } else if (J->f32)
            mm_rows_f32((const float *)J->a + (J->ag ? q % J->ag : q) * J->sa, (const float *)J->b + q * J->sb,
                        (float *)J->c + q * J->m * J->n, i0, i1, J->k, J->n, J->sar, J->sac,
                        J->sbr, J->sbc, J->ep,
                        J->ep && J->ep->res ? (const float *)J->ep->res + off : NULL, img, ch0);
        else
            mm_rows_f64((const double *)J->a + (J->ag ? q % J->ag : q) * J->sa, (const double *)J->b + q * J->sb,
                        (double *)J->c + q * J->m * J->n, i0, i1, J->k, J->n, J->sar, J->sac,
                        J->sbr, J->sbc, J->ep,
                        J->ep && J->ep->res ? (const double *)J->ep->res + off : NULL, img,
                        ch0);
    }
}

/* How long a waiting worker (or the caller) spins before it sleeps ($TAPESCOPE_SPIN_US
 * overrides): long enough to bridge the numpy work between two products of a training step,
 * an OpenMP-like spin (libgomp spins a few ms too), after which a worker holds no core. */
#define SPIN_NS 2000000LL

/* A persistent worker pool (created on first use, grown on demand, like OpenMP's): the caller
 * and up to t-1 workers share a job. Between jobs a worker spins for a short while (SPIN_NS,
 * $TAPESCOPE_SPIN_US) on the job word, then sleeps on a condition variable. Dispatching costs a
 * store and a wake-up instead of a pthread_create/pthread_join per product.
 * The shares are claimed, not assigned: each participant takes the next chunk of units from an
 * atomic counter until none are left. On a shared machine a worker the scheduler has not run
 * yet leaves its chunks to the others instead of making the caller wait for it; and a worker
 * that arrives after the caller has closed the job (the `state` word's CLOSED bit) does not join
 * it at all. Which thread computes a unit never changes its chains (each unit is whole output
 * elements, each with its serial k-loop), so no bit depends on the pool or the schedule.
 * Fork: a child has none of its parent's workers (and may inherit a locked mutex): the pool is
 * reset there (pthread_atfork, and a pid check before each use). Two callers at once (ctypes
 * drops the GIL): the second finds the pool busy and runs its whole job on its own thread. */
#define MAX_THREADS 64
#define CLOSED 0x40000000

typedef void (*pool_fn)(void *ctx);

static struct {
    pthread_mutex_t mu, use; /* mu guards the sleeps; use: held by the job that owns the pool */
    pthread_cond_t wake, done;
    unsigned long long word; /* generation << 8 | participants wanted, atomic */
    int state;               /* CLOSED bit | workers inside the current job, atomic */
    int nworkers, stop;
    pool_fn fn;
    void *ctx;
    pid_t pid;
    long long spin_ns;
    int ncpu; /* CPUs online */
    pthread_t tid[MAX_THREADS];
} pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER,
          PTHREAD_COND_INITIALIZER, 0, CLOSED, 0, 0, NULL, NULL, 0, -1, 1, {0}};

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Spin until *p differs from old (acquire) or the spin budget is gone; 1 when it changed. */
static int spin_ull(const unsigned long long *p, unsigned long long old) {
    if (pool.spin_ns <= 0) return __atomic_load_n(p, __ATOMIC_ACQUIRE) != old;
    long long until = now_ns() + pool.spin_ns;
    for (;;) {
        for (int i = 0; i < 64; ++i) {
            if (__atomic_load_n(p, __ATOMIC_ACQUIRE) != old) return 1;
            cpu_relax();
        }
        if (now_ns() > until) return 0;
    }
}

/* Spin until *p == want or the budget is gone; 1 when it got there. */
static int spin_int(const int *p, int want) {
    if (pool.spin_ns <= 0) return __atomic_load_n(p, __ATOMIC_ACQUIRE) == want;
    long long until = now_ns() + pool.spin_ns;
    for (;;) {
        for (int i = 0; i < 64; ++i) {
            if (__atomic_load_n(p, __ATOMIC_ACQUIRE) == want) return 1;
            cpu_relax();
        }
        if (now_ns() > until) return 0;
    }
}

typedef struct {
    int id;
    unsigned long long seen;
} pool_arg;

static pool_arg pool_args[MAX_THREADS];

static void *pool_worker(void *p) {
    const int id = ((pool_arg *)p)->id;
    /* a worker past the CPUs there are would spin on a core another thread needs: it sleeps */
    const int spins = id < pool.ncpu;
    unsigned long long seen = ((pool_arg *)p)->seen;
    for (;;) {
        unsigned long long w;
        if (spins && spin_ull(&pool.word, seen)) {
            w = __atomic_load_n(&pool.word, __ATOMIC_ACQUIRE);
        } else {
            pthread_mutex_lock(&pool.mu);
            while ((w = __atomic_load_n(&pool.word, __ATOMIC_ACQUIRE)) == seen && !pool.stop)
                pthread_cond_wait(&pool.wake, &pool.mu);
            pthread_mutex_unlock(&pool.mu);
        }
        if (__atomic_load_n(&pool.stop, __ATOMIC_ACQUIRE)) return NULL;
        seen = w;
        if (id >= (int)(w & 0xff)) continue; /* not wanted for this job */
        /* join the open job (whichever it is by now), or skip a closed one */
        int st = __atomic_load_n(&pool.state, __ATOMIC_ACQUIRE);
        int joined = 0;
        while (!(st & CLOSED))
            if (__atomic_compare_exchange_n(&pool.state, &st, st + 1, 1, __ATOMIC_ACQ_REL,
                                            __ATOMIC_ACQUIRE)) {
                joined = 1;
                break;
            }
        if (!joined) continue;
        pool.fn(pool.ctx); /* published before the state reset our join acquired */
        if (__atomic_sub_fetch(&pool.state, 1, __ATOMIC_ACQ_REL) == CLOSED) {
            pthread_mutex_lock(&pool.mu);
            pthread_cond_signal(&pool.done);
            pthread_mutex_unlock(&pool.mu);
        }
    }
}

/* In a forked child: the parent's workers do not exist here and its mutexes may be held by
 * threads that do not either. Start over with fresh ones (the threads are not joined: gone). */
static void pool_reset_child(void) {
    pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t c = PTHREAD_COND_INITIALIZER;
    pool.mu = m;
    pool.use = m;
    pool.wake = c;
    pool.done = c;
    pool.nworkers = 0;
    pool.state = CLOSED;
    pool.stop = 0;
    pool.pid = getpid();
}

static pthread_once_t pool_once = PTHREAD_ONCE_INIT;

static void pool_init_once(void) {
    const char *s = getenv("TAPESCOPE_SPIN_US");
    pool.spin_ns = s ? atoll(s) * 1000LL : SPIN_NS;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    pool.ncpu = n < 1 ? 1 : (n > MAX_THREADS ? MAX_THREADS : (int)n);
    pool.pid = getpid();
    pthread_atfork(NULL, NULL, pool_reset_child);
}

/* Run fn(ctx) on this thread and on up to t-1 workers at once; return when every participant
 * is out of it. fn claims its own work (see above), so it is complete with any number of
 * participants, one included. */
static void pool_run(pool_fn fn, void *ctx, int t) {
    if (t > MAX_THREADS) t = MAX_THREADS;
    if (t <= 1) {
        fn(ctx);
        return;
    }
    pthread_once(&pool_once, pool_init_once);
    if (pool.pid != getpid()) pool_reset_child(); /* forked without the atfork handler */
    if (pthread_mutex_trylock(&pool.use) != 0) { /* another caller owns the pool right now */
        fn(ctx);
        return;
    }
    while (pool.nworkers < t - 1 && !pool.stop) {
        pool_arg *a = &pool_args[pool.nworkers + 1];
        a->id = pool.nworkers + 1;
        a->seen = __atomic_load_n(&pool.word, __ATOMIC_ACQUIRE);
        if (pthread_create(&pool.tid[a->id], NULL, pool_worker, a) != 0) break;
        pool.nworkers++;
    }
    if (t > pool.nworkers + 1) t = pool.nworkers + 1;
    if (t > 1) {
        pool.fn = fn;
        pool.ctx = ctx;
        __atomic_store_n(&pool.state, 0, __ATOMIC_RELEASE); /* open: workers may join */
        unsigned long long w = __atomic_load_n(&pool.word, __ATOMIC_RELAXED);
        pthread_mutex_lock(&pool.mu);
        __atomic_store_n(&pool.word, (((w >> 8) + 1) << 8) | (unsigned long long)t,
                         __ATOMIC_RELEASE);
        pthread_cond_broadcast(&pool.wake);
        pthread_mutex_unlock(&pool.mu);
    }
    fn(ctx);
    if (t > 1 && (__atomic_fetch_or(&pool.state, CLOSED, __ATOMIC_ACQ_REL) & ~CLOSED) != 0 &&
        !spin_int(&pool.state, CLOSED)) {
        pthread_mutex_lock(&pool.mu);
        while (__atomic_load_n(&pool.state, __ATOMIC_ACQUIRE) != CLOSED)
            pthread_cond_wait(&pool.done, &pool.mu);
        pthread_mutex_unlock(&pool.mu);
    }
    pthread_mutex_unlock(&pool.use);
}

/* Stop and join the workers (tests; interpreter exit); how many were joined, or -1 when a job
 * owns the pool right now (nothing is stopped). A later job starts a new pool. */
int ts_pool_shutdown(void) {
    if (pool.pid != getpid() || pool.nworkers == 0) return 0;
    if (pthread_mutex_trylock(&pool.use) != 0) return -1;
    pthread_mutex_lock(&pool.mu);
    __atomic_store_n(&pool.stop, 1, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.mu);
    int n = pool.nworkers;
    for (int i = 1; i <= n; ++i) pthread_join(pool.tid[i], NULL);
    pool.nworkers = 0;
    __atomic_store_n(&pool.stop, 0, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&pool.use);
    return n;
}

/* Workers the pool holds now (tests). */
int ts_pool_size(void) { return pool.pid == getpid() ? pool.nworkers : 0; }

/* A job's units are claimed CHUNK at a time from J->next (J->u0 and J->u1 bound the job) */
typedef struct {
    job_t J;
    long long next, chunk; /* next: atomic */
} bmm_job;

static void bmm_part(void *ctx) {
    bmm_job *B = (bmm_job *)ctx;
    job_t J = B->J;
    for (;;) {
        long long u = __atomic_fetch_add(&B->next, B->chunk, __ATOMIC_RELAXED);
        if (u >= B->J.u1) return;
        J.u0 = u;
        J.u1 = u + B->chunk < B->J.u1 ? u + B->chunk : B->J.u1;
        run_units(&J);
    }
}

/* below this many multiply-adds per thread (~15 us of work), handing a share to a pool worker
 * costs more than it saves (was 1 << 20 while every product started its own threads). A worker
 * asleep (not woken in time) costs the caller nothing: it does the blocks itself. The MLP's
 * 64x128x32 products now take two threads: ~16 -> ~12 us each. */
#define MIN_WORK_PER_THREAD (1LL << 17)

static void bmm_cv(const void *a, const void *b, void *c, long long batch, long long m,
                   long long k, long long n, long long sa, long long sb, long long sar,
                   long long sac, long long sbr, long long sbc, int threads, int f32,
                   const ep_t *ep, const conv_t *cv, long long ag) {
    if (batch <= 0 || m <= 0 || n <= 0) return;
    long long units = batch * ((m + ROWS - 1) / ROWS);
    long long work = batch * m * n * (k > 0 ? k : 1);
    long long t = threads < 1 ? 1 : (threads > MAX_THREADS ? MAX_THREADS : threads);
    if (t > units) t = units;
    if (t > work / MIN_WORK_PER_THREAD) t = work / MIN_WORK_PER_THREAD;
    if (t < 1) t = 1;
    /* chunks of about an eighth of a participant's share, so a late or descheduled worker's
     * part is taken by the others */
    long long chunk = t == 1 ? units : units / (t * 8);
    bmm_job B = {{a, b, c, batch, m, k, n, sa, sb, 0, units, sar, sac, sbr, sbc, f32, ep, cv, ag},
                 0, chunk < 1 ? 1 : chunk};
    pool_run(bmm_part, &B, (int)t);
}

static void bmm_s(const void *a, const void *b, void *c, long long batch, long long m,
                  long long k, long long n, long long sa, long long sb, long long sar,
                  long long sac, long long sbr, long long sbc, int threads, int f32,
                  const ep_t *ep) {
    bmm_cv(a, b, c, batch, m, k, n, sa, sb, sar, sac, sbr, sbc, threads, f32, ep, NULL, 0);
}

/* contiguous batch entries */
static void bmm(const void *a, const void *b, void *c, long long batch, long long m,
                long long k, long long n, long long sa, long long sb, int threads, int f32,
                const ep_t *ep) {
    bmm_s(a, b, c, batch, m, k, n, sa, sb, k, 1, n, 1, threads, f32, ep);
}

void ts_mm_f64(const double *a, const double *b, double *c, long long m, long long k,
               long long n, int threads) { bmm(a, b, c, 1, m, k, n, 0, 0, threads, 0, NULL); }

void ts_mm_f32(const float *a, const float *b, float *c, long long m, long long k,
               long long n, int threads) { bmm(a, b, c, 1, m, k, n, 0, 0, threads, 1, NULL); }

/* a 2-D product with operands read through element strides: a[i][kk] = a[i*sar + kk*sac],
 * b[kk][j] = b[kk*sbr + j*sbc] (a transposed operand without a copy first) */
void ts_mm_s_f64(const double *a, const double *b, double *c, long long m, long long k,
                 long long n, long long sar, long long sac, long long sbr, long long sbc,
                 int threads) { bmm_s(a, b, c, 1, m, k, n, 0, 0, sar, sac, sbr, sbc, threads, 0, NULL); }

void ts_mm_s_f32(const float *a, const float *b, float *c, long long m, long long k,
                 long long n, long long sar, long long sac, long long sbr, long long sbc,
                 int threads) { bmm_s(a, b, c, 1, m, k, n, 0, 0, sar, sac, sbr, sbc, threads, 1, NULL); }

void ts_bmm_f64(const double *a, const double *b, double *c, long long batch, long long m,
                long long k, long long n, long long sa, long long sb, int threads) {
    bmm(a, b, c, batch, m, k, n, sa, sb, threads, 0, NULL);
}

void ts_bmm_f32(const float *a, const float *b, float *c, long long batch, long long m,
                long long k, long long n, long long sa, long long sb, int threads) {
    bmm(a, b, c, batch, m, k, n, sa, sb, threads, 1, NULL);
}

/* The batched product with an epilogue (ep_t) applied to each block of rows as it is done:
 * the bits of the product followed by each epilogue op as a separate pass. */
void ts_bmm_ep_f64(const double *a, const double *b, double *c, long long batch, long long m,
                   long long k, long long n, long long sa, long long sb, int threads,
                   const ep_t *ep) {
    bmm(a, b, c, batch, m, k, n, sa, sb, threads, 0, ep);
}

void ts_bmm_ep_f32(const float *a, const float *b, float *c, long long batch, long long m,
                   long long k, long long n, long long sa, long long sb, int threads,
                   const ep_t *ep) {
    bmm(a, b, c, batch, m, k, n, sa, sb, threads, 1, ep);
}

#include "conv_small.h"

/* A 2-D convolution as im2col + ts_bmm_ep without the im2col matrix (mm_rows_cv): x is
 * (nb, c, h, wd), wt (g, m/g, (c/g)*kh*kw) contiguous, out (nb, m, oh, ow); ep as for
 * ts_bmm_ep with ep->groups == g. The bits of ts_im2col followed by ts_bmm_ep. Strides and
 * dilations >= 1 (the caller checks). */
/* The shifted conv (no pack) when the pack would be shared by few rows (m / g <= 64: the
 * pack's cost per element of b is that of ~16-32 rows' multiply-adds), the widened grid adds
 * at most 1/16 of the columns, and every phase plane is read (kh >= sh, kw >= sw: a strided
 * 1x1 conv would copy four times the image it reads). Measured per shape (docs/benchmarks.md,
 * session 9): 0.8-0.9x the time of the packed conv on those, 1.0-1.5x outside them. */
#ifndef CV_SHIFT_ON
#define CV_SHIFT_ON 1
#endif
#define CV_SHIFT_WHEN(mg)                                                               \
    (CV_SHIFT_ON && (mg) <= 64 && kh >= sh && kw >= sw &&                               \
     16 * (((kw - 1) * dw) / sw) <= ow)
#define CONV_EP(F32)                                                                    \
    if (!GEOM_OK || g < 1 || m < 0) return; /* (the caller checked: never here) */     \
    const long long mg = m / g, k = (c / g) * kh * kw;                                  \
    const conv_t cv = {c, g, h, wd, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw, CV_SHIFT_WHEN(mg)}; \
    /* a small output plane: lanes over the output channels (conv_small.h) */            \
    if (cm_when(mg, oh * ow, k, kh * kw, nb, wp != NULL, F32) &&                        \
        conv_cm(x, wt, wp, out, nb, &cv, mg, k, threads, F32, ep))                      \
        return;                                                                         \
    if (kh == 1 && kw == 1 && sh == 1 && sw == 1 && ph == 0 && pw == 0 && oh == h && ow == wd) \
        /* a 1x1 conv's image is its own column matrix: the plain product over it */     \
        bmm_cv(wt, x, out, nb * g, mg, k, oh * ow, mg * k, k * h * wd, k, 1, oh * ow, 1, threads, \
               F32, ep, NULL, g);                                                       \
    else                                                                                \
        bmm_cv(wt, x, out, nb * g, mg, k, oh * ow, mg * k, 0, k, 1, 0, 0, threads, F32, ep, &cv, \
               0);

void ts_conv_ep_f64(const double *x, const double *wt, const double *wp, double *out,
                    long long nb, long long c, long long h, long long wd, long long g, long long m, long long kh,
                    long long kw, long long oh, long long ow, long long sh, long long sw,
                    long long ph, long long pw, long long dh, long long dw, int threads,
                    const ep_t *ep) {
    CONV_EP(0)
}

void ts_conv_ep_f32(const float *x, const float *wt, const float *wp, float *out,
                    long long nb, long long c, long long h, long long wd, long long g, long long m, long long kh,
                    long long kw, long long oh, long long ow, long long sh, long long sw,
                    long long ph, long long pw, long long dh, long long dw, int threads,
                    const ep_t *ep) {
    CONV_EP(1)
}

/* im2col for 2-D convolutions: cols[n][(c, kh, kw)][(oh, ow)] = x[n][c][oh*sh + kh*dh - ph]
 * [ow*sw + kw*dw - pw], +0.0 outside the image (the zero padding). A copy: no arithmetic, so no
 * rounding; the same matrix as core.ops.nn.im2col's window view, written contiguously. */
#define IM2COL(T)                                                                       \
    if (!geom_ok(nb, c, h, w, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw)) return;         \
    for (long long q = 0; q < nb * c; ++q) {                                            \
        const T *xq = x + q * h * w;                                                    \
        T *out = cols + q * kh * kw * oh * ow;                                          \
        for (long long u = 0; u < kh; ++u)                                              \
            for (long long v = 0; v < kw; ++v) {                                        \
                for (long long r = 0; r < oh; ++r) {                                    \
                    long long iy = r * sh + u * dh - ph;                                \
                    if (iy < 0 || iy >= h) {                                            \
                        for (long long s = 0; s < ow; ++s) out[s] = (T)0;               \
                    } else {                                                            \
                        const T *row = xq + iy * w;                                     \
                        for (long long s = 0; s < ow; ++s) {                            \
                            long long ix = s * sw + v * dw - pw;                        \
                            out[s] = (ix >= 0 && ix < w) ? row[ix] : (T)0;              \
                        }                                                               \
                    }                                                                   \
                    out += ow;                                                          \
                }                                                                       \
            }                                                                           \
    }

void ts_im2col_f64(const double *x, double *cols, long long nb, long long c, long long h,
                   long long w, long long kh, long long kw, long long oh, long long ow,
                   long long sh, long long sw, long long ph, long long pw, long long dh,
                   long long dw) { IM2COL(double) }

void ts_im2col_f32(const float *x, float *cols, long long nb, long long c, long long h,
                   long long w, long long kh, long long kw, long long oh, long long ow,
                   long long sh, long long sw, long long ph, long long pw, long long dh,
                   long long dw) { IM2COL(float) }

/* A 2-D convolution whose groups each have ONE output channel (depthwise and the like), direct:
 * out[n][q][oh][ow] = acc = 0.0; for (c, u, v) in row-major order over the group's input
 * channels and the taps: acc = acc + w[q][c][u][v] * x[n][q*cg + c][oh*sh + u*dh - ph]
 * [ow*sw + v*dw - pw] -- exactly the chain im2col + the reference matmul computes (the same
 * products in the same order), padding taps included as products with +0.0 (w*0.0 is -0.0 or
 * NaN for some w, so they are not skipped). Every output element is one chain, kept in `out`
 * while the taps pass over the plane. */
#define CONV_MG1_PLANES(T)                                                                     \
    long long cgc = c / g;                                                              \
    for (long long nq = 0; nq < nb * g; ++nq) {                                         \
        long long q = nq % g;                                                           \
        T *o = out + nq * oh * ow;                                                      \
        for (long long p = 0; p < oh * ow; ++p) o[p] = (T)0;                            \
        for (long long ci = 0; ci < cgc; ++ci) {                                        \
            const T *xc = x + ((nq / g) * c + q * cgc + ci) * h * wd;                   \
            const T *wc = wt + (q * cgc + ci) * kh * kw;                                \
            for (long long u = 0; u < kh; ++u)                                          \
                for (long long v = 0; v < kw; ++v) {                                    \
                    const T wv = wc[u * kw + v], zero = (T)0;                           \
                    long long off = v * dw - pw;                                        \
                    /* s in [lo, hi) read inside the row: 0 <= s*sw + off < wd */       \
                    long long lo = off >= 0 ? 0 : (-off + sw - 1) / sw;                 \
                    long long hi = wd - off <= 0 ? 0 : (wd - off + sw - 1) / sw;        \
                    if (hi > ow) hi = ow;                                               \
                    if (lo > hi) lo = hi;                                               \
                    for (long long r = 0; r < oh; ++r) {                                \
                        T *orow = o + r * ow;                                           \
                        long long iy = r * sh + u * dh - ph;                            \
                        if (iy < 0 || iy >= h) {                                        \
                            for (long long s = 0; s < ow; ++s) {                        \
                                T pr = wv * zero;                                       \
                                orow[s] = orow[s] + pr;                                 \
                            }                                                           \
                            continue;                                                   \
                        }                                                               \
                        const T *xr = xc + iy * wd + off;                               \
                        for (long long s = 0; s < lo; ++s) {                            \
                            T pr = wv * zero;                                           \
                            orow[s] = orow[s] + pr;                                     \
                        }                                                               \
                        if (sw == 1)                                                    \
                            for (long long s = lo; s < hi; ++s) {                       \
                                T pr = wv * xr[s];                                      \
                                orow[s] = orow[s] + pr;                                 \
                            }                                                           \
                        else                                                            \
                            for (long long s = lo; s < hi; ++s) {                       \
                                T pr = wv * xr[s * sw];                                 \
                                orow[s] = orow[s] + pr;                                 \
                            }                                                           \
                        for (long long s = hi; s < ow; ++s) {                           \
                            T pr = wv * zero;                                           \
                            orow[s] = orow[s] + pr;                                     \
                        }                                                               \
                    }                                                                   \
                }                                                                       \
        }                                                                               \
        if (ep) EPF(ep, o, ep->res ? (const T *)ep->res + nq * oh * ow : NULL, nq / g, q, 1, \
                     oh * ow);                                                   \
    }


/* The same chains, quicker: per (image, group) the group's input channels are copied once into
 * zero-padded "phase planes" P[ci][a][b][R][S] = xpad[R*sh + a][S*sw + b] (xpad: x with its
 * padding, +0.0 outside the image), so tap (u, v) of output (r, s) reads phase plane
 * ((u*dh) % sh, (v*dw) % sw) at (r + u*dh/sh, s + v*dw/sw): a plain offset in a row-major plane
 * of width Wq. The outputs are then computed VB at a time over the flattened (oh x Wq) grid,
 * each lane one output's chain kept in a register: acc = 0; for (c, u, v) in row-major order:
 * acc = acc + w*x -- the same products (padding taps as w * +0.0) in the same order, so the
 * same bits. Lanes past a row's ow columns compute values nobody stores. */
#define CONV_MG1_FAST(T, V, VB)                                                         \
    /* the phase planes are sized by the strides and the dilated window: with a hostile     \
     * stride or dilation they would be far larger than the image and the output (or their \
     * size would overflow); then (checked in doubles, before any product can overflow) the \
     * plain loop runs, the same chains */                                               \
    if (sh > 16 || sw > 16 ||                                                           \
        (double)sh * (double)sw *                                                       \
                ((double)oh + (double)(kh - 1) * (double)dh / (double)sh + 1.0) *       \
                ((double)ow + (double)(kw - 1) * (double)dw / (double)sw + 1.0 + (double)(VB)) > \
            4.0 * ((double)h * (double)wd + (double)oh * (double)ow) +                  \
                256.0 * ((double)ow + (double)wd + (double)(VB) + 16.0) + 4096.0)       \
        return 0;                                                                       \
    long long cgc = c / g, ntap = cgc * kh * kw;                                        \
    long long hq = oh + ((kh - 1) * dh) / sh, wq = ow + ((kw - 1) * dw) / sw;           \
    long long pl = hq * wq + wq + VB; /* one phase plane, with slack for the last lanes */ \
    long long npos = oh * wq, nblk = (npos + VB - 1) / VB;                              \
    /* the padding stays +0.0 from calloc: every plane has the same geometry, and only the \
     * cells inside the image are written, plane after plane */                         \
    T *P = (T *)calloc((size_t)(cgc * sh * sw * pl + nblk * VB), sizeof(T));           \
    long long *toff = (long long *)malloc((size_t)(ntap > 0 ? ntap : 1) * sizeof(long long)); \
    if (!P || !toff) {                                                                  \
        free(P);                                                                        \
        free(toff);                                                                     \
        return 0;                                                                       \
    }                                                                                   \
    T *tmp = P + cgc * sh * sw * pl;                                                    \
    PHASE_TOFF(toff, cgc, kh, kw, dh, dw, sh, sw, pl, wq);                              \
    for (long long nq = 0; nq < nb * g; ++nq) {                                         \
        long long q = nq % g;                                                           \
        for (long long ci = 0; ci < cgc; ++ci) {                                        \
            const T *xc = x + ((nq / g) * c + q * cgc + ci) * h * wd;                   \
            PHASE_COPY(T, P, xc, ci, sh, sw, pl, hq, wq, h, wd, ph, pw)                 \
        }                                                                               \
        const T *wg = wt + q * ntap;                                                    \
        for (long long blk = 0; blk < nblk; ++blk) {                                    \
            const T *base = P + blk * VB;                                               \
            V a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};                                   \
            for (long long tp = 0; tp < ntap; ++tp) {                                   \
                const T wv = wg[tp];                                                    \
                const V *src = (const V *)(base + toff[tp]);                            \
                V p0 = src[0] * wv, p1 = src[1] * wv, p2 = src[2] * wv, p3 = src[3] * wv; \
                a0 = a0 + p0;                                                           \
                a1 = a1 + p1;                                                           \
                a2 = a2 + p2;                                                           \
                a3 = a3 + p3;                                                           \
            }                                                                           \
            V *dst = (V *)(tmp + blk * VB);                                             \
            dst[0] = a0;                                                                \
            dst[1] = a1;                                                                \
            dst[2] = a2;                                                                \
            dst[3] = a3;                                                                \
        }                                                                               \
        T *o = out + nq * oh * ow;                                                      \
        for (long long r = 0; r < oh; ++r)                                              \
            for (long long s = 0; s < ow; ++s) o[r * ow + s] = tmp[r * wq + s];         \
        if (ep) EPF(ep, o, ep->res ? (const T *)ep->res + nq * oh * ow : NULL, nq / g, q, 1, \
                     oh * ow);                                                   \
    }                                                                                   \
    free(toff);                                                                         \
    free(P);                                                                            \
    return 1;

static int conv_mg1_fast_f64(const double *x, const double *wt, double *out, long long nb,
                             long long c, long long h, long long wd, long long g, long long kh,
                             long long kw, long long oh, long long ow, long long sh,
                             long long sw, long long ph, long long pw, long long dh,
                             long long dw, const ep_t *ep) {
#define EPF ep_rows_f64
    CONV_MG1_FAST(double, vmf64, (long long)(4 * sizeof(vmf64) / sizeof(double)))
#undef EPF
}

static int conv_mg1_fast_f32(const float *x, const float *wt, float *out, long long nb,
                             long long c, long long h, long long wd, long long g, long long kh,
                             long long kw, long long oh, long long ow, long long sh,
                             long long sw, long long ph, long long pw, long long dh,
                             long long dw, const ep_t *ep) {
#define EPF ep_rows_f32
    CONV_MG1_FAST(float, vmf32, (long long)(4 * sizeof(vmf32) / sizeof(float)))
#undef EPF
}

#include "conv_dw.h"

/* Strides and dilations of at least 1 take the lanes over channels (conv_dw.h), else the fast
 * loop; anything else (or no memory for the phase planes) the plain one. */
#define CONV_MG1(T, SFX)                                                                \
    if (!GEOM_OK || g < 1) return; /* (the caller checked: never here) */              \
    if (sh >= 1 && sw >= 1 && dh >= 1 && dw >= 1 && CONV_DW_ON &&                       \
        conv_dw_##SFX(x, wt, out, nb, c, h, wd, g, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw, ep)) \
        return;                                                                         \
    if (sh >= 1 && sw >= 1 && dh >= 1 && dw >= 1 &&                                     \
        conv_mg1_fast_##SFX(x, wt, out, nb, c, h, wd, g, kh, kw, oh, ow, sh, sw, ph, pw, dh, \
                            dw, ep))                                                    \
        return;                                                                         \
    {                                                                                   \
        CONV_MG1_PLANES(T)                                                              \
    }

void ts_conv_mg1_ep_f64(const double *x, const double *wt, double *out, long long nb,
                        long long c, long long h, long long wd, long long g, long long kh,
                        long long kw, long long oh, long long ow, long long sh, long long sw,
                        long long ph, long long pw, long long dh, long long dw,
                        const ep_t *ep) {
#define EPF ep_rows_f64
    CONV_MG1(double, f64)
#undef EPF
}

void ts_conv_mg1_ep_f32(const float *x, const float *wt, float *out, long long nb,
                        long long c, long long h, long long wd, long long g, long long kh,
                        long long kw, long long oh, long long ow, long long sh, long long sw,
                        long long ph, long long pw, long long dh, long long dw,
                        const ep_t *ep) {
#define EPF ep_rows_f32
    CONV_MG1(float, f32)
#undef EPF
}

void ts_conv_mg1_f64(const double *x, const double *wt, double *out, long long nb, long long c,
                     long long h, long long wd, long long g, long long kh, long long kw,
                     long long oh, long long ow, long long sh, long long sw, long long ph,
                     long long pw, long long dh, long long dw) {
    ts_conv_mg1_ep_f64(x, wt, out, nb, c, h, wd, g, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw, NULL);
}

void ts_conv_mg1_f32(const float *x, const float *wt, float *out, long long nb, long long c,
                     long long h, long long wd, long long g, long long kh, long long kw,
                     long long oh, long long ow, long long sh, long long sw, long long ph,
                     long long pw, long long dh, long long dw) {
    ts_conv_mg1_ep_f32(x, wt, out, nb, c, h, wd, g, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw, NULL);
}

/* One prepared convolution call (core.onnx.fused's FusedConv): the geometry and weights fixed
 * once per shape, this run's image, output and epilogue set in a copy of it. A single pointer
 * for ctypes to pass: a call with 21 arguments cost ~3 us of argument conversion, more than
 * a small grouped 1x1 conv's per-group setup. one_per_group: ts_conv_mg1_ep (g == m), else
 * ts_conv_ep (ep.groups == g). */
typedef struct {
    const void *x, *w, *wpack; /* wpack: ts_conv_cm_pack of w, or NULL (see ts_conv_ep) */
    void *out;
    long long nb, c, h, wd, g, m, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw;
    int threads, f32, one_per_group;
    ep_t ep;
} conv_call_t;

void ts_conv_call(conv_call_t *C) {
    C->ep.groups = C->g;
    if (C->one_per_group) {
        if (C->f32)
            ts_conv_mg1_ep_f32(C->x, C->w, C->out, C->nb, C->c, C->h, C->wd, C->g, C->kh, C->kw,
                               C->oh, C->ow, C->sh, C->sw, C->ph, C->pw, C->dh, C->dw, &C->ep);
        else
            ts_conv_mg1_ep_f64(C->x, C->w, C->out, C->nb, C->c, C->h, C->wd, C->g, C->kh, C->kw,
                               C->oh, C->ow, C->sh, C->sw, C->ph, C->pw, C->dh, C->dw, &C->ep);
    } else if (C->f32)
        ts_conv_ep_f32(C->x, C->w, C->wpack, C->out, C->nb, C->c, C->h, C->wd, C->g, C->m, C->kh,
                       C->kw, C->oh, C->ow, C->sh, C->sw, C->ph, C->pw, C->dh, C->dw, C->threads,
                       &C->ep);
    else
        ts_conv_ep_f64(C->x, C->w, C->wpack, C->out, C->nb, C->c, C->h, C->wd, C->g, C->m, C->kh,
                       C->kw, C->oh, C->ow, C->sh, C->sw, C->ph, C->pw, C->dh, C->dw, C->threads,
                       &C->ep);
}

/* 2-D pools in pool_nd's order (core.ops.nn): each output is its own chain over its window's
 * taps (u, v) in row-major order,
 *   average: acc = +0.0; acc = acc + tap ...; y = acc / cnt[position] (the caller's divisors);
 *   max:     acc = tap(0, 0); acc = (acc > t || acc != acc) ? acc : t ..., numpy's
 *            np.maximum(acc, t): the first NaN stays, and of two equal values (+0.0 and -0.0)
 *            the second.
 * A padding tap changes no bits, so lanes skips it: adding +0.0 leaves an average's acc as it
 * is (acc starts at +0.0, and x + y is -0.0 only when both are, so acc is never -0.0), and
 * np.maximum(acc, -inf) is acc (or -inf when acc is -inf; NaN stays). A max starts from -inf
 * instead of its first tap: np.maximum(-inf, t) is t for every t, NaN and -0.0 included (and a
 * window wholly in the padding gives -inf, as pool_nd's does).
 * Four loop shapes, by geometry (POOL2D); each only decides which outputs share a vector:
 *   phase (POOL_PHASE): one plane at a time, copied into padded stride-phase planes so that a
 *         tap's reads for a block of outputs are one contiguous run;
 *   same  (POOL_SAME): strides 1, outputs the image's size: the whole tensor as one run, no copy;
 *   lanes (POOL_LANES): L planes side by side, one output of each per vector; no copy, each
 *         output's in-image taps from a list (global pools, windows that barely overlap,
 *         outputs too narrow for phase's runs);
 *   planes (conv_dw.h's POOL_DW): L planes copied into one channel-interleaved padded buffer,
 *         one output of each per vector, each tap one load. */
#define POOL_OP(AVG, a, t) ((AVG) ? (a) + (t) : ((a) != (a) ? (a) : ((a) > (t) ? (a) : (t))))

#define POOL_STORE(T, AVG, ydst, asrc, ci)                                              \
    if (AVG)                                                                            \
        (ydst) = (asrc) / cnt[ci];                                                      \
    else                                                                                \
        (ydst) = (asrc);

/* Lane-wise np.maximum(a, t): a where a > t or a is NaN, else t (GCC vector compares give
 * all-ones lanes where true) */
typedef int v16i32 __attribute__((vector_size(64), aligned(4), may_alias));
typedef long long v8i64 __attribute__((vector_size(64), aligned(8), may_alias));
#define POOL_MAX_FN(NAME, V, VI)                                                        \
    static inline V NAME(V a, V t) {                                                    \
        const VI m = (a > t) | (a != a);                                                \
        return (V)(((VI)a & m) | ((VI)t & ~m));                                         \
    }
POOL_MAX_FN(pool_max_v16f32, v16f32, v16i32)
POOL_MAX_FN(pool_max_v8f64, v8f64, v8i64)
/* The pools' vectors are the register's width (vpf32 ... below): without AVX-512 gcc lowered
 * the 64-byte compares and selects of pool_max_v16f32 to element-by-element code through the
 * stack, and squeezenet's MaxPools took 17-20 % of its run on the avx2 path against 3 % on
 * avx512 (perf, TAPESCOPE_ISA=avx2; issue 49). The lanes are outputs, each with its own taps
 * in order, so the width changes no bit. */
#if defined(__AVX512F__)
typedef v16f32 vpf32;
typedef v16i32 vpi32;
typedef v8f64 vpf64;
typedef v8i64 vpi64;
#define pool_max_vp32 pool_max_v16f32
#define pool_max_vp64 pool_max_v8f64
#else
#if defined(__AVX__)
#define POOL_VBYTES 32
#else
#define POOL_VBYTES 16
#endif
typedef float vpf32 __attribute__((vector_size(POOL_VBYTES), aligned(4), may_alias));
typedef int vpi32 __attribute__((vector_size(POOL_VBYTES), aligned(4), may_alias));
typedef double vpf64 __attribute__((vector_size(POOL_VBYTES), aligned(8), may_alias));
typedef long long vpi64 __attribute__((vector_size(POOL_VBYTES), aligned(8), may_alias));
POOL_MAX_FN(pool_max_vp32, vpf32, vpi32)
POOL_MAX_FN(pool_max_vp64, vpf64, vpi64)
#endif

/* The padded plane P (the region the windows cover; ID outside the image) split by stride phase
 * in both axes: phase (a, b) holds the padded cells (R*sh + a, S*sw + b) as a plane of hq x wq
 * plus a slack row, so one tap's reads for every output of a block of rows are one contiguous
 * run: output (r, s), tap (u, v) reads phase ((u*dh) % sh, (v*dw) % sw) at R = r + (u*dh) / sh,
 * S = s + (v*dw) / sw. The runs are taken a tile of 4 vectors at a time, its accumulators in
 * registers over all the taps; the tile also computes the wq - ow columns past each row's end
 * and, in the last tile, past the block's end (from padding, slack or the next phase: P has a
 * tile of slack after the last), which are dropped. */
#define POOL_PHASE(T, V, VMAX, AVG, ID)                                                 \
    {                                                                                   \
        /* phase planes far larger than the image (hostile strides or dilations; checked in \
         * doubles, before a product can overflow): 0, numpy's windows run instead */    \
        if ((double)sh * (double)sw *                                                   \
                (double)(oh + (double)(kh - 1) * (double)dh / (double)sh + 1.0) *       \
                ((double)ow + (double)(kw - 1) * (double)dw / (double)sw + 2.0) >       \
            4.0 * ((double)h * (double)w + (double)oh * (double)ow) +                   \
                256.0 * ((double)ow + (double)w + 16.0) + 4096.0)                       \
            return 0;                                                                   \
        const long long hq = oh + ((kh - 1) * dh) / sh, wq = ow + ((kw - 1) * dw) / sw; \
        const long long pl = hq * wq + wq, nph = sh * sw, nt = kh * kw;                 \
        const long long VL = (long long)(sizeof(V) / sizeof(T)), TL = 4 * VL;           \
        long long rb = 2048 / wq; /* output rows per block: the accumulators stay in L1 */ \
        if (rb < 1) rb = 1;                                                             \
        if (rb > oh) rb = oh;                                                           \
        T *P = (T *)malloc((size_t)(nph * pl + TL + rb * wq + TL) * sizeof(T));         \
        long long *toff = (long long *)malloc((size_t)(nt + 2 * sw) * sizeof(long long)); \
        if (!P || !toff) {                                                              \
            free(P);                                                                    \
            free(toff);                                                                 \
            return 0;                                                                   \
        }                                                                               \
        T *acc = P + nph * pl + TL;                                                     \
        long long *cl = toff + nt, *ch = cl + sw;                                       \
        for (long long u = 0; u < kh; ++u) /* each tap's run start, row-major tap order */ \
            for (long long v = 0; v < kw; ++v)                                          \
                toff[u * kw + v] = (((u * dh) % sh) * sw + (v * dw) % sw) * pl +        \
                                   ((u * dh) / sh) * wq + (v * dw) / sw;                \
        /* the padding is the same cells in every plane: filled once, the image cells    \
         * written per plane */                                                         \
        for (long long i = 0; i < nph * pl + TL; ++i) P[i] = ID;                        \
        V idv;                                                                          \
        for (long long l = 0; l < VL; ++l) idv[l] = ID;                                 \
        for (long long b = 0; b < sw; ++b) {                                            \
            /* column phase b's image cells: S in [cl[b], ch[b]), 0 <= S*sw + b - pw < w */ \
            long long lo = pw - b <= 0 ? 0 : (pw - b + sw - 1) / sw;                    \
            long long hi = w + pw - b <= 0 ? 0 : (w + pw - b + sw - 1) / sw;            \
            if (hi > wq) hi = wq;                                                       \
            if (lo > hi) lo = hi;                                                       \
            cl[b] = lo;                                                                 \
            ch[b] = hi;                                                                 \
        }                                                                               \
        for (long long q = 0; q < planes; ++q) {                                        \
            const T *xq = x + q * h * w;                                                \
            T *yq = y + q * oh * ow;                                                    \
            for (long long a = 0; a < sh; ++a) {                                        \
                /* R in [rlo, rhi): 0 <= R*sh + a - ph < h */                           \
                long long rlo = ph - a <= 0 ? 0 : (ph - a + sh - 1) / sh;               \
                long long rhi = h + ph - a <= 0 ? 0 : (h + ph - a + sh - 1) / sh;       \
                if (rhi > hq) rhi = hq;                                                 \
                if (rlo > rhi) rlo = rhi;                                               \
                for (long long R = rlo; R < rhi; ++R) {                                 \
                    const T *xr = xq + (R * sh + a - ph) * w;                           \
                    T *pr = P + a * sw * pl + R * wq; /* phase (a, 0)'s row R */        \
                    if (sw == 1) {                                                      \
                        memcpy(pr + cl[0], xr + cl[0] - pw, (size_t)(ch[0] - cl[0]) * sizeof(T)); \
                    } else if (sw == 2) {                                               \
                        /* both column phases in one deinterleaving pass, their ends apart */ \
                        T *restrict p0 = pr, *restrict p1 = pr + pl;                    \
                        const T *restrict xs = xr - pw;                                 \
                        const long long c0 = cl[0] > cl[1] ? cl[0] : cl[1];             \
                        const long long c1 = ch[0] < ch[1] ? ch[0] : ch[1];             \
                        for (long long S = c0; S < c1; ++S) {                           \
                            p0[S] = xs[2 * S];                                          \
                            p1[S] = xs[2 * S + 1];                                      \
                        }                                                               \
                        const long long e0 = c1 > cl[0] ? c1 : cl[0];                   \
                        const long long e1 = c1 > cl[1] ? c1 : cl[1];                   \
                        for (long long S = cl[0]; S < c0 && S < ch[0]; ++S) p0[S] = xs[2 * S]; \
                        for (long long S = e0; S < ch[0]; ++S) p0[S] = xs[2 * S];       \
                        for (long long S = cl[1]; S < c0 && S < ch[1]; ++S) p1[S] = xs[2 * S + 1]; \
                        for (long long S = e1; S < ch[1]; ++S) p1[S] = xs[2 * S + 1];   \
                    } else {                                                            \
                        for (long long b = 0; b < sw; ++b)                              \
                            for (long long S = cl[b]; S < ch[b]; ++S)                   \
                                pr[b * pl + S] = xr[S * sw + b - pw];                   \
                    }                                                                   \
                }                                                                       \
            }                                                                           \
            for (long long r0 = 0; r0 < oh; r0 += rb) {                                 \
                const long long r1 = r0 + rb < oh ? r0 + rb : oh;                       \
                const long long len = (r1 - r0) * wq;                                   \
                const T *base = P + r0 * wq;                                            \
                for (long long i0 = 0; i0 < len; i0 += TL) {                            \
                    V a0 = idv, a1 = idv, a2 = idv, a3 = idv;                           \
                    for (long long t = 0; t < nt; ++t) {                                \
                        const T *src = base + toff[t] + i0;                             \
                        if (AVG) {                                                      \
                            a0 = a0 + *(const V *)src;                                  \
                            a1 = a1 + *(const V *)(src + VL);                           \
                            a2 = a2 + *(const V *)(src + 2 * VL);                       \
                            a3 = a3 + *(const V *)(src + 3 * VL);                       \
                        } else {                                                        \
                            a0 = VMAX(a0, *(const V *)src);                             \
                            a1 = VMAX(a1, *(const V *)(src + VL));                      \
                            a2 = VMAX(a2, *(const V *)(src + 2 * VL));                  \
                            a3 = VMAX(a3, *(const V *)(src + 3 * VL));                  \
                        }                                                               \
                    }                                                                   \
                    *(V *)(acc + i0) = a0;                                              \
                    *(V *)(acc + i0 + VL) = a1;                                         \
                    *(V *)(acc + i0 + 2 * VL) = a2;                                     \
                    *(V *)(acc + i0 + 3 * VL) = a3;                                     \
                }                                                                       \
                for (long long r = r0; r < r1; ++r) {                                   \
                    const T *ar = acc + (r - r0) * wq;                                  \
                    for (long long s = 0; s < ow; ++s) {                                \
                        POOL_STORE(T, AVG, yq[r * ow + s], ar[s], r * ow + s)           \
                    }                                                                   \
                }                                                                       \
            }                                                                           \
        }                                                                               \
        free(P);                                                                        \
        free(toff);                                                                     \
        return 1;                                                                       \
    }

#define POOL_LANE_LOOP(T, AVG, NB)                                                      \
    for (long long t = tb[o]; t < tb[o + 1]; ++t) {                                     \
        const T *xt = xb + to[t];                                                       \
        for (long long j = 0; j < (NB); ++j) {                                          \
            T a_ = a[j], t_ = xt[j * hw];                                               \
            a[j] = POOL_OP(AVG, a_, t_);                                                \
        }                                                                               \
    }

#define POOL_LANES(T, AVG, ID, L)                                                       \
    {                                                                                   \
        const long long no = oh * ow, hw = h * w;                                       \
        /* every output's taps inside the image, as plane offsets in row-major tap order */ \
        long long *tb = (long long *)malloc((size_t)(no + 1) * sizeof(long long));      \
        long long *to = (long long *)malloc((size_t)(no * kh * kw + 1) * sizeof(long long)); \
        if (!tb || !to) {                                                               \
            free(tb);                                                                   \
            free(to);                                                                   \
            return 0;                                                                   \
        }                                                                               \
        long long nt = 0;                                                               \
        for (long long o = 0; o < no; ++o) {                                            \
            tb[o] = nt;                                                                 \
            for (long long u = 0; u < kh; ++u) {                                        \
                const long long ir = (o / ow) * sh + u * dh - ph;                       \
                if (ir < 0 || ir >= h) continue;                                        \
                for (long long v = 0; v < kw; ++v) {                                    \
                    const long long ic = (o % ow) * sw + v * dw - pw;                   \
                    if (ic >= 0 && ic < w) to[nt++] = ir * w + ic;                      \
                }                                                                       \
            }                                                                           \
        }                                                                               \
        tb[no] = nt;                                                                    \
        for (long long q0 = 0; q0 < planes; q0 += (L)) {                                \
            const long long nb = planes - q0 < (L) ? planes - q0 : (L);                 \
            const T *xb = x + q0 * hw;                                                  \
            for (long long o = 0; o < no; ++o) {                                        \
                T a[L];                                                                 \
                for (long long j = 0; j < (L); ++j) a[j] = ID;                          \
                if (nb == (L)) {                                                        \
                    POOL_LANE_LOOP(T, AVG, L)                                           \
                } else {                                                                \
                    POOL_LANE_LOOP(T, AVG, nb)                                          \
                }                                                                       \
                for (long long j = 0; j < nb; ++j) {                                    \
                    POOL_STORE(T, AVG, y[(q0 + j) * no + o], a[j], o)                   \
                }                                                                       \
            }                                                                           \
        }                                                                               \
        free(tb);                                                                       \
        free(to);                                                                       \
        return 1;                                                                       \
    }

/* Strides 1 and outputs the image's size (oh == h, ow == w: "same" padding): output i of the
 * whole tensor (planes one after another) reads tap (u, v) at input i + (u*dh - ph)*w + v*dw - pw,
 * so one tap's reads for any run of outputs, across rows and planes, are contiguous: tiles of 4
 * vectors run over the flat tensor straight from x into y, no copy. A tap off its plane's image
 * reads a neighbouring row's or plane's cell, which a mask (per tap, over one plane's positions,
 * extended by a tile so a tile's run of it is contiguous) turns to ID: as a padding tap, that
 * changes nothing. The first and last tiles, whose runs would leave x, read a guarded copy. */
#define POOL_SAME(T, IT, V, VI, VMAX, AVG, ID)                                          \
    {                                                                                   \
        const long long VL = (long long)(sizeof(V) / sizeof(T)), TL = 4 * VL;           \
        const long long hw = h * w, n = planes * hw, nt = kh * kw, ml = hw + TL;        \
        const long long mino = -(ph * w + pw);                                          \
        const long long maxo = ((kh - 1) * dh - ph) * w + (kw - 1) * dw - pw;           \
        const long long gl = TL + maxo - mino;                                          \
        IT *mk = (IT *)malloc((size_t)(nt * ml) * sizeof(IT));                          \
        T *tmp = (T *)malloc((size_t)(gl + TL + (AVG ? ml : 0)) * sizeof(T));           \
        long long *toff = (long long *)malloc((size_t)nt * sizeof(long long));          \
        if (!mk || !tmp || !toff) {                                                     \
            free(mk);                                                                   \
            free(tmp);                                                                  \
            free(toff);                                                                 \
            return 0;                                                                   \
        }                                                                               \
        T *G = tmp, *yt = tmp + gl, *cx = tmp + gl + TL;                                \
        for (long long u = 0; u < kh; ++u)                                              \
            for (long long v = 0; v < kw; ++v) {                                        \
                const long long t = u * kw + v;                                         \
                toff[t] = (u * dh - ph) * w + v * dw - pw;                              \
                /* -1 where the tap is inside; position p is row pr, column pc of a plane */ \
                for (long long p = 0, pr = 0, pc = 0; p < ml; ++p) {                    \
                    const long long r = pr + u * dh - ph, c = pc + v * dw - pw;         \
                    mk[t * ml + p] = (r >= 0 && r < h && c >= 0 && c < w) ? (IT)-1 : (IT)0; \
                    if (++pc == w) {                                                    \
                        pc = 0;                                                         \
                        if (++pr == h) pr = 0;                                          \
                    }                                                                   \
                }                                                                       \
            }                                                                           \
        if (AVG)                                                                        \
            for (long long p = 0, pp = 0; p < ml; ++p, pp = pp + 1 == hw ? 0 : pp + 1)  \
                cx[p] = cnt[pp];                                                        \
        V idv;                                                                          \
        for (long long l = 0; l < VL; ++l) idv[l] = ID;                                 \
        long long pm = 0; /* i0 % hw */                                                 \
        for (long long i0 = 0; i0 < n; i0 += TL) {                                      \
            const T *xs = x + i0;                                                       \
            if (i0 + mino < 0 || i0 + TL + maxo > n) {                                  \
                for (long long j = 0; j < gl; ++j) {                                    \
                    const long long k = i0 + mino + j;                                  \
                    G[j] = k >= 0 && k < n ? x[k] : ID;                                 \
                }                                                                       \
                xs = G - mino;                                                          \
            }                                                                           \
            V a0 = idv, a1 = idv, a2 = idv, a3 = idv;                                   \
            for (long long t = 0; t < nt; ++t) {                                        \
                const T *src = xs + toff[t];                                            \
                const IT *m = mk + t * ml + pm;                                         \
                V x0 = *(const V *)src, x1 = *(const V *)(src + VL);                    \
                V x2 = *(const V *)(src + 2 * VL), x3 = *(const V *)(src + 3 * VL);     \
                const VI m0 = *(const VI *)m, m1 = *(const VI *)(m + VL);               \
                const VI m2 = *(const VI *)(m + 2 * VL), m3 = *(const VI *)(m + 3 * VL); \
                x0 = (V)(((VI)x0 & m0) | ((VI)idv & ~m0));                              \
                x1 = (V)(((VI)x1 & m1) | ((VI)idv & ~m1));                              \
                x2 = (V)(((VI)x2 & m2) | ((VI)idv & ~m2));                              \
                x3 = (V)(((VI)x3 & m3) | ((VI)idv & ~m3));                              \
                if (AVG) {                                                              \
                    a0 = a0 + x0;                                                       \
                    a1 = a1 + x1;                                                       \
                    a2 = a2 + x2;                                                       \
                    a3 = a3 + x3;                                                       \
                } else {                                                                \
                    a0 = VMAX(a0, x0);                                                  \
                    a1 = VMAX(a1, x1);                                                  \
                    a2 = VMAX(a2, x2);                                                  \
                    a3 = VMAX(a3, x3);                                                  \
                }                                                                       \
            }                                                                           \
            if (AVG) {                                                                  \
                const T *c = cx + pm;                                                   \
                a0 = a0 / *(const V *)c;                                                \
                a1 = a1 / *(const V *)(c + VL);                                         \
                a2 = a2 / *(const V *)(c + 2 * VL);                                     \
                a3 = a3 / *(const V *)(c + 3 * VL);                                     \
            }                                                                           \
            T *yo = i0 + TL <= n ? y + i0 : yt; /* the last, partial tile: through yt */ \
            *(V *)yo = a0;                                                              \
            *(V *)(yo + VL) = a1;                                                       \
            *(V *)(yo + 2 * VL) = a2;                                                   \
            *(V *)(yo + 3 * VL) = a3;                                                   \
            if (yo == yt) memcpy(y + i0, yt, (size_t)(n - i0) * sizeof(T));             \
            pm += TL;                                                                   \
            while (pm >= hw) pm -= hw;                                                  \
        }                                                                               \
        free(mk);                                                                       \
        free(tmp);                                                                      \
        free(toff);                                                                     \
        return 1;                                                                       \
    }

#define POOL_ARGS(T)                                                                    \
    const T *x, const T *cnt, T *y, long long planes, long long h, long long w, long long kh, \
        long long kw, long long oh, long long ow, long long sh, long long sw, long long ph, \
        long long pw, long long dh, long long dw

/* The lanes loops as functions of their own, kept scalar: gcc otherwise builds each vector of
 * L planes' taps one lane insert at a time, and the L independent scalar chains run quicker
 * (measured: GlobalAveragePool 1000x13x13 0.043 -> 0.028 ms, 7x7 windows 0.027 -> 0.019). */
#if defined(__GNUC__) && !defined(__clang__)
#define POOL_SCALAR __attribute__((optimize("no-tree-vectorize", "no-tree-slp-vectorize")))
#else
#define POOL_SCALAR
#endif
static POOL_SCALAR int pool_lanes_avg_f64(POOL_ARGS(double)) { POOL_LANES(double, 1, 0.0, 8) }
static POOL_SCALAR int pool_lanes_avg_f32(POOL_ARGS(float)) { POOL_LANES(float, 1, 0.0f, 16) }
static POOL_SCALAR int pool_lanes_max_f64(POOL_ARGS(double)) {
    (void)cnt;
    POOL_LANES(double, 0, -__builtin_inf(), 8)
}
static POOL_SCALAR int pool_lanes_max_f32(POOL_ARGS(float)) {
    (void)cnt;
    POOL_LANES(float, 0, -__builtin_inff(), 16)
}

/* Which loop shape, as measured against the others (an Intel Xeon, then a Zen 4, both
 * AVX-512): lanes where a plane's windows read each input about once (global pools, 2x2 stride
 * 2: 3-10x quicker), or where the outputs are too narrow for phase's runs (ow <= 8) and every
 * window lies inside the image (7x7 outputs of stride 2 on 14x14: 2x; with padding taps its
 * per-output tap lists ran 3.4x slower than phase: inception_v2's 576 x 14 x 14 3x3 stride-2
 * MaxPool padded at the end, 0.400 ms against 0.118); same for stride-1 "same" pools whose tap
 * masks (taps x plane cells) stay under POOL_SAME_MAX (7x7 and 14x14 planes, 3x3 windows: 2-3x;
 * 28x28, 7,056 cells: 0.196 -> 0.159 ms on 256 planes; 56x56, 28,224: 0.143 against 0.210, so
 * not those); phase for the rest. */
#ifndef POOL_SAME_MAX
#define POOL_SAME_MAX 8192
#endif
#define POOL_NARROW_OK                                                                  \
    (ow <= 8 && ph == 0 && pw == 0 && (oh - 1) * sh + (kh - 1) * dh < h &&              \
     (ow - 1) * sw + (kw - 1) * dw < w)
/* MaxPool 3x3, stride 2, dilation 1 (squeezenet's, inception's, resnet's stem pools),
 * separable: each input row's window maxima first (H[i][s] = np.maximum over the row's three
 * taps 2s, 2s+1, 2s+2 in order), then y[r][s] = np.maximum(np.maximum(H[2r], H[2r+1]),
 * H[2r+2]). The same bits as the row-major fold of the nine taps: np.maximum(a, t) = (a > t or
 * a is NaN) ? a : t picks the first NaN of a sequence, else the last of its largest values
 * (+0.0 and -0.0 compare equal), so it is associative and only the taps' order matters, which
 * this keeps (row 0's three taps, row 1's, row 2's); -inf (the padding) is its identity on
 * either side. A padded copy of each input row (-inf outside the image, filled once) gives the
 * even and odd columns by two vector shuffles each, with no phase planes; each H row serves two
 * output rows. L = lanes a vector. Returns 0 without memory (the caller runs POOL_PHASE). */
#ifndef POOL_SEP_OFF /* -DPOOL_SEP_OFF=1: phase only (benchmarks) */
#if defined(__AVX512F__)
#define POOL_SEP_OFF 0
#else
/* Without AVX-512 the two-source shuffles of 64-byte vectors have no instruction (vpermt2ps):
 * gcc builds each from element moves, and squeezenet's pools took 17 % of its run on the avx2
 * path against 3 % on avx512 (perf, TAPESCOPE_ISA=avx2; issue 49). Phase planes there. */
#define POOL_SEP_OFF 1
#endif
#endif
#define POOL_MAX3S2(T, V, VI, VMAX, L, EVEN, ODD)                                       \
    {                                                                                   \
        /* narrower outputs run quicker in phase's flattened rows (float32, the two loops \
         * alternated in one process: 55-56 output columns 11-30 % faster here, 28 columns \
         * 12-50 % slower, 27 and less the same or slower) */                            \
        if (ow < 3 * (L) || POOL_SEP_OFF)                                               \
            return 0;                                                                   \
        const long long nb = (ow + (L) - 1) / (L), hl = nb * (L);                       \
        const long long wp = 2 * hl + 2 * (L) + 2; /* the padded row, and the loads' slack */ \
        T *buf = (T *)malloc((size_t)(wp + 3 * hl) * sizeof(T));                        \
        if (!buf) return 0;                                                             \
        T *hr[3] = {buf + wp, buf + wp + hl, buf + wp + 2 * hl};                        \
        const T ninf = -(T)__builtin_inf();                                             \
        for (long long j = 0; j < wp; ++j) buf[j] = ninf;                               \
        /* columns of the image inside the padded row: [pw, pw + wn) */                 \
        const long long wn = w < wp - pw ? w : (wp - pw > 0 ? wp - pw : 0);             \
        const VI ev = EVEN, od = ODD;                                                   \
        for (long long q = 0; q < planes; ++q) {                                        \
            const T *xq = x + q * h * w;                                                \
            T *yq = y + q * oh * ow;                                                    \
            for (long long i = 0; i < 2 * oh + 1; ++i) {                                \
                T *H = hr[i % 3];                                                       \
                const long long iy = i - ph;                                            \
                if (iy < 0 || iy >= h) {                                                \
                    for (long long j = 0; j < hl; ++j) H[j] = ninf;                     \
                } else {                                                                \
                    memcpy(buf + pw, xq + iy * w, (size_t)wn * sizeof(T));              \
                    for (long long b = 0; b < nb; ++b) {                                \
                        const T *p = buf + 2 * b * (L);                                 \
                        const V a0 = *(const V *)p, a1 = *(const V *)(p + (L));         \
                        const V c0 = *(const V *)(p + 2), c1 = *(const V *)(p + 2 + (L)); \
                        const V e = __builtin_shuffle(a0, a1, ev);                      \
                        const V o = __builtin_shuffle(a0, a1, od);                      \
                        const V e2 = __builtin_shuffle(c0, c1, ev);                     \
                        *(V *)(H + b * (L)) = VMAX(VMAX(e, o), e2);                     \
                    }                                                                   \
                }                                                                       \
                if (i >= 2 && i % 2 == 0) { /* output row (i - 2) / 2 is complete */    \
                    const long long r = (i - 2) / 2;                                    \
                    const T *h0 = hr[(i - 2) % 3], *h1 = hr[(i - 1) % 3];               \
                    T *yr = yq + r * ow;                                                \
                    for (long long b = 0; b < nb; ++b) {                                \
                        const V m = VMAX(VMAX(*(const V *)(h0 + b * (L)),               \
                                              *(const V *)(h1 + b * (L))),              \
                                         *(const V *)(H + b * (L)));                    \
                        if ((b + 1) * (L) <= ow)                                        \
                            *(V *)(yr + b * (L)) = m;                                   \
                        else                                                            \
                            for (long long l = 0; l < ow - b * (L); ++l)                \
                                yr[b * (L) + l] = m[l];                                 \
                    }                                                                   \
                }                                                                       \
            }                                                                           \
        }                                                                               \
        free(buf);                                                                      \
        return 1;                                                                       \
    }
#define POOL_MAX3S2_OK (kh == 3 && kw == 3 && sh == 2 && sw == 2 && dh == 1 && dw == 1 && \
                        ph >= 0 && pw >= 0)
/* (the geometry arguments are POOL_MAX3S2_OK's, checked by the caller) */
#define POOL_MAX3S2_FN(NAME, T, V, VI, VMAX, L, EVEN, ODD)                              \
    static int NAME(POOL_ARGS(T)) {                                                     \
        (void)cnt, (void)kh, (void)kw, (void)sh, (void)sw, (void)dh, (void)dw;          \
        POOL_MAX3S2(T, V, VI, VMAX, L, EVEN, ODD)                                       \
    }
POOL_MAX3S2_FN(pool_max3s2_f32, float, v16f32, v16i32, pool_max_v16f32, 16,
               ((v16i32){0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30}),
               ((v16i32){1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31}))
POOL_MAX3S2_FN(pool_max3s2_f64, double, v8f64, v8i64, pool_max_v8f64, 8,
               ((v8i64){0, 2, 4, 6, 8, 10, 12, 14}), ((v8i64){1, 3, 5, 7, 9, 11, 13, 15}))

/* A loop shape a pool's kind adds before phase (its FN returns 0 to decline): the max pools'
 * separable 3x3 stride 2; the average pools pass nothing */
#define POOL_TRY_MAX3S2(FN)                                                             \
    if (POOL_MAX3S2_OK && FN(x, cnt, y, planes, h, w, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw)) \
        return 1;
/* planes (conv_dw.h's POOL_DW: L planes side by side in the lanes, copied once, interleaved)
 * after the max pools' separable shape, where it was quicker than phase (float32, us a call,
 * phase -> planes, Intel Xeon AVX-512): output rows up to 32 wide (3x3 stride 2 AveragePools
 * onto 14x14 x 136 66 -> 26, 7x7 x 272 46 -> 14; MaxPools 3x3 stride 2 onto 26x26 x 256 253 ->
 * 218, 13x13 x 512 179 -> 90) and strided wider ones (AveragePool onto 56x56 x 32 133 -> 121;
 * with AVX2, which has no separable MaxPool, MaxPool onto 54x54 x 96 570 -> 435); wide stride-1
 * rows stayed in phase (AveragePool 3x3 56x56 x 64 108 -> 123). */
#ifndef POOL_DW_ON /* -DPOOL_DW_ON=0: without the lanes over planes (benchmarks) */
#define POOL_DW_ON 1
#endif
#define POOL2D(T, IT, V, VI, VMAX, AVG, ID, LANES, DW, MORE)                            \
    if (!geom_ok(planes, 1, h, w, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw) || ph < 0 ||  \
        pw < 0)                                                                         \
        return 0; /* 0: the caller runs numpy's windows */                              \
    {                                                                                   \
        const long long reads = oh * ow * kh * kw;                                      \
        if (reads <= (1 << 18) && (reads <= h * w || (POOL_NARROW_OK && reads <= 4 * h * w))) \
            return LANES(x, cnt, y, planes, h, w, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw); \
    }                                                                                   \
    if (sh == 1 && sw == 1 && oh == h && ow == w && kh * kw * h * w <= POOL_SAME_MAX)   \
        POOL_SAME(T, IT, V, VI, VMAX, AVG, ID)                                          \
    MORE                                                                                \
    if (POOL_DW_ON && (ow <= 32 || sh > 1 || sw > 1) &&                                 \
        DW(x, cnt, y, planes, h, w, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw))            \
        return 1;                                                                       \
    POOL_PHASE(T, V, VMAX, AVG, ID)

int ts_avgpool2d_f64(POOL_ARGS(double)) {
    POOL2D(double, long long, vpf64, vpi64, pool_max_vp64, 1, 0.0, pool_lanes_avg_f64,
           pool_dw_avg_f64, )
}
int ts_avgpool2d_f32(POOL_ARGS(float)) {
    POOL2D(float, int, vpf32, vpi32, pool_max_vp32, 1, 0.0f, pool_lanes_avg_f32,
           pool_dw_avg_f32, )
}
int ts_maxpool2d_f64(POOL_ARGS(double)) {
    (void)cnt;
    POOL2D(double, long long, vpf64, vpi64, pool_max_vp64, 0, -__builtin_inf(),
           pool_lanes_max_f64, pool_dw_max_f64, POOL_TRY_MAX3S2(pool_max3s2_f64))
}
int ts_maxpool2d_f32(POOL_ARGS(float)) {
    (void)cnt;
    POOL2D(float, int, vpf32, vpi32, pool_max_vp32, 0, -__builtin_inff(),
           pool_lanes_max_f32, pool_dw_max_f32, POOL_TRY_MAX3S2(pool_max3s2_f32))
}

/* PyTorch's max_pool2d_with_indices as the capture judge's reference states it
 * (core/capture/aten_ref_conv.py ``_first_max``): per output, its window's taps in row-major
 * order, a tap off the image (padding, a ceil_mode window's overhang) -inf; the first maximum
 * (a tap replaces the best so far only where greater, or a NaN where the best is not: the
 * first NaN), -0.0 and +0.0 equal; its index the flat index in the plane of the window's
 * origin plus the tap's offset ((t / kw) dh w + (t % kw) dw), the origin (oy sh - ph, ox sw -
 * pw). Returns 0 for a geometry geom_ok refuses (the caller's numpy then). */
#define MAXPOOL_IDX(T, IT)                                                              \
    {                                                                                   \
        if (!geom_ok(planes, 1, h, w, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw) ||        \
            kh * kw > (1LL << 30))                                                      \
            return 0;                                                                   \
        /* the last tap's offset from the window's origin held in an IT */              \
        const long long imax = sizeof(IT) < 8 ? 2147483647LL : (1LL << 62);             \
        if ((kh - 1) * dh > imax / (w > 0 ? w : 1) || (kh - 1) * dh * w + (kw - 1) * dw > imax) \
            return 0;                                                                   \
        const T ninf = -(T)__builtin_inf();                                             \
        /* a row of outputs at a time, tap by tap (the taps' order), each tap's update     \
         * branch-free over the row (random data mispredicts a branch on every other tap: \
         * 17 ns an output that way); a tap off the image is -inf, which never replaces   \
         * the best after the first tap, so only the first is laid out in full */         \
        T *restrict best = (T *)malloc((size_t)ow * sizeof(T));                         \
        IT *restrict off = (IT *)malloc((size_t)ow * sizeof(IT));                       \
        IT *restrict bnan = (IT *)malloc((size_t)ow * sizeof(IT));                      \
        if (!best || !off || !bnan) {                                                   \
            free(best), free(off), free(bnan);                                          \
            return 0;                                                                   \
        }                                                                               \
        for (long long q = 0; q < planes; ++q) {                                        \
            const T *xq = x + q * h * w;                                                \
            for (long long oy = 0; oy < oh; ++oy) {                                     \
                const long long y0 = oy * sh - ph;                                      \
                for (long long a = 0, t = 0; a < kh; ++a) {                             \
                    const long long iy = y0 + a * dh;                                   \
                    const int row_in = iy >= 0 && iy < h;                               \
                    const T *xr = xq + (row_in ? iy : 0) * w;                           \
                    for (long long b = 0; b < kw; ++b, ++t) {                           \
                        const long long c = b * dw - pw, to = a * dh * w + b * dw;      \
                        if (t == 0) {                                                   \
                            for (long long ox = 0; ox < ow; ++ox) {                     \
                                const long long ix = ox * sw + c;                       \
                                const T v = row_in && ix >= 0 && ix < w ? xr[ix] : ninf; \
                                best[ox] = v;                                           \
                                bnan[ox] = -(IT)(v != v);                               \
                                off[ox] = 0;                                            \
                            }                                                           \
                            continue;                                                   \
                        }                                                               \
                        if (!row_in) continue;                                          \
                        /* the outputs whose tap lies inside the row: ix in [0, w) */   \
                        long long lo = c >= 0 ? 0 : (-c + sw - 1) / sw;                 \
                        long long hi = w - c <= 0 ? 0 : (w - c + sw - 1) / sw;          \
                        if (hi > ow) hi = ow;                                           \
                        const T *restrict xs = xr + c;                                  \
                        const IT tov = (IT)to;                                          \
                        _Pragma("GCC ivdep") for (long long ox = lo; ox < hi; ++ox) {   \
                            const T v = xs[ox * sw];                                    \
                            const IT vn = -(IT)(v != v);                                \
                            const IT take = -(IT)(v > best[ox]) | (vn & ~bnan[ox]);     \
                            best[ox] = take ? v : best[ox];                             \
                            off[ox] = take ? tov : off[ox];                             \
                            bnan[ox] |= vn;                                             \
                        }                                                               \
                    }                                                                   \
                }                                                                       \
                T *yr = y + (q * oh + oy) * ow;                                         \
                long long *ir = idx + (q * oh + oy) * ow;                               \
                for (long long ox = 0; ox < ow; ++ox) {                                 \
                    yr[ox] = best[ox];                                                  \
                    ir[ox] = y0 * w + ox * sw - pw + (long long)off[ox];               \
                }                                                                       \
            }                                                                           \
        }                                                                               \
        free(best), free(off), free(bnan);                                              \
        return 1;                                                                       \
    }
#define MAXPOOL_IDX_ARGS(T)                                                             \
    const T *x, T *y, long long *idx, long long planes, long long h, long long w,       \
        long long kh, long long kw, long long oh, long long ow, long long sh, long long sw, \
        long long ph, long long pw, long long dh, long long dw
/* (the tap offsets held in integers of the element's width, so that the update vectorises:
 * a float32 pool's taps lie within 2**31 elements of the window's origin, or geom_ok and the
 * caller's int check refuse it) */
int ts_maxpool2d_idx_f64(MAXPOOL_IDX_ARGS(double)) MAXPOOL_IDX(double, long long)
int ts_maxpool2d_idx_f32(MAXPOOL_IDX_ARGS(float)) MAXPOOL_IDX(float, int)

/* The gradient of max_pool2d_with_indices (the judge's reference, np.add.at's): gx = +0.0
 * everywhere, then each output's gradient added to its index's input, in the outputs'
 * row-major order, plane by plane. Returns 0 where an index is outside its plane (nothing
 * written past gx: the caller's numpy then, which names the error). */
#define MAXPOOL_IDX_BWD(T)                                                              \
    {                                                                                   \
        for (long long i = 0; i < planes * hw; ++i) gx[i] = (T)0;                       \
        for (long long q = 0; q < planes; ++q) {                                        \
            const T *gq = g + q * n;                                                    \
            const long long *iq = idx + q * n;                                          \
            T *xq = gx + q * hw;                                                        \
            for (long long j = 0; j < n; ++j) {                                         \
                const long long k = iq[j];                                              \
                if (k < 0 || k >= hw) return 0;                                         \
                xq[k] = xq[k] + gq[j];                                                  \
            }                                                                           \
        }                                                                               \
        return 1;                                                                       \
    }
int ts_maxpool2d_idx_bwd_f64(const double *g, const long long *idx, double *gx,
                             long long planes, long long n, long long hw) MAXPOOL_IDX_BWD(double)
int ts_maxpool2d_idx_bwd_f32(const float *g, const long long *idx, float *gx, long long planes,
                             long long n, long long hw) MAXPOOL_IDX_BWD(float)

/* acc = fma(a, b, acc) elementwise, every product and sum rounded once (C's fmaf, or fma in
 * double: the hardware's fused multiply-add where the path has one, libm's exact emulation
 * else), over a C-contiguous acc of d[0] x d[1] x d[2] x d[3] elements (libm's function,
 * called); a and b are laid over it by element strides sa, sb (0: a broadcast dimension; any
 * sign: numpy views, in bounds by construction). One step of the fma chains --explain writes
 * out (core/capture/explain.py: oneDNN's convolution gradients), which numpy's exact
 * emulation ran at ~15 array passes; in double, core.explain_prims.fma.
 * fma_: libm's fmaf / fma, handed in by the caller (core.native.fma_into): the fused
 * instruction (or libm's exact emulation) lives in libm, and this object keeps none (the
 * reference code's audit: tests/core/test_native.py, tests/gpu/test_fp_contract.py; a call of
 * fmaf here, even through a volatile pointer, gcc compiled to vfmadd) */
#define FMA4(T)                                                                        \
    for (long long i = 0; i < d[0]; ++i)                                               \
        for (long long j = 0; j < d[1]; ++j)                                           \
            for (long long l = 0; l < d[2]; ++l) {                                     \
                T *o = acc + ((i * d[1] + j) * d[2] + l) * d[3];                       \
                const T *ap = a + i * sa[0] + j * sa[1] + l * sa[2];                   \
                const T *bp = b + i * sb[0] + j * sb[1] + l * sb[2];                   \
                for (long long k = 0; k < d[3]; ++k)                                   \
                    o[k] = fma_(ap[k * sa[3]], bp[k * sb[3]], o[k]);                   \
            }

void ts_fma4_f32(float *acc, const float *a, const float *b, const long long *d,
                 const long long *sa, const long long *sb,
                 float (*fma_)(float, float, float)) {
    FMA4(float)
}

void ts_fma4_f64(double *acc, const double *a, const double *b, const long long *d,
                 const long long *sa, const long long *sb,
                 double (*fma_)(double, double, double)) {
    FMA4(double)
}

/* The fma chain product: acc[t][i][j] = fma(a[t][i][k], b[t][k][j], acc[t][i][j]) for k
 * from 0 up, each output one chain in that order (a BLAS micro-kernel's register lane), every
 * step rounded once; a (nb, m, kk) and b (nb, kk, n) C-contiguous, a's batch stride sab and
 * b's sbb (0: one matrix for every batch), acc (nb, m, n) its own start (zeros for a plain
 * product). What ts_fma4_f32 does one k at a time, a whole product in one call. fmaf_: libm's,
 * as there. */
void ts_fma_chain_f32(float *acc, const float *a, const float *b, long long nb, long long m,
                      long long n, long long kk, long long sab, long long sbb,
                      float (*fmaf_)(float, float, float)) {
    for (long long t = 0; t < nb; ++t)
        for (long long i = 0; i < m; ++i) {
            float *o = acc + (t * m + i) * n;
            const float *ar = a + t * sab + i * kk;
            for (long long k = 0; k < kk; ++k) {
                const float av = ar[k], *br = b + t * sbb + k * n;
                for (long long j = 0; j < n; ++j)
                    o[j] = fmaf_(av, br[j], o[j]);
            }
        }
}

#include "serial_sums.h"

void ts_colsum_f64(const double *x, double *out, long long r, long long n) { COLSUM(double) }

void ts_colsum_f32(const float *x, float *out, long long r, long long n) { COLSUM(float) }

void ts_chansum_f64(const double *x, double *out, long long b, long long n, long long l) {
    CHANSUM(double)
}

void ts_chansum_f32(const float *x, float *out, long long b, long long n, long long l) {
    CHANSUM(float)
}

/* One Adam update in core.optim.Adam's order, one rounding per written operation:
 * m = m*b1 + omb1*g; v = v*b2 + (g*g)*omb2; w_new = w - (m / (sqrt(v) + eps)) * lr_t.
 * m and v in place; the new weights into out. sqrt is IEEE (correctly rounded). Every element
 * is its own chain, so the pool's threads claim slices of [0, n) and the bits do not depend on
 * how many there are or who takes which. */
#define ADAM(T)                                                                         \
    for (long long i = i0; i < i1; ++i) {                                               \
        T gi = g[i];                                                                    \
        T m1 = m[i] * b1, p = omb1 * gi;                                                \
        T mi = m1 + p;                                                                  \
        T gg = gi * gi;                                                                 \
        T gg2 = gg * omb2, v1 = v[i] * b2;                                              \
        T vi = v1 + gg2;                                                                \
        T den = SQRT(vi);                                                               \
        den = den + eps;                                                                \
        T u = mi / den;                                                                 \
        u = u * lr_t;                                                                   \
        m[i] = mi;                                                                      \
        v[i] = vi;                                                                      \
        out[i] = w[i] - u;                                                              \
    }

static void adam_rows_f64(const double *w, const double *g, double *m, double *v, double *out,
                          long long i0, long long i1, double b1, double omb1, double b2,
                          double omb2, double eps, double lr_t) {
#define SQRT __builtin_sqrt
    ADAM(double)
#undef SQRT
}

static void adam_rows_f32(const float *w, const float *g, float *m, float *v, float *out,
                          long long i0, long long i1, float b1, float omb1, float b2, float omb2,
                          float eps, float lr_t) {
#define SQRT __builtin_sqrtf
    ADAM(float)
#undef SQRT
}

typedef struct {
    const void *w, *g;
    void *m, *v, *out;
    long long n;
    double s[6]; /* b1, omb1, b2, omb2, eps, lr_t (a float's value is exact in a double) */
    int f32;
    long long next; /* the next element to claim, atomic */
} adam_t;

/* chunks of ADAM_CHUNK elements claimed from A->next (atomic) */
#define ADAM_CHUNK 4096LL

static void adam_part(void *ctx) {
    adam_t *A = (adam_t *)ctx;
    for (;;) {
        long long i0 = __atomic_fetch_add(&A->next, ADAM_CHUNK, __ATOMIC_RELAXED);
        if (i0 >= A->n) return;
        long long i1 = i0 + ADAM_CHUNK < A->n ? i0 + ADAM_CHUNK : A->n;
        if (A->f32)
            adam_rows_f32((const float *)A->w, (const float *)A->g, (float *)A->m,
                          (float *)A->v, (float *)A->out, i0, i1, (float)A->s[0],
                          (float)A->s[1], (float)A->s[2], (float)A->s[3], (float)A->s[4],
                          (float)A->s[5]);
        else
            adam_rows_f64((const double *)A->w, (const double *)A->g, (double *)A->m,
                          (double *)A->v, (double *)A->out, i0, i1, A->s[0], A->s[1], A->s[2],
                          A->s[3], A->s[4], A->s[5]);
    }
}

/* below this many elements per thread a share is not worth a worker's wake-up */
#define MIN_ADAM_PER_THREAD (1LL << 14)

static void adam(adam_t *A, int threads) {
    long long t = threads < 1 ? 1 : threads;
    if (t > A->n / MIN_ADAM_PER_THREAD) t = A->n / MIN_ADAM_PER_THREAD;
    if (t < 1) t = 1;
    pool_run(adam_part, A, (int)(t > MAX_THREADS ? MAX_THREADS : t));
}

void ts_adam_f64(const double *w, const double *g, double *m, double *v, double *out,
                 long long n, double b1, double omb1, double b2, double omb2, double eps,
                 double lr_t, int threads) {
    adam_t A = {w, g, m, v, out, n, {b1, omb1, b2, omb2, eps, lr_t}, 0, 0};
    adam(&A, threads);
}

void ts_adam_f32(const float *w, const float *g, float *m, float *v, float *out, long long n,
                 float b1, float omb1, float b2, float omb2, float eps, float lr_t,
                 int threads) {
    adam_t A = {w, g, m, v, out, n, {b1, omb1, b2, omb2, eps, lr_t}, 1, 0};
    adam(&A, threads);
}

/* Per-channel normalisation, BatchNormalization's inference formula in its order:
 * y = ((x - mean[c]) / den[c]) * scale[c] + bias[c] for x of shape (nb, c, plane), den the
 * per-channel sqrt(var + eps) the caller computed; one rounding per operation. */
#define CHNORM(T)                                                                       \
    for (long long q = 0; q < nb * c; ++q) {                                            \
        long long ch = q % c;                                                           \
        const T m = mean[ch], d = den[ch], g = scale[ch], b = bias[ch];                 \
        const T *xq = x + q * plane;                                                    \
        T *yq = y + q * plane;                                                          \
        for (long long p = 0; p < plane; ++p) {                                         \
            T t = xq[p] - m;                                                            \
            t = t / d;                                                                  \
            t = t * g;                                                                  \
            yq[p] = t + b;                                                              \
        }                                                                               \
    }

void ts_chnorm_f64(const double *x, const double *mean, const double *den, const double *scale,
                   const double *bias, double *y, long long nb, long long c, long long plane) {
    CHNORM(double)
}

void ts_chnorm_f32(const float *x, const float *mean, const float *den, const float *scale,
                   const float *bias, float *y, long long nb, long long c, long long plane) {
    CHNORM(float)
}

/* out[k][j][i] = x[k][i][j]: b contiguous r x c matrices transposed (a capture's `t` and
 * transpose of the last two axes), each element's bytes copied as an unsigned integer of its
 * size -- no arithmetic, so the same bits on every path -- in TS_TILE x TS_TILE tiles, the
 * inner loop along the smaller of the two strides (a numpy copy of the transposed view walks
 * the input down its columns: 2-7x slower at 256 x 1024 float32) */
#define TS_TILE 16
#define TRANSPOSE(T)                                                                    \
    for (long long k = 0; k < b; ++k) {                                                 \
        const T *xk = x + k * r * c;                                                    \
        T *ok = out + k * r * c;                                                        \
        for (long long i0 = 0; i0 < r; i0 += TS_TILE) {                                 \
            long long i1 = i0 + TS_TILE < r ? i0 + TS_TILE : r;                         \
            for (long long j0 = 0; j0 < c; j0 += TS_TILE) {                             \
                long long j1 = j0 + TS_TILE < c ? j0 + TS_TILE : c;                     \
                if (c <= r) {                                                           \
                    for (long long j = j0; j < j1; ++j)                                 \
                        for (long long i = i0; i < i1; ++i) ok[j * r + i] = xk[i * c + j]; \
                } else {                                                                \
                    for (long long i = i0; i < i1; ++i)                                 \
                        for (long long j = j0; j < j1; ++j) ok[j * r + i] = xk[i * c + j]; \
                }                                                                       \
            }                                                                           \
        }                                                                               \
    }

void ts_transpose_u16(const unsigned short *x, unsigned short *out, long long b, long long r,
                      long long c) {
    TRANSPOSE(unsigned short)
}

void ts_transpose_u32(const unsigned int *x, unsigned int *out, long long b, long long r,
                      long long c) {
    TRANSPOSE(unsigned int)
}

void ts_transpose_u64(const unsigned long long *x, unsigned long long *out, long long b,
                      long long r, long long c) {
    TRANSPOSE(unsigned long long)
}
