/* ops_rows.cu: reductions, matmul/bmm, and the row-wise ops (softmax, rms_norm, rope,
 * cross_entropy), forward and backward (template: see gpu/source.py). Every sum is serial
 * from +0.0 in the order docs/reference-order.md fixes, inside one thread.
 */

#ifndef TS_GRID_STRIDE /* the host backend's prelude defines its own (lanes: docs/devices.md) */
#define TS_GRID_STRIDE(i, n)                                                             \
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < (n);       \
         i += (long long)gridDim.x * blockDim.x)
#endif

/* sum / mean: perm lists, per output slot j, the R input positions in row-major order. */
extern "C" __global__ void reduce_fwd_T(const real_t* x, real_t* y, const long long* perm,
                                        long long R, long long m, long long mean, real_t n) {
    TS_GRID_STRIDE(j, m) {
        real_t acc = (real_t)0;
        for (long long r = 0; r < R; ++r) acc = ADD(acc, x[perm[j * R + r]]);
        y[j] = mean ? DIV(acc, n) : acc;
    }
}

/* ga = g (sum) or g / n (mean), broadcast back: slot[i] is the output slot of input i. */
extern "C" __global__ void reduce_bwd_T(const real_t* g, real_t* gx, const long long* slot,
                                        long long mean, real_t n, long long count) {
    TS_GRID_STRIDE(i, count) {
        real_t v = g[slot[i]];
        if (mean) v = DIV(v, n);
        gx[i] = ADD(gx[i], v);
    }
}

/* y[b, i, j] (= or +=) dot over k of a[b, i, k] * b[b, k, j], strided operands, serial in k.
 * matmul, bmm, conv2d and all their backward products are this kernel with different strides;
 * y is [B, M, N] with rows contiguous and batch stride syb.
 * One thread owns a TS_MM x TS_MM tile of outputs: each output still accumulates alone, from
 * +0.0, in k order (the tile only shares the loads), so the bits do not depend on the tile. */
#define TS_MM 4
extern "C" __global__ void mm_T(const real_t* a, const real_t* b, real_t* y, long long B,
                                long long M, long long N, long long K, long long sab,
                                long long sam, long long sak, long long sbb, long long sbk,
                                long long sbn, long long syb, long long accumulate) {
    long long tm = (M + TS_MM - 1) / TS_MM, tn = (N + TS_MM - 1) / TS_MM;
    long long total = B * tm * tn;
    TS_GRID_STRIDE(t, total) {
        long long bi = t / (tm * tn);
        long long rem = t - bi * (tm * tn);
        long long i0 = (rem / tn) * TS_MM;
        long long j0 = (rem - (rem / tn) * tn) * TS_MM;
        long long ia[TS_MM], jb[TS_MM];
        for (int p = 0; p < TS_MM; ++p) {
            /* rows / columns past the edge re-read the last valid one and are not stored */
            ia[p] = bi * sab + (i0 + p < M ? i0 + p : M - 1) * sam;
            jb[p] = bi * sbb + (j0 + p < N ? j0 + p : N - 1) * sbn;
        }
        real_t acc[TS_MM][TS_MM];
        for (int p = 0; p < TS_MM; ++p)
            for (int q = 0; q < TS_MM; ++q) acc[p][q] = (real_t)0;
        for (long long k = 0; k < K; ++k) {
            real_t av[TS_MM], bv[TS_MM];
            for (int p = 0; p < TS_MM; ++p) av[p] = a[ia[p] + k * sak];
            for (int q = 0; q < TS_MM; ++q) bv[q] = b[jb[q] + k * sbk];
            for (int p = 0; p < TS_MM; ++p)
                for (int q = 0; q < TS_MM; ++q) acc[p][q] = ADD(acc[p][q], MUL(av[p], bv[q]));
        }
        for (int p = 0; p < TS_MM && i0 + p < M; ++p)
            for (int q = 0; q < TS_MM && j0 + q < N; ++q) {
                long long o = bi * syb + (i0 + p) * N + j0 + q;
                y[o] = accumulate ? ADD(y[o], acc[p][q]) : acc[p][q];
            }
    }
}

/* max along a strided row; NaN propagates (exact in any order). */
__device__ __forceinline__ real_t ts_rowmax_T(const real_t* x, long long L, long long st) {
    real_t m = x[0];
    for (long long l = 1; l < L; ++l) {
        real_t v = x[l * st];
        if (v != v || v > m) m = (m != m) ? m : v;
    }
    return m;
}

/* softmax over an axis of length L with stride `inner`; outer*inner independent rows. */
extern "C" __global__ void softmax_fwd_T(const real_t* x, real_t* y, long long outer,
                                         long long L, long long inner) {
    TS_GRID_STRIDE(t, outer * inner) {
        long long base = (t / inner) * L * inner + (t % inner);
        real_t m = ts_rowmax_T(x + base, L, inner);
        real_t s = (real_t)0;
        for (long long l = 0; l < L; ++l) {
            real_t e = EXP(SUB(x[base + l * inner], m));
            y[base + l * inner] = e;
            s = ADD(s, e);
        }
        for (long long l = 0; l < L; ++l) y[base + l * inner] = DIV(y[base + l * inner], s);
    }
}

extern "C" __global__ void softmax_bwd_T(const real_t* y, const real_t* g, real_t* gx,
                                         long long outer, long long L, long long inner) {
    TS_GRID_STRIDE(t, outer * inner) {
        long long base = (t / inner) * L * inner + (t % inner);
        real_t d = (real_t)0;
        for (long long l = 0; l < L; ++l)
            d = ADD(d, MUL(g[base + l * inner], y[base + l * inner]));
        for (long long l = 0; l < L; ++l) {
            long long i = base + l * inner;
            gx[i] = ADD(gx[i], MUL(y[i], SUB(g[i], d)));
        }
    }
}

/* rms_norm over rows of D: r = 1 / sqrt(serial_sum(x*x) / n + eps) (kept in rbuf for bwd). */
extern "C" __global__ void rms_fwd_T(const real_t* x, const real_t* gamma, real_t* y,
                                     real_t* rbuf, long long R, long long D, real_t n,
                                     real_t eps) {
    TS_GRID_STRIDE(row, R) {
        const real_t* xr = x + row * D;
        real_t ss = (real_t)0;
        for (long long d = 0; d < D; ++d) ss = ADD(ss, MUL(xr[d], xr[d]));
        real_t r = DIV((real_t)1, SQRT(ADD(DIV(ss, n), eps)));
        rbuf[row] = r;
        for (long long d = 0; d < D; ++d) y[row * D + d] = MUL(MUL(xr[d], r), gamma[d]);
    }
}

extern "C" __global__ void rms_bwd_x_T(const real_t* x, const real_t* gamma, const real_t* g,
                                       const real_t* rbuf, real_t* gx, long long R, long long D,
                                       real_t n) {
    TS_GRID_STRIDE(row, R) {
        const real_t* xr = x + row * D;
        const real_t* gr = g + row * D;
        real_t r = rbuf[row];
        real_t dot = (real_t)0;
        for (long long d = 0; d < D; ++d) dot = ADD(dot, MUL(MUL(gr[d], gamma[d]), xr[d]));
        real_t c = MUL(DIV(MUL(MUL(r, r), r), n), dot);
        for (long long d = 0; d < D; ++d) {
            real_t gd = MUL(gr[d], gamma[d]);
            gx[row * D + d] = ADD(gx[row * D + d], SUB(MUL(gd, r), MUL(xr[d], c)));
        }
    }
}

/* ggamma = unb(g * (x * r)): serial over rows when x has leading axes, else elementwise. */
extern "C" __global__ void rms_bwd_gamma_T(const real_t* x, const real_t* g, const real_t* rbuf,
                                           real_t* gg, long long R, long long D,
                                           long long reduce) {
    TS_GRID_STRIDE(d, D) {
        if (!reduce) {
            gg[d] = ADD(gg[d], MUL(g[d], MUL(x[d], rbuf[0])));
        } else {
            real_t acc = (real_t)0;
            for (long long row = 0; row < R; ++row)
                acc = ADD(acc, MUL(g[row * D + d], MUL(x[row * D + d], rbuf[row])));
            gg[d] = ADD(gg[d], acc);
        }
    }
}

/* rope over rows of D (position p = row % S), host tables c, s [S, D/2]. bwd: x is g, y gx. */
extern "C" __global__ void rope_T(const real_t* x, const real_t* c, const real_t* s,
                                  real_t* y, long long R, long long S, long long D,
                                  long long bwd) {
    long long h = D / 2;
    TS_GRID_STRIDE(t, R * h) {
        long long row = t / h, i = t - (t / h) * h;
        long long p = row % S;
        real_t cv = c[p * h + i], sv = s[p * h + i];
        real_t x1 = x[row * D + i], x2 = x[row * D + i + h];
        if (!bwd) {
            y[row * D + i] = SUB(MUL(x1, cv), MUL(x2, sv));
            y[row * D + i + h] = ADD(MUL(x2, cv), MUL(x1, sv));
        } else {
            y[row * D + i] = ADD(y[row * D + i], ADD(MUL(x1, cv), MUL(x2, sv)));
            y[row * D + i + h] = ADD(y[row * D + i + h], SUB(MUL(x2, cv), MUL(x1, sv)));
        }
    }
}

/* cross_entropy rows: m, s kept for backward; nll[r] = log(s) - (x[t] - m). */
extern "C" __global__ void ce_rows_T(const real_t* x, const real_t* t, real_t* nll,
                                     real_t* mbuf, real_t* sbuf, long long R, long long C) {
    TS_GRID_STRIDE(row, R) {
        const real_t* xr = x + row * C;
        real_t m = ts_rowmax_T(xr, C, 1);
        real_t s = (real_t)0;
        for (long long c = 0; c < C; ++c) s = ADD(s, EXP(SUB(xr[c], m)));
        long long ti = (long long)t[row];
        mbuf[row] = m;
        sbuf[row] = s;
        nll[row] = SUB(LOG(s), SUB(xr[ti], m));
    }
}

/* y = serial_sum(nll over rows) / R, one thread. */
extern "C" __global__ void ce_total_T(const real_t* nll, real_t* y, long long R, real_t rn) {
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        real_t acc = (real_t)0;
        for (long long r = 0; r < R; ++r) acc = ADD(acc, nll[r]);
        y[0] = DIV(acc, rn);
    }
}

/* ga[r, c] = (p - [c == t]) * (g / R), p = exp(x - m) / s recomputed as in forward. */
extern "C" __global__ void ce_bwd_T(const real_t* x, const real_t* t, const real_t* mbuf,
                                    const real_t* sbuf, const real_t* gy, real_t* gx,
                                    long long R, long long C, real_t rn) {
    TS_GRID_STRIDE(i, R * C) {
        long long row = i / C, c = i - (i / C) * C;
        real_t k = DIV(gy[0], rn);
        real_t p = DIV(EXP(SUB(x[i], mbuf[row])), sbuf[row]);
        if (c == (long long)t[row]) p = SUB(p, (real_t)1);
        gx[i] = ADD(gx[i], MUL(p, k));
    }
}
