/* The direct conv with one output channel per group (depthwise), its vector lanes over the
 * groups: included by refkernels.c before its CONV_MG1 dispatch (its vector types
 * vmf32/vmf64, ep_t and the ep_rows_* epilogues).
 *
 * CONV_MG1_FAST puts an output plane's positions in the lanes: a 7x7 plane's 49 outputs filled
 * 49 of 64 lanes, and every plane paid its own padded copy, its store and its epilogue call
 * (shufflenet's depthwise convs ran at 3-19 GFLOP/s, issue 49). Here a block of L = (lanes a
 * vector) groups of one image is copied once into a zero-padded, channel-interleaved buffer
 * xb[ci][Y][X][L] (Y, X over the padded region the windows cover), so that tap (ci, u, v) of
 * output (r, s) is ONE vector load at xb[ci][r*sh + u*dh][s*sw + v*dw][0..L), a lane per
 * group. Each lane of each accumulator is one output's chain: acc = +0.0; for (ci, u, v) in
 * row-major order: acc = acc + w*x, the product rounded, then the add (-ffp-contract=off),
 * padding taps as w * +0.0 (not skipped: w * 0.0 is -0.0 or NaN for some w); the weights are
 * interleaved the same way, wb[t][L], +0.0 in the lanes past the last group. The lanes only
 * say which chains run side by side, so the bits are those of CONV_MG1_PLANES (and of im2col
 * + the reference product). The epilogue's bias, BatchNorm and Relu run on the finished
 * accumulators, a lane per channel (DW_EP: EP_ONE's ops in its order); the block (ob[position]
 * [L]) is then written back to its L output planes, which lie one after another in NCHW (or to
 * the shuffle's dst rows). An epilogue with a residual or a Mul/Add pair runs after, on those
 * rows (EPF). Copies change no bits.
 *
 * Returns 0 (the caller runs CONV_MG1_FAST or the plain loop) when the padded region is far
 * larger than the image and the output (hostile strides, pads or dilations; checked in
 * doubles before any size is computed), or without memory. One thread, as the entry before.
 * The 2-D pools' planes go the same way (POOL_DW, at the end). */

#ifndef CONV_DW_ON /* -DCONV_DW_ON=0: the lanes over positions only (benchmarks) */
#define CONV_DW_ON 1
#endif
/* Where the lanes over channels are quicker than CONV_MG1_FAST's over positions (float32, 3x3,
 * Intel Xeon AVX-512, us a call, position lanes -> channel lanes, with BatchNorm): 7x7 x 544
 * 58 -> 29, 14x14 x 272 61 -> 41, 28x28 x 136 98 -> 87, 56x56 x 64 204 -> 176, 112x112 x 32
 * 498 -> 440, stride 2 onto 7x7 x 272 63 -> 21, onto 28x28 x 112 155 -> 112. The copies in and
 * out (transposes) cost about what the taps do; what pays for them on wide planes is the
 * epilogue in registers, its divisions overlapping the products. Without a fusable epilogue
 * wide stride-1 rows fill the position lanes well and stay there (56x56 x 64 146 -> 160,
 * 112x112 x 32 349 -> 426 here). AVX2 alike. */
#ifndef DW_WHEN
#define DW_WHEN (fuse || sh > 1 || sw > 1 || ow <= 32)
#endif
/* Two lanes (float64 on the SSE path: TAPESCOPE_ISA=c) do not pay for the copies: shufflenet's
 * depthwise convs (float64, us a run) 2,398 -> 2,493 with them. */
#define DW_LMIN 4
/* the most elements the interleaved buffers (a block's padded images and outputs) may hold,
 * 32 MiB of float32: L planes' worth, so planes past about 500 x 500 stay with the phase
 * planes, which copy one plane at a time */
#define DW_MAXBUF 8388608.0
#define DW_SB 8 /* output positions a tile (DW_TILES: 8 accumulators, of 16 registers with AVX2) */

/* In-register transposes of L x L (L vectors of L lanes: r[i][j] <- r[j][i]), for the copies
 * into and out of the interleaved layout; shuffles only, so exact. Stage d swaps bit d of the
 * row index with bit d of the lane index (pairs of rows i, i + d); after every bit, the
 * transpose. The masks are constants, so gcc picks the ISA's shuffles (AVX-512: vpermt2ps). */
#if defined(__AVX512F__)
#define DW_L32 16
#define DW_L64 8
#elif defined(__AVX__)
#define DW_L32 8
#define DW_L64 4
#else
#define DW_L32 4
#define DW_L64 2
#endif
#define DW_LIST2(F, d, L) F(0, d, L), F(1, d, L)
#define DW_LIST4(F, d, L) DW_LIST2(F, d, L), F(2, d, L), F(3, d, L)
#define DW_LIST8(F, d, L) DW_LIST4(F, d, L), F(4, d, L), F(5, d, L), F(6, d, L), F(7, d, L)
#define DW_LIST16(F, d, L)                                                              \
    DW_LIST8(F, d, L), F(8, d, L), F(9, d, L), F(10, d, L), F(11, d, L), F(12, d, L),  \
        F(13, d, L), F(14, d, L), F(15, d, L)
#define DW_LIST_(n, F, d, L) DW_LIST##n(F, d, L)
#define DW_LIST(n, F, d, L) DW_LIST_(n, F, d, L)
#define DW_LO(j, d, L) (((j) & (d)) ? (L) + (j) - (d) : (j))
#define DW_HI(j, d, L) (((j) & (d)) ? (L) + (j) : (j) + (d))
#define DW_STAGE(V, VI, L, d)                                                           \
    _Pragma("GCC unroll 16") for (int i_ = 0; i_ < (L); ++i_) if (!(i_ & (d))) {       \
        const V a_ = r[i_], b_ = r[(i_ + (d)) % (L)];                                   \
        r[i_] = __builtin_shuffle(a_, b_, (VI){DW_LIST(L, DW_LO, d, L)});               \
        r[(i_ + (d)) % (L)] = __builtin_shuffle(a_, b_, (VI){DW_LIST(L, DW_HI, d, L)}); \
    }
#define DW_TRANSPOSE_FN(NAME, V, VI, L)                                                 \
    static inline __attribute__((always_inline)) void NAME(V *r) {                      \
        if ((L) > 8) DW_STAGE(V, VI, L, 8)                                              \
        if ((L) > 4) DW_STAGE(V, VI, L, 4)                                              \
        if ((L) > 2) DW_STAGE(V, VI, L, 2)                                              \
        DW_STAGE(V, VI, L, 1)                                                           \
    }
typedef int dw_vi32 __attribute__((vector_size(sizeof(vmf32))));
typedef long long dw_vi64 __attribute__((vector_size(sizeof(vmf64))));
DW_TRANSPOSE_FN(dw_tr_f32, vmf32, dw_vi32, DW_L32)
DW_TRANSPOSE_FN(dw_tr_f64, vmf64, dw_vi64, DW_L64)

#define CONV_DW(T, V, VI, TR, EPF)                                                      \
    enum { L = (int)(sizeof(V) / sizeof(T)) };                                          \
    /* the epilogue in the lanes (DW_EP) unless it has a residual or a Mul/Add pair */   \
    const int fuse = ep && !ep->res && !ep->mul2 && !ep->add2;                          \
    if (L < DW_LMIN || nb <= 0 || g <= 0 || oh <= 0 || ow <= 0 || !DW_WHEN) return 0;   \
    const long long cgc = c / g, ntap = cgc * kh * kw;                                  \
    if (cgc < 1) return 0;                                                              \
    {                                                                                   \
        const double hp = (oh - 1.0) * (double)sh + (kh - 1.0) * (double)dh + 1.0;     \
        const double wpd = (ow - 1.0) * (double)sw + (kw - 1.0) * (double)dw + 1.0;    \
        if ((double)cgc * hp * wpd > 4.0 * ((double)cgc * (double)h * (double)wd +      \
                                            (double)oh * (double)ow) + 4096.0 ||        \
            ((double)cgc * hp * wpd + (double)oh * (double)ow) * (double)L > DW_MAXBUF || \
            (double)ntap * (double)L > 65536.0)                                         \
            return 0;                                                                   \
    }                                                                                   \
    const long long Hp = (oh - 1) * sh + (kh - 1) * dh + 1;                             \
    const long long Wp = (ow - 1) * sw + (kw - 1) * dw + 1;                             \
    const long long npl = Hp * Wp, P = oh * ow;                                         \
    /* the image rows and columns inside the padded region: Y = iy + ph in [0, Hp) */    \
    const long long y0 = ph > 0 ? 0 : -ph, y1 = h < Hp - ph ? h : Hp - ph;              \
    const long long x0 = pw > 0 ? 0 : -pw, x1 = wd < Wp - pw ? wd : Wp - pw;            \
    T *xb = NULL;                                                                       \
    const size_t nxb = (size_t)(cgc * npl * L), nwb = (size_t)(ntap * L), nob = (size_t)(P * L); \
    if (posix_memalign((void **)&xb, 64, (nxb + nwb + nob) * sizeof(T)) != 0) return 0; \
    /* +0.0 everywhere: the padding cells stay so (every block writes the same cells) */ \
    memset(xb, 0, (nxb + nwb + nob) * sizeof(T));                                       \
    T *wb = xb + nxb, *ob = wb + nwb;                                                   \
    long long *toff = (long long *)malloc((size_t)ntap * sizeof(long long));            \
    if (!toff) {                                                                        \
        free(xb);                                                                       \
        return 0;                                                                       \
    }                                                                                   \
    for (long long ci = 0, t = 0; ci < cgc; ++ci)                                       \
        for (long long u = 0; u < kh; ++u)                                              \
            for (long long v = 0; v < kw; ++v, ++t)                                     \
                toff[t] = (ci * npl + u * dh * Wp + v * dw) * L;                        \
    const int e_bias = fuse && ep->bias, e_bn = fuse && ep->mean, e_relu = fuse && ep->relu; \
    V e_b = {0}, e_m = {0}, e_d = {0}, e_g = {0}, e_t = {0};                            \
    for (long long n = 0; n < nb; ++n)                                                  \
        for (long long c0 = 0; c0 < g; c0 += L) {                                       \
            const long long nl = g - c0 < L ? g - c0 : L;                               \
            /* the block's per-channel operands (lanes past nl: 0, and 1 for den) */    \
            for (long long l = 0; l < L; ++l) {                                         \
                const long long ch = c0 + (l < nl ? l : 0);                             \
                e_b[l] = e_bias && l < nl ? ((const T *)ep->bias)[ch] : (T)0;           \
                e_m[l] = e_bn && l < nl ? ((const T *)ep->mean)[ch] : (T)0;             \
                e_d[l] = e_bn && l < nl ? ((const T *)ep->den)[ch] : (T)1;              \
                e_g[l] = e_bn && l < nl ? ((const T *)ep->scale)[ch] : (T)1;            \
                e_t[l] = e_bn && l < nl ? ((const T *)ep->beta)[ch] : (T)0;             \
            }                                                                           \
            /* the block's weights, interleaved; +0.0 past the last group */            \
            for (long long l = 0; l < L; ++l)                                           \
                for (long long t = 0; t < ntap; ++t)                                    \
                    wb[t * L + l] = l < nl ? wt[(c0 + l) * ntap + t] : (T)0;            \
            /* the block's images, interleaved (lanes past nl copy the last group's:   \
             * computed, never stored) */                                               \
            for (long long ci = 0; ci < cgc; ++ci) {                                    \
                const T *xl[L];                                                         \
                for (long long l = 0; l < L; ++l)                                       \
                    xl[l] = x + (n * c + (c0 + (l < nl ? l : nl - 1)) * cgc + ci) * h * wd; \
                T *xd = xb + ci * npl * L;                                              \
                DW_COPY_IN(T, V, TR)                                                    \
            }                                                                           \
            DW_TILES(T, V, VI)                                                          \
            /* back to the block's output planes (or, fused, the rows of the shuffle's  \
             * dst), then the epilogue if not fused */                                 \
            DW_COPY_OUT(T, V, TR)                                                       \
            if (ep && !fuse)                                                            \
                EPF(ep, o, ep->res ? (const T *)ep->res + (n * g + c0) * P : NULL, n, c0, nl, P); \
        }                                                                               \
    free(toff);                                                                         \
    free(xb);                                                                           \
    return 1;

/* The block's L planes xl[l] of channel ci into xd[Y][X][L]: L positions at a time, one
 * vector from each plane, transposed, each result vector one position's L lanes. The whole
 * image inside the region (the usual case): its flattened plane, the last L positions
 * overlapping the ones before (the same values written again); else row by row, the rows'
 * ends (and planes or rows narrower than L) one element at a time. */
#define DW_COPY_IN(T, V, TR)                                                            \
    if (y0 == 0 && y1 == h && x0 == 0 && x1 == wd && h * wd >= L) {                     \
        const long long hw = h * wd;                                                    \
        for (long long p0 = 0; p0 < hw; p0 += L) {                                      \
            const long long p = p0 + L <= hw ? p0 : hw - L;                             \
            V r[L];                                                                     \
            for (long long l = 0; l < L; ++l) r[l] = *(const V *)(xl[l] + p);           \
            TR(r);                                                                      \
            long long iy = p / wd, ix = p % wd;                                         \
            for (long long j = 0; j < L; ++j) {                                         \
                *(V *)(xd + ((iy + ph) * Wp + ix + pw) * L) = r[j];                     \
                if (++ix == wd) ix = 0, ++iy;                                           \
            }                                                                           \
        }                                                                               \
    } else                                                                              \
        for (long long iy = y0; iy < y1; ++iy) {                                        \
            T *dr = xd + ((iy + ph) * Wp + pw) * L;                                     \
            long long ix = x0;                                                          \
            for (; ix + L <= x1; ix += L) {                                             \
                V r[L];                                                                 \
                for (long long l = 0; l < L; ++l) r[l] = *(const V *)(xl[l] + iy * wd + ix); \
                TR(r);                                                                  \
                for (long long j = 0; j < L; ++j) *(V *)(dr + (ix + j) * L) = r[j];     \
            }                                                                           \
            for (; ix < x1; ++ix)                                                       \
                for (long long l = 0; l < L; ++l) dr[ix * L + l] = xl[l][iy * wd + ix]; \
        }

/* ob[p][L] back to the block's nl output planes o[l][p], L positions at a time (the last L
 * overlapping), transposed; fewer than L positions one element at a time */
#define DW_COPY_OUT(T, V, TR)                                                           \
    T *o = out + (n * g + c0) * P;                                                      \
    T *dl[L];                                                                           \
    for (long long l = 0; l < nl; ++l)                                                  \
        dl[l] = fuse && ep->dst ? (T *)ep->dst + ep->dst_row[n * ep->channels + c0 + l] * P \
                                : o + l * P;                                            \
    if (P >= L)                                                                         \
        for (long long p0 = 0; p0 < P; p0 += L) {                                       \
            const long long p = p0 + L <= P ? p0 : P - L;                               \
            V r[L];                                                                     \
            for (long long j = 0; j < L; ++j) r[j] = *(const V *)(ob + (p + j) * L);    \
            TR(r);                                                                      \
            for (long long l = 0; l < nl; ++l) *(V *)(dl[l] + p) = r[l];                \
        }                                                                               \
    else                                                                                \
        for (long long l = 0; l < nl; ++l)                                              \
            for (long long p = 0; p < P; ++p) dl[l][p] = ob[p * L + l];

/* The epilogue on a tile's finished accumulators, each lane its channel's operands: EP_ONE's
 * ops, each its own rounding, in its order (bias; BatchNorm's y - mean, / den, * scale,
 * + beta; Relu: y <= 0 gives +0.0, NaN stays). Done while the tile is in registers, so the
 * divisions overlap the next tile's products (shufflenet's BatchNorm after every depthwise
 * conv: its pass, mostly divisions, took ~11 us of a 14x14 x 272 conv's ~50). */
#define DW_EP8(OP)                                                                      \
    {                                                                                   \
        OP(a0) OP(a1) OP(a2) OP(a3) OP(a4) OP(a5) OP(a6) OP(a7)                         \
    }
#define DW_EP_BIAS(a) a = a + e_b;
#define DW_EP_SUB(a) a = a - e_m;
#define DW_EP_DIV(a) a = a / e_d;
#define DW_EP_MUL(a) a = a * e_g;
#define DW_EP_ADD(a) a = a + e_t;
#define DW_EP_RELU(a) a = (__typeof__(a))((__typeof__(a <= e_z))a & ~(a <= e_z));
#define DW_EP(T, V, VI)                                                                 \
    {                                                                                   \
        if (e_bias) DW_EP8(DW_EP_BIAS)                                                  \
        if (e_bn) {                                                                     \
            DW_EP8(DW_EP_SUB)                                                           \
            DW_EP8(DW_EP_DIV)                                                           \
            DW_EP8(DW_EP_MUL)                                                           \
            DW_EP8(DW_EP_ADD)                                                           \
        }                                                                               \
        if (e_relu) {                                                                   \
            const V e_z = {0};                                                          \
            DW_EP8(DW_EP_RELU)                                                          \
        }                                                                               \
    }

/* the tile's DW_SB positions q[j] from p (the last tile repeats P - 1) and where their
 * windows start in xb, xs[j]; (r_, s_) is output position p: no division per tile */
#define DW_POSITIONS(T)                                                                 \
    const T *xs[DW_SB];                                                                 \
    long long q[DW_SB];                                                                 \
    for (int j = 0; j < DW_SB; ++j) {                                                   \
        if (p + j < P) {                                                                \
            q[j] = p + j;                                                               \
            xs[j] = xb + (r_ * sh * Wp + s_ * sw) * L;                                  \
            if (++s_ == ow) s_ = 0, ++r_;                                               \
        } else {                                                                        \
            q[j] = q[j - 1];                                                            \
            xs[j] = xs[j - 1];                                                          \
        }                                                                               \
    }

/* every output position of the block, DW_SB at a time in row-major order (rows may change
 * inside a tile; the last tile repeats the last position, which computes and stores the same
 * value again), each tap one weight vector and one input vector per position: tap t's input
 * for output (r, s) lies toff[t] past xb[r*sh][s*sw] */
#define DW_TILES(T, V, VI)                                                              \
    for (long long p = 0, r_ = 0, s_ = 0; p < P; p += DW_SB) {                          \
        DW_POSITIONS(T)                                                                 \
        V a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}, a4 = {0}, a5 = {0}, a6 = {0}, a7 = {0}; \
        const T *x0_ = xs[0], *x1_ = xs[1], *x2_ = xs[2], *x3_ = xs[3];                  \
        const T *x4_ = xs[4], *x5_ = xs[5], *x6_ = xs[6], *x7_ = xs[7];                  \
        for (long long t = 0; t < ntap; ++t) {                                          \
            const V wv = *(const V *)(wb + t * L);                                      \
            const long long o_ = toff[t];                                               \
            V p0 = wv * *(const V *)(x0_ + o_), p1 = wv * *(const V *)(x1_ + o_);       \
            V p2 = wv * *(const V *)(x2_ + o_), p3 = wv * *(const V *)(x3_ + o_);       \
            V p4 = wv * *(const V *)(x4_ + o_), p5 = wv * *(const V *)(x5_ + o_);       \
            V p6 = wv * *(const V *)(x6_ + o_), p7 = wv * *(const V *)(x7_ + o_);       \
            a0 = a0 + p0;                                                               \
            a1 = a1 + p1;                                                               \
            a2 = a2 + p2;                                                               \
            a3 = a3 + p3;                                                               \
            a4 = a4 + p4;                                                               \
            a5 = a5 + p5;                                                               \
            a6 = a6 + p6;                                                               \
            a7 = a7 + p7;                                                               \
        }                                                                               \
        if (fuse) DW_EP(T, V, VI)                                                       \
        *(V *)(ob + q[0] * L) = a0;                                                     \
        *(V *)(ob + q[1] * L) = a1;                                                     \
        *(V *)(ob + q[2] * L) = a2;                                                     \
        *(V *)(ob + q[3] * L) = a3;                                                     \
        *(V *)(ob + q[4] * L) = a4;                                                     \
        *(V *)(ob + q[5] * L) = a5;                                                     \
        *(V *)(ob + q[6] * L) = a6;                                                     \
        *(V *)(ob + q[7] * L) = a7;                                                     \
    }

static int conv_dw_f64(const double *x, const double *wt, double *out, long long nb,
                       long long c, long long h, long long wd, long long g, long long kh,
                       long long kw, long long oh, long long ow, long long sh, long long sw,
                       long long ph, long long pw, long long dh, long long dw,
                       const ep_t *ep) {
    CONV_DW(double, vmf64, dw_vi64, dw_tr_f64, ep_rows_f64)
}

static int conv_dw_f32(const float *x, const float *wt, float *out, long long nb,
                       long long c, long long h, long long wd, long long g, long long kh,
                       long long kw, long long oh, long long ow, long long sh, long long sw,
                       long long ph, long long pw, long long dh, long long dw,
                       const ep_t *ep) {
    CONV_DW(float, vmf32, dw_vi32, dw_tr_f32, ep_rows_f32)
}


/* 2-D pools (refkernels' POOL2D) the same way: L planes side by side in the lanes, copied once
 * into xb[Y][X][L] with the padding ID (+0.0 for an average, -inf for a max: both change no
 * accumulator, as in POOL_PHASE, whose chains these are: acc = ID; acc = OP(acc, tap) over the
 * window's taps (u, v) in row-major order, padding included; an average's y = acc / cnt[r*ow +
 * s], the caller's divisor, broadcast over the lanes). OP: the add, or np.maximum(acc, t) =
 * (acc > t or acc is NaN) ? acc : t. POOL_PHASE ran each plane on its own, with its copy into
 * phase planes, its tiles over a few dozen outputs and its stores: shufflenet's 3x3 stride-2
 * AveragePools onto 28x28 x 24, 14x14 x 136 and 7x7 x 272 took 70, 98 and 73 us. Returns 0
 * (the caller runs the other shapes) for fewer than L planes, a padded region far larger than
 * the image and the output, or without memory. */
#define DW_POOL_OP(V, VI, AVG, a, t)                                                    \
    if (AVG)                                                                            \
        a = a + (t);                                                                    \
    else {                                                                              \
        const V t_ = (t);                                                               \
        const VI m_ = (a > t_) | (a != a);                                              \
        a = (V)(((VI)a & m_) | ((VI)t_ & ~m_));                                         \
    }
#define POOL_DW(T, V, VI, TR, AVG, ID)                                                  \
    enum { L = (int)(sizeof(V) / sizeof(T)) };                                          \
    const long long wd = w;                                                             \
    if (L < DW_LMIN || planes < L || oh <= 0 || ow <= 0 || ph < 0 || pw < 0) return 0;  \
    {                                                                                   \
        const double hp = (oh - 1.0) * (double)sh + (kh - 1.0) * (double)dh + 1.0;      \
        const double wpd = (ow - 1.0) * (double)sw + (kw - 1.0) * (double)dw + 1.0;     \
        if (hp * wpd > 4.0 * ((double)h * (double)wd + (double)oh * (double)ow) + 4096.0 || \
            (hp * wpd + (double)oh * (double)ow) * (double)L > DW_MAXBUF ||             \
            (double)kh * (double)kw > 65536.0)                                          \
            return 0;                                                                   \
    }                                                                                   \
    const long long Hp = (oh - 1) * sh + (kh - 1) * dh + 1;                             \
    const long long Wp = (ow - 1) * sw + (kw - 1) * dw + 1;                             \
    const long long npl = Hp * Wp, P = oh * ow, ntap = kh * kw;                         \
    const long long y0 = 0, y1 = h < Hp - ph ? h : Hp - ph;                             \
    const long long x0 = 0, x1 = wd < Wp - pw ? wd : Wp - pw;                           \
    T *xb = NULL;                                                                       \
    if (posix_memalign((void **)&xb, 64, (size_t)((npl + P) * L) * sizeof(T)) != 0) return 0; \
    long long *toff = (long long *)malloc((size_t)ntap * sizeof(long long));            \
    if (!toff) {                                                                        \
        free(xb);                                                                       \
        return 0;                                                                       \
    }                                                                                   \
    for (long long i = 0; i < (npl + P) * L; ++i) xb[i] = (ID);                         \
    T *ob = xb + npl * L;                                                               \
    for (long long u = 0, t = 0; u < kh; ++u)                                           \
        for (long long v = 0; v < kw; ++v, ++t) toff[t] = (u * dh * Wp + v * dw) * L;   \
    const int fuse = 0; /* (DW_COPY_OUT: no epilogue) */                                \
    const ep_t *ep = NULL;                                                              \
    const long long n = 0, g = planes;                                                  \
    T *out = y;                                                                         \
    V idv;                                                                              \
    for (long long l = 0; l < L; ++l) idv[l] = (ID);                                    \
    for (long long c0 = 0; c0 < planes; c0 += L) {                                      \
        const long long nl = planes - c0 < L ? planes - c0 : L;                         \
        const T *xl[L];                                                                 \
        for (long long l = 0; l < L; ++l) xl[l] = x + (c0 + (l < nl ? l : nl - 1)) * h * wd; \
        T *xd = xb;                                                                     \
        DW_COPY_IN(T, V, TR)                                                            \
        for (long long p = 0, r_ = 0, s_ = 0; p < P; p += DW_SB) {                      \
            DW_POSITIONS(T)                                                             \
            V a0 = idv, a1 = idv, a2 = idv, a3 = idv, a4 = idv, a5 = idv, a6 = idv, a7 = idv; \
            const T *x0_ = xs[0], *x1_ = xs[1], *x2_ = xs[2], *x3_ = xs[3];              \
            const T *x4_ = xs[4], *x5_ = xs[5], *x6_ = xs[6], *x7_ = xs[7];              \
            for (long long t = 0; t < ntap; ++t) {                                      \
                const long long o_ = toff[t];                                           \
                DW_POOL_OP(V, VI, AVG, a0, *(const V *)(x0_ + o_))                      \
                DW_POOL_OP(V, VI, AVG, a1, *(const V *)(x1_ + o_))                      \
                DW_POOL_OP(V, VI, AVG, a2, *(const V *)(x2_ + o_))                      \
                DW_POOL_OP(V, VI, AVG, a3, *(const V *)(x3_ + o_))                      \
                DW_POOL_OP(V, VI, AVG, a4, *(const V *)(x4_ + o_))                      \
                DW_POOL_OP(V, VI, AVG, a5, *(const V *)(x5_ + o_))                      \
                DW_POOL_OP(V, VI, AVG, a6, *(const V *)(x6_ + o_))                      \
                DW_POOL_OP(V, VI, AVG, a7, *(const V *)(x7_ + o_))                      \
            }                                                                           \
            if (AVG) {                                                                  \
                a0 = a0 / cnt[q[0]];                                                    \
                a1 = a1 / cnt[q[1]];                                                    \
                a2 = a2 / cnt[q[2]];                                                    \
                a3 = a3 / cnt[q[3]];                                                    \
                a4 = a4 / cnt[q[4]];                                                    \
                a5 = a5 / cnt[q[5]];                                                    \
                a6 = a6 / cnt[q[6]];                                                    \
                a7 = a7 / cnt[q[7]];                                                    \
            }                                                                           \
            *(V *)(ob + q[0] * L) = a0;                                                 \
            *(V *)(ob + q[1] * L) = a1;                                                 \
            *(V *)(ob + q[2] * L) = a2;                                                 \
            *(V *)(ob + q[3] * L) = a3;                                                 \
            *(V *)(ob + q[4] * L) = a4;                                                 \
            *(V *)(ob + q[5] * L) = a5;                                                 \
            *(V *)(ob + q[6] * L) = a6;                                                 \
            *(V *)(ob + q[7] * L) = a7;                                                 \
        }                                                                               \
        DW_COPY_OUT(T, V, TR)                                                           \
        (void)o;                                                                        \
    }                                                                                   \
    (void)ep;                                                                           \
    free(toff);                                                                         \
    free(xb);                                                                           \
    return 1;

#define POOL_DW_ARGS(T)                                                                 \
    const T *x, const T *cnt, T *y, long long planes, long long h, long long w, long long kh, \
        long long kw, long long oh, long long ow, long long sh, long long sw, long long ph, \
        long long pw, long long dh, long long dw
static int pool_dw_avg_f64(POOL_DW_ARGS(double)) {
    POOL_DW(double, vmf64, dw_vi64, dw_tr_f64, 1, 0.0)
}
static int pool_dw_avg_f32(POOL_DW_ARGS(float)) {
    POOL_DW(float, vmf32, dw_vi32, dw_tr_f32, 1, 0.0f)
}
static int pool_dw_max_f64(POOL_DW_ARGS(double)) {
    (void)cnt;
    POOL_DW(double, vmf64, dw_vi64, dw_tr_f64, 0, -__builtin_inf())
}
static int pool_dw_max_f32(POOL_DW_ARGS(float)) {
    (void)cnt;
    POOL_DW(float, vmf32, dw_vi32, dw_tr_f32, 0, -__builtin_inff())
}
