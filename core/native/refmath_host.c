/* refmath on the CPU tape: the C twin gpu/kernels/refmath.cuh itself, compiled for the host.
 *
 * Built exactly as the host backend builds it (intrinsics_host.h: each __d*_rn is one IEEE
 * operation; -ffp-contract=off: no FMA), one loop per function and dtype. core.refmath calls
 * these for the tape; its numpy spelling stays the oracle (tests/core/test_refmath_native.py
 * checks the two bit for bit, specials included). float32 is (float)ts_f((double)x), as on the
 * device.
 */
#include "intrinsics_host.h"
#include "refmath.cuh"
#include "refmath_simd.h"

/* name: the function; dfn, ffn: its double and float spellings (a branch-free twin where one
 * exists, so the loop vectorises) */
#define TS_LOOP(name, dfn, ffn)                                                             \
    void tsv_##name(const double *restrict x, double *restrict y, long long n) {        \
        for (long long i = 0; i < n; ++i) y[i] = dfn(x[i]);                               \
    }                                                                                   \
    void tsv_##name##f(const float *restrict x, float *restrict y, long long n) {       \
        for (long long i = 0; i < n; ++i) y[i] = ffn(x[i]);                               \
    }

static inline float tsb_expf(float x) { return tsb__to_float(tsb_exp((double)x)); }
static inline float tsb_logf(float x) { return tsb__to_float(tsb_log((double)x)); }
static inline float tsb_rsqrtf(float x) { return tsb__to_float(tsb_rsqrt((double)x)); }

TS_LOOP(exp, tsb_exp, tsb_expf)
TS_LOOP(expm1, ts_expm1, ts_expm1f)
TS_LOOP(log, tsb_log, tsb_logf)
TS_LOOP(log1p, ts_log1p, ts_log1pf)
TS_LOOP(tanh, tsb_tanh, ts_tanhf)
TS_LOOP(sigmoid, ts_sigmoid, ts_sigmoidf)
TS_LOOP(erf, ts_erf, ts_erff)
TS_LOOP(rsqrt, tsb_rsqrt, tsb_rsqrtf)
