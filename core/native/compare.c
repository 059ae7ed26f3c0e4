/* The capture judge's comparison of two float arrays in one pass (core/capture/judge.py's
 * _float_diff, whose numpy form is the fallback and the tests' oracle).
 *
 * For ref r and recorded o of one float type (float64, float32, float16, bfloat16) and shape:
 *   n_diff       elements whose bits differ;
 *   first        the first such flat (row-major) index;
 *   max_ulp      the largest distance in core.parity.ordered's integer order (the bits as a
 *                sign-magnitude integer mapped to two's complement, so -0 and +0 are both 0);
 *   max_abs      the largest |o - r| in float64 over the differing elements;
 *   n_sz         differing pairs that compare equal: +0 against -0 (NaN aside, two floats of
 *                different bits are equal only when both are zeros).
 * NaN is compare_arrays' policy (core/parity.py), which the judge applies itself: as in the
 * numpy form, the elements run in blocks of `block`, and a block that holds a difference and a
 * NaN (in either array, anywhere in the block) ends the pass with 1 ("has NaN"); the numbers
 * are then not read.
 *
 * Only integer work and exact conversions: the bits read through memcpy (any alignment), a
 * half value made a double exactly, one float64 subtraction per element (the numpy form's
 * own), its absolute value by clearing the sign bit and the maximum taken on the bits (for
 * doubles >= 0 the integer order is the numeric order). No FMA can form: nothing is
 * multiplied and added. gcc vectorises the contiguous loop at the ISA path's width; the bits
 * never depend on it.
 */
#include <stdint.h>
#include <string.h>

typedef long long ll;

typedef struct {
    ll n_diff, first, n_sz, blk_k;
    uint64_t max_ulp, max_abs; /* max_abs: the bits of a double >= 0 */
    int blk_nan;
} fd_acc;

static inline double bits_f64(uint64_t b) { double d; memcpy(&d, &b, 8); return d; }
static inline uint64_t f64_bits(double d) { uint64_t b; memcpy(&b, &d, 8); return b; }

static inline double tod_f64(uint64_t b) { return bits_f64(b); }
static inline double tod_f32(uint32_t b) { float f; memcpy(&f, &b, 4); return (double)f; }
static inline double tod_bf16(uint16_t b) { return tod_f32((uint32_t)b << 16); }
/* a float16 as a double, exactly: (implicit bit | mantissa) * 2^(e - 25), subnormals with
 * e = 1 and no implicit bit; infinities as infinities (a NaN's value is never read) */
static inline double tod_f16(uint16_t b) {
    uint32_t e = (b >> 10) & 0x1f, m = b & 0x3ff;
    uint32_t ee = e ? e : 1, mm = e ? (m | 0x400) : m;
    double v = (double)mm * bits_f64((uint64_t)(ee - 25 + 1023) << 52);
    v = e == 31 ? bits_f64(0x7ff0000000000000ULL) : v;
    return (b & 0x8000) ? -v : v;
}

#define FD_CHUNK 1024LL
#define FD_AHEAD 2048LL

/* one segment [0, n) of a row: contiguous (both strides the element size) or strided, the
 * full numbers or n_diff and max_ulp only; ST is the signed integer of the type's width, SHIFT
 * its bits less one, MAG every bit but the sign, INF an infinity's bits (a NaN's magnitude is
 * larger) */
#define FD_SEG(NAME, UT, ST, SHIFT, MAG, INF, TOD)                                             \
    static inline __attribute__((always_inline)) void NAME##_body(                            \
        const char *rp, const char *op, ll rs, ll os, ll n, const int full, fd_acc *a) {      \
        /* counts in the type's own width (n <= FD_CHUNK / sizeof(UT) elements: no overflow): \
         * widened to 64 bits per element, the vectors did half the work an instruction */   \
        UT k = 0, sz = 0;                                                                      \
        UT mx = 0, mu = 0; /* the largest magnitude (a NaN's is above INF's); the largest d */ \
        uint64_t ma = 0;                                                                       \
        for (ll i = 0; i < n; i++) {                                                           \
            UT x, y;                                                                           \
            memcpy(&x, rp + i * rs, sizeof(UT));                                               \
            memcpy(&y, op + i * os, sizeof(UT));                                               \
            UT ne = (UT)(x != y);                                                              \
            k += ne;                                                                           \
            UT xm = (UT)(x & MAG), ym = (UT)(y & MAG);                                         \
            UT m2 = xm > ym ? xm : ym;                                                         \
            mx = m2 > mx ? m2 : mx;                                                            \
            /* the ordered integer: the magnitude, negated where the sign bit is set (s: 0 or \
             * all ones, by the arithmetic shift), so -0 is 0; d = max - min, unsigned */     \
            ST sx = (ST)((ST)x >> SHIFT), sy = (ST)((ST)y >> SHIFT);                           \
            ST xo = (ST)((UT)(xm ^ (UT)sx) - (UT)sx), yo = (ST)((UT)(ym ^ (UT)sy) - (UT)sy);   \
            UT d = (UT)((UT)(xo > yo ? xo : yo) - (UT)(xo > yo ? yo : xo));                    \
            mu = d > mu ? d : mu;                                                              \
            if (full) {                                                                        \
                sz += ne & (UT)((UT)(xm | ym) == 0);                                           \
                uint64_t ab = f64_bits(TOD(y) - TOD(x)) & 0x7fffffffffffffffULL;              \
                ab &= -(uint64_t)ne; /* (a select here kept gcc 12 from vectorising) */     \
                ma = ab > ma ? ab : ma;                                                        \
            }                                                                                  \
        }                                                                                      \
        UT nan = (UT)(mx > (UT)(INF));                                                         \
        a->n_diff += k;                                                                        \
        a->blk_k += k;                                                                         \
        a->blk_nan |= nan != 0;                                                                \
        a->max_ulp = (uint64_t)mu > a->max_ulp ? (uint64_t)mu : a->max_ulp;                   \
        if (full) {                                                                            \
            a->n_sz += sz;                                                                     \
            a->max_abs = ma > a->max_abs ? ma : a->max_abs;                                    \
        }                                                                                      \
    }                                                                                          \
    static void NAME(const char *rp, const char *op, ll rs, ll os, ll n, int full, int alone, \
                     fd_acc *a) {                                                              \
        ll k0 = a->n_diff;                                                                     \
        if (rs == (ll)sizeof(UT) && os == (ll)sizeof(UT)) {                                    \
            /* the same bits (the common case): nothing to count, unless another segment of  \
             * its block differs, where a NaN here is that block's NaN */                     \
            if (alone && !memcmp(rp, op, (size_t)n * sizeof(UT)))                              \
                return;                                                                        \
            for (ll s = 0; s < n; s += FD_CHUNK / (ll)sizeof(UT)) {                           \
                ll m = n - s < FD_CHUNK / (ll)sizeof(UT) ? n - s : FD_CHUNK / (ll)sizeof(UT);  \
                const char *rc = rp + s * (ll)sizeof(UT), *oc = op + s * (ll)sizeof(UT);      \
                if (s + (FD_AHEAD + FD_CHUNK) / (ll)sizeof(UT) <= n) /* lines ahead of use */ \
                    for (ll b = 0; b < FD_CHUNK; b += 64) {                                    \
                        __builtin_prefetch(rc + FD_AHEAD + b);                                 \
                        __builtin_prefetch(oc + FD_AHEAD + b);                                 \
                    }                                                                          \
                if (full)                                                                      \
                    NAME##_body(rc, oc, sizeof(UT), sizeof(UT), m, 1, a);                      \
                else                                                                           \
                    NAME##_body(rc, oc, sizeof(UT), sizeof(UT), m, 0, a);                      \
            }                                                                                  \
        } else {                                                                               \
            for (ll s = 0; s < n; s += FD_CHUNK / (ll)sizeof(UT)) {                           \
                ll m = n - s < FD_CHUNK / (ll)sizeof(UT) ? n - s : FD_CHUNK / (ll)sizeof(UT);  \
                if (full)                                                                      \
                    NAME##_body(rp + s * rs, op + s * os, rs, os, m, 1, a);                    \
                else                                                                           \
                    NAME##_body(rp + s * rs, op + s * os, rs, os, m, 0, a);                    \
            }                                                                                  \
        }                                                                                      \
        if (a->first < 0 && a->n_diff > k0) { /* the first difference: once per call */      \
            for (ll i = 0; i < n; i++) {                                                       \
                UT x, y;                                                                       \
                memcpy(&x, rp + i * rs, sizeof(UT));                                           \
                memcpy(&y, op + i * os, sizeof(UT));                                           \
                if (x != y) {                                                                  \
                    a->first = i; /* the segment's own index: the caller adds its start */   \
                    break;                                                                     \
                }                                                                              \
            }                                                                                  \
        }                                                                                      \
    }

FD_SEG(fd_f64, uint64_t, int64_t, 63, 0x7fffffffffffffffULL, 0x7ff0000000000000ULL,
       tod_f64)
FD_SEG(fd_f32, uint32_t, int32_t, 31, 0x7fffffffU, 0x7f800000U, tod_f32)
FD_SEG(fd_f16, uint16_t, int16_t, 15, 0x7fff, 0x7c00, tod_f16)
FD_SEG(fd_bf16, uint16_t, int16_t, 15, 0x7fff, 0x7f80, tod_bf16)

typedef void (*fd_seg_t)(const char *, const char *, ll, ll, ll, int, int, fd_acc *);

/* ts_fdiff: kind 0 float64, 1 float32, 2 float16, 3 bfloat16; nd >= 1 dimensions of `shape`
 * (none 0), byte strides rstr/ostr (any sign); `block` >= 1 elements per block (the NaN rule
 * above). out[0..2] = n_diff, first (-1: none), n_sz; *ulp = max_ulp; *abs_out = max_abs.
 * Returns 0, 1 (a block with a difference holds a NaN), or -1 (bad arguments). */
int ts_fdiff(const void *r, const void *o, int kind, int nd, const ll *shape, const ll *rstr,
             const ll *ostr, ll block, int full, ll *out, uint64_t *ulp, double *abs_out) {
    static const fd_seg_t segs[4] = {fd_f64, fd_f32, fd_f16, fd_bf16};
    if (kind < 0 || kind > 3 || nd < 1 || nd > 32 || block < 1)
        return -1;
    fd_seg_t seg = segs[kind];
    fd_acc a = {0, -1, 0, 0, 0, 0, 0};
    ll idx[32] = {0};
    const char *rrow = (const char *)r, *orow = (const char *)o;
    ll len = shape[nd - 1], rs = rstr[nd - 1], os = ostr[nd - 1];
    for (int d = 0; d < nd; d++)
        if (shape[d] < 1)
            return -1;
    ll total = 1;
    for (int d = 0; d < nd; d++)
        total *= shape[d];
    ll pos = 0, in_blk = 0; /* flat index of the row's start; elements of the open block */
    for (;;) {
        ll j = 0;
        while (j < len) {
            ll m = len - j < block - in_blk ? len - j : block - in_blk;
            int had = a.first >= 0;
            int alone = in_blk == 0 && (m == block || pos + j + m == total);
            seg(rrow + j * rs, orow + j * os, rs, os, m, full, alone, &a);
            if (!had && a.first >= 0)
                a.first += pos + j;
            j += m;
            in_blk += m;
            if (in_blk == block) {
                if (a.blk_k && a.blk_nan)
                    return 1;
                in_blk = a.blk_k = a.blk_nan = 0;
            }
        }
        pos += len;
        int d = nd - 2; /* the next row: an odometer over the outer dimensions */
        for (; d >= 0; d--) {
            rrow += rstr[d];
            orow += ostr[d];
            if (++idx[d] < shape[d])
                break;
            rrow -= rstr[d] * shape[d];
            orow -= ostr[d] * shape[d];
            idx[d] = 0;
        }
        if (d < 0)
            break;
    }
    if (a.blk_k && a.blk_nan)
        return 1;
    out[0] = a.n_diff;
    out[1] = a.first;
    out[2] = a.n_sz;
    *ulp = a.max_ulp;
    *abs_out = bits_f64(a.max_abs);
    return 0;
}
