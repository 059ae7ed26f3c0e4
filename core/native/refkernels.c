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

/* Rows [i0, i1) of one product, in register tiles: R rows x JB columns of c live in local
 * accumulators for the whole k-loop (so c is not reloaded and stored once per k), each loaded
 * b[k][j..] feeds R independent chains; every chain still runs k = 0, 1, 2, ... in order, one
 * rounding for the product and one for the add. JB is a compile-time constant so gcc keeps the
 * tile in vector registers. Columns past the last whole tile take the plain i-k-j loop. */
#define JB64 32
#define JB32 64

#define MM_TILE(T, R, JB)                                                               \
    {                                                                                   \
        T acc[R][JB];                                                                   \
        for (int r = 0; r < R; ++r)                                                     \
            for (int jj = 0; jj < JB; ++jj) acc[r][jj] = (T)0;                          \
        for (long long kk = 0; kk < k; ++kk) {                                          \
            const T *bk = b + kk * n + j;                                               \
            for (int r = 0; r < R; ++r) {                                               \
                const T x = a[(i + r) * k + kk];                                        \
                for (int jj = 0; jj < JB; ++jj) {                                       \
                    T p = x * bk[jj];                                                   \
                    acc[r][jj] = acc[r][jj] + p;                                        \
                }                                                                       \
            }                                                                           \
        }                                                                               \
        for (int r = 0; r < R; ++r)                                                     \
            for (int jj = 0; jj < JB; ++jj) c[(i + r) * n + j + jj] = acc[r][jj];       \
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

/* Column panels outside, rows inside: one k x JB panel of b serves every row of the block
 * while it is in cache. */
#define MM_ROWS(T, JB)                                                                  \
    long long i, j;                                                                     \
    for (j = 0; j + JB <= n; j += JB) {                                                 \
        for (i = i0; i + 4 <= i1; i += 4) MM_TILE(T, 4, JB)                             \
        for (; i < i1; ++i) MM_TILE(T, 1, JB)                                           \
    }                                                                                   \
    for (i = i0; i + 4 <= i1; i += 4) MM_TAIL(T, 4, j)                                  \
    for (; i < i1; ++i) MM_TAIL(T, 1, j)

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
/* below this many multiply-adds a thread costs more than it saves */
#define MIN_WORK_PER_THREAD 65536LL

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
