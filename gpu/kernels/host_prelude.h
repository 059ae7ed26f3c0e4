/* host_prelude.h: the CUDA names the kernel library uses, defined for gcc (the host backend).
 *
 * The host backend compiles the identical CUDA C kernel text with g++ (-O2 -ffp-contract=off
 * -march=native, loops vectorised, never -ffast-math; gpu/host.py) behind this prelude and loads
 * the shared object with ctypes.
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
 *  - A lane kernel (see "lanes" below) runs runs of a block's threads in one vectorised call,
 *    and a forward launch's blocks may run on a pool of OS threads ("the block pool" below).
 *  - `order` (0 forward, 1 reverse; +2 thread by thread, no lanes) is the order blocks run in
 *    and the order threads run in within each phase. A kernel that is right for CUDA gives the
 *    same bits under every order; one that reads a value another thread writes in the same
 *    phase (a missing barrier) or that two threads write, does not. gpu/host.py runs them all
 *    and compares (orders="both", docs/devices.md).
 *  - __shared__ memory is one static per OS thread: each OS thread runs one block at a time, so
 *    it is the block's, shared by its threads (fibers), exactly CUDA's scope.
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

/* ---- lanes: one call runs a run of threads of a grid-stride kernel ---------------------- */

/* A kernel whose only use of threadIdx is the grid-stride loop TS_GRID_STRIDE (or the block-
 * stride loop TS_BLOCK_STRIDE), with no barrier, no __shared__, no return/break/goto in its body
 * and no variable that outlives one iteration of the loop (gpu.host.lane_kernels decides from
 * the source), runs a run of w consecutive threads of a block in ONE
 * call: threadIdx.x is the first of them and ts_lane_w = w. The loop below then visits, for each
 * grid-stride step, the indices of those w threads in thread order (an inner loop over
 * consecutive i that gcc can vectorise: each lane is one thread's element, with that thread's
 * operations in its order; no sum is ever split across lanes). This is the schedule "for each
 * step s, threads lo..hi-1 run iteration s": a valid CUDA schedule for threads that do not talk,
 * and the same bits as one thread after another (tests/gpu/test_host_lanes.py). Code outside
 * the loop runs once per call instead of once per thread: gpu/host.py admits only bodies whose
 * code outside the loop cannot tell (no threadIdx, no return). ts_lane_w is 1 for every other
 * launch, and then the loops are exactly the CUDA ones. */
static __thread long long ts_lane_w = 1;

#define TS_GRID_STRIDE(i, n)                                                                  \
    for (long long ts_gs_c = blockIdx.x * (long long)blockDim.x + threadIdx.x,               \
                   ts_gs_w = ts_lane_w;                                                       \
         ts_gs_c < (n); ts_gs_c += (long long)gridDim.x * blockDim.x)                         \
        for (long long i = ts_gs_c, ts_gs_h = ts_gs_c + ts_gs_w < (n) ? ts_gs_c + ts_gs_w : (n); \
             i < ts_gs_h; ++i)

#define TS_BLOCK_STRIDE(i, n)                                                                 \
    for (long long ts_bs_c = threadIdx.x, ts_bs_w = ts_lane_w; ts_bs_c < (n);                 \
         ts_bs_c += blockDim.x)                                                               \
        for (long long i = ts_bs_c, ts_bs_h = ts_bs_c + ts_bs_w < (n) ? ts_bs_c + ts_bs_w : (n); \
             i < ts_bs_h; ++i)

/* ---- one launch ---------------------------------------------------------------------------- */

/* order bits: 1 reverse (blocks and threads last to first), 2 thread by thread (no lanes).
 * Reverse always runs thread by thread, as does every launch that is not a lane kernel. */
#define TS_ORDER_REVERSE 1
#define TS_ORDER_SERIAL 2

struct ts_grid_job {
    ts_body_fn body;
    void** a;
    long long g[3], b[3];
    long long nb, nt, slices, units;
    int barrier, lanes, order;
    long long next;   /* the next unit to take (atomic when the pool runs it) */
    long long failed; /* the first failing unit (under ts_pool.mu), or `units` */
    int rc;           /* its error code */
};

static inline void ts_set_block(const struct ts_grid_job* J, long long b) {
    blockIdx.x = (unsigned)(b % J->g[0]);
    blockIdx.y = (unsigned)((b / J->g[0]) % J->g[1]);
    blockIdx.z = (unsigned)(b / (J->g[0] * J->g[1]));
}

static inline void ts_enter_grid(const struct ts_grid_job* J) {
    gridDim.x = J->g[0]; gridDim.y = J->g[1]; gridDim.z = J->g[2];
    blockDim.x = J->b[0]; blockDim.y = J->b[1]; blockDim.z = J->b[2];
    ts_host_error = 0;
    ts_lane_w = 1;
}

/* Unit u of a launch: block u / slices; for a lane kernel, thread slice u % slices of it (the
 * threads of a slice run in lanes, for each threadIdx.y/z); else the whole block, thread by
 * thread or as fibers. 0 or an error code. */
static int ts_run_unit(const struct ts_grid_job* J, long long u) {
    long long nt = J->nt;
    if (J->lanes) {
        long long b = u / J->slices, s = u % J->slices, bx = J->b[0];
        long long lo = bx * s / J->slices, hi = bx * (s + 1) / J->slices;
        ts_set_block(J, b);
        if (hi > lo) {
            ts_lane_w = hi - lo;
            for (long long yz = 0; yz < J->b[1] * J->b[2]; ++yz) {
                threadIdx.x = (unsigned)lo;
                threadIdx.y = (unsigned)(yz % J->b[1]);
                threadIdx.z = (unsigned)(yz / J->b[1]);
                J->body(J->a);
            }
            ts_lane_w = 1;
        }
        return ts_host_error;
    }
    int rev = J->order & TS_ORDER_REVERSE;
    ts_set_block(J, rev ? J->nb - 1 - u : u);
    if (J->barrier && nt > 1) {
        int rc = ts_run_block_fibers(J->body, J->a, nt, rev);
        if (rc) return rc;
    } else if (J->b[1] == 1 && J->b[2] == 1) {
        threadIdx.y = threadIdx.z = 0;
        for (long long k = 0; k < nt; ++k) {
            threadIdx.x = (unsigned)(rev ? nt - 1 - k : k);
            J->body(J->a);
        }
    } else {
        for (long long k = 0; k < nt; ++k) {
            ts_set_thread(rev ? nt - 1 - k : k);
            J->body(J->a);
        }
    }
    return ts_host_error;
}

/* ---- the block pool: independent units of a launch on worker threads ---------------------- */

/* A launch's units (blocks, or thread slices of a lane kernel's blocks) never share an
 * accumulation: each output element is written by the one thread that owns it, with that
 * thread's serial operations (a kernel where two threads write one element is a race on CUDA,
 * and `orders="both"` catches it). So which OS thread runs a unit, and when, changes no bit:
 * the results do not depend on the thread count (tests/gpu/test_host_lanes.py). Only forward
 * launches use the pool; the reverse and thread-by-thread orders run on the caller, in order.
 * Workers sleep on a condition variable between launches; __shared__ and the fiber stacks are
 * per OS thread already; a worker idle for a second ends. One launch uses the pool at a time;
 * a concurrent caller (another Python thread replaying on the same module) runs its launch on
 * its own thread. */
#include <pthread.h>
#include <time.h>
#define TS_POOL_MAX 64

static struct {
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    pthread_mutex_t use; /* held by the launch that owns the pool */
    int started;         /* workers running */
    int want;            /* workers that join the current job */
    int active;          /* of those, still running it */
    unsigned long long gen;
    struct ts_grid_job* job;
    pid_t pid;
    unsigned long long born[TS_POOL_MAX]; /* gen when worker i was started */
} ts_pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER,
             PTHREAD_MUTEX_INITIALIZER, 0, 0, 0, 0, NULL, 0, {0}};

static void ts_run_units(struct ts_grid_job* J) {
    ts_enter_grid(J);
    for (;;) {
        long long u = __atomic_fetch_add(&J->next, 1, __ATOMIC_RELAXED);
        if (u >= J->units) break;
        int rc = ts_run_unit(J, u);
        if (rc) {
            /* keep the first failing unit's code, whoever ran it */
            pthread_mutex_lock(&ts_pool.mu);
            if (u < J->failed) {
                J->failed = u;
                J->rc = rc;
            }
            pthread_mutex_unlock(&ts_pool.mu);
            ts_host_error = 0;
        }
    }
}

static void* ts_pool_worker(void* arg) {
    long long me = (long long)(intptr_t)arg;
    pthread_mutex_lock(&ts_pool.mu);
    /* a job published after this worker was started (even before it ran) is one to join */
    unsigned long long seen = ts_pool.born[me];
    for (;;) {
        while (ts_pool.gen == seen) {
            /* idle for a second: the last worker leaves (every loaded module has its own pool,
             * so only the modules in use keep threads); a later launch starts it again */
            struct timespec until;
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_sec += 1;
            int rc = pthread_cond_timedwait(&ts_pool.work, &ts_pool.mu, &until);
            if (rc != 0 && ts_pool.gen == seen && me == ts_pool.started - 1) {
                ts_pool.started -= 1;
                pthread_mutex_unlock(&ts_pool.mu);
                return NULL;
            }
        }
        seen = ts_pool.gen;
        if (me >= ts_pool.want) continue;
        struct ts_grid_job* J = ts_pool.job;
        pthread_mutex_unlock(&ts_pool.mu);
        ts_run_units(J);
        pthread_mutex_lock(&ts_pool.mu);
        if (--ts_pool.active == 0) pthread_cond_signal(&ts_pool.done);
    }
    return NULL;
}

/* Workers for `n` helpers (started when missing); how many there are. */
static int ts_pool_reserve(int n) {
    if (ts_pool.pid != getpid()) { /* a forked child has none of its parent's workers */
        ts_pool.started = 0;
        ts_pool.pid = getpid();
    }
    while (ts_pool.started < n && ts_pool.started < TS_POOL_MAX) {
        pthread_t th;
        pthread_attr_t at;
        ts_pool.born[ts_pool.started] = ts_pool.gen;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        int ok = pthread_create(&th, &at, ts_pool_worker, (void*)(intptr_t)ts_pool.started);
        pthread_attr_destroy(&at);
        if (ok != 0) break;
        ts_pool.started += 1;
    }
    return ts_pool.started < n ? ts_pool.started : n;
}

/* Launches with fewer threads than this run on the caller: waking the pool costs more. */
#define TS_POOL_MIN_THREADS 2048

/* One launch (see the execution model above): 0 or an error code. */
static int ts_run_grid(ts_body_fn body, void** a, long long gx, long long gy, long long gz,
                       long long bx, long long by, long long bz, int barrier, int lanes,
                       int order, int nthreads) {
    struct ts_grid_job J;
    J.body = body;
    J.a = a;
    J.g[0] = gx; J.g[1] = gy; J.g[2] = gz;
    J.b[0] = bx; J.b[1] = by; J.b[2] = bz;
    J.nb = gx * gy * gz;
    J.nt = bx * by * bz;
    J.barrier = barrier;
    J.order = order;
    J.lanes = lanes && !barrier && !(order & (TS_ORDER_REVERSE | TS_ORDER_SERIAL));
    J.slices = 1;
    int helpers = 0;
    if (nthreads > 1 && order == 0 && J.nb * J.nt >= TS_POOL_MIN_THREADS && J.nb * J.nt > 1) {
        if (J.lanes && J.nb < 4LL * nthreads) {
            /* few blocks: split each block's threads into slices of >= 32 lanes */
            long long s = (4LL * nthreads + J.nb - 1) / J.nb, most = bx / 32;
            J.slices = s < most ? s : (most > 1 ? most : 1);
        }
        if (J.nb * J.slices > 1) helpers = nthreads - 1;
    }
    J.units = J.nb * J.slices;
    J.next = 0;
    J.failed = J.units;
    J.rc = 0;
    if (helpers > 0 && pthread_mutex_trylock(&ts_pool.use) == 0) {
        pthread_mutex_lock(&ts_pool.mu);
        helpers = ts_pool_reserve(helpers);
        ts_pool.job = &J;
        ts_pool.want = helpers;
        ts_pool.active = helpers;
        ts_pool.gen += 1;
        pthread_cond_broadcast(&ts_pool.work);
        pthread_mutex_unlock(&ts_pool.mu);
        ts_run_units(&J);
        pthread_mutex_lock(&ts_pool.mu);
        while (ts_pool.active > 0) pthread_cond_wait(&ts_pool.done, &ts_pool.mu);
        ts_pool.job = NULL;
        pthread_mutex_unlock(&ts_pool.mu);
        pthread_mutex_unlock(&ts_pool.use);
        return J.rc;
    }
    /* on the caller, units in order: the first error stops the launch */
    ts_enter_grid(&J);
    for (long long u = 0; u < J.units; ++u) {
        int rc = ts_run_unit(&J, u);
        if (rc) return rc;
    }
    return 0;
}

/* __dadd_rn & co and the bit casts: refmath's host twins of the CUDA intrinsics. */
#include "intrinsics_host.h"

/* One launch record of a replayed launch list: the generated per-kernel launcher, the grid,
 * the block and the argument pointer array (cuLaunchKernel's layout). */
typedef int (*ts_launcher)(long long, long long, long long, long long, long long, long long,
                           void**, int, int);
struct ts_launch_rec {
    ts_launcher fn;
    long long g[3];
    long long b[3];
    void** args;
};

/* Run n launch records in order (blocks and threads in `order`, see above; up to `nthreads`
 * OS threads per launch); returns (index+1) * 4 + error code of the first failing one, 0 when
 * all ran. */
extern "C" long long ts_host_replay(const struct ts_launch_rec* recs, long long n, int order,
                                    int nthreads) {
    for (long long i = 0; i < n; ++i) {
        const struct ts_launch_rec* r = &recs[i];
        int rc = r->fn(r->g[0], r->g[1], r->g[2], r->b[0], r->b[1], r->b[2], r->args, order,
                       nthreads);
        if (rc != 0) return (i + 1) * 4 + rc;
    }
    return 0;
}

#endif /* TS_HOST_PRELUDE_H */
