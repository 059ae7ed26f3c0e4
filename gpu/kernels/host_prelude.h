/* host_prelude.h: the CUDA names the kernel library uses, defined for gcc (the host backend).
 *
 * The host backend compiles the identical CUDA C kernel text with g++ (-O2 -ffp-contract=off,
 * never -ffast-math) behind this prelude and loads the shared object with ctypes.
 *
 * Execution model (docs/devices.md):
 *  - A launch runs the grid's blocks one after another, and inside a block its threads one after
 *    another (blockIdx / threadIdx set before each call). That is a valid CUDA schedule for any
 *    kernel without inter-thread communication, which is what every kernel here is: each output
 *    element is computed by exactly one thread, in a serial order fixed by the source.
 *  - A kernel whose body contains __syncthreads() is launched by the host with ONE thread per
 *    block (the Python launcher sees the barrier in the source and clamps blockDim to 1), so the
 *    thread-strided loops cover the row and every barrier is trivially satisfied. A barrier
 *    reached with more than one thread in the block is an error the launcher reports.
 *  - Bit-exactness: every kernel result is computed by one thread in an order independent of
 *    blockDim, so the schedule cannot change a bit.
 */
#ifndef TS_HOST_PRELUDE_H
#define TS_HOST_PRELUDE_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__FAST_MATH__)
#error "the host backend must never be compiled with -ffast-math (it breaks bit parity)"
#endif

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
/* __shared__ memory is per block; blocks run one at a time on the launching thread. */
#define __shared__ static __thread

struct ts_dim3 {
    unsigned int x, y, z;
};
typedef struct ts_dim3 dim3;

static __thread dim3 blockIdx;
static __thread dim3 threadIdx;
static __thread dim3 blockDim;
static __thread dim3 gridDim;
static __thread int ts_host_error; /* 1: barrier with >1 thread per block */

static inline void __syncthreads(void) {
    /* Valid only when the block has one thread (see the execution model above). */
    if (blockDim.x * blockDim.y * blockDim.z != 1u) ts_host_error = 1;
}

/* __dadd_rn & co and the bit casts: refmath's host twins of the CUDA intrinsics. */
#include "intrinsics_host.h"

/* One launch record of a replayed launch list: the generated per-kernel launcher, the grid,
 * the block and the argument pointer array (cuLaunchKernel's layout). */
typedef int (*ts_launcher)(long long, long long, long long, long long, long long, long long,
                           void**);
struct ts_launch_rec {
    ts_launcher fn;
    long long g[3];
    long long b[3];
    void** args;
};

/* Run n launch records in order; returns the index+1 of the first failing one, 0 when all ran. */
extern "C" long long ts_host_replay(const struct ts_launch_rec* recs, long long n) {
    for (long long i = 0; i < n; ++i) {
        const struct ts_launch_rec* r = &recs[i];
        if (r->fn(r->g[0], r->g[1], r->g[2], r->b[0], r->b[1], r->b[2], r->args) != 0)
            return i + 1;
    }
    return 0;
}

#endif /* TS_HOST_PRELUDE_H */
