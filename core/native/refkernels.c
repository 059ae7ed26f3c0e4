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

/* Rows [i0, i1) of one product. Four rows at a time: each loaded b[k][j..] feeds four
 * independent chains (one per row), which is what makes this fast; every chain still runs
 * k = 0, 1, 2, ... in order. */
#define MM_ROWS(T)                                                                      \
    long long i = i0;                                                                   \
    for (; i + 4 <= i1; i += 4) {                                                       \
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
    for (; i < i1; ++i) {                                                               \
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

static void mm_rows_f64(const double *a, const double *b, double *c, long long i0,
                        long long i1, long long k, long long n) { MM_ROWS(double) }

static void mm_rows_f32(const float *a, const float *b, float *c, long long i0,
                        long long i1, long long k, long long n) { MM_ROWS(float) }

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
