/* diff.cu: the device parity-diff kernels (template: real_t / _T, see gpu/source.py).
 *
 * Same rules as core/parity.py: n_diff counts differing bit patterns; ulp distance on the
 * ordered-integer line over differing elements where neither side is NaN; NaN-vs-number and
 * ±0 mismatches are counted apart; abs/rel in double. The NaN policy: two NaNs are equal
 * whatever their sign and payload (IEEE leaves those to the implementation), not in n_diff,
 * counted in nan_bits. Counts and maxima are order-independent, so the per-thread partials may
 * be combined in any grouping and stay exact.
 *
 * table: per tensor j, three long longs [ref address, other address, n].
 * partials: slot s = j * blockDim.x + t, ints at 6*s (n_diff, max_ulp, first, n_nan, n_zero,
 * nan_bits), doubles at 2*s (max_abs, max_rel). The combine kernel writes the same layout per
 * tensor.
 */

#ifndef TS_INF
#define TS_INF __longlong_as_double(0x7ff0000000000000LL)
#endif

__device__ __forceinline__ long long ts_ordered_T(real_t x) {
    long long b = (long long)AS_BITS(x);
    /* negative floats: sign-magnitude to two's complement around zero */
    return b >= 0 ? b : (long long)(BITS_MIN - b);
}

extern "C" __global__ void diff_partial_T(const long long* table, long long count,
                                          long long* oi, double* od) {
    long long j = blockIdx.x;
    if (j >= count) return;
    const real_t* r = (const real_t*)(unsigned long long)table[3 * j];
    const real_t* o = (const real_t*)(unsigned long long)table[3 * j + 1];
    long long n = table[3 * j + 2];
    long long n_diff = 0, n_nan = 0, n_zero = 0, nan_bits = 0, first = -1;
    unsigned long long max_ulp = 0;
    double max_abs = 0.0, max_rel = 0.0;
    for (long long i = threadIdx.x; i < n; i += blockDim.x) {
        real_t a = r[i], b = o[i];
        if (AS_BITS(a) == AS_BITS(b)) continue;
        if (a != a && b != b) { nan_bits += 1; continue; } /* the NaN policy: equal */
        n_diff += 1;
        if (first < 0) first = i;
        if (a != a || b != b) { n_nan += 1; continue; }
        if (a == 0 && b == 0) n_zero += 1;
        long long oa = ts_ordered_T(a), ob = ts_ordered_T(b);
        unsigned long long d = oa >= ob ? (unsigned long long)oa - (unsigned long long)ob
                                        : (unsigned long long)ob - (unsigned long long)oa;
        if (d > max_ulp) max_ulp = d;
        double ab = fabs(__dsub_rn((double)b, (double)a));
        if (ab != ab) ab = TS_INF; /* inf vs -inf */
        double den = fabs((double)a);
        double rel = (den == 0.0 || den == TS_INF) ? (ab > 0.0 ? TS_INF : 0.0)
                                                       : __ddiv_rn(ab, den);
        if (ab > max_abs) max_abs = ab;
        if (rel > max_rel) max_rel = rel;
    }
    long long s = j * (long long)blockDim.x + threadIdx.x;
    oi[6 * s] = n_diff;
    oi[6 * s + 1] = (long long)max_ulp;
    oi[6 * s + 2] = first;
    oi[6 * s + 3] = n_nan;
    oi[6 * s + 4] = n_zero;
    oi[6 * s + 5] = nan_bits;
    od[2 * s] = max_abs;
    od[2 * s + 1] = max_rel;
}

extern "C" __global__ void diff_combine_T(long long count, long long nthreads,
                                          const long long* pi, const double* pd,
                                          long long* ri, double* rd) {
    for (long long j = blockIdx.x * (long long)blockDim.x + threadIdx.x; j < count;
         j += (long long)gridDim.x * blockDim.x) {
        long long n_diff = 0, n_nan = 0, n_zero = 0, nan_bits = 0, first = -1;
        unsigned long long max_ulp = 0;
        double max_abs = 0.0, max_rel = 0.0;
        for (long long t = 0; t < nthreads; ++t) {
            long long s = j * nthreads + t;
            n_diff += pi[6 * s];
            unsigned long long u = (unsigned long long)pi[6 * s + 1];
            if (u > max_ulp) max_ulp = u;
            long long f = pi[6 * s + 2];
            if (f >= 0 && (first < 0 || f < first)) first = f;
            n_nan += pi[6 * s + 3];
            n_zero += pi[6 * s + 4];
            nan_bits += pi[6 * s + 5];
            if (pd[2 * s] > max_abs) max_abs = pd[2 * s];
            if (pd[2 * s + 1] > max_rel) max_rel = pd[2 * s + 1];
        }
        ri[6 * j] = n_diff;
        ri[6 * j + 1] = (long long)max_ulp;
        ri[6 * j + 2] = first;
        ri[6 * j + 3] = n_nan;
        ri[6 * j + 4] = n_zero;
        ri[6 * j + 5] = nan_bits;
        rd[2 * j] = max_abs;
        rd[2 * j + 1] = max_rel;
    }
}
