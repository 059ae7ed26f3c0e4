/* optim.cu: gradient zero-fill, loss seed and the device optimizers (template: gpu/source.py).
 * core.optim's order (docs/reference-order.md, Optimizers): clip, then L2, then the update.
 * The gradient buffers are never modified: clipping and L2 act on a per-element copy.
 * Per-step scalars live in small device buffers (ctl, k), so an episode is graph-capturable;
 * they hold the compute type acc_t (float for a half episode: its scalars are float32).
 */

#ifndef TS_GRID_STRIDE /* the host backend's prelude defines its own (lanes: docs/devices.md) */
#define TS_GRID_STRIDE(i, n)                                                             \
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < (n);       \
         i += (long long)gridDim.x * blockDim.x)
#endif
#ifndef TS_BLOCK_STRIDE
#define TS_BLOCK_STRIDE(i, n) for (long long i = threadIdx.x; i < (n); i += blockDim.x)
#endif

extern "C" __global__ void fill_T(real_t* x, real_t v, long long n) {
    TS_GRID_STRIDE(i, n) { x[i] = v; }
}

/* The loss seed from a device buffer (half episodes: the loss scale, set per step). */
extern "C" __global__ void fill_from_T(real_t* x, const acc_t* v, long long n) {
    TS_GRID_STRIDE(i, n) { x[i] = v[0]; }
}

/* table: (address, n) pairs; block j zero-fills buffer j: every gradient in one launch. */
extern "C" __global__ void zero_many_T(const long long* table, long long count) {
    for (long long j = blockIdx.x; j < count; j += gridDim.x) {
        real_t* p = (real_t*)(unsigned long long)table[2 * j];
        long long n = table[2 * j + 1];
        TS_BLOCK_STRIDE(i, n) p[i] = (real_t)0;
    }
}

/* Global norm over (address, n) pairs in order, serial: ctl = [s, active]. One thread. */
extern "C" __global__ void clip_norm_T(const long long* table, long long count, real_t clip,
                                       acc_t* ctl) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    real_t acc = (real_t)0;
    for (long long j = 0; j < count; ++j) {
        const real_t* p = (const real_t*)(unsigned long long)table[2 * j];
        long long n = table[2 * j + 1];
        for (long long i = 0; i < n; ++i) acc = ADD(acc, MUL(p[i], p[i]));
    }
    real_t norm = SQRT(acc);
    if (norm > clip) {
        ctl[0] = DIV(clip, norm);
        ctl[1] = (real_t)1;
    } else {
        ctl[0] = (real_t)1;
        ctl[1] = (real_t)0;
    }
}

/* The gradient an update steps with: scaled by s when clipping is on, then plus L2 * w. */
__device__ __forceinline__ real_t ts_opt_grad_s_T(real_t g, real_t w, real_t s, int clip,
                                                   long long use_l2, real_t l2) {
    if (clip) g = MUL(g, s);
    if (use_l2) g = ADD(g, MUL(l2, w));
    return g;
}

__device__ __forceinline__ real_t ts_opt_grad_T(real_t g, real_t w, const acc_t* ctl,
                                                 long long use_l2, real_t l2) {
    /* ctl[0] is read whether or not clipping is on (ctl always holds two values): a load that
     * sits behind the branch kept gcc from vectorising the host's Adam/SGD loops. */
    real_t s = ctl[0];
    return ts_opt_grad_s_T(g, w, s, ctl[1] != (real_t)0, use_l2, l2);
}

extern "C" __global__ void sgd_T(real_t* w, const real_t* g, const acc_t* ctl, real_t lr,
                                 long long use_l2, real_t l2, long long n) {
    TS_GRID_STRIDE(i, n) {
        real_t gi = ts_opt_grad_T(g[i], w[i], ctl, use_l2, l2);
        w[i] = SUB(w[i], MUL(lr, gi));
    }
}

#define TS_HAC 64 /* the host Adam's elements per thread */

/* k = [b1, 1-b1, b2, 1-b2, eps, lr_t], each rounded once to real_t on the host. */
extern "C" __global__ void adam_T(real_t* w, const real_t* g, real_t* m, real_t* v,
                                  const acc_t* ctl, const acc_t* k, long long use_l2,
                                  real_t l2, long long n) {
#if defined(TS_HOST_PRELUDE_H) && !defined(TS_USER_KERNEL)
    /* The host: TS_HAC consecutive elements a thread (a lane call's run of threads is one
     * contiguous span, vectorised), the step's scalars read once per span instead of once per
     * element (ctl and k may share a type with w, m, v, so gcc could not hoist their loads past
     * the stores: the element loop was twice core.optim's C pass). Threads past the last span
     * do nothing. Each element is its own chain with the operations below in their order, so
     * which thread owns it changes no bit. */
    TS_GRID_STRIDE(u, (n + TS_HAC - 1) / TS_HAC) {
        long long i0 = u * TS_HAC, i1 = n - i0 < TS_HAC ? n : i0 + TS_HAC;
        const real_t s = ctl[0];
        const acc_t k0 = k[0], k1 = k[1], k2 = k[2], k3 = k[3], k4 = k[4], k5 = k[5];
        const int clip = ctl[1] != (real_t)0;
        for (long long i = i0; i < i1; ++i) {
            real_t gi = ts_opt_grad_s_T(g[i], w[i], s, clip, use_l2, l2);
            real_t mi = ADD(MUL(k0, m[i]), MUL(k1, gi));
            real_t vi = ADD(MUL(k2, v[i]), MUL(k3, MUL(gi, gi)));
            m[i] = mi;
            v[i] = vi;
            w[i] = SUB(w[i], MUL(k5, DIV(mi, ADD(SQRT(vi), k4))));
        }
    }
#else
    TS_GRID_STRIDE(i, n) {
        real_t gi = ts_opt_grad_T(g[i], w[i], ctl, use_l2, l2);
        real_t mi = ADD(MUL(k[0], m[i]), MUL(k[1], gi));
        real_t vi = ADD(MUL(k[2], v[i]), MUL(k[3], MUL(gi, gi)));
        m[i] = mi;
        v[i] = vi;
        w[i] = SUB(w[i], MUL(k[5], DIV(mi, ADD(SQRT(vi), k[4]))));
    }
#endif
}

/* ---- mixed precision (core.amp, docs/reference-order.md "Mixed precision") ----------------
 * ctl = [1, 0, found, inv]: inv = 1 / loss scale (a power of two). amp_check sets found when any
 * unscaled gradient g * inv is inf or NaN (serial, one thread); the updates then skip. */
extern "C" __global__ void amp_check_T(const long long* table, long long count, acc_t* ctl) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    acc_t inv = ctl[3];
    acc_t found = (acc_t)0;
    for (long long j = 0; j < count; ++j) {
        const real_t* p = (const real_t*)(unsigned long long)table[2 * j];
        long long n = table[2 * j + 1];
        for (long long i = 0; i < n; ++i) {
            acc_t x = MUL(p[i], inv);
            if (SUB(x, x) != (acc_t)0) found = (acc_t)1; /* inf - inf and NaN are NaN */
        }
    }
    ctl[2] = found;
}

/* Adam on the float32 master: g unscaled, the master updated, w = the master rounded once. */
extern "C" __global__ void amp_adam_T(real_t* w, acc_t* master, const real_t* g, acc_t* m,
                                      acc_t* v, const acc_t* ctl, const acc_t* k,
                                      long long use_l2, real_t l2, long long n) {
    TS_GRID_STRIDE(i, n) {
        if (ctl[2] == (acc_t)0) {
            real_t gi = MUL(g[i], ctl[3]);
            if (use_l2) gi = ADD(gi, MUL(l2, master[i]));
            real_t mi = ADD(MUL(k[0], m[i]), MUL(k[1], gi));
            real_t vi = ADD(MUL(k[2], v[i]), MUL(k[3], MUL(gi, gi)));
            m[i] = mi;
            v[i] = vi;
            real_t wi = SUB(master[i], MUL(k[5], DIV(mi, ADD(SQRT(vi), k[4]))));
            master[i] = wi;
            w[i] = wi;
        }
    }
}

extern "C" __global__ void amp_sgd_T(real_t* w, acc_t* master, const real_t* g, const acc_t* ctl,
                                     real_t lr, long long use_l2, real_t l2, long long n) {
    TS_GRID_STRIDE(i, n) {
        if (ctl[2] == (acc_t)0) {
            real_t gi = MUL(g[i], ctl[3]);
            if (use_l2) gi = ADD(gi, MUL(l2, master[i]));
            real_t wi = SUB(master[i], MUL(lr, gi));
            master[i] = wi;
            w[i] = wi;
        }
    }
}
