/* refmath on the CPU tape: the C twin gpu/kernels/refmath.cuh itself, compiled for the host.
 *
 * Built exactly as the host backend builds it (intrinsics_host.h: each __d*_rn is one IEEE
 * operation; -ffp-contract=off: no FMA), one loop per function and dtype. core.refmath calls
 * these for the tape; its numpy spelling stays the oracle (tests/core/test_refmath_native.py
 * checks the two bit for bit, specials included). float32 is (float)ts_f((double)x), as on the
 * device; refmath_simd.h's float loops reach those bits by a quicker route, certified per
 * element.
 */
#include "intrinsics_host.h"
#include "refmath.cuh"
#include "refmath_simd.h"

/* name: the function; dfn: its double spelling per element (a branch-free twin where one
 * exists, so the loop vectorises); floop: its float loop (refmath_simd.h) */
#define TS_LOOP(name, dfn, floop)                                                           \
    void tsv_##name(const double *restrict x, double *restrict y, long long n) {        \
        for (long long i = 0; i < n; ++i) y[i] = dfn(x[i]);                               \
    }                                                                                   \
    void tsv_##name##f(const float *restrict x, float *restrict y, long long n) {       \
        floop(x, y, n);                                                                 \
    }

TS_REFMATH_FUNCS(TS_LOOP)
