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

#define TS_LOOP(name)                                                                   \
    void tsv_##name(const double *x, double *y, long long n) {                          \
        for (long long i = 0; i < n; ++i) y[i] = ts_##name(x[i]);                       \
    }                                                                                   \
    void tsv_##name##f(const float *x, float *y, long long n) {                         \
        for (long long i = 0; i < n; ++i) y[i] = ts_##name##f(x[i]);                    \
    }

TS_LOOP(exp)
TS_LOOP(expm1)
TS_LOOP(log)
TS_LOOP(log1p)
TS_LOOP(tanh)
TS_LOOP(sigmoid)
TS_LOOP(erf)
TS_LOOP(rsqrt)
