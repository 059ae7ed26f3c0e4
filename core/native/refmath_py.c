/* refmath's C twin as a tiny CPython extension: one call per array, without ctypes' argument
 * conversion (ctypes costs ~2 us a call, more than tanh of 16 elements). The same loops as
 * refmath_host.c (which core.native loads through ctypes when Python.h is not installed).
 *
 * run(i, x, y): y = f_i(x) elementwise; x, y C-contiguous buffers of equal size; f_i is
 * FUNCS[i / 2] in double (i even) or float (i odd). Python checks dtypes before calling.
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

static PyMethodDef METHODS[] = {
    {"run", (PyCFunction)(void (*)(void))run, METH_FASTCALL, "run(i, x, y): y = f_i(x)"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_ts_refmath", NULL, -1, METHODS,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__ts_refmath(void) { return PyModule_Create(&MODULE); }
