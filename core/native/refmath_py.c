/* refmath's C twin as a tiny CPython extension: one call per array, without ctypes' argument
 * conversion (ctypes costs ~2 us a call, more than tanh of 16 elements). The same loops as
 * refmath_host.c (which core.native loads through ctypes when Python.h is not installed).
 *
 * apply(i, x): a new C-contiguous array y = f_i(x) elementwise, f_i FUNCS[i / 2] in double (i
 * even) or float (i odd); x an ndarray of that exact native type, any layout. It allocates y
 * through numpy's C API: a small array's np.empty and two buffer exports cost more than f_i of
 * 16 elements (~0.15 us a call against ~0.4 us, issue 29).
 *
 * tanh_grad(g, y): a new array g * (1 - y * y) elementwise, the tape's tanh backward
 * (core.ops.elementwise), here because this is the one native entry point cheap enough to call
 * per node: one call instead of numpy's three ufuncs and two temporaries (issue 29). g and y
 * must be C-contiguous ndarrays of one native float type and one shape; anything else raises
 * (TypeError, ValueError), so a caller can fall back to the numpy spelling.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>

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
    /* a new reference: x itself when C-contiguous, else a C-contiguous copy */
    PyArrayObject *x = PyArray_GETCONTIGUOUS((PyArrayObject *)args[1]);
    if (x == NULL) return NULL;
    PyObject *y = PyArray_SimpleNew(PyArray_NDIM(x), PyArray_DIMS(x), PyArray_TYPE(x));
    if (y != NULL) LOOPS[i](PyArray_DATA(x), PyArray_DATA((PyArrayObject *)y), PyArray_SIZE(x));
    Py_DECREF(x);
    return y;
}

static PyObject *tanh_grad(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "tanh_grad(g, y) takes 2 arguments");
        return NULL;
    }
    int t = float_type(args[0]);
    if (t < 0 || float_type(args[1]) != t) {
        PyErr_SetString(PyExc_TypeError,
                        "tanh_grad: g and y must be ndarrays of one native float type");
        return NULL;
    }
    PyArrayObject *g = (PyArrayObject *)args[0], *y = (PyArrayObject *)args[1];
    if (!PyArray_SAMESHAPE(g, y) || !PyArray_IS_C_CONTIGUOUS(g) || !PyArray_IS_C_CONTIGUOUS(y)) {
        PyErr_SetString(PyExc_ValueError, "tanh_grad: g and y must be C-contiguous, one shape");
        return NULL;
    }
    PyObject *out = PyArray_SimpleNew(PyArray_NDIM(y), PyArray_DIMS(y), t);
    if (out == NULL) return NULL;
    npy_intp n = PyArray_SIZE(y);
    if (t == NPY_DOUBLE)
        d_tanh_grad(PyArray_DATA(g), PyArray_DATA(y), PyArray_DATA((PyArrayObject *)out), n);
    else
        f_tanh_grad(PyArray_DATA(g), PyArray_DATA(y), PyArray_DATA((PyArrayObject *)out), n);
    return out;
}

static PyMethodDef METHODS[] = {
    {"apply", (PyCFunction)(void (*)(void))apply, METH_FASTCALL, "apply(i, x): f_i(x), new"},
    {"tanh_grad", (PyCFunction)(void (*)(void))tanh_grad, METH_FASTCALL,
     "tanh_grad(g, y): g * (1 - y * y), new"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_ts_refmath", NULL, -1, METHODS,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__ts_refmath(void) {
    import_array(); /* numpy's C API (returns NULL with ImportError when it cannot load) */
    return PyModule_Create(&MODULE);
}
