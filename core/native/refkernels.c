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
 */
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>

/* Rows [i0, i1) of one product, in register tiles: R rows x JB columns of c live in local
 * accumulators for the whole k-loop (so c is not reloaded and stored once per k), each loaded
 * b[k][j..] feeds R independent chains; every chain still runs k = 0, 1, 2, ... in order, one
 * rounding for the product and one for the add. JB is a compile-time constant so gcc keeps the
 * tile in vector registers. Columns past the last whole tile take the plain i-k-j loop. */
#define JB64 32
#define JB32 64

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
                const T x = a[(i + r) * k + kk];                                        \
                for (int jj = 0; jj < JB; ++jj) {                                       \
                    T p = x * bk[jj];                                                   \
                    acc[r][jj] = acc[r][jj] + p;                                        \
                }                                                                       \
            }                                                                           \
        }                                                                               \
        for (int r = 0; r < R; ++r)                                                     \
            for (long long jj = 0; jj < (nv); ++jj) c[(i + r) * n + j + jj] = acc[r][jj]; \
    }

#define MM_TAIL(T, R, J0)                                                               \
    for (int r = 0; r < R; ++r) {                                                       \
        T *ci = c + (i + r) * n;                                                        \
        const T *ai = a + (i + r) * k;                                                  \
        for (long long jj = J0; jj < n; ++jj) ci[jj] = (T)0;                            \
        for (long long kk = 0; kk < k; ++kk) {                                          \
            const T aik = ai[kk];                                                       \
            const T *bk = b + kk * n;                                                   \
            for (long long jj = J0; jj < n; ++jj) {                                     \
                T p = aik * bk[jj];                                                     \
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
#define MM_ROWS(T, JB)                                                                  \
    long long i, j, k0, k1;                                                             \
    long long jfull = n - n % JB;                                                       \
    T *pack = NULL;                                                                     \
    if (jfull < n && k > 0) {                                                           \
        pack = (T *)malloc((size_t)k * JB * sizeof(T));                                 \
        if (pack)                                                                       \
            for (long long kk = 0; kk < k; ++kk)                                        \
                for (long long jj = 0; jj < JB; ++jj)                                   \
                    pack[kk * JB + jj] = jfull + jj < n ? b[kk * n + jfull + jj] : (T)0; \
    }                                                                                   \
    for (k0 = 0; k0 < k || (k == 0 && k0 == 0); k0 += KC) {                            \
        k1 = k0 + KC < k ? k0 + KC : k;                                                 \
        for (j = 0; j < jfull; j += JB) {                                               \
            for (i = i0; i + 4 <= i1; i += 4) MM_TILE(T, 4, JB, b + j, n, JB)           \
            for (; i < i1; ++i) MM_TILE(T, 1, JB, b + j, n, JB)                         \
        }                                                                               \
        if (pack) {                                                                     \
            j = jfull;                                                                  \
            for (i = i0; i + 4 <= i1; i += 4) MM_TILE(T, 4, JB, pack, JB, n - jfull)    \
            for (; i < i1; ++i) MM_TILE(T, 1, JB, pack, JB, n - jfull)                  \
        }                                                                               \
        if (k == 0) break;                                                              \
    }                                                                                   \
    if (jfull < n && !pack) {                                                           \
        j = jfull;                                                                      \
        for (i = i0; i + 4 <= i1; i += 4) MM_TAIL(T, 4, j)                              \
        for (; i < i1; ++i) MM_TAIL(T, 1, j)                                            \
    }                                                                                   \
    free(pack);

static void mm_rows_f64(const double *a, const double *b, double *c, long long i0,
                        long long i1, long long k, long long n) { MM_ROWS(double, JB64) }

static void mm_rows_f32(const float *a, const float *b, float *c, long long i0,
                        long long i1, long long k, long long n) { MM_ROWS(float, JB32) }

/* A batched product c[q] = a[q] @ b[q], q < batch, a[q] at a + q*sa, b[q] at b + q*sb (a
 * stride of 0 broadcasts one operand), c contiguous. Work unit u = one block of ROWS rows of one
 * batch entry; a thread takes a contiguous range of units. */
#define ROWS 16

typedef struct {
    const void *a, *b;
    void *c;
    long long batch, m, k, n, sa, sb, u0, u1;
    int f32;
} job_t;

static void run_units(const job_t *J) {
    long long blocks = (J->m + ROWS - 1) / ROWS;
    for (long long u = J->u0; u < J->u1; ++u) {
        long long q = u / blocks, i0 = (u % blocks) * ROWS;
        long long i1 = i0 + ROWS < J->m ? i0 + ROWS : J->m;
        if (J->f32)
            mm_rows_f32((const float *)J->a + q * J->sa, (const float *)J->b + q * J->sb,
                        (float *)J->c + q * J->m * J->n, i0, i1, J->k, J->n);
        else
            mm_rows_f64((const double *)J->a + q * J->sa, (const double *)J->b + q * J->sb,
                        (double *)J->c + q * J->m * J->n, i0, i1, J->k, J->n);
    }
}

static void *worker(void *p) {
    run_units((const job_t *)p);
    return NULL;
}

#define MAX_THREADS 64
/* below this many multiply-adds per thread, starting a thread (~20-50 us) costs more than it
 * saves */
#define MIN_WORK_PER_THREAD (1LL << 20)

static void bmm(const void *a, const void *b, void *c, long long batch, long long m,
                long long k, long long n, long long sa, long long sb, int threads, int f32) {
    if (batch <= 0 || m <= 0 || n <= 0) return;
    long long units = batch * ((m + ROWS - 1) / ROWS);
    long long work = batch * m * n * (k > 0 ? k : 1);
    long long t = threads < 1 ? 1 : (threads > MAX_THREADS ? MAX_THREADS : threads);
    if (t > units) t = units;
    if (t > work / MIN_WORK_PER_THREAD) t = work / MIN_WORK_PER_THREAD;
    if (t < 1) t = 1;
    job_t jobs[MAX_THREADS];
    pthread_t tid[MAX_THREADS];
    int started[MAX_THREADS];
    for (long long w = 0; w < t; ++w) {
        job_t J = {a, b, c, batch, m, k, n, sa, sb, units * w / t, units * (w + 1) / t, f32};
        jobs[w] = J;
        started[w] = 0;
    }
    for (long long w = 1; w < t; ++w)
        started[w] = pthread_create(&tid[w], NULL, worker, &jobs[w]) == 0;
    run_units(&jobs[0]);
    for (long long w = 1; w < t; ++w) {
        if (started[w])
            pthread_join(tid[w], NULL);
        else
            run_units(&jobs[w]); /* no thread could be made: do its share here */
    }
}

void ts_mm_f64(const double *a, const double *b, double *c, long long m, long long k,
               long long n, int threads) { bmm(a, b, c, 1, m, k, n, 0, 0, threads, 0); }

void ts_mm_f32(const float *a, const float *b, float *c, long long m, long long k,
               long long n, int threads) { bmm(a, b, c, 1, m, k, n, 0, 0, threads, 1); }

void ts_bmm_f64(const double *a, const double *b, double *c, long long batch, long long m,
                long long k, long long n, long long sa, long long sb, int threads) {
    bmm(a, b, c, batch, m, k, n, sa, sb, threads, 0);
}

void ts_bmm_f32(const float *a, const float *b, float *c, long long batch, long long m,
                long long k, long long n, long long sa, long long sb, int threads) {
    bmm(a, b, c, batch, m, k, n, sa, sb, threads, 1);
}

/* im2col for 2-D convolutions: cols[n][(c, kh, kw)][(oh, ow)] = x[n][c][oh*sh + kh*dh - ph]
 * [ow*sw + kw*dw - pw], +0.0 outside the image (the zero padding). A copy: no arithmetic, so no
 * rounding; the same matrix as core.ops.nn.im2col's window view, written contiguously. */
#define IM2COL(T)                                                                       \
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
#define CONV_MG1(T)                                                                     \
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
    }

void ts_conv_mg1_f64(const double *x, const double *wt, double *out, long long nb, long long c,
                     long long h, long long wd, long long g, long long kh, long long kw,
                     long long oh, long long ow, long long sh, long long sw, long long ph,
                     long long pw, long long dh, long long dw) { CONV_MG1(double) }

void ts_conv_mg1_f32(const float *x, const float *wt, float *out, long long nb, long long c,
                     long long h, long long wd, long long g, long long kh, long long kw,
                     long long oh, long long ow, long long sh, long long sw, long long ph,
                     long long pw, long long dh, long long dw) { CONV_MG1(float) }

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

void ts_colsum_f64(const double *x, double *out, long long r, long long n) { COLSUM(double) }

void ts_colsum_f32(const float *x, float *out, long long r, long long n) { COLSUM(float) }

/* One Adam update in core.optim.Adam's order, one rounding per written operation:
 * m = m*b1 + omb1*g; v = v*b2 + (g*g)*omb2; w_new = w - (m / (sqrt(v) + eps)) * lr_t.
 * m and v in place; the new weights into out. sqrt is IEEE (correctly rounded). */
#define ADAM(T)                                                                         \
    for (long long i = 0; i < n; ++i) {                                                 \
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

void ts_adam_f64(const double *w, const double *g, double *m, double *v, double *out,
                 long long n, double b1, double omb1, double b2, double omb2, double eps,
                 double lr_t) {
#define SQRT __builtin_sqrt
    ADAM(double)
#undef SQRT
}

void ts_adam_f32(const float *w, const float *g, float *m, float *v, float *out, long long n,
                 float b1, float omb1, float b2, float omb2, float eps, float lr_t) {
#define SQRT __builtin_sqrtf
    ADAM(float)
#undef SQRT
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
