/* The recorder's per-op path in C (app/capture/recorder.py, ``Recorder``): the common case of
 * looking up an argument's value, of recording an op's output, and of encoding an op's
 * positional arguments, through the CPython API only (torch's tensors are read through their
 * Python attributes: no libtorch header, no ABI of torch's). Every uncommon branch calls the
 * recorder's Python method, which does the whole thing over again from the start: this file
 * only answers where nothing has been changed yet, so a fallback sees what the Python path
 * alone would (the same value ids, digests and rows; tests/capture/test_recorder_hot.py).
 *
 * Built at first use by app/capture/recorder_native.py (gcc, core.cache's KernelCache).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <math.h>
#include <structmember.h>

/* set once a process by ``setup`` */
static PyObject *g_tensor;       /* torch.Tensor */
static PyObject *g_parameter;    /* torch.nn.Parameter */
static PyObject *g_strided;      /* torch.strided */
static PyObject *g_globals;      /* app/capture/recorder.py's globals: its thresholds and the
                                   * numpy dtypes read at each use (a test may change them) */
static PyObject *g_frombuffer;   /* numpy.frombuffer */
static PyObject *g_autograd_node;  /* torch._C._current_autograd_node */
static PyObject *s__param_ptr, *s_param_written, *s__by_ptr, *s_alias_written,
    *s_storage_offset, *s_element_size;
static PyObject *s_version, *s_dtype, *s_is_cpu, *s_layout, *s_is_neg, *s_nbytes, *s_shape,
    *s_is_contiguous, *s_data_ptr, *s_reshape, *s_cpu, *s_T, *s_next_uid, *s_n_hashed,
    *s_hashes_only, *s_stored_bytes, *s_max_bytes, *s_hasher, *s_spool, *s_new_value,
    *s_v_dtype, *s_v_shape, *s_v_sha, *s_v_array, *s_devices, *s_uid, *s_seen, *s_numel,
    *s_sha_like, *s_names_of, *s_op, *s_op_rec, *s_record, *s_broken, *s_source, *s_code_skip,
    *s_src_at, *s_derive_views, *s_uninit, *s_uninit_vids, *s_is_nested, *s_dim,
    *s_in_backward, *s_after_backward,
    *s_in_optimizer, *s_modules, *s_module_from, *s_module_path, *s_sequence_nr,
    *s_backward_module, *s_empty, *s_last_ones_like, *s_losses, *s_step, *s_tables, *s_rows,
    *s_DERIVE_MIN, *s_NUMPY_DTYPES, *s_base, *s_recording, *s_quiet, *s_thread,
    *s_set_eval_frame, *s_graph_task_id, *s_is_quantized, *s_is_conj, *s_stride, *s_derived,
    *s_derived_later, *s_derived_digest, *s_put, *s_torch_dispatch, *s_fresh_reads,
    *s_note_strided, *s_is_zerotensor, *s__np_watch;

/* torch.Tensor's own descriptors of the attributes and methods read here (found once by
 * ``setup``): for a plain Tensor or Parameter, the one an attribute lookup finds (neither type
 * defines them again; a descriptor the two do not share is not used), called without the
 * lookup (its MRO walk and, for a method, the instance dict's) */
#define NDESC 16
static int is_plain_tensor(PyObject *t);
static PyObject *d_names[NDESC], *d_descr[NDESC];
static int d_n;

static PyObject *descr_of(PyObject *name) {
    for (int i = 0; i < d_n; i++)
        if (d_names[i] == name)
            return d_descr[i];
    return NULL;
}

/* t.<name> */
static PyObject *tget(PyObject *t, PyObject *name) {
    PyObject *dsc;
    if (is_plain_tensor(t) && (dsc = descr_of(name)) != NULL
        && Py_IS_TYPE(dsc, &PyGetSetDescr_Type))
        return Py_TYPE(dsc)->tp_descr_get(dsc, t, (PyObject *)Py_TYPE(t));
    return PyObject_GetAttr(t, name);
}

/* t.<name>() */
static PyObject *tcall(PyObject *t, PyObject *name) {
    PyObject *dsc;
    if (is_plain_tensor(t) && (dsc = descr_of(name)) != NULL
        && Py_IS_TYPE(dsc, &PyMethodDescr_Type))
        return PyObject_CallOneArg(dsc, t);
    return PyObject_CallMethodNoArgs(t, name);
}

/* the descriptors (``setup``): those torch.Tensor and torch.nn.Parameter share, of a
 * getset's or a method's type */
static int find_descriptors(void) {
    PyObject *names[] = {s_version, s_dtype, s_layout, s_nbytes, s_shape, s_base, s_is_cpu,
                         s_is_quantized, s_data_ptr, s_stride, s_is_neg, s_is_contiguous,
                         s_numel, s_is_conj, s_dim, s_is_zerotensor};
    for (int i = 0; i < d_n; i++)
        Py_CLEAR(d_descr[i]);
    d_n = 0;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]) && d_n < NDESC; i++) {
        PyObject *a = _PyType_Lookup((PyTypeObject *)g_tensor, names[i]);
        PyObject *b = _PyType_Lookup((PyTypeObject *)g_parameter, names[i]);
        if (a == NULL || a != b || !(Py_IS_TYPE(a, &PyGetSetDescr_Type)
                                     || Py_IS_TYPE(a, &PyMethodDescr_Type)))
            continue;
        Py_INCREF(a);
        d_names[d_n] = names[i];
        d_descr[d_n++] = a;
    }
    return 0;
}

/* dict[name], borrowed; NULL with an exception when it is missing */
static PyObject *item(PyObject *d, PyObject *name) {
    PyObject *v = PyDict_GetItemWithError(d, name);
    if (v == NULL && !PyErr_Occurred())
        PyErr_SetObject(PyExc_KeyError, name);
    return v;
}

/* a global of recorder.py, borrowed; NULL with an exception */
static PyObject *glob(PyObject *name) { return item(g_globals, name); }

/* an int global of recorder.py; -1 with an exception */
static long long glob_ll(PyObject *name) {
    PyObject *v = glob(name);
    return v == NULL ? -1 : PyLong_AsLongLong(v);
}

/* One recorder's state: its instance dict (every attribute read afresh at each call: the
 * Python path reassigns ``hasher``, ``spool``, ``stored_bytes`` ...), its digest and the
 * Python methods a fallback calls. */
typedef struct {
    PyObject_HEAD
    PyObject *rec;       /* the Recorder */
    PyObject *dict;      /* rec.__dict__ */
    PyObject *hex;       /* rec._hex */
    PyObject *py_made;   /* Recorder._made (unbound) */
    PyObject *py_value_of;  /* Recorder._value_of (unbound) */
    PyObject *py_encode;    /* rec._encode (bound) */
    long long ops;       /* ops recorded here (the tests' proof that this path ran) */
    /* the recorder's containers, bound once (``Recorder.__init__`` makes them, nothing
     * assigns them again: their contents change, never which object they are) */
    PyObject *c_uid;
    PyObject *c_seen;
    PyObject *c_v_dtype;
    PyObject *c_v_shape;
    PyObject *c_v_sha;
    PyObject *c_v_array;
    PyObject *c_rows;
    PyObject *c_devices;
    PyObject *c_names_of;
    PyObject *c_code_skip;
    PyObject *c_src_at;
    PyObject *c_derived;
    PyObject *c_uninit;
    PyObject *c_uninit_vids; /* ``Recorder._uninit_vids`` */
    PyObject *c_modules;
    PyObject *c_losses;
    vectorcallfunc vectorcall;  /* the instance called as the mode's ``__torch_dispatch__`` */
} Hot;

static int is_plain_tensor(PyObject *t) {
    return (PyObject *)Py_TYPE(t) == g_tensor || (PyObject *)Py_TYPE(t) == g_parameter;
}


/* t._version as a new reference; NULL with no exception set: it has none (an inference
 * tensor's RuntimeError, cleared); NULL with one: another error */
static PyObject *version_of(PyObject *t) {
    PyObject *v = tget(t, s_version);
    if (v == NULL && PyErr_ExceptionMatches(PyExc_RuntimeError))
        PyErr_Clear();
    return v;
}

/* t.data_ptr() in *p (``recorder._ptr``): -1 for a tensor without one (sparse, a wrapper
 * subclass: RuntimeError or NotImplementedError, cleared); 0, or -1 with another error */
static int ptr_of(PyObject *t, long long *p) {
    PyObject *v = tcall(t, s_data_ptr);
    if (v == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_RuntimeError)
            && !PyErr_ExceptionMatches(PyExc_NotImplementedError))
            return -1;
        PyErr_Clear();
        *p = -1;
        return 0;
    }
    *p = PyLong_AsLongLong(v);
    Py_DECREF(v);
    return *p == -1 && PyErr_Occurred() ? -1 : 0;
}

/* the uid of t when the recorder knows it (borrowed), else NULL (no exception): the entry
 * ``(weak reference, uid, data pointer)`` of t itself, at the data pointer ``p`` t has now
 * (``t.data = x`` gives it other memory, no aten op seen: a new uid) */
static PyObject *known_uid(PyObject *uid, PyObject *t, long long p, PyObject **idp) {
    PyObject *id = PyLong_FromVoidPtr(t);
    if (id == NULL)
        return NULL;
    PyObject *e = PyDict_GetItemWithError(uid, id);
    if (idp != NULL)
        *idp = id;
    else
        Py_DECREF(id);
    if (e == NULL || !PyTuple_Check(e) || PyTuple_GET_SIZE(e) != 3)
        return NULL;
    PyObject *ref = PyTuple_GET_ITEM(e, 0);
    if (!PyWeakref_Check(ref) || PyWeakref_GET_OBJECT(ref) != t)
        return NULL;
    long long q = PyLong_AsLongLong(PyTuple_GET_ITEM(e, 2));
    if (q == -1 && PyErr_Occurred())
        return NULL;
    return q == p ? PyTuple_GET_ITEM(e, 1) : NULL;
}


/* attribute ``name`` of t is True (1), False (0), error (-1); a method when ``call`` */
static int flag(PyObject *t, PyObject *name, int call) {
    PyObject *v = call ? tcall(t, name) : tget(t, name);
    if (v == NULL)
        return -1;
    int r = PyObject_IsTrue(v);
    Py_DECREF(v);
    return r;
}

static int add_to(PyObject *d, PyObject *name, long long by) {
    PyObject *v = item(d, name);
    if (v == NULL)
        return -1;
    PyObject *b = PyLong_FromLongLong(by);
    if (b == NULL)
        return -1;
    PyObject *s = PyNumber_Add(v, b);
    Py_DECREF(b);
    if (s == NULL)
        return -1;
    int r = PyDict_SetItem(d, name, s);
    Py_DECREF(s);
    return r;
}

static int append_to(PyObject *d, PyObject *name, PyObject *v) {
    PyObject *l = item(d, name);
    if (l == NULL)
        return -1;
    return PyList_Append(l, v);
}

#define GATHER_DIMS 64

/* t's elements in C order (shape ``shape``, a tuple; ``n`` bytes in all, its ``nbytes``) read
 * from ``p``, its first element's address, along its strides: a new bytes object, the bytes a
 * C-order copy holds (``_c_order``); NULL with no exception where it is not a case known here
 * (more than GATHER_DIMS dimensions, an item size that does not divide ``n``: the Python's),
 * NULL with one on an error. Dimensions of one element are dropped and dimensions that are
 * contiguous over each other merged, so that the innermost loop is one ``memcpy`` of a row
 * where the last dimension's elements are adjacent (a transpose's rows, a slice's). */
static PyObject *gathered(PyObject *t, const char *p, PyObject *shape, long long n) {
    Py_ssize_t nd = PyTuple_GET_SIZE(shape);
    if (nd > GATHER_DIMS)
        return NULL;
    long long size[GATHER_DIMS], stride[GATHER_DIMS], numel = 1;
    for (Py_ssize_t i = 0; i < nd; i++) {
        size[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, i));
        if (size[i] == -1 && PyErr_Occurred())
            return NULL;
        numel *= size[i];
    }
    if (numel <= 0 || n <= 0 || n % numel != 0)
        return NULL;
    long long item = n / numel;
    PyObject *st = tcall(t, s_stride);
    if (st == NULL)
        return NULL;
    if (!PyTuple_Check(st) || PyTuple_GET_SIZE(st) != nd) {
        Py_DECREF(st);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < nd; i++) {
        stride[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(st, i));
        if (stride[i] == -1 && PyErr_Occurred()) {
            Py_DECREF(st);
            return NULL;
        }
    }
    Py_DECREF(st);
    /* in bytes, size-1 dimensions dropped, contiguous neighbours merged */
    long long sz[GATHER_DIMS], sb[GATHER_DIMS];
    int k = 0;
    for (Py_ssize_t i = 0; i < nd; i++) {
        if (size[i] == 1)
            continue;
        if (stride[i] < 0)
            return NULL;
        if (k > 0 && sb[k - 1] == stride[i] * item * size[i]) {
            sz[k - 1] *= size[i];
            sb[k - 1] = stride[i] * item;
        } else {
            sz[k] = size[i];
            sb[k++] = stride[i] * item;
        }
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)n);
    if (out == NULL)
        return NULL;
    char *o = PyBytes_AS_STRING(out);
    if (k == 0) {  /* one element */
        memcpy(o, p, (size_t)item);
        return out;
    }
    /* the innermost dimension: one memcpy where its elements are adjacent, else item by item */
    long long inner = sz[k - 1], istep = sb[k - 1];
    size_t row = (size_t)(inner * item);
    long long idx[GATHER_DIMS] = {0};
    const char *src = p;
    for (;;) {
        if (istep == item) {
            memcpy(o, src, row);
        } else if (item == 4) {
            for (long long j = 0; j < inner; j++)
                memcpy(o + 4 * j, src + j * istep, 4);
        } else if (item == 8) {
            for (long long j = 0; j < inner; j++)
                memcpy(o + 8 * j, src + j * istep, 8);
        } else if (item == 2) {
            for (long long j = 0; j < inner; j++)
                memcpy(o + 2 * j, src + j * istep, 2);
        } else {
            for (long long j = 0; j < inner; j++)
                memcpy(o + item * j, src + j * istep, (size_t)item);
        }
        o += row;
        int d = k - 2;
        for (; d >= 0; d--) {
            src += sb[d];
            if (++idx[d] < sz[d])
                break;
            src -= sb[d] * sz[d];
            idx[d] = 0;
        }
        if (d < 0)
            break;
    }
    return out;
}

/* ``Recorder._new_value(t, True)``'s common case: a plain CPU tensor, C-contiguous, of a dtype
 * numpy holds as it is, no neg bit, whose memory is hashed where it lies (hashes only or over
 * the budget) or stored as a bytes copy (no spool; hashed inline). A new reference to the value
 * id; Py_None (a new reference) where it is not that case and nothing was changed; NULL: an
 * error. Every check comes before the first change. */
static PyObject *new_value_fast(Hot *self, PyObject *t) {
    PyObject *d = self->dict, *res = NULL;
    PyObject *dtype = NULL, *nb = NULL, *shape = NULL, *pv = NULL, *buf = NULL, *h = NULL,
             *copy = NULL;
    if (!is_plain_tensor(t))
        Py_RETURN_NONE;
    if ((dtype = tget(t, s_dtype)) == NULL)
        return NULL;
    PyObject *np_dtypes = glob(s_NUMPY_DTYPES), *name;
    name = np_dtypes ? PyDict_GetItemWithError(np_dtypes, dtype) : NULL;  /* borrowed */
    Py_DECREF(dtype);
    if (name == NULL) {
        if (PyErr_Occurred())
            return NULL;
        Py_RETURN_NONE;
    }
    int f = flag(t, s_is_cpu, 0);
    if (f <= 0)
        return f < 0 ? NULL : (Py_INCREF(Py_None), Py_None);
    PyObject *layout = tget(t, s_layout);
    if (layout == NULL)
        return NULL;
    Py_DECREF(layout);
    if (layout != g_strided)
        Py_RETURN_NONE;
    if ((f = flag(t, s_is_neg, 1)) != 0)
        return f < 0 ? NULL : (Py_INCREF(Py_None), Py_None);
    /* a nested tensor (strided, but no one shape: the transformer's fast path): the Python's */
    if ((f = flag(t, s_is_nested, 0)) != 0)
        return f < 0 ? NULL : (Py_INCREF(Py_None), Py_None);
    /* a ZeroTensor (forward AD's zero tangents: zeros, its memory never written): the
     * Python's */
    if ((f = flag(t, s_is_zerotensor, 1)) != 0)
        return f < 0 ? NULL : (Py_INCREF(Py_None), Py_None);
    if ((nb = tget(t, s_nbytes)) == NULL)
        return NULL;
    long long n = PyLong_AsLongLong(nb);
    if (n == -1 && PyErr_Occurred())
        goto done;
    PyObject *hashes_only = item(d, s_hashes_only), *stored = item(d, s_stored_bytes),
             *maxb = item(d, s_max_bytes), *hasher = item(d, s_hasher), *spool = item(d, s_spool);
    if (!hashes_only || !stored || !maxb || !hasher || !spool)
        goto done;
    int hashed = PyObject_IsTrue(hashes_only);
    if (hashed < 0)
        goto done;
    if (!hashed) {
        long long sb = PyLong_AsLongLong(stored), mb = PyLong_AsLongLong(maxb);
        if (PyErr_Occurred())
            goto done;
        hashed = sb + n > mb;
    }
    /* a hashing thread (its values from ``_ASYNC_MIN`` bytes): the Python's */
    if (hasher != Py_None)
        goto none;
    int contiguous = flag(t, s_is_contiguous, 1);
    if (contiguous < 0)
        goto done;
    /* not C-contiguous: its elements gathered in C order (the bytes ``_c_order`` copies),
     * hashed or stored to the spool from the copy; a private array in memory: the Python's */
    if (!contiguous && !hashed && spool == Py_None)
        goto none;
    if (!contiguous && (f = flag(t, s_is_conj, 1)) != 0) {
        if (f < 0)
            goto done;
        goto none;
    }
    if ((pv = tcall(t, s_data_ptr)) == NULL)
        goto done;
    void *p = PyLong_AsVoidPtr(pv);
    if (p == NULL) {
        if (PyErr_Occurred())
            goto done;
        goto none;  /* no memory: the Python (numpy's view) */
    }
    PyObject *shp = tget(t, s_shape);
    if (shp == NULL)
        goto done;
    shape = PySequence_Tuple(shp);
    Py_DECREF(shp);
    if (shape == NULL)
        goto done;
    if (!contiguous) {
        if ((copy = gathered(t, (const char *)p, shape, n)) == NULL) {
            if (PyErr_Occurred())
                goto done;
            goto none;
        }
        p = PyBytes_AS_STRING(copy);
    }
    /* the common case: from here on it is recorded */
    PyObject *devices = self->c_devices, *v_dtype = self->c_v_dtype;
    if (devices == NULL || v_dtype == NULL || PySet_Add(devices, s_cpu) < 0)
        goto done;
    PyObject *vid = PyLong_FromSsize_t(PyList_GET_SIZE(v_dtype));
    if (vid == NULL)
        goto done;
    if (PyList_Append(v_dtype, name) < 0 || PyList_Append(self->c_v_shape, shape) < 0) {
        Py_DECREF(vid);
        goto done;
    }
    if (hashed) {
        /* its bytes where they lie: a read-only memoryview over the tensor's memory */
        buf = PyMemoryView_FromMemory((char *)p, (Py_ssize_t)n, PyBUF_READ);
        if (buf == NULL || PyList_Append(self->c_v_array, Py_None) < 0 || add_to(d, s_n_hashed, 1) < 0
            || (h = PyObject_CallOneArg(self->hex, buf)) == NULL
            || PyList_Append(self->c_v_sha, h) < 0) {
            Py_DECREF(vid);
            goto done;
        }
    } else if (spool != Py_None) {
        /* stored: to the spool's file from the tensor's memory, its digest of it */
        PyObject *ai = NULL, *nn = NULL;
        buf = PyMemoryView_FromMemory((char *)p, (Py_ssize_t)n, PyBUF_READ);
        if (buf == NULL || (h = PyObject_CallOneArg(self->hex, buf)) == NULL
            || PyList_Append(self->c_v_sha, h) < 0 || (nn = PyLong_FromLongLong(n)) == NULL
            || (ai = PyObject_CallMethodObjArgs(spool, s_put, buf, nn, h, NULL)) == NULL
            || PyList_Append(self->c_v_array, ai) < 0 || add_to(d, s_stored_bytes, n) < 0) {
            Py_XDECREF(nn);
            Py_XDECREF(ai);
            Py_DECREF(vid);
            goto done;
        }
        Py_DECREF(nn);
        Py_DECREF(ai);
    } else {
        /* stored: a bytes copy that numpy reads (read-only), its digest of the copy */
        PyObject *c = NULL, *c2 = NULL;
        buf = PyBytes_FromStringAndSize((const char *)p, (Py_ssize_t)n);
        if (buf == NULL || (c = PyObject_CallFunctionObjArgs(g_frombuffer, buf, name, NULL)) == NULL
            || (c2 = PyObject_CallMethodOneArg(c, s_reshape, shape)) == NULL
            || PyList_Append(self->c_v_array, c2) < 0 || add_to(d, s_stored_bytes, n) < 0
            || (h = PyObject_CallOneArg(self->hex, buf)) == NULL
            || PyList_Append(self->c_v_sha, h) < 0) {
            Py_XDECREF(c);
            Py_XDECREF(c2);
            Py_DECREF(vid);
            goto done;
        }
        Py_DECREF(c);
        Py_DECREF(c2);
    }
    res = vid;
    goto done;
none:
    res = Py_None;
    Py_INCREF(res);
done:
    Py_XDECREF(nb);
    Py_XDECREF(shape);
    Py_XDECREF(pv);
    Py_XDECREF(buf);
    Py_XDECREF(copy);
    Py_XDECREF(h);
    return res;
}

/* a tuple of two ints, untracked by the cyclic GC (it holds no container: it can be in no
 * cycle; tuples are made tracked and untracked at a collection they survive: this spares the
 * young generation's scans the recorder's ~4 keys an op) */
static PyObject *pair(PyObject *a, PyObject *b) {
    PyObject *k = PyTuple_Pack(2, a, b);
    if (k != NULL && PyObject_GC_IsTracked(k))
        PyObject_GC_UnTrack(k);
    return k;
}

static long long long_of(PyObject *t, PyObject *name, int call);

/* where t's storage begins, from its data pointer p (``recorder._skey``): p less its offset
 * in bytes; p itself where t tells none (an error cleared); 0, or -1 with another error */
static int skey_of(PyObject *t, long long p, long long *k) {
    *k = p;
    long long off = long_of(t, s_storage_offset, 1), size;
    if (off == -1 && PyErr_Occurred())
        goto none;
    if ((size = long_of(t, s_element_size, 1)) == -1 && PyErr_Occurred())
        goto none;
    *k = p - off * size;
    return 0;
none:
    if (!PyErr_ExceptionMatches(PyExc_RuntimeError)
        && !PyErr_ExceptionMatches(PyExc_NotImplementedError))
        return -1;
    PyErr_Clear();
    return 0;
}

/* ``Recorder._by_ptr[_skey(t)].append(ref)`` (the tensors known over a storage), t at data
 * pointer p */
static int by_ptr_add(PyObject *d, PyObject *t, long long p, PyObject *ref) {
    PyObject *table = item(d, s__by_ptr), *list, *key;
    long long k;
    if (table == NULL || !PyDict_Check(table))
        return table == NULL ? -1 : 0;
    if (skey_of(t, p, &k) < 0 || (key = PyLong_FromLongLong(k)) == NULL)
        return -1;
    list = PyDict_GetItemWithError(table, key);
    if (list == NULL) {
        if (PyErr_Occurred() || (list = PyList_New(0)) == NULL) {
            Py_DECREF(key);
            return -1;
        }
        int bad = PyDict_SetItem(table, key, list) < 0;
        Py_DECREF(list);
        if (bad) {
            Py_DECREF(key);
            return -1;
        }
    }
    Py_DECREF(key);
    return PyList_Check(list) ? PyList_Append(list, ref) : 0;
}

/* 1 where another tensor than t is known over t's storage (``Recorder._by_ptr``: a write
 * through t may be a write to it: ``_alias_written``), 0 where none, -1 with an exception */
static int aliased(Hot *self, PyObject *t) {
    long long p;
    if (ptr_of(t, &p) < 0)
        return -1;
    if (p <= 0)
        return 0;
    if (skey_of(t, p, &p) < 0)
        return -1;
    PyObject *table = item(self->dict, s__by_ptr), *pv, *list;
    if (table == NULL)
        return -1;
    if (!PyDict_Check(table) || (pv = PyLong_FromLongLong(p)) == NULL)
        return PyDict_Check(table) ? -1 : 0;
    list = PyDict_GetItemWithError(table, pv);
    Py_DECREF(pv);
    if (list == NULL)
        return PyErr_Occurred() ? -1 : 0;
    if (!PyList_Check(list))
        return 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(list); i++) {
        PyObject *r = PyList_GET_ITEM(list, i);
        if (!PyWeakref_Check(r) || PyWeakref_GET_OBJECT(r) != t)
            return 1;
    }
    return 0;
}

/* ``Recorder._key``: t's uid (assigned here when it has none) and its version (-1 without a
 * counter), as new references; 0, or 1 where a weak reference cannot be made (nothing changed:
 * the Python's), -1 with an exception */
static int key_of(Hot *self, PyObject *t, PyObject **up, PyObject **verp) {
    PyObject *d = self->dict;
    PyObject *uid = self->c_uid, *id = NULL, *u;
    long long p;
    if (uid == NULL || ptr_of(t, &p) < 0)
        return -1;
    u = known_uid(uid, t, p, &id);
    if (u != NULL) {
        Py_INCREF(u);
    } else {
        if (PyErr_Occurred()) {
            Py_XDECREF(id);
            return -1;
        }
        PyObject *next = item(d, s_next_uid), *ref, *e, *pv;
        if (next == NULL || (ref = PyWeakref_NewRef(t, NULL)) == NULL) {
            Py_XDECREF(id);
            if (next != NULL && PyErr_ExceptionMatches(PyExc_TypeError)) {
                PyErr_Clear();  /* (a tensor that takes no weak reference) */
                return 1;
            }
            return -1;
        }
        u = next;
        Py_INCREF(u);
        pv = PyLong_FromLongLong(p);
        e = pv == NULL ? NULL : PyTuple_Pack(3, ref, u, pv);
        Py_XDECREF(pv);
        /* NOTE: neither is in a cycle (a weak reference without a callback holds nothing the
         * collector follows, the triple holds it and two ints): untracked, the recorder's ~2 a
         * tensor are no long-lived objects the cyclic GC counts toward a full collection of
         * the process's heap (gpt-wide: one of ~150 ms every ~20 captures; the weak reference
         * is still cleared when its tensor dies) */
        PyObject_GC_UnTrack(ref);
        if (e != NULL)
            PyObject_GC_UnTrack(e);
        Py_DECREF(ref);
        if (e == NULL || PyDict_SetItem(uid, id, e) < 0 || add_to(d, s_next_uid, 1) < 0
            || (p > 0 && by_ptr_add(d, t, p, PyTuple_GET_ITEM(e, 0)) < 0)) {
            Py_XDECREF(e);
            Py_DECREF(id);
            Py_DECREF(u);
            return -1;
        }
        Py_DECREF(e);
    }
    Py_DECREF(id);
    PyObject *ver = version_of(t);
    if (ver == NULL) {
        if (PyErr_Occurred()) {
            Py_DECREF(u);
            return -1;
        }
        ver = PyLong_FromLong(-1);
    }
    *up = u;
    *verp = ver;
    return 0;
}

/* ``key_of`` for ``made`` and ``value_of``: 1 (the Python's) where the recorder has a
 * ``_new_value`` of its instance's own (``_new_value_unseen``: the Python throughout), -1 with an
 * exception (the seen table missing too), else ``key_of``'s answer */
static int own_key(Hot *self, PyObject *t, PyObject **up, PyObject **verp) {
    if (self->c_seen == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the recorder's seen table is not bound");
        return -1;
    }
    if (PyDict_GetItemWithError(self->dict, s_new_value) != NULL)
        return 1;
    if (PyErr_Occurred())
        return -1;
    return key_of(self, t, up, verp);
}

/* ``Recorder._made(t, written)``: the value an op just made or wrote in t */
static PyObject *made(Hot *self, PyObject *t, int written) {
    PyObject *seen = self->c_seen, *u, *ver;
    int k = own_key(self, t, &u, &ver);
    if (k < 0)
        return NULL;
    if (k > 0)
        goto slow;
    PyObject *vid = new_value_fast(self, t);
    if (vid == Py_None) {
        Py_DECREF(vid);
        vid = PyObject_CallMethodObjArgs(self->rec, s_new_value, t, Py_True, NULL);
    }
    if (vid == NULL) {
        Py_DECREF(u);
        Py_DECREF(ver);
        return NULL;
    }
    PyObject *key = pair(u, ver);
    int bad = key == NULL || PyDict_SetItem(seen, key, vid) < 0;
    Py_XDECREF(key);
    if (!bad && written) {
        long long v = PyLong_AsLongLong(ver);
        if (v == -1 && PyErr_Occurred())
            bad = 1;
        else if (v >= 0) {
            PyObject *v1 = PyLong_FromLongLong(v + 1);
            key = v1 ? pair(u, v1) : NULL;
            Py_XDECREF(v1);
            bad = key == NULL || PyDict_SetItem(seen, key, vid) < 0;
            Py_XDECREF(key);
        }
    }
    Py_DECREF(u);
    Py_DECREF(ver);
    if (!bad && written) {
        /* another tensor at t's memory (``p.data``'s alias and ``p``): the Python forgets it */
        int a = aliased(self, t);
        if (a > 0) {
            PyObject *r = PyObject_CallMethodOneArg(self->rec, s_alias_written, t);
            bad = r == NULL;
            Py_XDECREF(r);
        } else {
            bad = a < 0;
        }
    }
    if (!bad && written) {
        /* a model's parameter or buffer written outside an optimizer's step: the script's own
         * update (``Recorder._param_written``, the Python's: rare) */
        PyObject *ptrs = PyDict_GetItemWithError(self->dict, s__param_ptr), *in_opt;
        if (ptrs == NULL) {
            bad = PyErr_Occurred() != NULL;
        } else if (PyAnySet_Check(ptrs) && PySet_GET_SIZE(ptrs)
                   && (in_opt = item(self->dict, s_in_optimizer)) != NULL) {
            int io = PyObject_IsTrue(in_opt);
            PyObject *r = io ? NULL : PyObject_CallMethodOneArg(self->rec, s_param_written, t);
            bad = io < 0 || (!io && r == NULL);
            Py_XDECREF(r);
        } else {
            bad = PyErr_Occurred() != NULL;
        }
    }
    if (bad) {
        Py_DECREF(vid);
        return NULL;
    }
    return vid;
slow:
    return PyObject_CallFunctionObjArgs(self->py_made, self->rec, t, written ? Py_True : Py_False,
                                        NULL);
}

/* ``Recorder._value_of``: the value id of t as it is now, recorded on first sight (a view
 * with a base, which may be derived from it, and every case ``new_value_fast`` does not know:
 * the Python's) */
static PyObject *value_of(Hot *self, PyObject *t) {
    PyObject *seen = self->c_seen, *u, *ver, *vid = NULL;
    int k = own_key(self, t, &u, &ver);
    if (k < 0)
        return NULL;
    if (k > 0)
        goto slow;
    PyObject *key = pair(u, ver);
    Py_DECREF(u);
    Py_DECREF(ver);
    if (key == NULL)
        return NULL;
    vid = PyDict_GetItemWithError(seen, key);
    if (vid != NULL) {
        Py_DECREF(key);
        Py_INCREF(vid);
        return vid;
    }
    if (PyErr_Occurred())
        goto fail;
    if (is_plain_tensor(t)) {
        PyObject *base = tget(t, s_base);
        if (base == NULL)
            goto fail;
        Py_DECREF(base);
        if (base != Py_None) {  /* (the uid assigned here is the one the Python finds) */
            Py_DECREF(key);
            goto slow;
        }
    }
    vid = new_value_fast(self, t);
    if (vid == Py_None) {
        Py_DECREF(vid);
        vid = PyObject_CallMethodOneArg(self->rec, s_new_value, t);
    }
    if (vid == NULL || PyDict_SetItem(seen, key, vid) < 0)
        goto fail;
    Py_DECREF(key);
    return vid;
fail:
    Py_XDECREF(vid);
    Py_DECREF(key);
    return NULL;
slow:
    return PyObject_CallFunctionObjArgs(self->py_value_of, self->rec, t, NULL);
}

static PyObject *Hot_value_of(Hot *self, PyObject *t) { return value_of(self, t); }

/* ``Recorder._made_like(t, like)``: a value whose bytes are value ``like``'s */
static PyObject *made_like(Hot *self, PyObject *t, PyObject *like) {
    PyObject *d = self->dict, *u, *ver, *vid = NULL, *shape = NULL, *a2 = NULL;
    int k = key_of(self, t, &u, &ver);
    if (k != 0)
        return k < 0 ? NULL : PyObject_CallMethod(self->rec, "_made_like", "OO", t, like);
    PyObject *v_dtype = self->c_v_dtype, *v_sha = self->c_v_sha, *v_array = self->c_v_array,
             *seen = self->c_seen;
    Py_ssize_t li = PyLong_AsSsize_t(like);
    if (!v_dtype || !v_sha || !v_array || !seen || (li == -1 && PyErr_Occurred()))
        goto done;
    if (li < 0 || li >= PyList_GET_SIZE(v_dtype) || li >= PyList_GET_SIZE(v_sha)
        || li >= PyList_GET_SIZE(v_array)) {
        PyErr_SetString(PyExc_IndexError, "made_like: no such value");
        goto done;
    }
    if ((vid = PyLong_FromSsize_t(PyList_GET_SIZE(v_dtype))) == NULL)
        goto done;
    PyObject *shp = tget(t, s_shape);
    if (shp == NULL)
        goto fail;
    shape = PySequence_Tuple(shp);
    Py_DECREF(shp);
    if (shape == NULL || PyList_Append(v_dtype, PyList_GET_ITEM(v_dtype, li)) < 0
        || PyList_Append(self->c_v_shape, shape) < 0)
        goto fail;
    PyObject *h = PyList_GET_ITEM(v_sha, li);
    Py_INCREF(h);
    int bad = PyList_Append(v_sha, h) < 0;
    if (!bad && h == Py_None) {  /* still on the hashing thread: copied when the file is made */
        PyObject *p = PyTuple_Pack(2, vid, like);
        bad = p == NULL || append_to(d, s_sha_like, p) < 0;
        Py_XDECREF(p);
    }
    Py_DECREF(h);
    if (bad)
        goto fail;
    PyObject *a = PyList_GET_ITEM(v_array, li);
    Py_INCREF(a);
    PyObject *hashes_only = item(d, s_hashes_only);
    int ho = hashes_only ? PyObject_IsTrue(hashes_only) : -1;
    if (ho < 0) {
        Py_DECREF(a);
        goto fail;
    }
    /* stored where ``like`` is, named again at no charge to the budget (the budget is disk:
     * the file and its load hold the same bytes once) */
    if (Py_IS_TYPE(a, &PyLong_Type)) {  /* in the spool */
        a2 = a;
        Py_INCREF(a2);
    } else if (a != Py_None && !ho
               && (a2 = PyObject_CallMethodOneArg(a, s_reshape, shape)) == NULL) {
        Py_DECREF(a);  /* (a view of the same private copy, read-only) */
        goto fail;
    }
    Py_DECREF(a);
    if (a2 != NULL) {
        if (PyList_Append(v_array, a2) < 0)
            goto fail;
    } else if (PyList_Append(v_array, Py_None) < 0 || add_to(d, s_n_hashed, 1) < 0) {
        goto fail;
    }
    PyObject *key = pair(u, ver);
    bad = key == NULL || PyDict_SetItem(seen, key, vid) < 0;
    Py_XDECREF(key);
    if (bad)
        goto fail;
    goto done;
fail:
    Py_CLEAR(vid);
done:
    Py_DECREF(u);
    Py_DECREF(ver);
    Py_XDECREF(shape);
    Py_XDECREF(a2);
    return vid;
}

static PyObject *Hot_made(Hot *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "made(t, written=False)");
        return NULL;
    }
    int written = 0;
    if (nargs == 2 && (written = PyObject_IsTrue(args[1])) < 0)
        return NULL;
    return made(self, args[0], written);
}

/* every item of the list or tuple x is an int, bool, str or None (those exact types) */
static int all_plain(PyObject *x) {
    Py_ssize_t n = PySequence_Fast_GET_SIZE(x);
    PyObject **items = PySequence_Fast_ITEMS(x);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyTypeObject *tp = Py_TYPE(items[i]);
        if (tp != &PyLong_Type && tp != &PyBool_Type && tp != &PyUnicode_Type
            && items[i] != Py_None)
            return 0;
    }
    return 1;
}

/* ``Recorder._encode(x)`` (a new reference): int, bool, str, None and a finite float as they
 * are, a tensor {"T": value id}, a list or tuple of the first four a list; the rest the
 * Python's */
static PyObject *encode_one(Hot *self, PyObject *a) {
    PyTypeObject *tp = Py_TYPE(a);
    if (tp == &PyLong_Type || tp == &PyBool_Type || tp == &PyUnicode_Type || a == Py_None
        || (tp == &PyFloat_Type && isfinite(PyFloat_AS_DOUBLE(a)))) {
        Py_INCREF(a);
        return a;
    }
    int is_t = is_plain_tensor(a) ? 1 : PyObject_IsInstance(a, g_tensor);
    if (is_t < 0)
        return NULL;
    if (is_t) {
        PyObject *vid = value_of(self, a), *e;
        if (vid == NULL)
            return NULL;
        e = PyDict_New();
        if (e == NULL || PyDict_SetItem(e, s_T, vid) < 0)
            Py_CLEAR(e);
        Py_DECREF(vid);
        return e;
    }
    if ((PyList_Check(a) || PyTuple_Check(a)) && all_plain(a)) {
        /* sizes, dims: as they are, a list */
        PyObject *e = PySequence_List(a);
        if (e != NULL)
            PyObject_GC_UnTrack(e);  /* (ints, strs, None: it can be in no cycle) */
        return e;
    }
    return PyObject_CallOneArg(self->py_encode, a);
}

/* the positional arguments as the row records them (``Recorder.__torch_dispatch__``'s loop):
 * int, bool, str and None as they are, a finite float as it is, a tensor {"T": value id},
 * anything else ``_encode``'s */
static PyObject *Hot_encode_args(Hot *self, PyObject *args) {
    if (!PyTuple_Check(args) && !PyList_Check(args)) {
        PyErr_SetString(PyExc_TypeError, "encode_args: a tuple or list");
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(args);
    PyObject **items = PySequence_Fast_ITEMS(args);
    PyObject *out = PyList_New(n);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *e = encode_one(self, items[i]);
        if (e == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, e);
    }
    return out;
}

/* x is a tensor: 1, 0, -1 error */
static int is_tensor(PyObject *x) {
    return is_plain_tensor(x) ? 1 : PyObject_IsInstance(x, g_tensor);
}

/* ``recorder._tensors(x)`` appended to list ``out`` */
static int collect(PyObject *x, PyObject *out) {
    int r = is_tensor(x);
    if (r != 0)
        return r < 0 ? -1 : PyList_Append(out, x);
    if (PyList_Check(x) || PyTuple_Check(x)) {
        /* (a list could change under us only through its items' own code: none here) */
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(x); i++)
            if (collect(PySequence_Fast_GET_ITEM(x, i), out) < 0)
                return -1;
    }
    return 0;
}

/* a tensor attribute compared by identity (1 same, 0 not, -1 error) */
static int attr_is(PyObject *t, PyObject *name, PyObject *v) {
    PyObject *a = tget(t, name);
    if (a == NULL)
        return -1;
    Py_DECREF(a);
    return a == v;
}

/* the long of a method's result or attribute; -1 with an exception on error */
static long long long_of(PyObject *t, PyObject *name, int call) {
    PyObject *v = call ? tcall(t, name) : tget(t, name);
    if (v == NULL)
        return -1;
    long long r = PyLong_AsLongLong(v);
    Py_DECREF(v);
    return r;
}

/* ``Recorder._same_bytes(out, args, enc_args)``: the value id (borrowed) or NULL: none (no
 * exception) or an error */
static PyObject *same_bytes(PyObject *out, PyObject *args, PyObject *enc_args) {
    PyObject *dtype = tget(out, s_dtype), *res = NULL;
    if (dtype == NULL)
        return NULL;
    int f;
    PyObject *np_dtypes = glob(s_NUMPY_DTYPES);
    PyObject *nm = np_dtypes ? PyDict_GetItemWithError(np_dtypes, dtype) : NULL;
    if (nm == NULL || (f = flag(out, s_is_cpu, 0)) <= 0 || (f = attr_is(out, s_layout, g_strided)) <= 0
        || (f = flag(out, s_is_neg, 1)) != 0 || (f = flag(out, s_is_contiguous, 1)) <= 0)
        goto done;
    long long p = long_of(out, s_data_ptr, 1), n;
    if (PyErr_Occurred() || ((n = long_of(out, s_numel, 1)) == -1 && PyErr_Occurred()))
        goto done;
    /* (a subclass's pointer may be no memory's: a wrapper's 0, a DTensor's 288; plain
     * tensors only, as Recorder._same_bytes with ``_no_memory``) */
    if (p == 0 || !is_plain_tensor(out))
        goto done;
    Py_ssize_t na = PyTuple_GET_SIZE(args), ne = PyList_GET_SIZE(enc_args);
    for (Py_ssize_t i = 0; i < na && i < ne; i++) {
        PyObject *a = PyTuple_GET_ITEM(args, i);
        if (!is_plain_tensor(a))
            continue;
        if ((f = attr_is(a, s_dtype, dtype)) <= 0) {
            if (f < 0)
                goto done;
            continue;
        }
        /* (the layout first: a sparse argument has no data pointer to ask for) */
        if ((f = attr_is(a, s_layout, g_strided)) <= 0) {
            if (f < 0)
                goto done;
            continue;
        }
        long long ap = long_of(a, s_data_ptr, 1);
        if (ap == -1 && PyErr_Occurred())
            goto done;
        if (ap != p)
            continue;
        long long an = long_of(a, s_numel, 1);
        if (an == -1 && PyErr_Occurred())
            goto done;
        if (an != n)
            continue;
        if ((f = attr_is(a, s_layout, g_strided)) <= 0 || (f = flag(a, s_is_neg, 1)) != 0
            || (f = flag(a, s_is_contiguous, 1)) <= 0) {
            if (f < 0)
                goto done;
            continue;
        }
        res = PyObject_GetItem(PyList_GET_ITEM(enc_args, i), s_T);
        if (res != NULL)
            Py_DECREF(res);  /* (borrowed: enc_args holds it) */
        goto done;
    }
done:
    Py_DECREF(dtype);
    return res;
}

/* ``Recorder._source``'s walk where its caches know every frame up to the user's: the source's
 * index, a new reference; else the Python's from the first frame they do not know */
static PyObject *source(Hot *self) {
    PyObject *code_skip = self->c_code_skip, *src_at = self->c_src_at;
    if (code_skip == NULL || src_at == NULL)
        return NULL;
    PyFrameObject *f = PyEval_GetFrame();  /* borrowed: the mode's own frame (skipped) */
    Py_XINCREF(f);
    while (f != NULL) {
        PyCodeObject *co = PyFrame_GetCode(f);
        PyObject *cid = PyLong_FromVoidPtr(co), *skip, *r = NULL;
        if (cid == NULL) {
            Py_DECREF(co);
            Py_DECREF(f);
            return NULL;
        }
        skip = PyDict_GetItemWithError(code_skip, cid);
        if (skip != NULL && skip == Py_False) {
            PyObject *lasti = PyLong_FromLong(PyFrame_GetLasti(f));
            PyObject *at = lasti ? PyTuple_Pack(2, cid, lasti) : NULL;
            Py_XDECREF(lasti);
            if (at != NULL) {
                r = PyDict_GetItemWithError(src_at, at);
                Py_DECREF(at);
                Py_XINCREF(r);
            }
            if (r == NULL && !PyErr_Occurred())
                r = PyObject_CallMethodOneArg(self->rec, s_source, (PyObject *)f);
        } else if (skip == NULL && !PyErr_Occurred()) {
            r = PyObject_CallMethodOneArg(self->rec, s_source, (PyObject *)f);
        } else if (skip != NULL && skip != Py_True) {  /* (not ours: the Python's) */
            r = PyObject_CallMethodOneArg(self->rec, s_source, (PyObject *)f);
        }
        Py_DECREF(cid);
        Py_DECREF(co);
        if (r != NULL || PyErr_Occurred()) {
            Py_DECREF(f);
            return r;
        }
        PyFrameObject *back = PyFrame_GetBack(f);
        Py_DECREF(f);
        f = back;
    }
    return PyLong_FromLong(-1);
}

#define MAXDIM 64

/* a tuple of ints (shape or strides) into out[]; its length, -1 with an exception, -2 too
 * long (no exception) */
static Py_ssize_t ints_of(PyObject *seq, long long *out) {
    PyObject *t = PySequence_Tuple(seq);
    if (t == NULL)
        return -1;
    Py_ssize_t n = PyTuple_GET_SIZE(t);
    if (n > MAXDIM) {
        Py_DECREF(t);
        return -2;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        out[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(t, i));
        if (out[i] == -1 && PyErr_Occurred()) {
            Py_DECREF(t);
            return -1;
        }
    }
    Py_DECREF(t);
    return n;
}

/* ``Recorder._derived_source(out, args, enc_args)``: 2 found (*src a value id, *strides out's
 * strides over its C-order elements as a tuple, or None: the same bytes), 0 none, 1 a case
 * the Python knows and this does not (its merged-dimensions comparison: nothing decided),
 * -1 an error. A RuntimeError or TypeError reading a tensor: none (the Python's except). */
static int derived_source(Hot *self, PyObject *out, PyObject *args, PyObject *enc_args,
                          PyObject **src, PyObject **strides) {
    int f = 0;
    long long a_shape[MAXDIM], a_stride[MAXDIM], o_shape[MAXDIM], o_stride[MAXDIM],
        over[MAXDIM];
    Py_ssize_t order[MAXDIM];
    if (!is_plain_tensor(out) || (f = attr_is(out, s_layout, g_strided)) <= 0
        || (f = flag(out, s_is_contiguous, 1)) != 0 || (f = flag(out, s_is_quantized, 0)) != 0
        || (f = flag(out, s_is_conj, 1)) != 0 || (f = flag(out, s_is_neg, 1)) != 0)
        goto none_or_err;
    long long n = long_of(out, s_numel, 1), p;
    if ((n == -1 && PyErr_Occurred()) || ((p = long_of(out, s_data_ptr, 1)) == -1
                                          && PyErr_Occurred()))
        goto err;
    if (!n || !p)
        return 0;
    PyObject *dt = tget(out, s_dtype);
    if (dt == NULL)
        goto err;
    Py_DECREF(dt);  /* (out holds it) */
    Py_ssize_t na = PyTuple_GET_SIZE(args), ne = PyList_GET_SIZE(enc_args);
    for (Py_ssize_t i = 0; i < na && i < ne; i++) {
        PyObject *a = PyTuple_GET_ITEM(args, i);
        if (!is_plain_tensor(a))
            continue;
        if ((f = attr_is(a, s_dtype, dt)) <= 0) {
            if (f < 0)
                goto err;
            continue;
        }
        if ((f = attr_is(a, s_layout, g_strided)) <= 0) {  /* (a sparse one: no data pointer) */
            if (f < 0)
                goto err;
            continue;
        }
        long long ap = long_of(a, s_data_ptr, 1), an;
        if (ap == -1 && PyErr_Occurred())
            goto err;
        if (ap != p)
            continue;
        if ((an = long_of(a, s_numel, 1)) == -1 && PyErr_Occurred())
            goto err;
        if (an != n)
            continue;
        if ((f = attr_is(a, s_layout, g_strided)) <= 0 || (f = flag(a, s_is_conj, 1)) != 0
            || (f = flag(a, s_is_neg, 1)) != 0) {
            if (f < 0)
                goto err;
            continue;
        }
        PyObject *vid = PyObject_GetItem(PyList_GET_ITEM(enc_args, i), s_T);
        if (vid == NULL)
            goto err;
        PyObject *derived = self->c_derived, *dd = NULL;
        if (derived == NULL || ((dd = PyDict_GetItemWithError(derived, vid)) == NULL
                                && PyErr_Occurred())) {
            Py_DECREF(vid);
            goto err;
        }
        PyObject *ash = tget(a, s_shape), *ast = tcall(a, s_stride),
                 *osh = tget(out, s_shape), *ost = tcall(out, s_stride);
        Py_ssize_t an_ = -1, as_ = -1, on_ = -1, os_ = -1;
        if (ash && ast && osh && ost) {
            an_ = ints_of(ash, a_shape);
            as_ = an_ >= 0 ? ints_of(ast, a_stride) : an_;
            on_ = as_ >= 0 ? ints_of(osh, o_shape) : as_;
            os_ = on_ >= 0 ? ints_of(ost, o_stride) : on_;
        }
        Py_XDECREF(ash);
        Py_XDECREF(ast);
        Py_XDECREF(osh);
        Py_XDECREF(ost);
        if (os_ < 0 || an_ != as_ || on_ != os_) {
            Py_DECREF(vid);
            if (os_ == -2 || (os_ >= 0 && !PyErr_Occurred()))
                return 1;
            goto err;
        }
        /* a's dimensions of more than one element by (memory stride, size); a later one of
         * the same key stands for it (the Python's dict) */
        Py_ssize_t n_at = 0, k = 0;
        for (Py_ssize_t x = 0; x < an_; x++) {
            if (a_shape[x] == 1)
                continue;
            int first = 1;
            for (Py_ssize_t y = 0; y < x; y++)
                if (a_shape[y] != 1 && a_shape[y] == a_shape[x] && a_stride[y] == a_stride[x])
                    first = 0;
            n_at += first;
        }
        for (Py_ssize_t j = 0; j < on_; j++) {
            if (o_shape[j] == 1)
                continue;
            Py_ssize_t found = -1;
            for (Py_ssize_t x = 0; x < an_; x++)
                if (a_shape[x] != 1 && a_shape[x] == o_shape[j] && a_stride[x] == o_stride[j])
                    found = x;  /* (the last: the dict's value) */
            if (found < 0) {  /* not a permutation: the merged-dimensions case, the Python's */
                Py_DECREF(vid);
                return 1;
            }
            order[k++] = found;
        }
        int dup = 0, sorted = 1;
        for (Py_ssize_t x = 0; x < k; x++)
            for (Py_ssize_t y = 0; y < x; y++) {
                if (order[y] == order[x])
                    dup = 1;
                if (order[y] > order[x])
                    sorted = 0;
            }
        if (k != n_at || dup) {
            Py_DECREF(vid);
            return 0;
        }
        PyObject *srcv;
        if (dd == NULL) {
            if (sorted) {  /* its axes in their order: a's C-order bytes */
                *src = vid;
                *strides = Py_None;
                Py_INCREF(Py_None);
                return 2;
            }
            srcv = vid;  /* over a's C order */
            long long step = 1;
            for (Py_ssize_t x = an_ - 1; x >= 0; x--) {
                over[x] = step;
                step *= a_shape[x];
            }
        } else {  /* a derived itself: its source, a's strides over it */
            Py_DECREF(vid);
            if (!PyTuple_Check(dd) || PyTuple_GET_SIZE(dd) != 2)
                return 1;
            srcv = PyTuple_GET_ITEM(dd, 0);
            Py_INCREF(srcv);
            Py_ssize_t no = ints_of(PyTuple_GET_ITEM(dd, 1), over);
            if (no < 0 || no != an_) {
                Py_DECREF(srcv);
                if (no == -1)
                    goto err;
                return 1;
            }
        }
        PyObject *st = PyTuple_New(on_);
        if (st == NULL) {
            Py_DECREF(srcv);
            return -1;
        }
        Py_ssize_t it = 0;
        for (Py_ssize_t j = 0; j < on_; j++) {
            PyObject *v = PyLong_FromLongLong(o_shape[j] == 1 ? 0 : over[order[it++]]);
            if (v == NULL) {
                Py_DECREF(st);
                Py_DECREF(srcv);
                return -1;
            }
            PyTuple_SET_ITEM(st, j, v);
        }
        *src = srcv;
        *strides = st;
        return 2;
    }
    return 0;
none_or_err:
    if (f >= 0)
        return 0;
err:
    if (PyErr_ExceptionMatches(PyExc_RuntimeError) || PyErr_ExceptionMatches(PyExc_TypeError)) {
        PyErr_Clear();  /* (a tensor without storage: no data pointer) */
        return 0;
    }
    return -1;
}

/* ``Recorder._made_derived(t, src, strides)``: a value derived from value src (no copy, no
 * digest of its bytes: the sentinel ``derived_digest``, made when the file is where src's
 * digest is still on the hashing thread) */
static PyObject *made_derived(Hot *self, PyObject *t, PyObject *src, PyObject *strides) {
    PyObject *d = self->dict, *u, *ver, *vid = NULL, *shape = NULL, *pairv = NULL;
    int k = key_of(self, t, &u, &ver);
    if (k != 0)
        return k < 0 ? NULL : PyObject_CallMethod(self->rec, "_made_derived", "OOO", t, src,
                                                  strides);
    PyObject *v_dtype = self->c_v_dtype, *v_sha = self->c_v_sha,
             *derived = self->c_derived, *seen = self->c_seen;
    Py_ssize_t si = PyLong_AsSsize_t(src);
    if (!v_dtype || !v_sha || !derived || !seen || (si == -1 && PyErr_Occurred()))
        goto fail;
    if (si < 0 || si >= PyList_GET_SIZE(v_dtype) || si >= PyList_GET_SIZE(v_sha)) {
        PyErr_SetString(PyExc_IndexError, "made_derived: no such value");
        goto fail;
    }
    if ((vid = PyLong_FromSsize_t(PyList_GET_SIZE(v_dtype))) == NULL)
        goto fail;
    PyObject *shp = tget(t, s_shape);
    if (shp == NULL)
        goto fail;
    shape = PySequence_Tuple(shp);
    Py_DECREF(shp);
    if (shape == NULL || PyList_Append(v_dtype, PyList_GET_ITEM(v_dtype, si)) < 0
        || PyList_Append(self->c_v_shape, shape) < 0 || PyList_Append(self->c_v_array, Py_None) < 0
        || add_to(d, s_n_hashed, 1) < 0 || (pairv = PyTuple_Pack(2, src, strides)) == NULL
        || PyDict_SetItem(derived, vid, pairv) < 0)
        goto fail;
    if (PyList_GET_ITEM(v_sha, si) == Py_None) {
        if (PyList_Append(v_sha, Py_None) < 0 || append_to(d, s_derived_later, vid) < 0)
            goto fail;
    } else {
        PyObject *h = PyObject_CallMethodOneArg(self->rec, s_derived_digest, vid);
        int bad = h == NULL || PyList_Append(v_sha, h) < 0;
        Py_XDECREF(h);
        if (bad)
            goto fail;
    }
    PyObject *key = pair(u, ver);
    int bad = key == NULL || PyDict_SetItem(seen, key, vid) < 0;
    Py_XDECREF(key);
    if (bad)
        goto fail;
    goto done;
fail:
    Py_CLEAR(vid);
done:
    Py_DECREF(u);
    Py_DECREF(ver);
    Py_XDECREF(shape);
    Py_XDECREF(pairv);
    return vid;
}

/* item i of tuple ``info`` is true: 1, 0, -1 */
static int info_true(PyObject *info, Py_ssize_t i) {
    return PyObject_IsTrue(PyTuple_GET_ITEM(info, i));
}

/* append made(t, written) for every tensor in x to outs */
static int made_all(Hot *self, PyObject *x, int written, PyObject *outs) {
    PyObject *ts = PyList_New(0);
    if (ts == NULL || collect(x, ts) < 0) {
        Py_XDECREF(ts);
        return -1;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(ts); i++) {
        PyObject *v = made(self, PyList_GET_ITEM(ts, i), written);
        if (v == NULL || PyList_Append(outs, v) < 0) {
            Py_XDECREF(v);
            Py_DECREF(ts);
            return -1;
        }
        Py_DECREF(v);
    }
    Py_DECREF(ts);
    return 0;
}

/* ``Recorder._backward_module(node)``: the module running when the node was made, by
 * bisection over the hooks' ``module_from`` (node numbers, rising) and ``module_path``; an
 * AccumulateGrad node (numbered last of all) or a list not as written: the Python method */
static PyObject *backward_module(Hot *self, PyObject *d, PyObject *node) {
    if (node == Py_None) {
        Py_INCREF(s_empty);
        return s_empty;
    }
    PyObject *nr = PyObject_CallMethodNoArgs(node, s_sequence_nr), *from, *paths;
    if (nr == NULL)
        return NULL;
    unsigned long long number = PyLong_AsUnsignedLongLong(nr);
    Py_DECREF(nr);
    if (number == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    if ((from = item(d, s_module_from)) == NULL || (paths = item(d, s_module_path)) == NULL)
        return NULL;
    if (number == ULLONG_MAX || !PyList_Check(from) || !PyList_Check(paths)
        || PyList_GET_SIZE(paths) < PyList_GET_SIZE(from))  /* (paths are appended first) */
        return PyObject_CallMethodOneArg(self->rec, s_backward_module, node);
    Py_ssize_t lo = 0, hi = PyList_GET_SIZE(from);  /* the first entry past ``number`` */
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        unsigned long long at = PyLong_AsUnsignedLongLong(PyList_GET_ITEM(from, mid));
        if (at == (unsigned long long)-1 && PyErr_Occurred())
            return NULL;
        if (at <= number)
            lo = mid + 1;
        else
            hi = mid;
    }
    PyObject *module = lo > 0 ? PyList_GET_ITEM(paths, lo - 1) : s_empty;
    Py_INCREF(module);
    return module;
}

/* 1 when the first encoded argument is a value (``{"T": vid}``) in the set ``vids``, 0 when
 * not, -1 with an exception */
static int first_value_in(PyObject *enc_args, PyObject *vids) {
    if (!PyTuple_Check(enc_args) && !PyList_Check(enc_args))
        return 0;
    if (PySequence_Fast_GET_SIZE(enc_args) == 0)
        return 0;
    PyObject *e = PySequence_Fast_GET_ITEM(enc_args, 0);
    if (!PyDict_Check(e))
        return 0;
    PyObject *v = PyDict_GetItemWithError(e, s_T);
    if (v == NULL)
        return PyErr_Occurred() ? -1 : 0;
    return PySet_Contains(vids, v);
}

/* ``Recorder._record``'s common case: 0 recorded, 1 not that case (nothing changed: the
 * Python's), -1 an error */
static int record(Hot *self, PyObject *info, PyObject *args, PyObject *kwargs, PyObject *out,
                  PyObject *enc_args, PyObject *enc_kwargs, long long graph_task,
                  PyObject *src) {
    PyObject *d = self->dict;
    PyObject *writes = PyTuple_GET_ITEM(info, 1), *fresh = PyTuple_GET_ITEM(info, 2),
             *unmarked = PyTuple_GET_ITEM(info, 3), *name_idx = PyTuple_GET_ITEM(info, 4);
    int view = info_true(info, 7), ones_like = info_true(info, 6);
    if (view < 0 || ones_like < 0 || !PyTuple_Check(writes) || !PyTuple_Check(fresh))
        return view < 0 || ones_like < 0 ? -1 : 1;
    Py_ssize_t nw = PyTuple_GET_SIZE(writes), na = PyTuple_GET_SIZE(args);
    PyObject *outs = NULL, *module = NULL, *row = NULL, *t_args = NULL, *t_outs = NULL;
    int rc = -1, f;
    if (nw == 0 && unmarked == Py_None && (f = is_tensor(out)) != 0) {
        if (f < 0)
            return -1;
        PyObject *v = NULL;
        if (view && PySet_GET_SIZE(self->c_uninit_vids) > 0) {
            /* a view of uninitialised memory (``_made_uninitialised``): the Python's */
            if ((f = first_value_in(enc_args, self->c_uninit_vids)) != 0)
                return f;
        }
        if (view) {
            PyObject *like = same_bytes(out, args, enc_args);
            if (like != NULL) {
                v = made_like(self, out, like);
            } else if (PyErr_Occurred()) {
                return -1;
            } else {
                /* a view that may be derived (``_derived_source``): the Python's */
                PyObject *dv = PyObject_GetAttr(self->rec, s_derive_views);
                if (dv == NULL || (f = PyObject_IsTrue(dv)) < 0) {
                    Py_XDECREF(dv);
                    return -1;
                }
                Py_DECREF(dv);
                int derive = 0;
                if (f) {
                    long long nb = long_of(out, s_nbytes, 0);
                    if (nb == -1 && PyErr_Occurred()) {
                        if (!PyErr_ExceptionMatches(PyExc_RuntimeError))
                            return -1;
                        PyErr_Clear();  /* (a sparse view has no nbytes: not derived) */
                    }
                    long long derive_min = glob_ll(s_DERIVE_MIN);
                    if (derive_min == -1 && PyErr_Occurred())
                        return -1;
                    derive = nb >= derive_min;
                }
                PyObject *src = NULL, *strides = NULL;
                int r = derive ? derived_source(self, out, args, enc_args, &src, &strides) : 0;
                if (r < 0 || r == 1)
                    return r;  /* (1: not a case known here: the Python's, nothing changed) */
                if (r == 0)
                    v = made(self, out, 0);
                else if (strides == Py_None)
                    v = made_like(self, out, src);
                else
                    v = made_derived(self, out, src, strides);
                Py_XDECREF(src);
                Py_XDECREF(strides);
            }
        } else {
            PyObject *uninit = self->c_uninit;
            if (uninit == NULL || (f = PySet_Contains(uninit, name_idx)) < 0)
                return -1;
            if (f)
                return 1;
            v = made(self, out, 0);
        }
        if (v == NULL)
            return -1;
        outs = PyList_New(1);
        if (outs == NULL) {
            Py_DECREF(v);
            return -1;
        }
        PyList_SET_ITEM(outs, 0, v);
    } else if (nw) {
        if ((outs = PyList_New(0)) == NULL)
            return -1;
        for (Py_ssize_t j = 0; j < nw; j++) {
            PyObject *w = PyTuple_GET_ITEM(writes, j), *v;
            if (!PyTuple_Check(w) || PyTuple_GET_SIZE(w) != 3)
                goto done;
            Py_ssize_t i = PyLong_AsSsize_t(PyTuple_GET_ITEM(w, 0));
            int kwarg_only = PyObject_IsTrue(PyTuple_GET_ITEM(w, 2));
            if ((i == -1 && PyErr_Occurred()) || kwarg_only < 0)
                goto done;
            if (i < na && !kwarg_only) {
                v = PyTuple_GET_ITEM(args, i);
            } else {
                v = PyDict_GetItemWithError(kwargs, PyTuple_GET_ITEM(w, 1));
                if (v == NULL && PyErr_Occurred())
                    goto done;
            }
            if (v != NULL && made_all(self, v, 1, outs) < 0)
                goto done;
        }
        Py_ssize_t nf = PyTuple_GET_SIZE(fresh);
        int seq = PyTuple_Check(out) || PyList_Check(out);
        Py_ssize_t nr = seq && nf > 1 ? PySequence_Fast_GET_SIZE(out) : 1;
        for (Py_ssize_t j = 0; j < nf && j < nr; j++) {
            if ((f = info_true(fresh, j)) < 0)
                goto done;
            if (f && made_all(self, seq && nf > 1 ? PySequence_Fast_GET_ITEM(out, j) : out, 0,
                              outs) < 0)
                goto done;
        }
    } else if (unmarked != Py_None) {
        return 1;  /* the running statistics batch norm writes: the Python's */
    } else {
        if ((outs = PyList_New(0)) == NULL || made_all(self, out, 0, outs) < 0)
            goto done;
    }
    if (view && nw == 0 && na > 0) {
        /* a view's key at its base's version is this value too (``_record``'s comment) */
        PyObject *a0 = PyTuple_GET_ITEM(args, 0);
        if ((f = is_tensor(a0)) < 0)
            goto done;
        PyObject *ver = f ? version_of(a0) : NULL;
        if (ver == NULL && PyErr_Occurred())
            goto done;
        if (ver != NULL) {
            PyObject *ts = PyList_New(0), *uid = self->c_uid, *seen = self->c_seen;
            int bad = ts == NULL || uid == NULL || seen == NULL || collect(out, ts) < 0;
            for (Py_ssize_t i = 0; !bad && i < PyList_GET_SIZE(ts) && i < PyList_GET_SIZE(outs);
                 i++) {
                PyObject *ti = PyList_GET_ITEM(ts, i), *u = NULL;
                long long p;
                if (ptr_of(ti, &p) < 0) {
                    bad = 1;
                    continue;
                }
                u = known_uid(uid, ti, p, NULL);
                if (u == NULL) {
                    bad = PyErr_Occurred() != NULL;
                    continue;
                }
                PyObject *key = pair(u, ver);
                bad = key == NULL
                      || PyDict_SetDefault(seen, key, PyList_GET_ITEM(outs, i)) == NULL;
                Py_XDECREF(key);
            }
            Py_XDECREF(ts);
            Py_DECREF(ver);
            if (bad)
                goto done;
        }
    }
    /* phase and module */
    long phase;
    if (graph_task != -1) {
        /* an optimizer stepped from a gradient hook inside backward: its phase, no module */
        PyObject *in_opt = item(d, s_in_optimizer);
        int bw_opt;
        if (in_opt == NULL || (bw_opt = PyObject_IsTrue(in_opt)) < 0)
            goto done;
        phase = bw_opt ? 2 : 1;
        if (PyDict_SetItem(d, s_in_backward, Py_True) < 0
            || PyDict_SetItem(d, s_after_backward, Py_True) < 0)
            goto done;
        /* a module entered inside the backward (a checkpoint's recompute): the one it runs
         * in; else the module its autograd node was made in */
        PyObject *modules = self->c_modules, *top = NULL;
        if (modules == NULL || !PyList_Check(modules))
            goto done;
        Py_ssize_t nm = PyList_GET_SIZE(modules);
        if (nm) {
            top = PyList_GET_ITEM(modules, nm - 1);
            if (!PyTuple_Check(top) || PyTuple_GET_SIZE(top) != 3
                || PyTuple_GET_ITEM(top, 2) != Py_True)
                top = NULL;
        }
        if (top != NULL) {
            module = PyTuple_GET_ITEM(top, 1);
            Py_INCREF(module);
        } else if (bw_opt) {
            module = s_empty;
            Py_INCREF(module);
        } else {
            PyObject *node = PyObject_CallNoArgs(g_autograd_node);
            if (node == NULL)
                goto done;
            module = backward_module(self, d, node);
            Py_DECREF(node);
            if (module == NULL)
                goto done;
        }
        PyObject *last = item(d, s_last_ones_like);
        if (last == NULL)
            goto done;
        if (last != Py_None) {
            PyObject *losses = self->c_losses, *step = item(d, s_step);
            if (losses == NULL || step == NULL || PyObject_SetItem(losses, step, last) < 0
                || PyDict_SetItem(d, s_last_ones_like, Py_None) < 0)
                goto done;
        }
    } else {
        PyObject *modules = self->c_modules, *in_opt = item(d, s_in_optimizer),
                 *after = item(d, s_after_backward);
        if (modules == NULL || in_opt == NULL || after == NULL || !PyList_Check(modules))
            goto done;
        Py_ssize_t nm = PyList_GET_SIZE(modules);
        int io = PyObject_IsTrue(in_opt), ab = io ? 0 : PyObject_IsTrue(after);
        if (io < 0 || ab < 0)
            goto done;
        phase = io || (ab && nm == 0) ? 2 : 0;
        if (nm) {
            module = PySequence_GetItem(PyList_GET_ITEM(modules, nm - 1), 1);
            if (module == NULL)
                goto done;
        } else {
            module = s_empty;
            Py_INCREF(module);
        }
        if (ones_like && na > 0) {
            PyObject *a0 = PyTuple_GET_ITEM(args, 0);
            if ((f = is_tensor(a0)) < 0)
                goto done;
            if (f) {
                long long dim = long_of(a0, s_dim, 1);
                if (dim == -1 && PyErr_Occurred())
                    goto done;
                if (dim == 0) {
                    PyObject *vid = PyObject_GetItem(PyList_GET_ITEM(enc_args, 0), s_T);
                    int bad = vid == NULL || PyDict_SetItem(d, s_last_ones_like, vid) < 0;
                    Py_XDECREF(vid);
                    if (bad)
                        goto done;
                }
            }
        }
    }
    PyObject *tables = item(d, s_tables), *mt, *mi;
    if (tables == NULL || (mt = PyObject_GetItem(tables, s_modules)) == NULL)
        goto done;
    Py_DECREF(mt);  /* (tables holds it) */
    if (!PyDict_Check(mt))
        goto done_type;
    mi = PyDict_GetItemWithError(mt, module);
    if (mi == NULL) {
        if (PyErr_Occurred())
            goto done;
        PyObject *n = PyLong_FromSsize_t(PyDict_GET_SIZE(mt));
        int bad = n == NULL || PyDict_SetItem(mt, module, n) < 0;
        Py_XDECREF(n);
        if (bad)
            goto done;
        mi = PyDict_GetItemWithError(mt, module);
        if (mi == NULL)
            goto done;
    }
    PyObject *ph = PyLong_FromLong(phase), *step = item(d, s_step), *rows = self->c_rows;
    t_args = PyList_AsTuple(enc_args);
    t_outs = PyList_AsTuple(outs);
    if (ph == NULL || step == NULL || rows == NULL || t_args == NULL || t_outs == NULL) {
        Py_XDECREF(ph);
        goto done;
    }
    row = PyTuple_Pack(8, name_idx, mi, ph, step, src, t_args, enc_kwargs, t_outs);
    Py_DECREF(ph);
    if (row == NULL || PyList_Append(rows, row) < 0)
        goto done;
    /* NOTE: a row is a tree of ints, strs, floats, lists and dicts made for it alone (no
     * cycle can pass through it): untracked, it is no long-lived object of the cyclic GC's.
     * The collector itself never untracks it (a tuple holding a dict or a list, even an
     * untracked one, stays tracked): each op's 2-3 tuples counted toward a full collection
     * of the process's heap, ~150 ms on gpt-wide's every ~20 captures */
    PyObject_GC_UnTrack(row);
    PyObject_GC_UnTrack(t_args);
    PyObject_GC_UnTrack(t_outs);
    if (PyObject_GC_IsTracked(enc_kwargs))
        PyObject_GC_UnTrack(enc_kwargs);
    rc = 0;
    goto done;
done_type:
    PyErr_SetString(PyExc_TypeError, "record: the modules' table is not a dict");
done:
    Py_XDECREF(outs);
    Py_XDECREF(module);
    Py_XDECREF(row);
    Py_XDECREF(t_args);
    Py_XDECREF(t_outs);
    return rc;
}

/* recording failed at op ``info[0]`` (the Exception set): ``Recorder._broken``; 0, or -1
 * where the error is not an Exception (a KeyboardInterrupt: it goes on up, as the Python's) */
static int broken(Hot *self, PyObject *info) {
    if (!PyErr_ExceptionMatches(PyExc_Exception))
        return -1;
    PyObject *tp, *val, *tb;
    PyErr_Fetch(&tp, &val, &tb);
    PyErr_NormalizeException(&tp, &val, &tb);
    PyObject *r = PyObject_CallMethodObjArgs(self->rec, s_broken, PyTuple_GET_ITEM(info, 0),
                                             val ? val : Py_None, NULL);
    Py_XDECREF(tp);
    Py_XDECREF(val);
    Py_XDECREF(tb);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* whether encoded argument e (a {"T": vid}, or a list of them, nested) names a value of set
 * ids: 1, 0, -1 with an exception */
static int names_any(PyObject *e, PyObject *ids) {
    if (PyDict_CheckExact(e)) {
        PyObject *v = PyDict_GetItemWithError(e, s_T);
        if (v == NULL)
            return PyErr_Occurred() ? -1 : 0;
        return PySet_Contains(ids, v);
    }
    if (PyList_CheckExact(e)) {
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(e); i++) {
            int r = names_any(PyList_GET_ITEM(e, i), ids);
            if (r != 0)
                return r;
        }
    }
    return 0;
}

/* ``Recorder._op_rec(func, args, kwargs, graph_task)``: record and run one op of the step */
static PyObject *Hot_op(Hot *self, PyObject *const *argv, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "op(func, args, kwargs, graph_task)");
        return NULL;
    }
    PyObject *func = argv[0], *args = argv[1], *kwargs = argv[2], *gt = argv[3];
    PyObject *d = self->dict, *names_of = self->c_names_of, *hasher = item(d, s_hasher);
    if (names_of == NULL || hasher == NULL)
        return NULL;
    long long graph_task = PyLong_AsLongLong(gt);
    if (graph_task == -1 && PyErr_Occurred())
        return NULL;
    PyObject *fid = PyLong_FromVoidPtr(func);
    if (fid == NULL)
        return NULL;
    PyObject *info = PyDict_GetItemWithError(names_of, fid);  /* borrowed */
    if (info == NULL && !PyErr_Occurred() && PyDict_CheckExact(names_of)) {
        /* not met yet in this capture: its facts as ``_op_rec`` finds them (``Recorder._op``:
         * the process's cache, this capture's name index, into ``_names_of``), then on here */
        PyObject *got = PyObject_CallMethodOneArg(self->rec, s_op, func);
        if (got == NULL) {
            Py_DECREF(fid);
            return NULL;
        }
        Py_DECREF(got);
        info = PyDict_GetItemWithError(names_of, fid);
    }
    Py_DECREF(fid);
    if (info == NULL && PyErr_Occurred())
        return NULL;
    int has_kw = kwargs != Py_None && PyDict_Check(kwargs) && PyDict_GET_SIZE(kwargs) > 0;
    /* not met (``_op`` gave nothing), skipped (profiler), a hashing thread that may need
     * protecting, a collective, kwargs not a dict: the Python's */
    if (info == NULL || !PyTuple_CheckExact(info) || PyTuple_GET_SIZE(info) < 11
        || hasher != Py_None || !PyTuple_Check(args)
        || (kwargs != Py_None && !PyDict_Check(kwargs)))
        goto slow;
    int f = info_true(info, 5);
    if (f != 0)
        goto slow_or_err;
    if ((f = info_true(info, 8)) != 0)
        goto slow_or_err;
    /* its first argument overwritten unread (``Recorder._unread``): the Python's */
    if (PyTuple_GET_SIZE(info) > 11 && (f = info_true(info, 11)) != 0)
        goto slow_or_err;
    /* its first argument's memory layout read (``LAYOUT_OPS``: recorded): the Python's */
    if (PyTuple_GET_SIZE(info) > 12 && (f = info_true(info, 12)) != 0)
        goto slow_or_err;
    Py_INCREF(info);  /* (our own reference: a callback could clear the table) */
    PyObject *enc_args = NULL, *enc_kwargs = NULL, *src = NULL, *out = NULL, *kw = NULL;
    /* inputs first: a value an op reads for the first time is recorded before it runs */
    if ((enc_args = Hot_encode_args(self, args)) == NULL)
        goto pre_failed;
    /* an input of memory no recorded op wrote, where the op reads its values (``_op_facts``'
     * last): what C++ wrote there, read afresh (``Recorder._fresh_reads``) */
    if (PyTuple_GET_SIZE(info) > 13 && self->c_uninit_vids != NULL) {
        PyObject *uninit = self->c_uninit_vids;
        /* memory the script shares with numpy (``Recorder._np_watch``): any op taking a
         * tensor may meet bytes numpy wrote; the Python's (``_fresh_reads``) */
        PyObject *watch = PyDict_GetItemWithError(self->dict, s__np_watch);
        if (watch == NULL && PyErr_Occurred())
            goto pre_failed;
        int watching = watch != NULL && PyDict_Check(watch) && PyDict_GET_SIZE(watch) > 0;
        if (watching || (PySet_Check(uninit) && PySet_GET_SIZE(uninit) > 0)) {
            int hit = watching ? 1 : info_true(info, 13);
            if (hit > 0 && !watching)
                hit = names_any(enc_args, uninit);
            if (hit < 0)
                goto pre_failed;
            if (hit) {
                PyObject *e2 = PyObject_CallMethodObjArgs(self->rec, s_fresh_reads, args,
                                                          enc_args, info, NULL);
                if (e2 == NULL)
                    goto pre_failed;
                Py_SETREF(enc_args, e2);
            }
        }
    }
    if ((enc_kwargs = PyDict_New()) == NULL)
        goto pre_failed;
    if (has_kw) {
        Py_ssize_t pos = 0;
        PyObject *k, *v;
        while (PyDict_Next(kwargs, &pos, &k, &v)) {
            PyObject *e = encode_one(self, v);
            if (e == NULL || PyDict_SetItem(enc_kwargs, k, e) < 0) {
                Py_XDECREF(e);
                goto pre_failed;
            }
            Py_DECREF(e);
        }
        kw = kwargs;
        Py_INCREF(kw);
    } else if ((kw = PyDict_New()) == NULL) {
        goto pre_failed;
    }
    if ((src = source(self)) == NULL)
        goto pre_failed;
    out = PyObject_Call(PyTuple_GET_ITEM(info, 9), args, has_kw ? kwargs : NULL);
    if (out == NULL)
        goto end;
    int r = record(self, info, args, kw, out, enc_args, enc_kwargs, graph_task, src);
    if (r == 0)
        self->ops++;
    if (r == 1) {
        PyObject *x = PyObject_CallMethodObjArgs(self->rec, s_record, info, args, kw, out,
                                                 enc_args, enc_kwargs, gt, src, NULL);
        r = x == NULL ? -1 : 0;
        Py_XDECREF(x);
    }
    if (r == 0 && PyTuple_GET_SIZE(args) > 0 && is_plain_tensor(PyTuple_GET_ITEM(args, 0))) {
        /* its first argument's layout where not C-contiguous (``Recorder._note_strided``:
         * --explain follows a kernel's order over it) */
        PyObject *t0 = PyTuple_GET_ITEM(args, 0);
        int f2 = attr_is(t0, s_layout, g_strided);
        if (f2 > 0)
            f2 = flag(t0, s_is_contiguous, 1);
        else if (f2 == 0)
            f2 = 1;  /* (not strided: no layout to note) */
        if (f2 == 0) {
            PyObject *x = PyObject_CallMethodOneArg(self->rec, s_note_strided, t0);
            if (x == NULL)
                r = -1;
            Py_XDECREF(x);
        } else if (f2 < 0) {
            r = -1;
        }
    }
    if (r < 0 && broken(self, info) < 0)
        Py_CLEAR(out);
    goto end;
pre_failed:
    /* an argument not read here: the Python's say (``_op_rec``: a lazy module's parameter
     * is passed over, the op unrecorded; anything else stops recording, ``_broken``) */
    if (PyErr_ExceptionMatches(PyExc_Exception)) {
        PyErr_Clear();
        out = PyObject_CallMethodObjArgs(self->rec, s_op_rec, func, args, kwargs, gt, NULL);
    }
end:
    Py_DECREF(info);
    Py_XDECREF(enc_args);
    Py_XDECREF(enc_kwargs);
    Py_XDECREF(src);
    Py_XDECREF(kw);
    return out;
slow_or_err:
    if (f < 0)
        return NULL;
slow:
    return PyObject_CallMethodObjArgs(self->rec, s_op_rec, func, args, kwargs, gt, NULL);
}

/* ``Recorder.__torch_dispatch__``: dynamo's frame callback off while the op is recorded (put
 * back after), the op run untouched when recording is off or quiet, or it is another thread's
 * (a loader's), else recorded (``op``) */
static PyObject *Hot_dispatch(Hot *self, PyObject *const *argv, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "dispatch(func, args, kwargs)");
        return NULL;
    }
    PyObject *func = argv[0], *args = argv[1], *kwargs = argv[2], *res = NULL, *targs;
    PyObject *d = self->dict, *set_eval_frame = glob(s_set_eval_frame), *prior, *gt = NULL;
    if (set_eval_frame == NULL || (prior = PyObject_CallOneArg(set_eval_frame, Py_None)) == NULL)
        return NULL;
    if ((targs = PySequence_Tuple(args)) == NULL)
        goto done;
    PyObject *kw = kwargs != Py_None && PyDict_Check(kwargs) && PyDict_GET_SIZE(kwargs) ? kwargs
                                                                                     : NULL;
    PyObject *recording = item(d, s_recording), *quiet = item(d, s_quiet);
    int on = recording ? PyObject_IsTrue(recording) : -1, q = quiet ? PyObject_IsTrue(quiet) : -1;
    if (on < 0 || q < 0)
        goto done;
    if (!on || q) {
        res = PyObject_Call(func, targs, kw);
        goto done;
    }
    PyObject *graph_task_id = glob(s_graph_task_id);
    if (graph_task_id == NULL || (gt = PyObject_CallNoArgs(graph_task_id)) == NULL)
        goto done;
    long long g = PyLong_AsLongLong(gt);
    if (g == -1 && PyErr_Occurred())
        goto done;
    if (g == -1) {  /* another thread's op (a loader's), not the step's */
        PyObject *thread = item(d, s_thread);
        unsigned long th = thread ? PyLong_AsUnsignedLong(thread) : 0;
        if (PyErr_Occurred())
            goto done;
        if (th != PyThread_get_thread_ident()) {
            res = PyObject_Call(func, targs, kw);
            goto done;
        }
    }
    PyObject *op_args[4] = {func, targs, kwargs, gt};
    res = Hot_op(self, op_args, 4);
done:
    Py_XDECREF(targs);
    Py_XDECREF(gt);
    if (prior != Py_None) {  /* (an exception on its way up waits while it is put back) */
        PyObject *tp, *val, *tb;
        PyErr_Fetch(&tp, &val, &tb);
        PyObject *r = PyObject_CallOneArg(set_eval_frame, prior);
        if (r == NULL) {
            Py_CLEAR(res);
            Py_XDECREF(tp);
            Py_XDECREF(val);
            Py_XDECREF(tb);
        } else {
            Py_DECREF(r);
            PyErr_Restore(tp, val, tb);
        }
    }
    Py_DECREF(prior);
    return res;
}

/* the instance called as the recorder's ``__torch_dispatch__(func, types, args, kwargs)``: set
 * as the recorder's own attribute (``Recorder._go_native``), it is what torch's dispatch of a
 * mode finds (its ``__self__`` the recorder, as torch checks), so that no Python frame runs
 * between torch and ``dispatch``; any other call, the class's method */
static PyObject *Hot_vectorcall(PyObject *callable, PyObject *const *argv, size_t nargsf,
                                PyObject *kwnames) {
    Hot *self = (Hot *)callable;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (self->dict == NULL || self->rec == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the recorder's C path is not set up");
        return NULL;
    }
    if (nargs == 4 && kwnames == NULL) {
        PyObject *d_args[3] = {argv[0], argv[2], argv[3]};
        return Hot_dispatch(self, d_args, 3);
    }
    PyObject *fn = _PyType_Lookup(Py_TYPE(self->rec), s_torch_dispatch);
    if (fn == NULL) {
        PyErr_SetString(PyExc_AttributeError, "__torch_dispatch__");
        return NULL;
    }
    Py_ssize_t nk = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    PyObject **all = PyMem_Malloc((size_t)(nargs + nk + 1) * sizeof(PyObject *));
    if (all == NULL)
        return PyErr_NoMemory();
    all[0] = self->rec;
    for (Py_ssize_t i = 0; i < nargs + nk; i++)
        all[i + 1] = argv[i];
    Py_INCREF(fn);
    PyObject *r = PyObject_Vectorcall(fn, all, (size_t)(nargs + 1), kwnames);
    Py_DECREF(fn);
    PyMem_Free(all);
    return r;
}

static int Hot_traverse(Hot *self, visitproc visit, void *arg) {
    Py_VISIT(self->rec);
    Py_VISIT(self->dict);
    Py_VISIT(self->hex);
    Py_VISIT(self->py_made);
    Py_VISIT(self->py_value_of);
    Py_VISIT(self->py_encode);
    Py_VISIT(self->c_uid);
    Py_VISIT(self->c_seen);
    Py_VISIT(self->c_v_dtype);
    Py_VISIT(self->c_v_shape);
    Py_VISIT(self->c_v_sha);
    Py_VISIT(self->c_v_array);
    Py_VISIT(self->c_rows);
    Py_VISIT(self->c_devices);
    Py_VISIT(self->c_names_of);
    Py_VISIT(self->c_code_skip);
    Py_VISIT(self->c_src_at);
    Py_VISIT(self->c_derived);
    Py_VISIT(self->c_uninit);
    Py_VISIT(self->c_uninit_vids);
    Py_VISIT(self->c_modules);
    Py_VISIT(self->c_losses);
    return 0;
}

static int Hot_clear(Hot *self) {
    Py_CLEAR(self->rec);
    Py_CLEAR(self->dict);
    Py_CLEAR(self->hex);
    Py_CLEAR(self->py_made);
    Py_CLEAR(self->py_value_of);
    Py_CLEAR(self->py_encode);
    Py_CLEAR(self->c_uid);
    Py_CLEAR(self->c_seen);
    Py_CLEAR(self->c_v_dtype);
    Py_CLEAR(self->c_v_shape);
    Py_CLEAR(self->c_v_sha);
    Py_CLEAR(self->c_v_array);
    Py_CLEAR(self->c_rows);
    Py_CLEAR(self->c_devices);
    Py_CLEAR(self->c_names_of);
    Py_CLEAR(self->c_code_skip);
    Py_CLEAR(self->c_src_at);
    Py_CLEAR(self->c_derived);
    Py_CLEAR(self->c_uninit);
    Py_CLEAR(self->c_uninit_vids);
    Py_CLEAR(self->c_modules);
    Py_CLEAR(self->c_losses);
    return 0;
}

static void Hot_dealloc(Hot *self) {
    PyObject_GC_UnTrack(self);
    Hot_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Hot_init(Hot *self, PyObject *args, PyObject *kw) {
    PyObject *rec, *dict, *hex, *py_made, *py_value_of, *py_encode;
    if (!PyArg_ParseTuple(args, "O!OOOO:Hot", &PyDict_Type, &dict, &rec, &hex, &py_made,
                          &py_value_of) || g_tensor == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_RuntimeError, "Hot: setup() first");
        return -1;
    }
    if ((py_encode = PyObject_GetAttrString(rec, "_encode")) == NULL)
        return -1;
    Hot_clear(self);
    Py_INCREF(rec);
    Py_INCREF(dict);
    Py_INCREF(hex);
    Py_INCREF(py_made);
    Py_INCREF(py_value_of);
    self->rec = rec;
    self->dict = dict;
    self->hex = hex;
    self->py_made = py_made;
    self->py_value_of = py_value_of;
    self->py_encode = py_encode;
    if ((self->c_uid = PyDict_GetItemWithError(dict, s_uid)) == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_KeyError, "uid");
        return -1;
    }
    Py_INCREF(self->c_uid);
    if ((self->c_seen = PyDict_GetItemWithError(dict, s_seen)) == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_KeyError, "seen");
        return -1;
    }
    Py_INCREF(self->c_seen);
    if ((self->c_v_dtype = PyDict_GetItemWithError(dict, s_v_dtype)) == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_KeyError, "v_dtype");
        return -1;
    }
    Py_INCREF(self->c_v_dtype);
    if ((self->c_v_shape = PyDict_GetItemWithError(dict, s_v_shape)) == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_KeyError, "v_shape");
        return -1;
    }
    Py_INCREF(self->c_v_shape);
    if ((self->c_v_sha = PyDict_GetItemWithError(dict, s_v_sha)) == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_KeyError, "v_sha");
        return -1;
    }
    Py_INCREF(self->c_v_sha);
    if ((self->c_v_array = PyDict_GetItemWithError(dict, s_v_array)) == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_KeyError, "v_array");
        return -1;
    }
    Py_INCREF(self->c_v_array);
    if ((self->c_rows = PyDict_GetItemWithError(dict, s_rows)) == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_KeyError, "rows");
        return -1;
    }
    Py_INCREF(self->c_rows);
    if ((self->c_devices = PyDict_GetItemWithError(dict, s_devices)) == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_KeyError, "devices");
        return -1;
    }
    Py_INCREF(self->c_devices);
    if ((self->c_names_of = PyDict_GetItemWithError(dict, s_names_of)) == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_KeyError, "names_of");
        return -1;
    }
    Py_INCREF(self->c_names_of);
    if ((self->c_code_skip = PyDict_GetItemWithError(dict, s_code_skip)) == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_KeyError, "code_skip");
        return -1;
    }
    Py_INCREF(self->c_code_skip);
    if ((self->c_src_at = PyDict_GetItemWithError(dict, s_src_at)) == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_KeyError, "src_at");
        return -1;
    }
    Py_INCREF(self->c_src_at);
    if ((self->c_derived = PyDict_GetItemWithError(dict, s_derived)) == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_KeyError, "derived");
        return -1;
    }
    Py_INCREF(self->c_derived);
    if ((self->c_uninit = PyDict_GetItemWithError(dict, s_uninit)) == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_KeyError, "uninit");
        return -1;
    }
    Py_INCREF(self->c_uninit);
    if ((self->c_uninit_vids = PyDict_GetItemWithError(dict, s_uninit_vids)) == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_KeyError, "uninit_vids");
        return -1;
    }
    Py_INCREF(self->c_uninit_vids);
    if ((self->c_modules = PyDict_GetItemWithError(dict, s_modules)) == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_KeyError, "modules");
        return -1;
    }
    Py_INCREF(self->c_modules);
    if ((self->c_losses = PyDict_GetItemWithError(dict, s_losses)) == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_KeyError, "losses");
        return -1;
    }
    Py_INCREF(self->c_losses);
    return 0;
}

static PyMethodDef Hot_methods[] = {
    {"made", (PyCFunction)(void (*)(void))Hot_made, METH_FASTCALL,
     "made(t, written=False): Recorder._made"},
    {"value_of", (PyCFunction)Hot_value_of, METH_O, "value_of(t): Recorder._value_of"},
    {"dispatch", (PyCFunction)(void (*)(void))Hot_dispatch, METH_FASTCALL,
     "dispatch(func, args, kwargs): Recorder.__torch_dispatch__"},
    {"op", (PyCFunction)(void (*)(void))Hot_op, METH_FASTCALL,
     "op(func, args, kwargs, graph_task): Recorder._op_rec"},
    {"encode_args", (PyCFunction)Hot_encode_args, METH_O,
     "encode_args(args): the positional arguments as a row records them"},
    {NULL, NULL, 0, NULL}};

static PyMemberDef Hot_members[] = {
    {"ops", T_LONGLONG, offsetof(Hot, ops), READONLY, "ops recorded by the C path"},
    {"__self__", T_OBJECT, offsetof(Hot, rec), READONLY,
     "the recorder (torch checks a mode's __torch_dispatch__ is bound to the mode)"},
    {NULL, 0, 0, 0, NULL}};

static PyObject *Hot_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    Hot *self = (Hot *)PyType_GenericNew(type, args, kw);
    if (self != NULL)
        self->vectorcall = Hot_vectorcall;
    return (PyObject *)self;
}

static PyTypeObject HotType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_ts_recorder_hot.Hot",
    .tp_basicsize = sizeof(Hot),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "Hot(rec.__dict__, rec, hex, Recorder._made, Recorder._value_of)",
    .tp_vectorcall_offset = offsetof(Hot, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_new = Hot_new,
    .tp_init = (initproc)Hot_init,
    .tp_dealloc = (destructor)Hot_dealloc,
    .tp_traverse = (traverseproc)Hot_traverse,
    .tp_clear = (inquiry)Hot_clear,
    .tp_methods = Hot_methods,
    .tp_members = Hot_members,
};

static PyObject *setup(PyObject *mod, PyObject *args) {
    PyObject *tensor, *parameter, *strided, *globals, *frombuffer, *node;
    if (!PyArg_ParseTuple(args, "OOOO!OO:setup", &tensor, &parameter, &strided, &PyDict_Type,
                          &globals, &frombuffer, &node))
        return NULL;
    Py_INCREF(node);
    Py_XSETREF(g_autograd_node, node);
    Py_INCREF(tensor);
    Py_INCREF(parameter);
    Py_INCREF(strided);
    Py_INCREF(globals);
    Py_INCREF(frombuffer);
    Py_XSETREF(g_tensor, tensor);
    Py_XSETREF(g_parameter, parameter);
    Py_XSETREF(g_strided, strided);
    Py_XSETREF(g_globals, globals);
    Py_XSETREF(g_frombuffer, frombuffer);
    if (!PyType_Check(tensor) || !PyType_Check(parameter)) {
        PyErr_SetString(PyExc_TypeError, "setup: Tensor and Parameter are types");
        return NULL;
    }
    find_descriptors();
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"setup", setup, METH_VARARGS,
     "setup(Tensor, Parameter, strided, recorder's globals, numpy.frombuffer, "
     "torch._C._current_autograd_node)"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_ts_recorder_hot",
                                    "The recorder's per-op path in C.", -1, module_methods};

#define INTERN(var, text) \
    if ((var = PyUnicode_InternFromString(text)) == NULL) \
        return NULL

PyMODINIT_FUNC PyInit__ts_recorder_hot(void) {
    INTERN(s_version, "_version");
    INTERN(s__param_ptr, "_param_ptr");
    INTERN(s_param_written, "_param_written");
    INTERN(s__by_ptr, "_by_ptr");
    INTERN(s_alias_written, "_alias_written");
    INTERN(s_storage_offset, "storage_offset");
    INTERN(s_element_size, "element_size");
    INTERN(s_dtype, "dtype");
    INTERN(s_is_cpu, "is_cpu");
    INTERN(s_layout, "layout");
    INTERN(s_is_neg, "is_neg");
    INTERN(s_nbytes, "nbytes");
    INTERN(s_shape, "shape");
    INTERN(s_is_contiguous, "is_contiguous");
    INTERN(s_data_ptr, "data_ptr");
    INTERN(s_reshape, "reshape");
    INTERN(s_cpu, "cpu");
    INTERN(s_T, "T");
    INTERN(s_torch_dispatch, "__torch_dispatch__");
    INTERN(s_next_uid, "next_uid");
    INTERN(s_n_hashed, "n_hashed");
    INTERN(s_hashes_only, "hashes_only");
    INTERN(s_stored_bytes, "stored_bytes");
    INTERN(s_max_bytes, "max_bytes");
    INTERN(s_hasher, "hasher");
    INTERN(s_spool, "spool");
    INTERN(s_new_value, "_new_value");
    INTERN(s_v_dtype, "v_dtype");
    INTERN(s_v_shape, "v_shape");
    INTERN(s_v_sha, "v_sha");
    INTERN(s_v_array, "v_array");
    INTERN(s_devices, "devices");
    INTERN(s_uid, "uid");
    INTERN(s_seen, "seen");
    INTERN(s_DERIVE_MIN, "_DERIVE_MIN");
    INTERN(s_NUMPY_DTYPES, "_NUMPY_DTYPES");
    INTERN(s_base, "_base");
    INTERN(s_is_quantized, "is_quantized");
    INTERN(s_is_conj, "is_conj");
    INTERN(s_stride, "stride");
    INTERN(s_derived, "derived");
    INTERN(s_derived_later, "derived_later");
    INTERN(s_derived_digest, "_derived_digest");
    INTERN(s_put, "put");
    INTERN(s_fresh_reads, "_fresh_reads");
    INTERN(s__np_watch, "_np_watch");
    INTERN(s_note_strided, "_note_strided");
    INTERN(s_is_zerotensor, "_is_zerotensor");
    INTERN(s_recording, "recording");
    INTERN(s_quiet, "quiet");
    INTERN(s_thread, "thread");
    INTERN(s_set_eval_frame, "_set_eval_frame");
    INTERN(s_graph_task_id, "_graph_task_id");
    INTERN(s_numel, "numel");
    INTERN(s_sha_like, "sha_like");
    INTERN(s_names_of, "_names_of");
    INTERN(s_op, "_op");
    INTERN(s_op_rec, "_op_rec");
    INTERN(s_record, "_record");
    INTERN(s_broken, "_broken");
    INTERN(s_source, "_source");
    INTERN(s_code_skip, "_code_skip");
    INTERN(s_src_at, "_src_at");
    INTERN(s_derive_views, "derive_views");
    INTERN(s_uninit, "_uninit");
    INTERN(s_uninit_vids, "_uninit_vids");
    INTERN(s_is_nested, "is_nested");
    INTERN(s_dim, "dim");
    INTERN(s_in_backward, "in_backward");
    INTERN(s_after_backward, "after_backward");
    INTERN(s_in_optimizer, "in_optimizer");
    INTERN(s_modules, "modules");
    INTERN(s_module_from, "module_from");
    INTERN(s_module_path, "module_path");
    INTERN(s_sequence_nr, "_sequence_nr");
    INTERN(s_backward_module, "_backward_module");
    INTERN(s_empty, "");
    INTERN(s_last_ones_like, "last_ones_like");
    INTERN(s_losses, "losses");
    INTERN(s_step, "step");
    INTERN(s_tables, "tables");
    INTERN(s_rows, "rows");
    if (PyType_Ready(&HotType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&HotType);
    if (PyModule_AddObject(m, "Hot", (PyObject *)&HotType) < 0) {
        Py_DECREF(&HotType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
