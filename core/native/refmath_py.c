/* refmath's C twin as a tiny CPython extension: one call per array, without ctypes' argument
 * conversion (ctypes costs ~2 us a call, more than tanh of 16 elements). The same loops as
 * refmath_host.c (which core.native loads through ctypes when Python.h is not installed).
 *
 * apply(i, x): a new C-contiguous array y = f_i(x) elementwise, f_i FUNCS[i / 2] in double (i
 * even) or float (i odd); x an ndarray of that exact native type, any layout or alignment (an
 * aligned C-contiguous copy first where it is not). It allocates y through numpy's C API: a
 * small array's np.empty and two buffer exports cost more than f_i of 16 elements (~0.15 us a
 * call against ~0.4 us, issue 29).
 *
 * tanh_grad(g, y): a new array g * (1 - y * y) elementwise, the tape's tanh backward
 * (core.ops.elementwise), here because this is the one native entry point cheap enough to call
 * per node: one call instead of numpy's three ufuncs and two temporaries (issue 29). g and y
 * must be aligned C-contiguous ndarrays of one native float type and one shape; anything else
 * raises (TypeError, ValueError), so a caller can fall back to the numpy spelling.
 *
 * fdiff(ref, rec, kind, block, full): compare.c's ts_fdiff on two arrays read where they lie
 * (core.native.float_diff's numbers), its arguments taken from the arrays here: the capture
 * judge calls it ~1,300 times a zoo capture on a few hundred elements, where ctypes' argument
 * conversion and two `.ctypes.data` lookups were most of the cost. numpy's C API, not the
 * buffer protocol: numpy exports no buffer of a user dtype (bfloat16), and reading the array
 * struct costs nothing. kind is compare.c's (0 float64, 1 float32, 2 float16, 3 bfloat16),
 * checked against both arrays' dtype; a dtype, byte order, shape, size (0) or kind that does
 * not match raises (TypeError, ValueError) and nothing is read.
 *
 * outcmp(g, rec, t, kinds, block): the judge's numbers of one output, two fdiff passes in one call
 * (below).
 *
 * colsum(x), chansum(x): core.native's serial sums (serial_sums.h, the loops of the ctypes
 * library's ts_colsum and ts_chansum) of a 2-d (r, n) or 3-d (b, n, l) ndarray of float64 or
 * float32 (native order; any layout: a C-contiguous aligned copy first where it is not), as a
 * new 1-d array of n sums: serial_sum calls them ~350 times a zoo GPT judge on rows of 16
 * elements, where ctypes' two `.ctypes.data` lookups and its call were ~4 us of ~6. Another
 * dtype or rank raises (TypeError, ValueError).
 *
 * ew(code, x, y, z, s): the aten table's short cuts' elementwise ops (below).
 *
 * gelu(x, g, s, p): aten's exact GELU or its backward in one call (below).
 *
 * sqsums(xs): each array's serial sum of squares, a _foreach_norm's (below).
 *
 * decode(a, arrays, ids, chain, other, missing): the capture judge's argument walk (below).
 *
 * addr(x): x.ctypes.data of an ndarray (its first element's address), for the ctypes calls of
 * small products (core.native.mm, bmm), whose three lookups were most of their call's cost.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>

#include "intrinsics_host.h"
#include "refmath.cuh"
#include "refmath_simd.h"

/* the comparison itself, compiled into this object too (hidden: no symbol shared with the
 * ctypes library's ts_fdiff) */
#pragma GCC visibility push(hidden)
#include "compare.c"
#pragma GCC visibility pop

/* the serial sums' loops, as the ctypes library's (hidden too) */
#include "serial_sums.h"

static void d_colsum(const double *x, double *out, long long r, long long n) { COLSUM(double) }
static void f_colsum(const float *x, float *out, long long r, long long n) { COLSUM(float) }
static void d_chansum(const double *x, double *out, long long b, long long n, long long l) {
    CHANSUM(double)
}
static void f_chansum(const float *x, float *out, long long b, long long n, long long l) {
    CHANSUM(float)
}

/* as refmath_host.c: the loops of refmath_simd.h */
#define TS_PAIR(name, dloop, floop)                                                     \
    static void d_##name(const void *x, void *y, Py_ssize_t n) {                        \
        dloop((const double *)x, (double *)y, (long long)n);                            \
    }                                                                                   \
    static void f_##name(const void *x, void *y, Py_ssize_t n) {                        \
        floop((const float *)x, (float *)y, (long long)n);                              \
    }

TS_REFMATH_FUNCS(TS_PAIR)

typedef void (*loop_fn)(const void *, void *, Py_ssize_t);
/* the order of core.native.REFMATH: double, float per function */
#define TS_ENTRY(name, dloop, floop) d_##name, f_##name,
static const loop_fn LOOPS[16] = {TS_REFMATH_FUNCS(TS_ENTRY)};

/* args[0] as an index into LOOPS, after checking there are `want` arguments; -1 with the error
 * set (TypeError: `usage`; ValueError: no such function) */
static long func_index(PyObject *const *args, Py_ssize_t nargs, Py_ssize_t want,
                       const char *usage, const char *name) {
    if (nargs != want) {
        PyErr_SetString(PyExc_TypeError, usage);
        return -1;
    }
    long i = PyLong_AsLong(args[0]);
    if (i == -1 && PyErr_Occurred()) return -1;
    if (i < 0 || i >= 16) {
        PyErr_Format(PyExc_ValueError, "%s: no such function", name);
        return -1;
    }
    return i;
}

/* NOTE: the numpy spelling's three roundings in its order, g * (1 - (y * y)), with g the left
 * operand of the last product as in numpy's g * (...); -ffp-contract=off keeps them three (no
 * FMA: tests/core/test_native.py audits this object), so the bits are numpy's. */
static void d_tanh_grad(const double *g, const double *y, double *out, Py_ssize_t n) {
    for (Py_ssize_t k = 0; k < n; k++)
        out[k] = __dmul_rn(g[k], __dsub_rn(1.0, __dmul_rn(y[k], y[k])));
}

static void f_tanh_grad(const float *g, const float *y, float *out, Py_ssize_t n) {
    for (Py_ssize_t k = 0; k < n; k++)
        out[k] = __fmul_rn(g[k], __fsub_rn(1.0f, __fmul_rn(y[k], y[k])));
}

/* the numpy type of an exact ndarray of native-order float64 (NPY_DOUBLE) or float32
 * (NPY_FLOAT), else -1 */
static int float_type(PyObject *o) {
    if (!PyArray_CheckExact(o)) return -1;
    PyArray_Descr *d = PyArray_DESCR((PyArrayObject *)o);
    int t = d->type_num;
    return (t == NPY_DOUBLE || t == NPY_FLOAT) && PyArray_ISNBO(d->byteorder) ? t : -1;
}

static PyObject *apply(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    long i = func_index(args, nargs, 2, "apply(i, x) takes 2 arguments", "apply");
    if (i < 0) return NULL;
    if (float_type(args[1]) != ((i & 1) ? NPY_FLOAT : NPY_DOUBLE)) {
        PyErr_SetString(PyExc_TypeError, "apply: x must be an ndarray of the function's dtype");
        return NULL;
    }
    /* a new reference: x itself when C-contiguous and aligned, else such a copy (the loops
     * read whole elements: an unaligned one is undefined behaviour, UBSan's report;
     * PyArray_GETCONTIGUOUS checks contiguity only) */
    PyArrayObject *x = (PyArrayObject *)args[1];
    if (PyArray_IS_C_CONTIGUOUS(x) && PyArray_ISALIGNED(x))
        Py_INCREF(x);
    else
        x = (PyArrayObject *)PyArray_NewCopy(x, NPY_CORDER);
    if (x == NULL) return NULL;
    PyObject *y = PyArray_SimpleNew(PyArray_NDIM(x), PyArray_DIMS(x), PyArray_TYPE(x));
    if (y != NULL) LOOPS[i](PyArray_DATA(x), PyArray_DATA((PyArrayObject *)y), PyArray_SIZE(x));
    Py_DECREF(x);
    return y;
}

/* the native float type of ndarrays a and b, or -1 with TypeError (not one native float type)
 * or ValueError (not aligned, C-contiguous and of one shape) set, naming fn and the pair */
static int float_pair(PyObject *a, PyObject *b, const char *fn, const char *pair) {
    int t = float_type(a);
    if (t < 0 || float_type(b) != t) {
        PyErr_Format(PyExc_TypeError, "%s: %s must be ndarrays of one native float type", fn,
                     pair);
        return -1;
    }
    PyArrayObject *x = (PyArrayObject *)a, *y = (PyArrayObject *)b;
    if (!PyArray_SAMESHAPE(x, y) || !PyArray_IS_C_CONTIGUOUS(x) || !PyArray_IS_C_CONTIGUOUS(y)
        || !PyArray_ISALIGNED(x) || !PyArray_ISALIGNED(y)) {
        PyErr_Format(PyExc_ValueError, "%s: %s must be aligned, C-contiguous, one shape", fn,
                     pair);
        return -1;
    }
    return t;
}

static PyObject *tanh_grad(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "tanh_grad(g, y) takes 2 arguments");
        return NULL;
    }
    int t = float_pair(args[0], args[1], "tanh_grad", "g and y");
    if (t < 0) return NULL;
    PyArrayObject *g = (PyArrayObject *)args[0], *y = (PyArrayObject *)args[1];
    PyObject *out = PyArray_SimpleNew(PyArray_NDIM(y), PyArray_DIMS(y), t);
    if (out == NULL) return NULL;
    npy_intp n = PyArray_SIZE(y);
    if (t == NPY_DOUBLE)
        d_tanh_grad(PyArray_DATA(g), PyArray_DATA(y), PyArray_DATA((PyArrayObject *)out), n);
    else
        f_tanh_grad(PyArray_DATA(g), PyArray_DATA(y), PyArray_DATA((PyArrayObject *)out), n);
    return out;
}

/* zero_le(x, t, v): relu and threshold_backward (core.capture.aten_ref_pointwise) in one
 * pass: out = x <= t ? +0.0 : v, elementwise, by v's bits and-ed with all ones where the
 * comparison is false and zero where it holds (+0.0 is all zero bits; a NaN x compares false
 * and keeps v; a NaN v keeps its payload): aten_ref_table.zero_where's rule without its two
 * temporaries. x and v: ndarrays of one native float type (float32 or float64) and shape,
 * aligned and C-contiguous (v may be x itself); t a Python float, rounded to that type by the
 * caller (its value is exact in it). New array; TypeError / ValueError, nothing computed,
 * where they are not those. */
#define ZERO_LE(T, U)                                                                          \
    {                                                                                          \
        const T *xp = (const T *)xd;                                                           \
        const U *vp = (const U *)vd;                                                           \
        U *op = (U *)od;                                                                       \
        const T tt = (T)t;                                                                     \
        for (npy_intp i = 0; i < n; i++)                                                       \
            op[i] = vp[i] & ((U)0 - (U)!(xp[i] <= tt));                                        \
    }

static void d_zero_le(const void *xd, double t, const void *vd, void *od, npy_intp n)
    ZERO_LE(double, uint64_t)
static void f_zero_le(const void *xd, double t, const void *vd, void *od, npy_intp n)
    ZERO_LE(float, uint32_t)

static PyObject *zero_le(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "zero_le(x, t, v) takes 3 arguments");
        return NULL;
    }
    int ty = float_pair(args[0], args[2], "zero_le", "x and v");
    if (ty < 0) return NULL;
    double t = PyFloat_AsDouble(args[1]);
    if (t == -1.0 && PyErr_Occurred()) return NULL;
    PyArrayObject *x = (PyArrayObject *)args[0], *v = (PyArrayObject *)args[2];
    PyObject *out = PyArray_SimpleNew(PyArray_NDIM(x), PyArray_DIMS(x), ty);
    if (out == NULL) return NULL;
    npy_intp n = PyArray_SIZE(x);
    void *od = PyArray_DATA((PyArrayObject *)out);
    int large = n >= (1 << 16); /* other threads run meanwhile (as ctypes') */
    PyThreadState *ts = large ? PyEval_SaveThread() : NULL;
    if (ty == NPY_DOUBLE) d_zero_le(PyArray_DATA(x), t, PyArray_DATA(v), od, n);
    else f_zero_le(PyArray_DATA(x), t, PyArray_DATA(v), od, n);
    if (ts != NULL) PyEval_RestoreThread(ts);
    return out;
}

/* whether array o's dtype is compare.c's kind (native byte order) */
static int fd_kind_ok(PyArrayObject *o, long kind) {
    PyArray_Descr *d = PyArray_DESCR(o);
    int t = d->type_num;
    if (!PyArray_ISNBO(d->byteorder)) return 0;
    switch (kind) {
    case 0: return t == NPY_DOUBLE;
    case 1: return t == NPY_FLOAT;
    case 2: return t == NPY_HALF;
    case 3: return t >= NPY_USERDEF && PyArray_ITEMSIZE(o) == 2; /* ml_dtypes' bfloat16 */
    default: return 0;
    }
}

static PyObject *FD_NAN; /* "nan": a block with a difference holds a NaN */

/* ts_fdiff on arrays r (the reference's) and o (the recorded) as they lie, kind, dtypes, shapes,
 * size and block checked first (nothing read where they do not fit): 0, 1 (a block with a
 * difference holds a NaN), or -2 with TypeError or ValueError set */
static int fd_pass(PyArrayObject *r, PyArrayObject *o, long kind, long long block, int full,
                   ll out[3], uint64_t *ulp, double *mab) {
    if (kind < 0 || kind > 3 || !fd_kind_ok(r, kind) || !fd_kind_ok(o, kind) ||
        PyArray_DESCR(r)->type_num != PyArray_DESCR(o)->type_num) {
        PyErr_SetString(PyExc_TypeError,
                        "fdiff: ref and rec must be of one float dtype, kind's, native order");
        return -2;
    }
    int nd = PyArray_NDIM(r);
    if (nd != PyArray_NDIM(o) || nd > 32 ||
        !PyArray_CompareLists(PyArray_DIMS(r), PyArray_DIMS(o), nd)) {
        PyErr_SetString(PyExc_ValueError, "fdiff: ref and rec must have one shape (<= 32-d)");
        return -2;
    }
    if (PyArray_SIZE(r) == 0 || block < 1) {
        PyErr_SetString(PyExc_ValueError, "fdiff: an empty array, or a block < 1");
        return -2;
    }
    /* core.native._fd_layout: dimensions of size 1 left out, neighbours both arrays step
     * through as one merged (row-major order kept) */
    ll shape[32], rs[32], os[32];
    int m = 0;
    const npy_intp *dims = PyArray_DIMS(r), *rst = PyArray_STRIDES(r), *ost = PyArray_STRIDES(o);
    for (int d = 0; d < nd; d++) {
        ll n = dims[d];
        if (n == 1) continue;
        if (m && rs[m - 1] == rst[d] * n && os[m - 1] == ost[d] * n) {
            shape[m - 1] *= n;
            rs[m - 1] = rst[d];
            os[m - 1] = ost[d];
        } else {
            shape[m] = n;
            rs[m] = rst[d];
            os[m] = ost[d];
            m++;
        }
    }
    if (m == 0) { /* one element (or a 0-d array) */
        shape[0] = 1;
        rs[0] = os[0] = PyArray_ITEMSIZE(r);
        m = 1;
    }
    int rc;
    if (PyArray_SIZE(r) >= (1 << 16)) { /* large: other threads run meanwhile (as ctypes') */
        Py_BEGIN_ALLOW_THREADS
        rc = ts_fdiff(PyArray_DATA(r), PyArray_DATA(o), (int)kind, m, shape, rs, os, block,
                      full, out, ulp, mab);
        Py_END_ALLOW_THREADS
    } else {
        rc = ts_fdiff(PyArray_DATA(r), PyArray_DATA(o), (int)kind, m, shape, rs, os, block,
                      full, out, ulp, mab);
    }
    if (rc != 0 && rc != 1) {
        PyErr_SetString(PyExc_ValueError, "fdiff: ts_fdiff refused its arguments");
        return -2;
    }
    return rc;
}

static PyObject *fdiff(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "fdiff(ref, rec, kind, block, full) takes 5 arguments");
        return NULL;
    }
    if (!PyArray_Check(args[0]) || !PyArray_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "fdiff: ref and rec must be ndarrays");
        return NULL;
    }
    PyArrayObject *r = (PyArrayObject *)args[0], *o = (PyArrayObject *)args[1];
    long kind = PyLong_AsLong(args[2]);
    if (kind == -1 && PyErr_Occurred()) return NULL;
    long long block = PyLong_AsLongLong(args[3]);
    if (block == -1 && PyErr_Occurred()) return NULL;
    int full = PyObject_IsTrue(args[4]);
    if (full < 0) return NULL;
    ll out[3];
    uint64_t ulp;
    double mab;
    int rc = fd_pass(r, o, kind, block, full, out, &ulp, &mab);
    if (rc < 0) return NULL;
    if (rc == 1) {
        Py_INCREF(FD_NAN);
        return FD_NAN;
    }
    if (out[1] < 0)
        return Py_BuildValue("(LOKdL)", out[0], Py_None, (unsigned long long)ulp, mab, out[2]);
    return Py_BuildValue("(LLKdL)", out[0], out[1], (unsigned long long)ulp, mab, out[2]);
}

/* whether a and b are views of the very same elements (one first address, dtype, shape and
 * strides): the same bits, nothing to read (a view op's reference output over the recorded
 * input, the recorded output laid over the same bytes: t, transpose, view ...) */
static int same_memory(PyArrayObject *a, PyArrayObject *b) {
    int nd = PyArray_NDIM(a);
    return PyArray_DATA(a) == PyArray_DATA(b) && nd == PyArray_NDIM(b)
           && PyArray_EquivTypes(PyArray_DESCR(a), PyArray_DESCR(b))
           && PyArray_CompareLists(PyArray_DIMS(a), PyArray_DIMS(b), nd)
           && PyArray_CompareLists(PyArray_STRIDES(a), PyArray_STRIDES(b), nd);
}

/* outcmp(g, rec, t, kinds, block): the capture judge's numbers of one output in one call
 * (judge._compare_out's, whose two fdiff calls and Python steps were most of the ~0.8 us an
 * output of a zoo GPT capture's ~1,300): g the reference's output on the recorded inputs, t
 * on the chain's (either may be the very object rec, or t g), all of rec's dtype and shape;
 * kinds core.native._FD_KIND (rec's dtype -> compare.c's kind). Returns
 * (n, n_diff, first_index, max_ulp, max_abs, n_signed_zero, t_n_diff, t_max_ulp): g against
 * rec in full (first_index None, the rest 0, where the bits are the same), t against rec in
 * short (t_max_ulp 0 where t_n_diff is); None where it does not decide them: rec's dtype not
 * in kinds, an empty array, or a NaN in a block with a difference (the NaN policy's numbers:
 * the caller's own path). Arrays of another dtype or shape raise (TypeError, ValueError) as
 * fdiff's, nothing read. */
static PyObject *outcmp(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "outcmp(g, rec, t, kinds, block) takes 5 arguments");
        return NULL;
    }
    if (!PyArray_Check(args[0]) || !PyArray_Check(args[1]) || !PyArray_Check(args[2]) ||
        !PyDict_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "outcmp: g, rec and t must be ndarrays, kinds a dict");
        return NULL;
    }
    PyArrayObject *g = (PyArrayObject *)args[0], *o = (PyArrayObject *)args[1],
                  *t = (PyArrayObject *)args[2];
    long long block = PyLong_AsLongLong(args[4]);
    if (block == -1 && PyErr_Occurred()) return NULL;
    if (block < 1) {
        PyErr_SetString(PyExc_ValueError, "outcmp: a block < 1");
        return NULL;
    }
    PyObject *k = PyDict_GetItemWithError(args[3], (PyObject *)PyArray_DESCR(o)); /* borrowed */
    if (k == NULL) {
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_NONE;
    }
    long kind = PyLong_AsLong(k);
    if (kind == -1 && PyErr_Occurred()) return NULL;
    npy_intp n = PyArray_SIZE(o);
    if (n == 0) Py_RETURN_NONE;
    ll d[3] = {0, -1, 0}, e[3] = {0, -1, 0};
    uint64_t dulp = 0, eulp = 0;
    double dmab = 0.0, emab = 0.0;
    if (g != o && !same_memory(g, o)) {
        int rc = fd_pass(g, o, kind, block, 1, d, &dulp, &dmab);
        if (rc < 0) return NULL;
        if (rc == 1) Py_RETURN_NONE;
    }
    if (!d[0]) { /* the same bits: _same's numbers */
        d[1] = -1;
        d[2] = 0;
        dulp = 0;
        dmab = 0.0;
    }
    if (t == g) {
        e[0] = d[0];
        eulp = dulp;
    } else if (!same_memory(t, o)) {
        int rc = fd_pass(t, o, kind, block, 0, e, &eulp, &emab);
        if (rc < 0) return NULL;
        if (rc == 1) Py_RETURN_NONE;
        if (!e[0]) eulp = 0;
    }
    if (d[1] < 0)
        return Py_BuildValue("(nLOKdLLK)", (Py_ssize_t)n, d[0], Py_None, (unsigned long long)dulp,
                             dmab, d[2], e[0], (unsigned long long)eulp);
    return Py_BuildValue("(nLLKdLLK)", (Py_ssize_t)n, d[0], d[1], (unsigned long long)dulp, dmab,
                         d[2], e[0], (unsigned long long)eulp);
}

/* colsum (nd 2) and chansum (nd 3): the sums along every axis but the second of x (args[0]) */
static PyObject *serial_sums(PyObject *const *args, Py_ssize_t nargs, int nd, const char *name) {
    if (nargs != 1) {
        PyErr_Format(PyExc_TypeError, "%s(x) takes 1 argument", name);
        return NULL;
    }
    int t = float_type(args[0]);
    if (t < 0) {
        PyErr_Format(PyExc_TypeError, "%s: x must be an ndarray of float64 or float32", name);
        return NULL;
    }
    if (PyArray_NDIM((PyArrayObject *)args[0]) != nd) {
        PyErr_Format(PyExc_ValueError, "%s: x must be %d-d", name, nd);
        return NULL;
    }
    /* a new reference: x itself when C-contiguous and aligned, else such a copy (the loops
     * read whole elements: an unaligned one is undefined behaviour, UBSan's report) */
    PyArrayObject *x = (PyArrayObject *)PyArray_FromArray(
        (PyArrayObject *)args[0], NULL, NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED);
    if (x == NULL) return NULL;
    const npy_intp *dims = PyArray_DIMS(x);
    npy_intp n = dims[1];
    PyObject *out = PyArray_SimpleNew(1, &n, t);
    if (out != NULL) {
        const void *src = PyArray_DATA(x);
        void *dst = PyArray_DATA((PyArrayObject *)out);
        long long a = dims[0], l = nd == 3 ? dims[2] : 1;
        int large = PyArray_SIZE(x) >= (1 << 16); /* other threads run meanwhile (as ctypes') */
        PyThreadState *ts = large ? PyEval_SaveThread() : NULL;
        if (nd == 2 && t == NPY_DOUBLE) d_colsum(src, dst, a, n);
        else if (nd == 2) f_colsum(src, dst, a, n);
        else if (t == NPY_DOUBLE) d_chansum(src, dst, a, n, l);
        else f_chansum(src, dst, a, n, l);
        if (ts != NULL) PyEval_RestoreThread(ts);
    }
    Py_DECREF(x);
    return out;
}

static PyObject *colsum(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    return serial_sums(args, nargs, 2, "colsum");
}

static PyObject *chansum(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    return serial_sums(args, nargs, 3, "chansum");
}

/* addr(x): the address of ndarray x's first element, as x.ctypes.data gives it (~1.4 us
 * there: a ctypes object built per lookup; three a product) */
static PyObject *addr(PyObject *self, PyObject *x) {
    (void)self;
    if (!PyArray_Check(x)) {
        PyErr_SetString(PyExc_TypeError, "addr: x must be an ndarray");
        return NULL;
    }
    return PyLong_FromVoidPtr(PyArray_DATA((PyArrayObject *)x));
}

/* ew(code, x, y, z, s): an optimizer's tiny elementwise ops (the aten table's short cuts,
 * core.capture.aten_ref_table.FAST) in one call: a new C-contiguous array of x's type and
 * shape, each element one IEEE operation per written operation in the forms' order (no fused
 * multiply-add: -ffp-contract=off and the _rn helpers), s (a Python float: the scalar already
 * rounded to x's type by the caller) as the forms' 0-d operand:
 *   0 add x + y (y None: x + s)   1 mul x * y (x * s)   2 div x / y (x / s)   3 sqrt(x)
 *   4 lerp(x, y, w = s): |w| < 0.5 ? x + w * (y - x) : y - (y - x) * (1 - w)
 *   5 addcmul x + ((s * y) * z)   6 addcdiv x + ((s * y) / z)
 * Without a NaN among the outputs each is IEEE's one answer, numpy's loops' too; with one, a
 * NaN's payload is whichever operand's a loop puts first (numpy's SIMD and scalar loops differ),
 * so None is returned and the caller computes in numpy. x, y, z: exact ndarrays of one native
 * float type and shape, aligned and C-contiguous (else TypeError or ValueError, nothing
 * computed). ~900 calls a zoo GPT capture's judge on 16-1,000 elements, where numpy's
 * ufuncs, their temporaries and the scalar's array were most of each. */
#define EW_LOOP(T, ADD, SUB, MUL, DIV, SQRT)                                                  \
    {                                                                                       \
        const T *xp = (const T *)xd, *yp = (const T *)yd, *zp = (const T *)zd;              \
        T *op = (T *)od, v = (T)s, one = (T)1, o = 0;                                       \
        int small = fabs(s) < 0.5;                                                          \
        for (npy_intp k = 0; k < n; k++) {                                                  \
            switch (code) {                                                                 \
            case 0: o = ADD(xp[k], yp ? yp[k] : v); break;                                  \
            case 1: o = MUL(xp[k], yp ? yp[k] : v); break;                                  \
            case 2: o = DIV(xp[k], yp ? yp[k] : v); break;                                  \
            case 3: o = SQRT(xp[k]); break;                                                 \
            case 4:                                                                         \
                o = small ? ADD(xp[k], MUL(v, SUB(yp[k], xp[k])))                           \
                          : SUB(yp[k], MUL(SUB(yp[k], xp[k]), SUB(one, v)));                \
                break;                                                                      \
            case 5: o = ADD(xp[k], MUL(MUL(v, yp[k]), zp[k])); break;                       \
            default: o = ADD(xp[k], DIV(MUL(v, yp[k]), zp[k])); break;                      \
            }                                                                               \
            if (o != o) return 1;                                                           \
            op[k] = o;                                                                      \
        }                                                                                   \
        return 0;                                                                           \
    }

/* 1 where an output is NaN (the rest then unwritten), else 0 */
static int d_ew(long code, const void *xd, const void *yd, const void *zd, double s, void *od,
                npy_intp n) EW_LOOP(double, __dadd_rn, __dsub_rn, __dmul_rn, __ddiv_rn, __dsqrt_rn)
static int f_ew(long code, const void *xd, const void *yd, const void *zd, double s, void *od,
                npy_intp n) EW_LOOP(float, __fadd_rn, __fsub_rn, __fmul_rn, __fdiv_rn, __fsqrt_rn)

/* an operand of ew: NULL for None (where `may_be_none`), else an ndarray of type t and x's
 * shape, aligned and C-contiguous; -1 with the error set */
static int ew_operand(PyObject *o, int t, PyArrayObject *x, int may_be_none,
                      PyArrayObject **out) {
    *out = NULL;
    if (o == Py_None && may_be_none) return 0;
    if (float_type(o) != t) {
        PyErr_SetString(PyExc_TypeError, "ew: operands must be ndarrays of x's native type");
        return -1;
    }
    PyArrayObject *a = (PyArrayObject *)o;
    if (!PyArray_SAMESHAPE(a, x) || !PyArray_IS_C_CONTIGUOUS(a) || !PyArray_ISALIGNED(a)) {
        PyErr_SetString(PyExc_ValueError, "ew: operands must be aligned, C-contiguous, of x's "
                                          "shape");
        return -1;
    }
    *out = a;
    return 0;
}

static PyObject *ew(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "ew(code, x, y, z, s) takes 5 arguments");
        return NULL;
    }
    long code = PyLong_AsLong(args[0]);
    if (code == -1 && PyErr_Occurred()) return NULL;
    if (code < 0 || code > 6) {
        PyErr_SetString(PyExc_ValueError, "ew: no such operation");
        return NULL;
    }
    double s = PyFloat_AsDouble(args[4]);
    if (s == -1.0 && PyErr_Occurred()) return NULL;
    int t = float_type(args[1]);
    if (t < 0) {
        PyErr_SetString(PyExc_TypeError, "ew: x must be an ndarray of a native float type");
        return NULL;
    }
    PyArrayObject *x = (PyArrayObject *)args[1], *y, *z;
    if (!PyArray_IS_C_CONTIGUOUS(x) || !PyArray_ISALIGNED(x)) {
        PyErr_SetString(PyExc_ValueError, "ew: x must be aligned and C-contiguous");
        return NULL;
    }
    /* y: an array for lerp, addcmul and addcdiv; an array or None for add, mul, div; z: an
     * array for addcmul and addcdiv; neither read by sqrt */
    if (ew_operand(args[2], t, x, code <= 3, &y) < 0 ||
        ew_operand(args[3], t, x, code <= 4, &z) < 0)
        return NULL;
    if (code == 3) y = z = NULL;
    PyObject *out = PyArray_SimpleNew(PyArray_NDIM(x), PyArray_DIMS(x), t);
    if (out == NULL) return NULL;
    const void *yd = y ? PyArray_DATA(y) : NULL, *zd = z ? PyArray_DATA(z) : NULL;
    npy_intp n = PyArray_SIZE(x);
    int nan = t == NPY_DOUBLE
                  ? d_ew(code, PyArray_DATA(x), yd, zd, s, PyArray_DATA((PyArrayObject *)out), n)
                  : f_ew(code, PyArray_DATA(x), yd, zd, s, PyArray_DATA((PyArrayObject *)out), n);
    if (nan) {
        Py_DECREF(out);
        Py_RETURN_NONE;
    }
    return out;
}

/* gelu(x, g, s, p): aten's exact GELU (approximate='none'), core.capture.aten_ref_pointwise's
 * _gelu_fwd (g None) or _gelu_bwd (g the incoming gradient), in one call without its numpy
 * temporaries (gpt-wide's MLP: ten 1 MB arrays a backward): the forms' own roundings in their
 * order, erf and exp by refmath's loops (refmath_simd.h, as M.erf and M.exp run them), over
 * chunks of GELU_CH elements kept in L1. s is M_SQRT1_2 and p the pdf's constant, as Python
 * floats, rounded to x's type here as np.asarray(c, x.dtype) rounds them:
 *   forward   (x * 0.5) * (1 + erf(x * s))
 *   backward  g * (0.5 * (1 + erf(x * s)) + x * (p * exp((x * x) * -0.5)))
 * No FMA (-ffp-contract=off and the _rn helpers). None where an output is NaN (its payload is
 * numpy's choice: the caller computes in numpy then), as ew. x, g: exact ndarrays of one native
 * float type and shape, aligned and C-contiguous (else TypeError or ValueError, nothing
 * computed). */
#define GELU_CH 256
#define GELU_LOOP(T, ERF, EXP, ADD, MUL)                                                      \
    {                                                                                       \
        const T *xp = (const T *)xd, *gp = (const T *)gd;                                   \
        T *op = (T *)od, sv = (T)s, pv = (T)p, half = (T)0.5, mhalf = (T)-0.5, one = (T)1;  \
        T t[GELU_CH], e[GELU_CH], u[GELU_CH];                                               \
        for (npy_intp c = 0; c < n; c += GELU_CH) {                                         \
            npy_intp m = n - c < GELU_CH ? n - c : GELU_CH;                                 \
            const T *x = xp + c;                                                            \
            T *o = op + c;                                                                  \
            for (npy_intp k = 0; k < m; k++) t[k] = MUL(x[k], sv);                          \
            ERF(t, e, (long long)m);                                                        \
            if (!gp) {                                                                      \
                for (npy_intp k = 0; k < m; k++) o[k] = MUL(MUL(x[k], half), ADD(one, e[k])); \
            } else {                                                                        \
                const T *g = gp + c;                                                        \
                for (npy_intp k = 0; k < m; k++) t[k] = MUL(MUL(x[k], x[k]), mhalf);        \
                EXP(t, u, (long long)m);                                                    \
                for (npy_intp k = 0; k < m; k++)                                            \
                    o[k] = MUL(g[k], ADD(MUL(half, ADD(one, e[k])), MUL(x[k], MUL(pv, u[k])))); \
            }                                                                               \
            int nan = 0;                                                                    \
            for (npy_intp k = 0; k < m; k++) nan |= o[k] != o[k];                           \
            if (nan) return 1;                                                              \
        }                                                                                   \
        return 0;                                                                           \
    }

/* 1 where an output is NaN (the rest then not all written), else 0 */
static int d_gelu(const void *xd, const void *gd, double s, double p, void *od, npy_intp n)
    GELU_LOOP(double, tsl_erf, tsl_exp, __dadd_rn, __dmul_rn)
static int f_gelu(const void *xd, const void *gd, double s, double p, void *od, npy_intp n)
    GELU_LOOP(float, tsl_erff, tsl_expf, __fadd_rn, __fmul_rn)

static PyObject *gelu(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "gelu(x, g, s, p) takes 4 arguments");
        return NULL;
    }
    double s = PyFloat_AsDouble(args[2]);
    if (s == -1.0 && PyErr_Occurred()) return NULL;
    double p = PyFloat_AsDouble(args[3]);
    if (p == -1.0 && PyErr_Occurred()) return NULL;
    int t = float_type(args[0]);
    if (t < 0) {
        PyErr_SetString(PyExc_TypeError, "gelu: x must be an ndarray of a native float type");
        return NULL;
    }
    PyArrayObject *x = (PyArrayObject *)args[0], *g;
    if (!PyArray_IS_C_CONTIGUOUS(x) || !PyArray_ISALIGNED(x)) {
        PyErr_SetString(PyExc_ValueError, "gelu: x must be aligned and C-contiguous");
        return NULL;
    }
    if (ew_operand(args[1], t, x, 1, &g) < 0) return NULL;
    PyObject *out = PyArray_SimpleNew(PyArray_NDIM(x), PyArray_DIMS(x), t);
    if (out == NULL) return NULL;
    const void *gd = g ? PyArray_DATA(g) : NULL;
    void *od = PyArray_DATA((PyArrayObject *)out);
    npy_intp n = PyArray_SIZE(x);
    int nan;
    Py_BEGIN_ALLOW_THREADS
    nan = t == NPY_DOUBLE ? d_gelu(PyArray_DATA(x), gd, s, p, od, n)
                          : f_gelu(PyArray_DATA(x), gd, s, p, od, n);
    Py_END_ALLOW_THREADS
    if (nan) {
        Py_DECREF(out);
        Py_RETURN_NONE;
    }
    return out;
}

/* sqsums(xs): a new 1-d array of each array's serial sum of squares, acc = +0.0; acc = acc +
 * (x * x) over its elements in C order (each square one rounding, then the add: the chain
 * serial_sum makes of a row of squares, core.capture.aten_ref_nn.vector_norms' padded matrix's
 * row without its +0.0 padding, which cannot move a sum of squares), for a list of
 * C-contiguous aligned ndarrays of one native float type; None where a sum is NaN (its payload
 * is the chain's choice: numpy's then). A _foreach_norm's 29 small gradients in one call (its
 * padded matrix's mask, fill and sum were ~50 us). Anything else raises (TypeError,
 * ValueError), nothing computed. */
static PyObject *sqsums(PyObject *self, PyObject *xs) {
    (void)self;
    if (!PyList_CheckExact(xs) || PyList_GET_SIZE(xs) == 0) {
        PyErr_SetString(PyExc_TypeError, "sqsums: xs must be a non-empty list of ndarrays");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(xs);
    int t = float_type(PyList_GET_ITEM(xs, 0));
    if (t < 0) {
        PyErr_SetString(PyExc_TypeError, "sqsums: xs must be ndarrays of one native float type");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = PyList_GET_ITEM(xs, i);
        if (float_type(o) != t) {
            PyErr_SetString(PyExc_TypeError,
                            "sqsums: xs must be ndarrays of one native float type");
            return NULL;
        }
        if (!PyArray_IS_C_CONTIGUOUS((PyArrayObject *)o) ||
            !PyArray_ISALIGNED((PyArrayObject *)o)) {
            PyErr_SetString(PyExc_ValueError, "sqsums: xs must be aligned and C-contiguous");
            return NULL;
        }
    }
    npy_intp dims[1] = {n};
    PyObject *out = PyArray_SimpleNew(1, dims, t);
    if (out == NULL) return NULL;
    int nan = 0;
    for (Py_ssize_t i = 0; i < n && !nan; i++) {
        PyArrayObject *a = (PyArrayObject *)PyList_GET_ITEM(xs, i);
        npy_intp m = PyArray_SIZE(a);
        if (t == NPY_DOUBLE) {
            const double *x = (const double *)PyArray_DATA(a);
            double acc = 0.0;
            for (npy_intp k = 0; k < m; k++) acc = __dadd_rn(acc, __dmul_rn(x[k], x[k]));
            ((double *)PyArray_DATA((PyArrayObject *)out))[i] = acc;
            nan = acc != acc;
        } else {
            const float *x = (const float *)PyArray_DATA(a);
            float acc = 0.0f;
            for (npy_intp k = 0; k < m; k++) acc = __fadd_rn(acc, __fmul_rn(x[k], x[k]));
            ((float *)PyArray_DATA((PyArrayObject *)out))[i] = acc;
            nan = acc != acc;
        }
    }
    if (nan) {
        Py_DECREF(out);
        Py_RETURN_NONE;
    }
    return out;
}

/* decode(a, arrays, ids, chain, other, missing): the capture judge's argument walk
 * (core.capture.judge._decode_ids, its Python twin and the tests' oracle): a new list of list
 * a's entries, a value {"T": id} (a dict of that one key) as chain[id] where chain holds it
 * (not None), else arrays[id] (a value whose array is None: missing(id) is called, and it
 * raises), each id read appended to list ids; a list entry walked the same way (a new list); a
 * None, bool, int, float or str (exact types) kept; any other entry as other(x, arrays, chain).
 * ~1,500 calls a zoo GPT capture's judge on a few entries each, where the Python walk's
 * ~0.6 us a call was its largest bookkeeping. a, ids: lists; chain: a dict (else TypeError). */
static PyObject *DECODE_T; /* "T" */

static PyObject *decode_walk(PyObject *a, PyObject *arrays, PyObject *ids, PyObject *chain,
                             PyObject *other, PyObject *missing) {
    PyObject *out = PyList_New(0);
    if (out == NULL) return NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(a); i++) {
        PyObject *x = PyList_GET_ITEM(a, i);
        PyObject *y = NULL, *v = NULL;
        PyTypeObject *t = Py_TYPE(x);
        Py_INCREF(x);
        if (x == Py_None || t == &PyBool_Type || t == &PyLong_Type || t == &PyFloat_Type ||
            t == &PyUnicode_Type) {
            Py_INCREF(x);
            y = x;
        } else if (t == &PyDict_Type && PyDict_GET_SIZE(x) == 1 &&
                   (v = PyDict_GetItemWithError(x, DECODE_T)) != NULL) {
            Py_INCREF(v);
            PyObject *c = PyDict_GetItemWithError(chain, v); /* borrowed */
            if (c == NULL && PyErr_Occurred()) goto fail;
            if (c != NULL && c != Py_None) {
                Py_INCREF(c);
                y = c;
            } else {
                y = PyObject_GetItem(arrays, v);
                if (y == NULL) goto fail;
                if (y == Py_None) {
                    Py_CLEAR(y);
                    PyObject *r = PyObject_CallOneArg(missing, v);
                    if (r != NULL) {
                        Py_DECREF(r);
                        PyErr_SetString(PyExc_RuntimeError, "decode: missing() returned");
                    }
                    goto fail;
                }
            }
            if (PyList_Append(ids, v) < 0) goto fail;
            Py_CLEAR(v);
        } else if (PyErr_Occurred()) { /* (the dict's lookup of "T" failed) */
            goto fail;
        } else if (t == &PyList_Type) {
            if (Py_EnterRecursiveCall(" in decode")) goto fail;
            y = decode_walk(x, arrays, ids, chain, other, missing);
            Py_LeaveRecursiveCall();
            if (y == NULL) goto fail;
        } else {
            y = PyObject_CallFunctionObjArgs(other, x, arrays, chain, NULL);
            if (y == NULL) goto fail;
        }
        if (PyList_Append(out, y) < 0) goto fail;
        Py_DECREF(y);
        Py_DECREF(x);
        continue;
    fail:
        Py_XDECREF(y);
        Py_XDECREF(v);
        Py_DECREF(x);
        Py_DECREF(out);
        return NULL;
    }
    return out;
}

static PyObject *decode(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError,
                        "decode(a, arrays, ids, chain, other, missing) takes 6 arguments");
        return NULL;
    }
    if (!PyList_CheckExact(args[0]) || !PyList_CheckExact(args[2]) ||
        !PyDict_CheckExact(args[3])) {
        PyErr_SetString(PyExc_TypeError, "decode: a and ids must be lists, chain a dict");
        return NULL;
    }
    return decode_walk(args[0], args[1], args[2], args[3], args[4], args[5]);
}

static PyMethodDef METHODS[] = {
    {"apply", (PyCFunction)(void (*)(void))apply, METH_FASTCALL, "apply(i, x): f_i(x), new"},
    {"tanh_grad", (PyCFunction)(void (*)(void))tanh_grad, METH_FASTCALL,
     "tanh_grad(g, y): g * (1 - y * y), new"},
    {"fdiff", (PyCFunction)(void (*)(void))fdiff, METH_FASTCALL,
     "fdiff(ref, rec, kind, block, full): core.native.float_diff's numbers, or 'nan'"},
    {"outcmp", (PyCFunction)(void (*)(void))outcmp, METH_FASTCALL,
     "outcmp(g, rec, t, kinds, block): the judge's numbers of one output, or None"},
    {"colsum", (PyCFunction)(void (*)(void))colsum, METH_FASTCALL,
     "colsum(x): the serial sums of 2-d x's columns over its rows, new"},
    {"chansum", (PyCFunction)(void (*)(void))chansum, METH_FASTCALL,
     "chansum(x): the serial sums of 3-d x over every axis but the second, new"},
    {"addr", (PyCFunction)addr, METH_O, "addr(x): x.ctypes.data"},
    {"ew", (PyCFunction)(void (*)(void))ew, METH_FASTCALL,
     "ew(code, x, y, z, s): an optimizer's tiny elementwise op, new; None where one is NaN"},
    {"zero_le", (PyCFunction)(void (*)(void))zero_le, METH_FASTCALL,
     "zero_le(x, t, v): x <= t ? +0.0 : v elementwise (relu, threshold_backward), new"},
    {"gelu", (PyCFunction)(void (*)(void))gelu, METH_FASTCALL,
     "gelu(x, g, s, p): aten's exact GELU (g None) or its backward, new; None where NaN"},
    {"sqsums", (PyCFunction)sqsums, METH_O,
     "sqsums(xs): each array's serial sum of squares, new; None where one is NaN"},
    {"decode", (PyCFunction)(void (*)(void))decode, METH_FASTCALL,
     "decode(a, arrays, ids, chain, other, missing): the capture judge's argument walk"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_ts_refmath", NULL, -1, METHODS,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__ts_refmath(void) {
    import_array(); /* numpy's C API (returns NULL with ImportError when it cannot load) */
    FD_NAN = PyUnicode_InternFromString("nan");
    if (FD_NAN == NULL) return NULL;
    DECODE_T = PyUnicode_InternFromString("T");
    if (DECODE_T == NULL) return NULL;
    return PyModule_Create(&MODULE);
}
