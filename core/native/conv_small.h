/* Convolutions with a small output plane (n = oh*ow of a few dozen: a 7x7 or 14x14 stage),
 * included by refkernels.c after its conv section (its vector types, ep_t, conv_t, the
 * cv_line_* rows of the im2col matrix and the pool).
 *
 * The product c (mg x n) = w (mg x k) @ im2col(x) (k x n) of one (image, group) has too few
 * columns for MM_ROWS's 64-wide panels: at n = 49 every column ran in its one-vector tiles at
 * 49/64 lane use, 40-50 GFLOP/s against ~75 with whole panels. Here the lanes hold output
 * channels instead: a tile is CM_NC columns x Q vectors of channels, each k-step loads Q
 * vectors of transposed weights and broadcasts CM_NC values of the column panel. Every
 * c[i][j] is still acc = +0.0; acc = acc + w[i][kk] * x[kk][j] for kk = 0, 1, ... in order,
 * one rounding per mul and per add, the padding's +0.0 included: only the lanes change, so
 * the bits are those of im2col + MM_ROWS. The accumulators continue across k-blocks through a
 * buffer (stored and reloaded exactly); a finished block of channels is copied to its rows of
 * c and the epilogue (ep_t) takes them there.
 *
 * Operands, both packed (copies, exact):
 *   wp: per group, blocks of CB = MM_Q vectors of channels; block b holds channels
 *       [b*CB, b*CB + bw) (bw = CB, the last one rounded up to whole vectors), element
 *       (kk, lane) at b*CB*k + kk*bw + lane, +0.0 for the lanes past mg (their products, 0*inf
 *       = NaN included, land in buffer lanes nobody stores). A group is k * mgp elements,
 *       mgp = mg rounded up to a vector. Cached by the ONNX plan (fused.py), packed per call
 *       for the tape.
 *   xp: per batch entry q = (image, group), the im2col matrix in column tiles: tile t holds
 *       columns [t*CM_NC, t*CM_NC + CM_NC), element (kk, col) at t*k*CM_NC + kk*CM_NC + col,
 *       +0.0 past n. Built from the image by cv_line (zero padding, strides, dilations). */

#define CM_NC 6     /* columns per tile: CM_NC x MM_Q accumulators fill 24 of 32 registers */
#define CM_KC 256   /* k-steps per block: a block's weights (64 KiB f32) stay in L2 */
#define CM_UB 2     /* blocks of channels per unit of work (threads claim units) */
#define CM_NMAX 256 /* the widest plane taken here (the line buffer's size) */

/* lanes of a vector V of T (a block of channels is MM_Q of them) */
#define CM_L(T, V) ((long long)(sizeof(V) / sizeof(T)))

/* one tile: CM_NC columns from t*CM_NC x Q vectors of block bi, k-steps [k0, k1); on the way
 * it asks for pfn lines a k-step of the next weight panel (pf, pfl lines: CM_UNIT). The
 * column loops are unrolled by request: gcc 12 (AVX-512) left 5 of the Q = 1 tile's 6
 * accumulators on the stack, a load and a store around every add (a channel block's last
 * 16 lanes: mg = 68, 136, 272 take it), 33 % of a 136-channel 7x7 conv's time */
#define CM_TILE(T, V, Q)                                                                \
    {                                                                                   \
        V acc[CM_NC][Q];                                                                \
        T *cb = cbuf + (bi * np + t * CM_NC) * CB;                                      \
        _Pragma("GCC unroll 8") for (int cc = 0; cc < CM_NC; ++cc)                      \
            for (int q = 0; q < (Q); ++q) {                                             \
                if (k0 == 0) {                                                          \
                    V z = {0};                                                          \
                    acc[cc][q] = z;                                                     \
                } else {                                                                \
                    acc[cc][q] = *(const V *)(cb + cc * CB + q * L);                    \
                }                                                                       \
            }                                                                           \
        const T *xk = xt + k0 * CM_NC;                                                  \
        const V *wk = (const V *)(wb + k0 * bw);                                        \
        for (long long kk = k0; kk < k1; ++kk, xk += CM_NC, wk += (Q)) {                \
            for (long long l = (t * (k1 - k0) + kk - k0) * pfn, le = l + pfn; l < le; ++l) \
                if (l < pfl) __builtin_prefetch(pf + l * 64, 0, 2);                     \
            V wv[Q];                                                                    \
            for (int q = 0; q < (Q); ++q) wv[q] = wk[q];                                \
            _Pragma("GCC unroll 8") for (int cc = 0; cc < CM_NC; ++cc) {                \
                for (int q = 0; q < (Q); ++q) {                                         \
                    V p;                                                                \
                    BMUL(T, V, p, &xk[cc], wv[q]);                                      \
                    acc[cc][q] = acc[cc][q] + p;                                        \
                }                                                                       \
            }                                                                           \
        }                                                                               \
        _Pragma("GCC unroll 8") for (int cc = 0; cc < CM_NC; ++cc)                      \
            for (int q = 0; q < (Q); ++q) *(V *)(cb + cc * CB + q * L) = acc[cc][q];    \
    }

typedef struct {
    const void *x, *w; /* the image (nb, c, h, w); the weights (g, mg, k), when wp is packed here */
    void *xp, *wp, *c;
    const conv_t *cv;
    const ep_t *ep;
    long long q0, mg, k, n, np, mgp, nblk, ntile; /* q0: this pass's first batch entry */
    long long upack, uw, units; /* pack units: upack for xp, then uw for wp (0: given) */
    int f32;
    long long next, chunk; /* next: atomic */
} cm_job;

/* xp's rows [kk0, kk1) of batch entry q. Row kk = (ci, u, v) at column j = (r, s) is
 * xpad[ci][r*sh + u*dh][s*sw + v*dw] of the zero-padded image: read through offsets joff[j]
 * from the tap's corner in the input planes themselves (no padding: a 1x1 conv, strided or
 * not), or in zero-padded copies of the unit's channels; a dilated window far larger than the
 * image (planes past 4x the image) takes cv_line's rows instead. Copies, so exact. (cv_line
 * row by row, its divisions and 7-column runs, cost as much as a 1x1 conv's product at
 * mg = 128: 58 GFLOP/s there, 72 without.) */
#define CM_PACK_X(T, LINE_FN)                                                           \
    {                                                                                   \
        const conv_t *cv = J->cv;                                                       \
        const long long n = J->n, k = J->k, khw = cv->kh * cv->kw;                      \
        const T *xq = (const T *)J->x +                                                 \
                      ((q / cv->g) * cv->c + (q % cv->g) * (cv->c / cv->g)) * cv->h * cv->w; \
        T *xp = (T *)J->xp + (q - J->q0) * J->ntile * k * CM_NC;                        \
        const long long hp = (cv->oh - 1) * cv->sh + (cv->kh - 1) * cv->dh + 1;         \
        const long long wq = (cv->ow - 1) * cv->sw + (cv->kw - 1) * cv->dw + 1;         \
        const int inside = cv->ph == 0 && cv->pw == 0 && hp <= cv->h && wq <= cv->w;    \
        const long long ci0 = kk0 / khw, ci1 = (kk1 - 1) / khw + 1;                     \
        T *pad = NULL;                                                                  \
        if (!inside && (double)hp * (double)wq <= 4.0 * (double)cv->h * (double)cv->w + 4096.0) \
            pad = (T *)calloc((size_t)((ci1 - ci0) * hp * wq), sizeof(T));             \
        if (inside || pad) {                                                            \
            const long long ps = inside ? cv->w : wq, pl = inside ? cv->h * cv->w : hp * wq; \
            const T *planes = inside ? xq + ci0 * pl : pad;                             \
            if (pad)                                                                    \
                for (long long ci = ci0; ci < ci1; ++ci)                                \
                    for (long long y = 0; y < hp; ++y) {                                \
                        const long long iy = y - cv->ph;                                \
                        if (iy < 0 || iy >= cv->h) continue;                            \
                        const long long x0 = cv->pw > 0 ? cv->pw : 0;                   \
                        const long long x1 = cv->w + cv->pw < wq ? cv->w + cv->pw : wq; \
                        const T *xr = xq + (ci * cv->h + iy) * cv->w - cv->pw;          \
                        T *pr = pad + ((ci - ci0) * hp + y) * wq;                       \
                        for (long long X = x0; X < x1; ++X) pr[X] = xr[X];              \
                    }                                                                   \
            /* tile by tile, the rows in order: each tile's rows written in a run */     \
            long long joff[CM_NMAX + CM_NC], koff[CM_KC];                               \
            for (long long j = 0; j < n; ++j)                                           \
                joff[j] = (j / cv->ow) * cv->sh * ps + (j % cv->ow) * cv->sw;           \
            /* kk = (ci, u, v) counted along (a division per row cost as much as the  \
             * row's copies) */                                                          \
            for (long long kk = kk0, ci = ci0, u = (kk0 % khw) / cv->kw, v = kk0 % cv->kw; \
                 kk < kk1; ++kk) {                                                      \
                koff[kk - kk0] = (ci - ci0) * pl + u * cv->dh * ps + v * cv->dw;        \
                if (++v == cv->kw) {                                                    \
                    v = 0;                                                              \
                    if (++u == cv->kh) u = 0, ++ci;                                     \
                }                                                                       \
            }                                                                           \
            for (long long t = 0; t < J->ntile; ++t) {                                  \
                const long long *jo = joff + t * CM_NC;                                 \
                T *dst = xp + (t * k + kk0) * CM_NC;                                    \
                if ((t + 1) * CM_NC <= n)                                               \
                    for (long long kk = kk0; kk < kk1; ++kk, dst += CM_NC) {            \
                        const T *base = planes + koff[kk - kk0];                        \
                        for (int cc = 0; cc < CM_NC; ++cc) dst[cc] = base[jo[cc]];      \
                    }                                                                   \
                else                                                                    \
                    for (long long kk = kk0; kk < kk1; ++kk, dst += CM_NC) {            \
                        const T *base = planes + koff[kk - kk0];                        \
                        for (int cc = 0; cc < CM_NC; ++cc)                              \
                            dst[cc] = t * CM_NC + cc < n ? base[jo[cc]] : (T)0;         \
                    }                                                                   \
            }                                                                           \
            free(pad);                                                                  \
        } else {                                                                        \
            T line[CM_NMAX + CM_NC];                                                    \
            for (long long j = n; j < J->np; ++j) line[j] = (T)0;                       \
            for (long long kk = kk0; kk < kk1; ++kk) {                                  \
                LINE_FN(cv, xq, kk, 0, n, line);                                        \
                for (long long t = 0; t < J->ntile; ++t)                                \
                    for (int cc = 0; cc < CM_NC; ++cc)                                  \
                        xp[(t * k + kk) * CM_NC + cc] = line[t * CM_NC + cc];           \
            }                                                                           \
        }                                                                               \
    }

/* wp's block b of group gi, from w (g, mg, k) */
#define CM_PACK_W(T, V)                                                                 \
    {                                                                                   \
        const long long L = CM_L(T, V), CB = MM_Q * L, k = J->k, mg = J->mg;            \
        const long long c0 = b * CB, bw = mg - c0 < CB ? (mg - c0 + L - 1) / L * L : CB; \
        const T *w = (const T *)J->w + (gi * mg + c0) * k;                              \
        T *wb = (T *)J->wp + gi * k * J->mgp + c0 * k;                                  \
        /* 16 k-steps at a time: each weight row read a cache line in a run */           \
        for (long long kb = 0; kb < k; kb += 16) {                                      \
            const long long ke = kb + 16 < k ? kb + 16 : k;                             \
            for (long long r = 0; r < bw; ++r)                                          \
                for (long long kk = kb; kk < ke; ++kk)                                  \
                    wb[kk * bw + r] = c0 + r < mg ? w[r * k + kk] : (T)0;               \
        }                                                                               \
    }

/* channel blocks [b0, b1) of batch entry q: the k-blocks, then each block's rows to c and
 * the epilogue over them */
#define CM_UNIT(T, V, EPC)                                                              \
    {                                                                                   \
        const long long L = CM_L(T, V), CB = MM_Q * L, k = J->k, n = J->n, np = J->np;  \
        const long long mg = J->mg, g = J->cv->g;                                       \
        const T *xq = (const T *)J->xp + (q - J->q0) * J->ntile * k * CM_NC;            \
        const T *wg = (const T *)J->wp + (q % g) * k * J->mgp;                          \
        T *c = (T *)J->c + q * mg * n;                                                  \
        T *cbuf = (T *)TLS_BUF(cm_buf);                                                 \
        for (long long k0 = 0, k1; k0 < k; k0 += CM_KC) {                               \
            k1 = k0 + CM_KC < k ? k0 + CM_KC : k;                                       \
            for (long long b = b0; b < b1; ++b) {                                       \
                const long long bi = b - b0, c0 = b * CB;                               \
                const long long bw = mg - c0 < CB ? (mg - c0 + L - 1) / L * L : CB;     \
                const T *wb = wg + c0 * k;                                              \
                /* the next weight panel (this k-block's next block, or the next k-block's \
                 * first) asked for while this one is computed, pfn lines a k-step: read \
                 * once from memory (a model's weights are not in cache), a panel's first \
                 * pass waited on every page the hardware prefetcher did not follow (the \
                 * 7x7 convs ran at 60 GFLOP/s in resnet50 against 82 with the weights \
                 * in cache) */                                                          \
                const long long nb_ = b + 1 < b1 ? b + 1 : b0, nk0 = b + 1 < b1 ? k0 : k1;  \
                const long long nc0 = nb_ * CB;                                         \
                const long long nbw = mg - nc0 < CB ? (mg - nc0 + L - 1) / L * L : CB;  \
                const char *pf = (const char *)(wg + nc0 * k + nk0 * nbw);              \
                const long long nk1 = nk0 + CM_KC < k ? nk0 + CM_KC : k;                \
                const long long pfl = nk0 < k ? ((nk1 - nk0) * nbw * (long long)sizeof(T) + 63) / 64 : 0; \
                const long long pfn = (pfl + J->ntile * (k1 - k0) - 1) / (J->ntile * (k1 - k0)); \
                for (long long t = 0; t < J->ntile; ++t) {                              \
                    const T *xt = xq + t * k * CM_NC;                                   \
                    CM_TILES(T, V)                                                      \
                }                                                                       \
            }                                                                           \
        }                                                                               \
        const long long r0 = b0 * CB, r1 = b1 * CB < mg ? b1 * CB : mg;                 \
        for (long long r = r0; r < r1; ++r) {                                           \
            const T *src = cbuf + ((r / CB - b0) * np) * CB + r % CB;                   \
            for (long long j = 0; j < n; ++j) c[r * n + j] = src[j * CB];               \
        }                                                                               \
        const ep_t *E = J->ep;                                                          \
        if (E) {                                                                        \
            const T *res = E->res ? (const T *)E->res + q * mg * n + r0 * n : NULL;     \
            EPC(E, c + r0 * n, res, q / E->groups, (q % E->groups) * mg + r0, r1 - r0, n, \
                0, n);                                                                  \
        }                                                                               \
    }
#if MM_Q == 4
#define CM_TILES(T, V)                                                                  \
    if (bw == CB) CM_TILE(T, V, 4)                                                      \
    else if (bw == 3 * L) CM_TILE(T, V, 3)                                              \
    else if (bw == 2 * L) CM_TILE(T, V, 2)                                              \
    else CM_TILE(T, V, 1)
#else
#define CM_TILES(T, V)                                                                  \
    if (bw == CB) CM_TILE(T, V, 2)                                                      \
    else CM_TILE(T, V, 1)
#endif

/* the accumulators of a unit's blocks, one buffer per thread: CM_UB blocks x (CM_NMAX + CM_NC)
 * columns x MM_Q vectors (of 64 bytes at most: 16 floats, 8 doubles) */
static __thread float cm_buf[CM_UB * (CM_NMAX + CM_NC) * MM_Q * 16] __attribute__((aligned(64)));

/* pack units first (phase 0), then the product's (phase 1): claimed CHUNK at a time */
static void cm_part(void *ctx) {
    cm_job *J = (cm_job *)ctx;
    const long long total = J->units;
    for (;;) {
        long long u = __atomic_fetch_add(&J->next, J->chunk, __ATOMIC_RELAXED);
        if (u >= total) return;
        const long long ue = u + J->chunk < total ? u + J->chunk : total;
        for (; u < ue; ++u) {
            if (J->upack + J->uw > 0) { /* phase 0 */
                if (u < J->upack) {
                    /* entry q's rows in CM_KC-row pieces */
                    const long long per = (J->k + CM_KC - 1) / CM_KC;
                    const long long q = J->q0 + u / per, kk0 = (u % per) * CM_KC;
                    const long long kk1 = kk0 + CM_KC < J->k ? kk0 + CM_KC : J->k;
                    if (J->f32) CM_PACK_X(float, cv_line_f32)
                    else CM_PACK_X(double, cv_line_f64)
                } else {
                    const long long gi = (u - J->upack) / J->nblk, b = (u - J->upack) % J->nblk;
                    if (J->f32) CM_PACK_W(float, vmf32)
                    else CM_PACK_W(double, vmf64)
                }
            } else {
                const long long per = (J->nblk + CM_UB - 1) / CM_UB;
                const long long q = J->q0 + u / per, b0 = (u % per) * CM_UB;
                const long long b1 = b0 + CM_UB < J->nblk ? b0 + CM_UB : J->nblk;
                if (J->f32) CM_UNIT(float, vmf32, ep_cols_f32)
                else CM_UNIT(double, vmf64, ep_cols_f64)
            }
        }
    }
}

static void cm_run(cm_job *J, long long units, long long work, int threads) {
    long long t = threads < 1 ? 1 : (threads > MAX_THREADS ? MAX_THREADS : threads);
    if (t > units) t = units;
    if (t > work / MIN_WORK_PER_THREAD) t = work / MIN_WORK_PER_THREAD;
    if (t < 1) t = 1;
    const long long chunk = t == 1 ? units : units / (t * 8);
    J->units = units;
    J->next = 0;
    J->chunk = chunk < 1 ? 1 : chunk;
    pool_run(cm_part, J, (int)t);
}

/* the packed weights' size in elements (per group k * mgp) */
static long long cm_wp_size(long long g, long long mg, long long k, int f32) {
    const long long L = f32 ? CM_L(float, vmf32) : CM_L(double, vmf64);
    return g * k * ((mg + L - 1) / L * L);
}

/* The short-k 1x1 product: a 1x1 conv (stride 1, no padding) whose image is its own column
 * matrix x (k x n of each (image, group), rows n apart) and whose k is short (shufflenet's
 * grouped 1x1 convs: k = 34..136). Lanes over columns as MM_ROWS, but a tile's chains run the
 * whole k in registers (no k-blocks: no accumulator stored and reloaded, no panel of x
 * packed: the tile reads x's rows in place), and the epilogue (ep_t: bias, BatchNorm,
 * residual, Relu, the copy to dst) is applied to the accumulators before their one store,
 * straight to the output's row or dst's. MM_ROWS finished a block of columns first and ran the
 * epilogue over it from memory, where BatchNorm's divides (vdivps: ~10 cycles for 16 lanes
 * on an Intel Xeon) ran alone; here a tile's divides overlap the next tile's multiplies and
 * adds. Each output is still acc = +0.0; acc = acc + w[i][kk] * x[kk][j] for kk = 0, 1, ...
 * in order, one rounding per mul and per add, then EP_ONE_R's ops in its order, one rounding
 * each: the bits of im2col + MM_ROWS + ep_cols. The columns past the last whole vector
 * (n % L: 4 of a 14x14 plane, 1 of a 7x7) take tiles with their lanes over the unit's
 * output channels instead (as conv_cm's: the weights transposed per unit, x's values
 * broadcast; lanes past the unit's rows weigh +0.0, their products, 0 * inf = NaN included,
 * never stored): in one-vector tiles over columns, 4 of a vector's 16 lanes held outputs,
 * 9 % of a 272-channel 14x14 conv's time. */
#define SK_KMAX 256 /* the longest k taken */

/* The weights are conv_cm's pack (wp: blocks of CB = MM_Q vectors of channels, each k-step's
 * bw lanes together; the ONNX plan keeps it, the tape's calls pack them): a column tile
 * broadcasts its R rows' weights of a k-step from one run, a channel tile loads them as
 * vectors (packing them per unit, as R-row runs and transposed, cost 16 % of a 272-channel
 * 14x14 conv). A unit of work is a chunk of whole panels of one batch entry, or its columns
 * past them. The channel tiles' per-channel values (bias, mean, den, scale, beta: CB lanes
 * each) and accumulators (6 x MM_Q vectors), one buffer per thread: */
static __thread double sk_abuf[(5 + 6) * MM_Q * 8] __attribute__((aligned(64)));

typedef struct {
    const void *x, *wp;
    void *c;
    const ep_t *ep;
    long long g, mg, k, n, mgp, nblk;
    long long per, uc; /* units per batch entry: column chunks of uc, then the tail's */
    int f32;
    long long units, next, chunk; /* next: atomic */
} sk_job;

/* the integer vector of V's size: Relu's mask */
typedef int sk_vi32 __attribute__((vector_size(sizeof(vmf32)), aligned(4), may_alias));
typedef long long sk_vi64 __attribute__((vector_size(sizeof(vmf64)), aligned(8), may_alias));

/* where a tile's rows go and what is applied on the way: row r's outputs at dd[r] (from
 * column js), its residual row rr[r]; ep: EP_ONE_R's ops (else stored as summed) with the
 * rows' per-channel values */
#define SK_OUT_T(T, NAME)                                                               \
    typedef struct {                                                                    \
        T *dd[6];                                                                       \
        const T *rr[6];                                                                 \
        T bb[6], bm[6], bd[6], bg[6], bt[6];                                            \
        long long js;                                                                   \
        int ep, bias, bn, res, res_first, relu;                                         \
    } NAME;
SK_OUT_T(float, sk_out_f32)
SK_OUT_T(double, sk_out_f64)

/* EP_ONE_R's ops on y, a vector of outputs whose lanes are one channel's (per-channel values
 * scalars: the column tiles) or the lanes' channels' (vectors: the channel tiles); rv: the
 * residual's values */
#define SK_EP(V, VI, y, BB, BM, BD, BG, BT, rv, o)                                           \
    {                                                                                   \
        if ((o)->bias) y = y + (BB);                                                    \
        if ((o)->bn) {                                                                  \
            y = y - (BM);                                                               \
            y = y / (BD);                                                               \
            y = y * (BG);                                                               \
            y = y + (BT);                                                               \
        }                                                                               \
        if ((o)->res) y = (o)->res_first ? (rv) + y : y + (rv);                         \
        if ((o)->relu) {                                                                \
            const V z_ = {0};                                                           \
            y = (V)((VI)y & ~(VI)(y <= z_)); /* <= 0: +0 (NaN stays) */                 \
        }                                                                               \
    }
/* vector q of row r finished: the epilogue, then the store (from e, SK_OUT_LOCAL's copy) */
#define SK_STORE(T, V, VI, y, r, q)                                                     \
    {                                                                                   \
        const long long j_ = e.js + (q) * L;                                            \
        if (e.ep) {                                                                     \
            const V rv_ = e.res ? *(const V *)(e.rr[r] + j_) : y;                       \
            SK_EP(V, VI, y, e.bb[r], e.bm[r], e.bd[r], e.bg[r], e.bt[r], rv_, &e)       \
        }                                                                               \
        *(V *)(e.dd[r] + j_) = y;                                                       \
    }

/* acc[R][Q] (declared here) = over k steps, element r of b (broadcast) times vector q of v,
 * each product rounded (BMUL) and added to its chain from +0.0; b and v advance by ldb and
 * ldv a step. What both tile kinds below run (a row tile: b the weights, v the image's
 * columns; a channel tile: b the image's columns, v the transposed weights). */
#define SK_ACC(T, V, R, Q, acc, k, b, ldb, v, ldv)                                      \
    V acc[R][Q];                                                                        \
    _Pragma("GCC unroll 8") for (int r_ = 0; r_ < (R); ++r_)                            \
        for (int q_ = 0; q_ < (Q); ++q_) {                                              \
            V z_ = {0};                                                                 \
            acc[r_][q_] = z_;                                                           \
        }                                                                               \
    for (long long kk_ = 0; kk_ < (k); ++kk_, (b) += (ldb), (v) += (ldv)) {             \
        V vq_[Q];                                                                       \
        for (int q_ = 0; q_ < (Q); ++q_) vq_[q_] = ((const V *)(v))[q_];                \
        _Pragma("GCC unroll 8") for (int r_ = 0; r_ < (R); ++r_)                        \
            for (int q_ = 0; q_ < (Q); ++q_) {                                          \
                V p_;                                                                   \
                BMUL(T, V, p_, (b) + r_, vq_[q_]);                                      \
                acc[r_][q_] = acc[r_][q_] + p_;                                         \
            }                                                                           \
    }

/* one tile: R rows x Q vectors, all k, then each vector's epilogue and store. wt: the tile's
 * weights (its R rows' of a k-step together, ldw apart); pk: the tile's first column in row 0
 * of x, rows ldp apart. A function of its own: inlined into the unit, gcc 12 kept row pointers and
 * accumulators on the stack (a load or a move per k-step: 115 against 88 us a 272-channel
 * 14x14 conv) */
#define SK_TILE_FN(T, V, VI, OUT, R, Q, NAME)                                           \
    __attribute__((noinline)) static void NAME(const T *wt, long long ldw, const T *pk, \
                                               long long ldp, long long k, const OUT *o) { \
        const long long L = CM_L(T, V);                                                 \
        SK_ACC(T, V, R, Q, acc, k, wt, ldw, pk, ldp)                                    \
        /* a local copy: the stores (may_alias vectors) could write *o, so gcc read   \
         * every flag and value from it again after each (AVX2's 16-column tiles of a  \
         * k = 16 conv: 1.09x MM_ROWS's time) */                                       \
        const OUT e = *o;                                                               \
        _Pragma("GCC unroll 8") for (int r = 0; r < (R); ++r)                           \
            _Pragma("GCC unroll 4") for (int q = 0; q < (Q); ++q)                       \
                SK_STORE(T, V, VI, acc[r][q], r, q)                                     \
    }
#define SK_TILE_FNS(T, V, VI, S)                                                        \
    SK_TILE_FN(T, V, VI, sk_out_##S, 6, 1, sk_tile_6_1_##S)                             \
    SK_TILE_FN(T, V, VI, sk_out_##S, 4, 1, sk_tile_4_1_##S)                             \
    SK_TILE_FN(T, V, VI, sk_out_##S, 2, 1, sk_tile_2_1_##S)                             \
    SK_TILE_FN(T, V, VI, sk_out_##S, 1, 1, sk_tile_1_1_##S)                             \
    SK_TILE_FN(T, V, VI, sk_out_##S, 6, 2, sk_tile_6_2_##S)                             \
    SK_TILE_FN(T, V, VI, sk_out_##S, 4, 2, sk_tile_4_2_##S)                             \
    SK_TILE_FN(T, V, VI, sk_out_##S, 2, 2, sk_tile_2_2_##S)                             \
    SK_TILE_FN(T, V, VI, sk_out_##S, 1, 2, sk_tile_1_2_##S)                             \
    SK_TILE_FNS_WIDE(T, V, VI, S)
#if MM_Q == 4
#define SK_TILE_FNS_WIDE(T, V, VI, S)                                                   \
    SK_TILE_FN(T, V, VI, sk_out_##S, 6, 3, sk_tile_6_3_##S)                             \
    SK_TILE_FN(T, V, VI, sk_out_##S, 4, 3, sk_tile_4_3_##S)                             \
    SK_TILE_FN(T, V, VI, sk_out_##S, 2, 3, sk_tile_2_3_##S)                             \
    SK_TILE_FN(T, V, VI, sk_out_##S, 1, 3, sk_tile_1_3_##S)                             \
    SK_TILE_FN(T, V, VI, sk_out_##S, 6, 4, sk_tile_6_4_##S)                             \
    SK_TILE_FN(T, V, VI, sk_out_##S, 4, 4, sk_tile_4_4_##S)                             \
    SK_TILE_FN(T, V, VI, sk_out_##S, 2, 4, sk_tile_2_4_##S)                             \
    SK_TILE_FN(T, V, VI, sk_out_##S, 1, 4, sk_tile_1_4_##S)
#else
#define SK_TILE_FNS_WIDE(T, V, VI, S)
#endif
SK_TILE_FNS(float, vmf32, sk_vi32, f32)
SK_TILE_FNS(double, vmf64, sk_vi64, f64)

/* one channel tile: NC columns from xb (x's row 0, rows n apart) x QC vectors of channels
 * from wc (the transposed weights, ldw lanes to a k-step), all k, into out[cc * QC + qv] */
#define SK_CTILE_FN(T, V, NC, QC, NAME)                                                 \
    __attribute__((noinline)) static void NAME(const T *wc, long long ldw, const T *xb, \
                                               long long n, long long k, V *out) {      \
        SK_ACC(T, V, NC, QC, acc, k, xb, n, wc, ldw)                                    \
        _Pragma("GCC unroll 8") for (int cc = 0; cc < (NC); ++cc)                       \
            for (int q = 0; q < (QC); ++q) out[cc * (QC) + q] = acc[cc][q];             \
    }
#define SK_CTILE_FNS_Q(T, V, S, QC)                                                     \
    SK_CTILE_FN(T, V, 1, QC, sk_ctile_1_##QC##_##S)                                     \
    SK_CTILE_FN(T, V, 2, QC, sk_ctile_2_##QC##_##S)                                     \
    SK_CTILE_FN(T, V, 3, QC, sk_ctile_3_##QC##_##S)                                     \
    SK_CTILE_FN(T, V, 4, QC, sk_ctile_4_##QC##_##S)                                     \
    SK_CTILE_FN(T, V, 6, QC, sk_ctile_6_##QC##_##S)
SK_CTILE_FNS_Q(float, vmf32, f32, 1)
SK_CTILE_FNS_Q(float, vmf32, f32, 2)
SK_CTILE_FNS_Q(double, vmf64, f64, 1)
SK_CTILE_FNS_Q(double, vmf64, f64, 2)
#if MM_Q == 4
SK_CTILE_FNS_Q(float, vmf32, f32, 3)
SK_CTILE_FNS_Q(float, vmf32, f32, 4)
SK_CTILE_FNS_Q(double, vmf64, f64, 3)
SK_CTILE_FNS_Q(double, vmf64, f64, 4)
#endif
#define SK_CTILE_NC(S, QC)                                                              \
    switch (nc) {                                                                       \
    case 1: sk_ctile_1_##QC##_##S(wcq, ldw, xb, n, k, acc); break;                      \
    case 2: sk_ctile_2_##QC##_##S(wcq, ldw, xb, n, k, acc); break;                      \
    case 3: sk_ctile_3_##QC##_##S(wcq, ldw, xb, n, k, acc); break;                      \
    case 4: sk_ctile_4_##QC##_##S(wcq, ldw, xb, n, k, acc); break;                      \
    default: sk_ctile_6_##QC##_##S(wcq, ldw, xb, n, k, acc); break;                     \
    }
#if MM_Q == 4
#define SK_CTILE(S)                                                                     \
    if (qc == 4) SK_CTILE_NC(S, 4)                                                      \
    else if (qc == 3) SK_CTILE_NC(S, 3)                                                 \
    else if (qc == 2) SK_CTILE_NC(S, 2)                                                 \
    else SK_CTILE_NC(S, 1)
#else
#define SK_CTILE(S)                                                                     \
    if (qc == 2) SK_CTILE_NC(S, 2)                                                      \
    else SK_CTILE_NC(S, 1)
#endif

/* columns [jc, jc + W) of the block's rows [i0, i1) through channel tiles: nc columns (6 at most)
 * x the block's qc = bw / L vectors, then each vector's epilogue (the per-channel values as
 * vectors, lanes past the rows padded) and its lanes stored to their rows */
#define SK_COLS(T, V, VI, S)                                                            \
    {                                                                                   \
        const long long nr = i1 - i0, qc = bw / L;                                      \
        T *cv_ = (T *)TLS_BUF(sk_abuf);                                                 \
        V *acc = (V *)(cv_ + 5 * bw);                                                   \
        /* bias, mean, den, scale, beta of the rows, each bw long */                   \
        for (long long l = 0; l < bw; ++l) {                                            \
            const long long ch = ch0 + i0 + (l < nr ? l : 0);                           \
            cv_[l] = o.bias ? ((const T *)E->bias)[ch] : (T)0;                          \
            cv_[bw + l] = o.bn ? ((const T *)E->mean)[ch] : (T)0;                       \
            cv_[2 * bw + l] = o.bn ? ((const T *)E->den)[ch] : (T)1;                    \
            cv_[3 * bw + l] = o.bn ? ((const T *)E->scale)[ch] : (T)1;                  \
            cv_[4 * bw + l] = o.bn ? ((const T *)E->beta)[ch] : (T)0;                   \
        }                                                                               \
        for (long long j0 = jc, nc; j0 < jc + W; j0 += nc) {                            \
            const long long rem = jc + W - j0;                                          \
            nc = rem >= 6 ? 6 : (rem == 5 ? 4 : rem);                                   \
            const T *xb = xq + j0, *wcq = wb;                                           \
            const long long ldw = bw;                                                   \
            SK_CTILE(S)                                                                 \
            for (long long cc = 0; cc < nc; ++cc)                                       \
                for (long long qv = 0; qv < qc; ++qv) {                                 \
                    const long long l0 = qv * L;                                        \
                    V y = acc[cc * qc + qv];                                            \
                    if (o.ep) {                                                         \
                        V rv = y;                                                       \
                        if (o.res) {                                                    \
                            T t_[sizeof(V) / sizeof(T)] = {0};                          \
                            for (long long l = 0; l < L && l0 + l < nr; ++l)            \
                                t_[l] = res[(i0 + l0 + l) * n + j0 + cc];               \
                            rv = *(const V *)t_;                                        \
                        }                                                               \
                        SK_EP(V, VI, y, *(const V *)(cv_ + l0), *(const V *)(cv_ + bw + l0), \
                              *(const V *)(cv_ + 2 * bw + l0), *(const V *)(cv_ + 3 * bw + l0), \
                              *(const V *)(cv_ + 4 * bw + l0), rv, &o)                  \
                    }                                                                   \
                    for (long long l = 0; l < L && l0 + l < nr; ++l) {                  \
                        const long long i = i0 + l0 + l;                                \
                        T *d = o.ep && E->dst                                           \
                                   ? (T *)E->dst + E->dst_row[img * E->channels + ch0 + i] * n \
                                   : c + i * n;                                         \
                        d[j0 + cc] = y[l];                                              \
                    }                                                                   \
                }                                                                       \
        }                                                                               \
    }

/* a tile of R rows from i over Q vectors: its rows' destinations and values, then the tile */
#define SK_TILE(T, S, R, Q)                                                             \
    {                                                                                   \
        for (int r = 0; r < (R); ++r) {                                                 \
            const long long ch = ch0 + i + r;                                           \
            o.dd[r] = o.ep && E->dst ? (T *)E->dst + E->dst_row[img * E->channels + ch] * n \
                                     : c + (i + r) * n;                                 \
            o.rr[r] = res ? res + (i + r) * n : NULL;                                   \
            if (o.bias) o.bb[r] = ((const T *)E->bias)[ch];                             \
            if (o.bn) {                                                                 \
                o.bm[r] = ((const T *)E->mean)[ch];                                     \
                o.bd[r] = ((const T *)E->den)[ch];                                      \
                o.bg[r] = ((const T *)E->scale)[ch];                                    \
                o.bt[r] = ((const T *)E->beta)[ch];                                     \
            }                                                                           \
        }                                                                               \
        sk_tile_##R##_##Q##_##S(wb + (i - i0), bw, pb, ldp, k, &o);                     \
    }
#define SK_ROWS(T, S, Q)                                                                \
    {                                                                                   \
        long long i = i0;                                                               \
        for (; i + 6 <= i1; i += 6) SK_TILE(T, S, 6, Q)                                 \
        for (; i + 4 <= i1; i += 4) SK_TILE(T, S, 4, Q)                                 \
        for (; i + 2 <= i1; i += 2) SK_TILE(T, S, 2, Q)                                 \
        for (; i < i1; ++i) SK_TILE(T, S, 1, Q)                                         \
    }
#if MM_Q == 4
#define SK_PANEL(T, S)                                                                  \
    if (QP == 4) SK_ROWS(T, S, 4)                                                       \
    else if (QP == 3) SK_ROWS(T, S, 3)                                                  \
    else if (QP == 2) SK_ROWS(T, S, 2)                                                  \
    else SK_ROWS(T, S, 1)
#else
#define SK_PANEL(T, S)                                                                  \
    if (QP == 2) SK_ROWS(T, S, 2)                                                       \
    else SK_ROWS(T, S, 1)
#endif

/* columns [j0, j1) of batch entry q (image q / g, group q % g): panel by panel of JB columns,
 * every block of rows over a panel (x is read once, the weights, mg x k, stay in cache: by
 * blocks outside, a 128-channel conv of a 56x56 image read it twice, 1.06x MM_ROWS's time);
 * or, from j0 = nf, the columns past the whole vectors, block by block */
#define SK_UNIT(T, V, VI, S)                                                            \
    {                                                                                   \
        const long long L = CM_L(T, V), JB = MM_Q * L, k = J->k, n = J->n, mg = J->mg;  \
        const long long nf = n - n % L; /* columns in whole vectors */                  \
        const T *xq = (const T *)J->x + q * k * n; /* c = g * k input channels */       \
        const T *wg = (const T *)J->wp + (q % J->g) * k * J->mgp;                       \
        T *c = (T *)J->c + q * mg * n;                                                  \
        const ep_t *E = J->ep;                                                          \
        const T *res = E && E->res ? (const T *)E->res + q * mg * n : NULL;             \
        const long long img = E ? q / E->groups : 0, ch0 = E ? (q % E->groups) * mg : 0; \
        sk_out_##S o;                                                                   \
        o.ep = E != NULL; /* EP_ONE_R's ops only (sk_ep_ok) */                           \
        o.bias = o.ep && E->bias, o.bn = o.ep && E->mean, o.res = o.ep && res;          \
        o.res_first = E ? E->res_first : 0, o.relu = o.ep && E->relu;                   \
        for (long long jc = j0; jc < j1; jc += JB) {                                    \
            const long long W = j1 - jc < JB ? j1 - jc : JB;                            \
            for (long long b = 0; b < J->nblk; ++b) {                                   \
                const long long i0 = b * JB, i1 = i0 + JB < mg ? i0 + JB : mg;          \
                const long long bw = i1 - i0 < JB ? (i1 - i0 + L - 1) / L * L : JB;     \
                const T *wb = wg + i0 * k;                                              \
                if (j0 < nf) {                                                          \
                    const long long QP = W / L, ldp = n;                                \
                    const T *pb = xq + jc;                                              \
                    o.js = jc;                                                          \
                    SK_PANEL(T, S)                                                      \
                } else                                                                  \
                    SK_COLS(T, V, VI, S)                                                \
            }                                                                           \
        }                                                                               \
    }

static void sk_part(void *ctx) {
    sk_job *J = (sk_job *)ctx;
    const long long L = J->f32 ? CM_L(float, vmf32) : CM_L(double, vmf64);
    const long long nf = J->n - J->n % L;
    for (;;) {
        long long u = __atomic_fetch_add(&J->next, J->chunk, __ATOMIC_RELAXED);
        if (u >= J->units) return;
        const long long ue = u + J->chunk < J->units ? u + J->chunk : J->units;
        for (; u < ue; ++u) {
            const long long q = u / J->per, cu = u % J->per;
            const long long j0 = cu * J->uc < nf ? cu * J->uc : nf;
            const long long j1 = j0 < nf ? (j0 + J->uc < nf ? j0 + J->uc : nf) : J->n;
            if (J->f32) SK_UNIT(float, vmf32, sk_vi32, f32)
            else SK_UNIT(double, vmf64, sk_vi64, f64)
        }
    }
}

/* Whether a conv of mg channels per group, k = (c/g)*taps, onto a plane of n (nb images)
 * takes the short-k product (when its geometry reads the image in place, sk_in_place, and its
 * epilogue is EP_ONE_R's, sk_ep_ok); packed: its weights come packed. Measured per conv, one
 * thread, f32, Intel Xeon (AVX-512), the weights packed, against MM_ROWS (n >= 64) or the
 * small-plane product (n < 64): shufflenet's grouped convs (mg = 28-136, k = 6-136)
 * 0.62-0.93x the time, squeezenet's and inception_v1's 1x1 convs of mg * k < 16384
 * 0.76-0.99x, resnet50's 64 -> 64 at 56x56 0.85x; planes below 64 (4x4 to 7x7, mg = 136-512,
 * k = 64-256) 0.74-0.99x; but from mg * k = 16384 up on larger planes (resnet50's 64 -> 256
 * at 56x56 and 256 -> 1024 at 14x14, with a residual) 1.03-1.05x: their k-loops are long
 * enough for MM_ROWS's blocks. Packing the weights per call (the tape) costs as much as ~25
 * columns' product: from 512 columns of all the images up. With AVX2 (TAPESCOPE_ISA=avx2,
 * 16-column tiles) the same convs measured 0.67-0.95x on the planes below 64 and for k >= 2 mg
 * (squeezenet's squeezes), 0.98-1.08x for shufflenet's k = mg (in the model) and 1.04-1.14x
 * for k < mg (squeezenet's expands, shufflenet's 24 -> 112); without AVX (TAPESCOPE_ISA=c)
 * 0.84-0.94x and 1.04-1.07x for the same: there it takes k >= 2 mg only. */
#if defined(__AVX512F__)
#define SK_KMG 0 /* k >= SK_KMG * mg on planes of 64 and more */
#else
#define SK_KMG 2
#endif
static int sk_when(long long mg, long long n, long long k, long long taps, long long nb,
                   int packed) {
    return taps == 1 && k >= 1 && k <= SK_KMAX && mg >= 1 && n >= 1 &&
           (n < 64 || (mg * k < 16384 && k >= SK_KMG * mg)) && (packed || n * nb >= 512);
}

/* an epilogue of EP_ONE_R's ops (no Mul/Add pair, no residual with a copy to dst) */
static int sk_ep_ok(const ep_t *ep) {
    return !ep || (!ep->mul2 && !ep->add2 && !(ep->res && ep->dst));
}

/* a 1x1 conv whose image is its column matrix */
static int sk_in_place(const conv_t *cv) {
    return cv->kh == 1 && cv->kw == 1 && cv->sh == 1 && cv->sw == 1 && cv->ph == 0 &&
           cv->pw == 0 && cv->oh == cv->h && cv->ow == cv->w;
}

/* Whether a conv of mg channels per group, k = (c/g)*taps, onto a plane of n (nb images) takes
 * the small-plane product; packed: its weights come packed (else they are packed per call).
 * Measured per conv of resnet50, inception_v2, densenet121 and squeezenet and on resnet18's
 * 8x8 and 16x16 planes (one thread, f32): below one whole panel (n < 64) it is 0.4-0.9x the
 * time of MM_ROWS's narrow tiles (all of them: 47 -> 24 ms over those models' convs); on planes
 * of 64-256, 0.75-0.97x for 3x3 convs of mg >= 32 and 0.8-1.0x for 1x1 ones with k >= 256 and
 * a tail past the panels, but 1.1-1.25x for 1x1 convs on whole panels (n = 64, 256) or of a
 * short k (squeezenet's 48, 64 -> 192, 256 at 13x13): MM_ROWS reads a 1x1 conv's image in
 * place, here it is packed for too few multiply-adds. Packing the weights per call costs
 * ~0.5 ns an element (memory-bound: the weight read, the pack written and read again), as much
 * as ~40 columns' product: the tape (no cache) takes this path below one panel from 48
 * columns of all its images up, for 1x1 convs from 384 channels (resnet18's n = 4 and 16 at
 * batch 2: 1.2-1.5x; n = 49: 0.6-0.8x for 3x3 convs and 1x1 ones of mg >= 512, 1.0-1.1x for
 * 1x1 ones of mg = 128-352; from one panel up the gain is the pack's cost). */
static int cm_when_cm(long long mg, long long n, long long k, long long taps, long long nb,
                      int packed, int f32) {
    const long long L = f32 ? CM_L(float, vmf32) : CM_L(double, vmf64);
    if (n > CM_NMAX || mg < L || k < 8 ||
        (!packed && (n >= 64 || n * nb < 48 || (taps == 1 && mg < 384))))
        return 0;
    return n < 64 || (taps > 1 ? mg >= 32 : n % 64 != 0 && k >= 256);
}

/* the short-k product's shapes too (conv_cm takes them when the geometry reads in place, and
 * gives the rest back to the caller) */
static int cm_when(long long mg, long long n, long long k, long long taps, long long nb,
                   int packed, int f32) {
    return sk_when(mg, n, k, taps, nb, packed) || cm_when_cm(mg, n, k, taps, nb, packed, f32);
}

/* The conv through the small-plane product, wp packed already (or NULL: packed here from wt);
 * 0 when its buffers cannot be had (nothing written: the caller runs the packed conv). */
/* The calling thread's grow-only buffers for xp and a per-call wp, up to CM_KEEP bytes each
 * (larger ones are malloc'd and freed per call), freed when the thread exits: a malloc of a
 * megabyte or more is an mmap whose pages all fault in again on every call (~0.5 us a 4 KiB
 * page: the tape's weight pack of a 512x512x3x3 conv took 1.1 ms of faults alone). */
#define CM_KEEP (64LL << 20)
#define CM_XP (32LL << 20)
typedef struct {
    void *p[2];
    size_t n[2];
} cm_keep_t;
static pthread_key_t cm_key;
static pthread_once_t cm_key_once = PTHREAD_ONCE_INIT;
static void cm_keep_free(void *v) {
    cm_keep_t *kp = (cm_keep_t *)v;
    free(kp->p[0]);
    free(kp->p[1]);
    free(kp);
}
static void cm_key_init(void) {
    if (pthread_key_create(&cm_key, cm_keep_free) != 0) cm_key = (pthread_key_t)-1;
}
/* buffer i of at least `bytes`, or NULL; *own: the caller frees it */
static void *cm_scratch(int i, size_t bytes, int *own) {
    *own = 0;
    pthread_once(&cm_key_once, cm_key_init);
    cm_keep_t *kp = cm_key == (pthread_key_t)-1 ? NULL : (cm_keep_t *)pthread_getspecific(cm_key);
    if (!kp && cm_key != (pthread_key_t)-1 && (kp = (cm_keep_t *)calloc(1, sizeof(*kp))) &&
        pthread_setspecific(cm_key, kp) != 0) {
        free(kp);
        kp = NULL;
    }
    if (!kp || bytes > (size_t)CM_KEEP) {
        *own = 1;
        return malloc(bytes);
    }
    if (kp->n[i] < bytes) {
        free(kp->p[i]);
        kp->p[i] = malloc(bytes);
        kp->n[i] = kp->p[i] ? bytes : 0;
    }
    return kp->p[i];
}

void ts_conv_cm_pack(const void *w, void *wp, long long g, long long mg, long long k, int f32,
                     int threads);

/* The short-k product, wp packed already (or NULL: packed here from wt); 0 when the pack's
 * buffer cannot be had (nothing written) */
static int conv_sk(const void *x, const void *wt, const void *wp, void *out, long long nb,
                   const conv_t *cv, long long mg, long long k, int threads, int f32,
                   const ep_t *ep) {
    const long long n = cv->oh * cv->ow, nq = nb * cv->g, work = nq * mg * n * k;
    const long long L = f32 ? CM_L(float, vmf32) : CM_L(double, vmf64);
    int own = 0;
    if (!wp) {
        void *p = cm_scratch(1, (size_t)cm_wp_size(cv->g, mg, k, f32) * (f32 ? 4 : 8), &own);
        if (!p) return 0;
        ts_conv_cm_pack(wt, p, cv->g, mg, k, f32, threads);
        wp = p;
    }
    sk_job J = {.x = x, .wp = wp, .c = out, .ep = ep, .g = cv->g, .mg = mg, .k = k, .n = n,
                .mgp = (mg + L - 1) / L * L, .nblk = (mg + MM_Q * L - 1) / (MM_Q * L),
                .f32 = f32};
    long long t = threads < 1 ? 1 : (threads > MAX_THREADS ? MAX_THREADS : threads);
    if (t > work / MIN_WORK_PER_THREAD) t = work / MIN_WORK_PER_THREAD;
    if (t < 1) t = 1;
    /* a batch entry's whole-vector columns in chunks of whole panels, at least two units a
     * thread where the columns allow, then one unit for the columns past them */
    const long long JB = MM_Q * L, nf = n - n % L, np = (nf + JB - 1) / JB;
    long long nch = (2 * t + nq - 1) / nq;
    nch = nch < 1 ? 1 : (nch > np ? np : nch);
    J.uc = np > 0 ? (np + nch - 1) / nch * JB : JB;
    J.per = (nf + J.uc - 1) / J.uc + (nf < n);
    J.units = nq * J.per;
    if (t > J.units) t = J.units;
    const long long chunk = t == 1 ? J.units : J.units / (t * 8);
    J.chunk = chunk < 1 ? 1 : chunk;
    pool_run(sk_part, &J, (int)t);
    if (own) free((void *)wp);
    return 1;
}

/* The conv through the small-plane product, wp packed already (or NULL: packed here from wt);
 * 0 when its buffers cannot be had (nothing written: the caller runs the packed conv). */
static int conv_cm(const void *x, const void *wt, const void *wp, void *out, long long nb,
                   const conv_t *cv, long long mg, long long k, int threads, int f32,
                   const ep_t *ep) {
    if (sk_when(mg, cv->oh * cv->ow, k, cv->kh * cv->kw, nb, wp != NULL) && sk_in_place(cv) &&
        sk_ep_ok(ep))
        return conv_sk(x, wt, wp, out, nb, cv, mg, k, threads, f32, ep);
    if (!cm_when_cm(mg, cv->oh * cv->ow, k, cv->kh * cv->kw, nb, wp != NULL, f32)) return 0;
    const long long n = cv->oh * cv->ow, ntile = (n + CM_NC - 1) / CM_NC;
    const long long L = f32 ? CM_L(float, vmf32) : CM_L(double, vmf64);
    const size_t sz = f32 ? sizeof(float) : sizeof(double);
    const long long nbq = nb * cv->g, nblk = (mg + MM_Q * L - 1) / (MM_Q * L);
    cm_job J = {.x = x, .w = wt, .wp = (void *)wp, .c = out, .cv = cv, .ep = ep, .mg = mg,
                .k = k, .n = n, .np = ntile * CM_NC, .mgp = (mg + L - 1) / L * L, .nblk = nblk,
                .ntile = ntile, .f32 = f32};
    /* the batch entries CM_XP bytes of xp at a time (a large batch's xp, taps times the
     * images, is not made at once) */
    const size_t per_q = (size_t)(ntile * CM_NC * k) * sz;
    long long qc = (long long)(CM_XP / per_q);
    qc = qc < 1 ? 1 : (qc > nbq ? nbq : qc);
    int own_x = 0, own_w = 0;
    J.xp = cm_scratch(0, (size_t)qc * per_q, &own_x);
    if (!wp) J.wp = cm_scratch(1, (size_t)cm_wp_size(cv->g, mg, k, f32) * sz, &own_w);
    for (J.q0 = 0; J.xp && J.wp && J.q0 < nbq; J.q0 += qc) {
        const long long nq = qc < nbq - J.q0 ? qc : nbq - J.q0;
        J.upack = nq * ((k + CM_KC - 1) / CM_KC);
        J.uw = wp || J.q0 > 0 ? 0 : cv->g * nblk;
        cm_run(&J, J.upack + J.uw, nq * k * n + J.uw * k * MM_Q * L, threads);
        J.upack = J.uw = 0;
        cm_run(&J, nq * ((nblk + CM_UB - 1) / CM_UB), nq * mg * n * k, threads);
    }
    const int done = J.xp && J.wp;
    if (own_x) free(J.xp);
    if (own_w) free(J.wp);
    return done;
}

/* For a caller that keeps the packed weights (the ONNX plan): their size in elements when a
 * conv of mg channels per group, k = (c/g)*taps, onto a plane of n takes the small-plane
 * product with them, else 0 */
long long ts_conv_cm_wsize(long long g, long long mg, long long k, long long taps, long long n,
                           int f32) {
    return cm_when(mg, n, k, taps, 1, 1, f32) ? cm_wp_size(g, mg, k, f32) : 0;
}

/* wp (ts_conv_cm_wsize elements) from w (g, mg, k) */
void ts_conv_cm_pack(const void *w, void *wp, long long g, long long mg, long long k, int f32,
                     int threads) {
    const long long L = f32 ? CM_L(float, vmf32) : CM_L(double, vmf64);
    const long long nblk = (mg + MM_Q * L - 1) / (MM_Q * L);
    cm_job J = {.w = w, .wp = wp, .mg = mg, .k = k, .mgp = (mg + L - 1) / L * L, .nblk = nblk,
                .uw = g * nblk, .f32 = f32};
    cm_run(&J, J.uw, J.uw * k * MM_Q * L, threads);
}
