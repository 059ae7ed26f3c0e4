/* refmath's C twin as a tiny CPython extension: one call per array, without ctypes' argument
 * conversion (ctypes costs ~2 us a call, more than tanh of 16 elements). The same loops as
 * refmath_host.c (which core.native loads through ctypes when Python.h is not installed).
 *
 * run(i, x, y): y = f_i(x) elementwise; x, y C-contiguous buffers of equal size; f_i is
 * FUNCS[i / 2] in double (i even) or float (i odd). Python checks dtypes before calling.
 *
 * tanh_grad(g, y, out): out = g * (1 - y * y) elementwise, the tape's tanh backward
 * (core.ops.elementwise), here because this is the one native entry point cheap enough to call
 * per node: one call instead of numpy's three ufuncs and two temporaries (issue 29). It checks
 * everything itself (one native float type, one shape, C-contiguous, out writable) and raises
 * ValueError otherwise, so a caller can fall back to the numpy spelling.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "intrinsics_host.h"
#include "refmath.cuh"
#include "refmath_simd.h"

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

static PyObject *run(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "run(i, x, y) takes 3 arguments");
        return NULL;
    }
    long i = PyLong_AsLong(args[0]);
    if (i == -1 && PyErr_Occurred()) return NULL;
    if (i < 0 || i >= 16) {
        PyErr_SetString(PyExc_ValueError, "run: no such function");
        return NULL;
    }
    Py_ssize_t item = (i & 1) ? 4 : 8;
    Py_buffer bx, by;
    if (PyObject_GetBuffer(args[1], &bx, PyBUF_C_CONTIGUOUS) < 0) return NULL;
    if (PyObject_GetBuffer(args[2], &by, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&bx);
        return NULL;
    }
    if (bx.len != by.len || bx.len % item || bx.itemsize != item || by.itemsize != item) {
        PyBuffer_Release(&bx);
        PyBuffer_Release(&by);
        PyErr_SetString(PyExc_ValueError, "run: x and y must be equal-size arrays of the dtype");
        return NULL;
    }
    LOOPS[i](bx.buf, by.buf, bx.len / item);
    PyBuffer_Release(&bx);
    PyBuffer_Release(&by);
    Py_RETURN_NONE;
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

/* "d" or "f" exactly: the native-order float64/float32 a numpy array exports (">d" and friends
 * are refused) */
static int float_format(const Py_buffer *b) {
    const char *f = b->format;
    if (f == NULL || f[0] == '\0' || f[1] != '\0') return 0;
    return (f[0] == 'd' && b->itemsize == 8) ? 8 : (f[0] == 'f' && b->itemsize == 4) ? 4 : 0;
}

static PyObject *tanh_grad(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "tanh_grad(g, y, out) takes 3 arguments");
        return NULL;
    }
    const int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT;
    Py_buffer b[3];
    int got = 0;
    PyObject *result = NULL;
    for (; got < 3; got++)
        if (PyObject_GetBuffer(args[got], &b[got], got == 2 ? flags | PyBUF_WRITABLE : flags) < 0)
            goto done;
    int item = float_format(&b[0]);
    int same = item != 0 && float_format(&b[1]) == item && float_format(&b[2]) == item;
    for (int k = 1; same && k < 3; k++) {
        same = b[k].ndim == b[0].ndim && b[k].len == b[0].len;
        for (int d = 0; same && d < b[0].ndim; d++) same = b[k].shape[d] == b[0].shape[d];
    }
    if (!same) {
        PyErr_SetString(PyExc_ValueError,
                        "tanh_grad: g, y and out must be float64 or float32 arrays of one "
                        "dtype and shape");
        goto done;
    }
    if (item == 8)
        d_tanh_grad((const double *)b[0].buf, (const double *)b[1].buf, (double *)b[2].buf,
                    b[0].len / 8);
    else
        f_tanh_grad((const float *)b[0].buf, (const float *)b[1].buf, (float *)b[2].buf,
                    b[0].len / 4);
    Py_INCREF(Py_None);
    result = Py_None;
done:
    while (got > 0) PyBuffer_Release(&b[--got]);
    return result;
}

static PyMethodDef METHODS[] = {
    {"run", (PyCFunction)(void (*)(void))run, METH_FASTCALL, "run(i, x, y): y = f_i(x)"},
    {"tanh_grad", (PyCFunction)(void (*)(void))tanh_grad, METH_FASTCALL,
     "tanh_grad(g, y, out): out = g * (1 - y * y)"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_ts_refmath", NULL, -1, METHODS,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__ts_refmath(void) { return PyModule_Create(&MODULE); }
