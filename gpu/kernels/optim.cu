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

/* ---- torch.optim's steps (core.optim.SGDMomentum / AdamW; docs/reference-order.md) --------
 * In PyTorch's order, its fused multiply-adds where ATen's CPU kernels contract (add with
 * alpha, addcmul, lerp): FMA_RN is one rounding. Flags and scalars live in k (staged per step:
 * a schedule's lr changes no launch). */

#ifndef TS_FMA_EMULATED
#define TS_FMA_EMULATED
/* fma(a, b, c) rounded once from round-to-nearest operations only, since the refmath contract
 * (the PTX audit, tests/gpu/test_fp_contract.py) forbids the fma instruction itself: the
 * numpy reference's algorithm (core.explain_prims.fma), operation for operation. float: the
 * product is exact in double, the sum is rounded to odd there, then to float (53 >= 24 + 2);
 * double: Boldo & Melquiond (an exact product by Veltkamp's split, two exact sums, one add
 * rounded to odd, one to nearest). Exact for finite operands whose product does not underflow;
 * a non-finite sum is the plain a * b + c, as the reference's. */
__device__ __forceinline__ double ts_round_odd_add(double a, double b) {
    double s = __dadd_rn(a, b);
    double bb = __dsub_rn(s, a);
    double e = __dadd_rn(__dsub_rn(a, __dsub_rn(s, bb)), __dsub_rn(b, bb));
    long long bits = __double_as_longlong(s);
    if (e != 0.0 && (bits & 1LL) == 0 && __dsub_rn(s, s) == 0.0)
        bits += ((e > 0.0) == (s > 0.0)) ? 1LL : -1LL;
    return __longlong_as_double(bits);
}
__device__ __forceinline__ float ts_fma_emul_f(float a, float b, float c) {
    double p = __dmul_rn((double)a, (double)b);
    float out = (float)ts_round_odd_add(p, (double)c);
    float plain = __fadd_rn(__fmul_rn(a, b), c);
    return (__fsub_rn(out, out) == 0.0f && __fsub_rn(plain, plain) == 0.0f) ? out : plain;
}
__device__ __forceinline__ void ts_split(double a, double* hi, double* lo) {
    double c = __dmul_rn(134217729.0, a); /* 2^27 + 1 */
    *hi = __dsub_rn(c, __dsub_rn(c, a));
    *lo = __dsub_rn(a, *hi);
}
__device__ __forceinline__ double ts_fma_emul_d(double a, double b, double c) {
    double ah, al, bh, bl;
    double uh = __dmul_rn(a, b);
    ts_split(a, &ah, &al);
    ts_split(b, &bh, &bl);
    double ul = __dadd_rn(__dadd_rn(__dadd_rn(__dsub_rn(__dmul_rn(ah, bh), uh),
                                              __dmul_rn(ah, bl)), __dmul_rn(al, bh)),
                          __dmul_rn(al, bl));
    double th = __dadd_rn(c, ul), t1 = __dsub_rn(th, c);
    double tl = __dadd_rn(__dsub_rn(c, __dsub_rn(th, t1)), __dsub_rn(ul, t1));
    double vh = __dadd_rn(uh, th), v1 = __dsub_rn(vh, uh);
    double vl = __dadd_rn(__dsub_rn(uh, __dsub_rn(vh, v1)), __dsub_rn(th, v1));
    double out = __dadd_rn(vh, ts_round_odd_add(tl, vl));
    double plain = __dadd_rn(__dmul_rn(a, b), c);
    return (__dsub_rn(out, out) == 0.0 && __dsub_rn(plain, plain) == 0.0) ? out : plain;
}
#endif

/* k = [lr, momentum, 1 - dampening, weight_decay, first step, nesterov] */
extern "C" __global__ void sgdm_T(real_t* w, const real_t* g, real_t* buf, const acc_t* ctl,
                                  const acc_t* k, long long use_l2, real_t l2, long long n) {
    TS_GRID_STRIDE(i, n) {
        real_t wi = w[i];
        real_t gi = ts_opt_grad_T(g[i], wi, ctl, use_l2, l2);
        if (k[3] != (acc_t)0) gi = FMA_RN(wi, k[3], gi);        /* grad.add(param, alpha=wd) */
        if (k[1] != (acc_t)0) {
            real_t b = k[4] != (acc_t)0 ? gi : FMA_RN(gi, k[2], MUL(buf[i], k[1]));
            buf[i] = b;
            gi = k[5] != (acc_t)0 ? FMA_RN(b, k[1], gi) : b;  /* nesterov: grad.add(buf, ...) */
        }
        w[i] = FMA_RN(gi, -k[0], wi);                          /* param.add_(grad, alpha=-lr) */
    }
}

/* k = [1 - lr wd, 1 - b1, b2, 1 - b2, sqrt(1 - b2^t), eps, -(lr / (1 - b1^t)), decay on,
 *      1 - b1 < 0.5 (ATen's lerp branch)] */
extern "C" __global__ void adamw_T(real_t* w, const real_t* g, real_t* m, real_t* v,
                                   const acc_t* ctl, const acc_t* k, long long use_l2, real_t l2,
                                   long long n) {
    TS_GRID_STRIDE(i, n) {
        real_t wi = w[i];
        real_t gi = ts_opt_grad_T(g[i], wi, ctl, use_l2, l2);
        if (k[7] != (acc_t)0) wi = MUL(wi, k[0]);             /* param.mul_(1 - lr * wd) */
        real_t mi = m[i];
        real_t d = SUB(gi, mi);
        mi = k[8] != (acc_t)0 ? FMA_RN(k[1], d, mi) : FMA_RN(SUB(k[1], (acc_t)1), d, gi);
        real_t vi = FMA_RN(MUL(k[3], gi), gi, MUL(v[i], k[2])); /* v.mul_(b2).addcmul_ */
        m[i] = mi;
        v[i] = vi;
        real_t den = ADD(DIV(SQRT(vi), k[4]), k[5]);
        w[i] = ADD(wi, DIV(MUL(k[6], mi), den));               /* param.addcdiv_ */
    }
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

/* The torch.optim steps on the float32 masters (sgdm_T / adamw_T's lines, buf / m / v in the
 * compute type): g unscaled, L2 on the master, the master updated, w = the master rounded once. */
extern "C" __global__ void amp_sgdm_T(real_t* w, acc_t* master, const real_t* g, acc_t* buf,
                                      const acc_t* ctl, const acc_t* k, long long use_l2,
                                      real_t l2, long long n) {
    TS_GRID_STRIDE(i, n) {
        if (ctl[2] == (acc_t)0) {
            real_t wi = master[i];
            real_t gi = MUL(g[i], ctl[3]);
            if (use_l2) gi = ADD(gi, MUL(l2, wi));
            if (k[3] != (acc_t)0) gi = FMA_RN(wi, k[3], gi);
            if (k[1] != (acc_t)0) {
                real_t b = k[4] != (acc_t)0 ? gi : FMA_RN(gi, k[2], MUL(buf[i], k[1]));
                buf[i] = b;
                gi = k[5] != (acc_t)0 ? FMA_RN(b, k[1], gi) : b;
            }
            wi = FMA_RN(gi, -k[0], wi);
            master[i] = wi;
            w[i] = wi;
        }
    }
}

extern "C" __global__ void amp_adamw_T(real_t* w, acc_t* master, const real_t* g, acc_t* m,
                                       acc_t* v, const acc_t* ctl, const acc_t* k,
                                       long long use_l2, real_t l2, long long n) {
    TS_GRID_STRIDE(i, n) {
        if (ctl[2] == (acc_t)0) {
            real_t wi = master[i];
            real_t gi = MUL(g[i], ctl[3]);
            if (use_l2) gi = ADD(gi, MUL(l2, wi));
            if (k[7] != (acc_t)0) wi = MUL(wi, k[0]);
            real_t mi = m[i];
            real_t d = SUB(gi, mi);
            mi = k[8] != (acc_t)0 ? FMA_RN(k[1], d, mi) : FMA_RN(SUB(k[1], (acc_t)1), d, gi);
            real_t vi = FMA_RN(MUL(k[3], gi), gi, MUL(v[i], k[2]));
            m[i] = mi;
            v[i] = vi;
            real_t den = ADD(DIV(SQRT(vi), k[4]), k[5]);
            wi = ADD(wi, DIV(MUL(k[6], mi), den));
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
