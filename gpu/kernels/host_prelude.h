/* host_prelude.h: the CUDA names the kernel library uses, defined for gcc (the host backend).
 *
 * The host backend compiles the identical CUDA C kernel text with g++ (-O2 -ffp-contract=off
 * -march=native, never -ffast-math) behind this prelude and loads the shared object with ctypes.
 *
 * Execution model (docs/devices.md):
 *  - A launch runs the grid's blocks one after another with their real blockDim. A kernel
 *    without __syncthreads() runs its block's threads one after another (blockIdx / threadIdx
 *    set before each call): a valid CUDA schedule for a kernel whose threads do not talk.
 *  - A kernel whose body contains __syncthreads() runs each thread of a block as a fiber (its
 *    own stack, switched in user space) on the launching OS thread. The block scheduler
 *    resumes every live fiber once per phase; each runs until its next __syncthreads() or until
 *    it returns. When every thread waits at the barrier the next phase starts; a barrier that
 *    only some threads reach (the others returned) is an error, as on CUDA.
 *  - `order` (0 forward, 1 reverse) is the order blocks run in and the order threads run in
 *    within each phase. A kernel that is right for CUDA gives the same bits under both orders;
 *    one that reads a value another thread writes in the same phase (a missing barrier) or
 *    that two threads write, does not. gpu/host.py runs both and compares (docs/devices.md).
 *  - __shared__ memory is one static per OS thread: blocks run one at a time, so it is the
 *    block's, shared by its threads (fibers), exactly CUDA's scope.
 */
#ifndef TS_HOST_PRELUDE_H
#define TS_HOST_PRELUDE_H

#include <math.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__FAST_MATH__)
#error "the host backend must never be compiled with -ffast-math (it breaks bit parity)"
#endif

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
/* __shared__ memory is per block; blocks run one at a time on the launching OS thread, and the
 * threads of a block are fibers on that same OS thread. */
#define __shared__ static __thread

struct ts_dim3 {
    unsigned int x, y, z;
};
typedef struct ts_dim3 dim3;

static __thread dim3 blockIdx;
static __thread dim3 threadIdx;
static __thread dim3 blockDim;
static __thread dim3 gridDim;
/* 1: a barrier reached outside a fiber block with more than one thread (a __syncthreads()
 * the launcher did not see in the kernel's body); 2: a barrier that only some threads of a
 * block reached; 3: no memory for the fiber stacks. */
static __thread int ts_host_error;

/* ---- fibers: one per thread of a barrier block ----------------------------------------- */

#define TS_FIBER_STACK (128 * 1024) /* per thread; a guard page below each one */

#if defined(__x86_64__) && defined(__ELF__) && !defined(TS_HOST_UCONTEXT)
#define TS_FIBER_ASM 1
#endif

#ifdef TS_FIBER_ASM
/* A user-space switch (callee-saved registers + stack pointer, no signal-mask syscall as in
 * swapcontext): a block of 128 threads crosses a barrier in microseconds. */
struct ts_fiber {
    void* sp;
    int state; /* 0 runnable, 1 waiting at a barrier, 2 returned */
};
extern "C" void ts_fiber_switch(void** save_sp, void* to_sp);
extern "C" void ts_fiber_entry(void);
__asm__(".text\n"
        ".p2align 4\n"
        ".globl ts_fiber_switch\n"
        ".hidden ts_fiber_switch\n"
        ".type ts_fiber_switch, @function\n"
        "ts_fiber_switch:\n"
        "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
        "  movq %rsp, (%rdi)\n"
        "  movq %rsi, %rsp\n"
        "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
        "  ret\n"
        ".size ts_fiber_switch, .-ts_fiber_switch\n"
        ".p2align 4\n"
        ".globl ts_fiber_entry\n"
        ".hidden ts_fiber_entry\n"
        ".type ts_fiber_entry, @function\n"
        "ts_fiber_entry:\n"
        "  call ts_fiber_main\n"
        "  ud2\n"
        ".size ts_fiber_entry, .-ts_fiber_entry\n");
#else
/* Portable fallback (other CPUs, or -DTS_HOST_UCONTEXT): POSIX ucontext, slower. */
#if defined(__APPLE__) && !defined(_XOPEN_SOURCE)
#define _XOPEN_SOURCE 700 /* macOS declares the ucontext calls only under it */
#endif
#include <ucontext.h>
struct ts_fiber {
    ucontext_t uc;
    int state;
};
#endif

typedef void (*ts_body_fn)(void**);

struct ts_block_sched {
    struct ts_fiber* f; /* the running block's fibers; NULL outside a fiber block */
    long long n, cur;
    ts_body_fn body;
    void** args;
#ifdef TS_FIBER_ASM
    void* home_sp;
#else
    ucontext_t home;
#endif
    char* stacks; /* cap stacks of TS_FIBER_STACK bytes, each above a guard page */
    struct ts_fiber* pool;
    long long cap;
    size_t page;
};
static __thread struct ts_block_sched ts_blk;

extern "C" __attribute__((visibility("hidden"), used, noreturn)) void ts_fiber_main(void);

static inline void ts_fiber_suspend(void) {
    struct ts_fiber* f = &ts_blk.f[ts_blk.cur];
#ifdef TS_FIBER_ASM
    ts_fiber_switch(&f->sp, ts_blk.home_sp);
#else
    swapcontext(&f->uc, &ts_blk.home);
#endif
}

extern "C" void ts_fiber_main(void) {
    ts_blk.body(ts_blk.args);
    ts_blk.f[ts_blk.cur].state = 2;
    ts_fiber_suspend(); /* never resumed */
    __builtin_trap();
}

static inline void __syncthreads(void) {
    __asm__ __volatile__("" ::: "memory");
    if (ts_blk.f) {
        ts_blk.f[ts_blk.cur].state = 1;
        ts_fiber_suspend();
    } else if (blockDim.x * blockDim.y * blockDim.z != 1u) {
        ts_host_error = 1;
    }
    __asm__ __volatile__("" ::: "memory");
}

/* Room for n fibers (stacks are kept for the next launch on this OS thread). */
static int ts_fiber_reserve(long long n) {
    if (n <= ts_blk.cap) return 1;
    if (!ts_blk.page) ts_blk.page = (size_t)sysconf(_SC_PAGESIZE);
    size_t slot = TS_FIBER_STACK + ts_blk.page;
    void* mem = mmap(NULL, (size_t)n * slot, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) return 0;
    void* pool = mmap(NULL, (size_t)n * sizeof(struct ts_fiber), PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (pool == MAP_FAILED) {
        munmap(mem, (size_t)n * slot);
        return 0;
    }
    /* a stack overflow faults on the guard page instead of overwriting another thread */
    for (long long i = 0; i < n; ++i)
        mprotect((char*)mem + (size_t)i * slot, ts_blk.page, PROT_NONE);
    if (ts_blk.cap) {
        munmap(ts_blk.stacks, (size_t)ts_blk.cap * slot);
        munmap(ts_blk.pool, (size_t)ts_blk.cap * sizeof(struct ts_fiber));
    }
    ts_blk.stacks = (char*)mem;
    ts_blk.pool = (struct ts_fiber*)pool;
    ts_blk.cap = n;
    return 1;
}

static inline void ts_set_thread(long long t) {
    threadIdx.x = (unsigned)(t % blockDim.x);
    threadIdx.y = (unsigned)((t / blockDim.x) % blockDim.y);
    threadIdx.z = (unsigned)(t / ((long long)blockDim.x * blockDim.y));
}

static void ts_fiber_start(long long t) {
    struct ts_fiber* f = &ts_blk.f[t];
    char* lo = ts_blk.stacks + (size_t)t * (TS_FIBER_STACK + ts_blk.page) + ts_blk.page;
    f->state = 0;
#ifdef TS_FIBER_ASM
    /* the frame ts_fiber_switch pops: six callee-saved registers, then the return address;
     * 72 below a 16-aligned top leaves %rsp 16-aligned at ts_fiber_entry's call */
    uintptr_t top = ((uintptr_t)(lo + TS_FIBER_STACK)) & ~(uintptr_t)15;
    void** sp = (void**)(top - 72);
    for (int i = 0; i < 6; ++i) sp[i] = 0;
    sp[6] = (void*)ts_fiber_entry;
    f->sp = sp;
#else
    getcontext(&f->uc);
    f->uc.uc_stack.ss_sp = lo;
    f->uc.uc_stack.ss_size = TS_FIBER_STACK;
    f->uc.uc_link = NULL;
    makecontext(&f->uc, (void (*)(void))ts_fiber_main, 0);
#endif
}

static inline void ts_fiber_resume(long long t) {
    ts_blk.cur = t;
    ts_set_thread(t);
#ifdef TS_FIBER_ASM
    ts_fiber_switch(&ts_blk.home_sp, ts_blk.f[t].sp);
#else
    swapcontext(&ts_blk.home, &ts_blk.f[t].uc);
#endif
}

/* One block, its nt threads as fibers, phase by phase; 0 or an error code (above). */
static int ts_run_block_fibers(ts_body_fn body, void** a, long long nt, int order) {
    if (!ts_fiber_reserve(nt)) return 3;
    ts_blk.f = ts_blk.pool;
    ts_blk.n = nt;
    ts_blk.body = body;
    ts_blk.args = a;
    for (long long t = 0; t < nt; ++t) ts_fiber_start(t);
    int rc = 0;
    for (;;) {
        long long waiting = 0, returned = 0;
        for (long long k = 0; k < nt; ++k) {
            long long t = order ? nt - 1 - k : k;
            if (ts_blk.f[t].state != 2) {
                ts_blk.f[t].state = 0;
                ts_fiber_resume(t);
            }
            if (ts_blk.f[t].state == 1) waiting += 1;
            else returned += 1;
        }
        if (returned == nt) break;
        if (waiting != nt) {
            rc = 2; /* the fibers still waiting are dropped: their stacks are reused */
            break;
        }
    }
    ts_blk.f = NULL;
    return rc;
}

/* One launch: the grid's blocks in `order`, each block's threads in `order` (see above). */
static int ts_run_grid(ts_body_fn body, void** a, long long gx, long long gy, long long gz,
                       long long bx, long long by, long long bz, int barrier, int order) {
    gridDim.x = gx; gridDim.y = gy; gridDim.z = gz;
    blockDim.x = bx; blockDim.y = by; blockDim.z = bz;
    ts_host_error = 0;
    long long nb = gx * gy * gz, nt = bx * by * bz;
    for (long long kb = 0; kb < nb; ++kb) {
        long long b = order ? nb - 1 - kb : kb;
        blockIdx.x = (unsigned)(b % gx);
        blockIdx.y = (unsigned)((b / gx) % gy);
        blockIdx.z = (unsigned)(b / (gx * gy));
        if (barrier && nt > 1) {
            int rc = ts_run_block_fibers(body, a, nt, order);
            if (rc) return rc;
        } else {
            for (long long k = 0; k < nt; ++k) {
                ts_set_thread(order ? nt - 1 - k : k);
                body(a);
            }
        }
        if (ts_host_error) return ts_host_error;
    }
    return ts_host_error;
}

/* __dadd_rn & co and the bit casts: refmath's host twins of the CUDA intrinsics. */
#include "intrinsics_host.h"

/* One launch record of a replayed launch list: the generated per-kernel launcher, the grid,
 * the block and the argument pointer array (cuLaunchKernel's layout). */
typedef int (*ts_launcher)(long long, long long, long long, long long, long long, long long,
                           void**, int);
struct ts_launch_rec {
    ts_launcher fn;
    long long g[3];
    long long b[3];
    void** args;
};

/* Run n launch records in order (blocks and threads in `order`, see above); returns
 * (index+1) * 4 + error code of the first failing one, 0 when all ran. */
extern "C" long long ts_host_replay(const struct ts_launch_rec* recs, long long n, int order) {
    for (long long i = 0; i < n; ++i) {
        const struct ts_launch_rec* r = &recs[i];
        int rc = r->fn(r->g[0], r->g[1], r->g[2], r->b[0], r->b[1], r->b[2], r->args, order);
        if (rc != 0) return (i + 1) * 4 + rc;
    }
    return 0;
}

#endif /* TS_HOST_PRELUDE_H */
