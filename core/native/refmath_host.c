/* refmath on the CPU tape: the C twin core/refmath/refmath.cuh itself, compiled for the host.
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

/* name: the function; dloop, floop: its double and float loops (refmath_simd.h) */
#define TS_LOOP(name, dloop, floop)                                                         \
    void tsv_##name(const double *restrict x, double *restrict y, long long n) {        \
        dloop(x, y, n);                                                                 \
    }                                                                                   \
    void tsv_##name##f(const float *restrict x, float *restrict y, long long n) {       \
        floop(x, y, n);                                                                 \
    }

TS_REFMATH_FUNCS(TS_LOOP)
