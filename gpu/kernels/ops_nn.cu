/* ops_nn.cu: pooling and the conv2d helpers (im2col, col2im, batch sums) for imported ONNX
 * models, following docs/reference-order-nn.md (template: gpu/source.py). Window geometry
 * (padding, strides, dilations, ceil_mode) is resolved on the host into index maps:
 *   taps[p*T + t]: the input pixel (h*W + w) under tap t of output pixel p, -1 in the padding;
 *   off/lst (CSR per input pixel): the (tap, output) pairs that land on it, in the order the
 *   reference adds them (col2im: tap-major; max-pool backward: output row-major).
 * Half precision (docs/reference-order-nn.md, "Half precision"): tensors are the storage type
 * (`real_t*`), the scratch the reference keeps in float32 is `acc_t*` (float: the pool counts,
 * avgpool's g / count, conv's products before their batch sum or col2im), and each kernel
 * rounds its result once (RND) before adding it to a stored gradient; im2col's columns are
 * copies of stored values, exact in the storage type.
 */

#ifndef TS_GRID_STRIDE /* the host backend's prelude defines its own (lanes: docs/devices.md) */
#define TS_GRID_STRIDE(i, n)                                                             \
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < (n);       \
         i += (long long)gridDim.x * blockDim.x)
#endif

#ifndef TS_NINF
#define TS_NINF __longlong_as_double((long long)0xfff0000000000000ULL)
#endif

/* max pool: y = np.maximum's chain over the window in row-major tap order, acc = tap 0, then
 * acc = (acc > v || acc is NaN) ? acc : v (padding is -inf, NaN propagates; of equal zeros the
 * later one, -0.0 or +0.0, as numpy and the executor's C); arg = the first tap holding the max
 * (np.argmax: the first of equal zeros), as an input pixel or -1 (padding). */
extern "C" __global__ void maxpool_fwd_T(const real_t* x, real_t* y, long long* arg,
                                         const long long* taps, long long NC, long long HW,
                                         long long P, long long T) {
    TS_GRID_STRIDE(o, NC * P) {
        long long nc = o / P, p = o - (o / P) * P;
        real_t best = (real_t)0, acc = (real_t)0;
        long long who = -1;
        for (long long t = 0; t < T; ++t) {
            long long s = taps[p * T + t];
            real_t v = s >= 0 ? x[nc * HW + s] : (real_t)TS_NINF;
            if (t == 0 || v > best || (v != v && best == best)) {
                best = v;
                who = s;
            }
            acc = t == 0 || !(acc > v || acc != acc) ? v : acc;
            if (best != best) break; /* argmax stops at the first NaN (acc is that NaN too) */
        }
        y[o] = acc;
        arg[o] = who;
    }
}

/* gx[nc, s] += (+0.0 + g of every output whose arg is s, outputs in row-major order) */
extern "C" __global__ void maxpool_bwd_T(const real_t* g, const long long* arg, real_t* gx,
                                         const long long* off, const long long* lst,
                                         long long NC, long long HW, long long P) {
    TS_GRID_STRIDE(e, NC * HW) {
        long long nc = e / HW, s = e - (e / HW) * HW;
        real_t acc = (real_t)0;
        for (long long r = off[s]; r < off[s + 1]; ++r) {
            long long o = nc * P + lst[r];
            if (arg[o] == s) acc = ADD(acc, g[o]);
        }
        gx[e] = ADD(gx[e], RND(acc));
    }
}

/* average pool: y = (serial sum of the window's input taps) / cnt[p] (padding adds +0.0,
 * which never changes a sum that starts at +0.0, so it is skipped). */
extern "C" __global__ void avgpool_fwd_T(const real_t* x, real_t* y, const acc_t* cnt,
                                         const long long* taps, long long NC, long long HW,
                                         long long P, long long T) {
    TS_GRID_STRIDE(o, NC * P) {
        long long nc = o / P, p = o - (o / P) * P;
        real_t acc = (real_t)0;
        for (long long t = 0; t < T; ++t) {
            long long s = taps[p * T + t];
            if (s >= 0) acc = ADD(acc, x[nc * HW + s]);
        }
        y[o] = DIV(acc, cnt[p]);
    }
}

/* gd[o] = g[o] / cnt[p] (avgpool backward, before col2im) */
extern "C" __global__ void avgpool_scale_T(const real_t* g, const acc_t* cnt, acc_t* gd,
                                           long long NC, long long P) {
    TS_GRID_STRIDE(o, NC * P) { gd[o] = DIV(g[o], cnt[o % P]); }
}

/* im2col for conv2d: cols[g][n][cg*T + t][p] = x[n, g*Cg + cg, taps[p, t]] (+0.0 in padding) */
extern "C" __global__ void im2col_T(const real_t* x, real_t* cols, const long long* taps,
                                    long long N, long long C, long long G, long long HW,
                                    long long T, long long P) {
    long long cg_n = C / G;
#if defined(TS_HOST_PRELUDE_H) && !defined(TS_USER_KERNEL)
    /* the host: one row (n, c, t) of P columns per thread, its index split once, not per
     * element (four 64-bit divisions an element were most of this copy's time); threads past
     * the last row do nothing. The same copies. */
    TS_GRID_STRIDE(r, N * C * T) {
        long long t = r % T, c = (r / T) % C, n = r / (T * C);
        long long g = c / cg_n, cg = c - g * cg_n;
        const real_t* xs = x + (n * C + c) * HW;
        real_t* dst = cols + ((g * N + n) * cg_n * T + cg * T + t) * P;
        for (long long p = 0; p < P; ++p) {
            long long s = taps[p * T + t];
            real_t v = s >= 0 ? xs[s] : (real_t)0;
            dst[p] = v;
        }
    }
#else
    TS_GRID_STRIDE(i, N * C * T * P) {
        long long p = i % P, t = (i / P) % T, c = (i / (P * T)) % C, n = i / (P * T * C);
        long long g = c / cg_n, cg = c - g * cg_n;
        long long s = taps[p * T + t];
        real_t v = s >= 0 ? x[(n * C + c) * HW + s] : (real_t)0;
        cols[((g * N + n) * cg_n * T + cg * T + t) * P + p] = v;
    }
#endif
}

/* col2im: gx[n, c, s] += (+0.0 + every (tap, p) column value landing on s, tap-major).
 * mode 0 (avgpool): the value is gd[n, c, p] on every tap; mode 1 (conv2d): gcols laid out
 * [g][n][cg*T + t][p]. lst holds t*P + p. */
extern "C" __global__ void col2im_T(const acc_t* cols, real_t* gx, const long long* off,
                                    const long long* lst, long long N, long long C,
                                    long long G, long long HW, long long T, long long P,
                                    long long mode) {
    long long cg_n = C / G;
    TS_GRID_STRIDE(e, N * C * HW) {
        long long s = e % HW, c = (e / HW) % C, n = e / (HW * C);
        long long g = c / cg_n, cg = c - g * cg_n;
        long long base = mode ? ((g * N + n) * cg_n * T + cg * T) * P : (n * C + c) * P;
        real_t acc = (real_t)0;
        for (long long r = off[s]; r < off[s + 1]; ++r) {
            /* conv2d's column is t * P + p = lst[r] itself (no division); avgpool's is p */
            long long tp = lst[r];
            acc = ADD(acc, cols[base + (mode ? tp : tp - (tp / P) * P)]);
        }
        gx[e] = ADD(gx[e], RND(acc));
    }
}

/* dst[j] += serial sum over b of src[b * stride + j] (conv2d's gw: the batch sum of its
 * products, kept in the compute type) */
extern "C" __global__ void batch_sum_add_T(const acc_t* src, real_t* dst, long long B,
                                           long long stride, long long m) {
#if defined(TS_HOST_PRELUDE_H) && !defined(TS_USER_KERNEL)
    /* the host: 64 consecutive j a thread, b outside, j inside (contiguous: vectorised); each
     * j is still its own chain in b order. Threads past the last chunk do nothing. */
    TS_GRID_STRIDE(u, (m + 63) / 64) {
        long long j0 = u * 64, nj = m - j0 < 64 ? m - j0 : 64;
        acc_t acc[64];
        for (long long q = 0; q < nj; ++q) acc[q] = (acc_t)0;
        for (long long b = 0; b < B; ++b) {
            const acc_t* sb = src + b * stride + j0;
            for (long long q = 0; q < nj; ++q) acc[q] = ADD(acc[q], sb[q]);
        }
        for (long long q = 0; q < nj; ++q) dst[j0 + q] = ADD(dst[j0 + q], RND(acc[q]));
    }
#else
    TS_GRID_STRIDE(j, m) {
        acc_t acc = (acc_t)0;
        for (long long b = 0; b < B; ++b) acc = ADD(acc, src[b * stride + j]);
        dst[j] = ADD(dst[j], RND(acc));
    }
#endif
}
