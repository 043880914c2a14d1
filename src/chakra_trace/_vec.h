/* Shared by the optional C extensions (schema/_wire.c, io/_kineto.c, io/_host.c);
 * include after <Python.h>. A growable array that lives inside a bytearray, so returning it
 * copies nothing and numpy views of it are writable; and the module stamp that lets
 * chakra_trace/_native.py refuse a kernel built for other sources. */
#ifndef CHAKRA_TRACE_VEC_H
#define CHAKRA_TRACE_VEC_H

#include <string.h>

/* setup.py passes both from chakra_trace/_native.py (build_macros): the ABI the Python side
 * expects and the hash of the sources this kernel is built from. */
#if !defined(CHAKRA_KERNEL_ABI) || !defined(CHAKRA_KERNEL_SOURCE)
#error "build the kernels through setup.py: it defines CHAKRA_KERNEL_ABI and CHAKRA_KERNEL_SOURCE"
#endif

/* The module, stamped with ABI and SOURCE, which _native.load compares with the package's. */
static inline PyObject *kernel_module(PyModuleDef *def) {
    PyObject *m = PyModule_Create(def);
    if (m && (PyModule_AddIntConstant(m, "ABI", CHAKRA_KERNEL_ABI) < 0 ||
              PyModule_AddStringConstant(m, "SOURCE", CHAKRA_KERNEL_SOURCE) < 0))
        Py_CLEAR(m);
    return m;
}

typedef struct {
    PyObject *obj;
    char *data;
    Py_ssize_t len, cap, item;
} vec;

static inline int vec_init(vec *v, Py_ssize_t item, Py_ssize_t cap) {
    v->item = item;
    v->len = 0;
    v->cap = cap > 16 ? cap : 16;
    v->obj = PyByteArray_FromStringAndSize(NULL, v->cap * item);
    v->data = v->obj ? PyByteArray_AS_STRING(v->obj) : NULL;
    return v->obj ? 0 : -1;
}

static inline int vec_grow(vec *v) {
    /* may be called from a loop that released the GIL: take it back for the resize */
    int held = PyGILState_Check();
    PyGILState_STATE g = PyGILState_UNLOCKED;
    if (!held) g = PyGILState_Ensure();
    Py_ssize_t cap = v->cap * 2;
    int rc = PyByteArray_Resize(v->obj, cap * v->item);
    if (rc == 0) {
        v->data = PyByteArray_AS_STRING(v->obj);
        v->cap = cap;
    }
    if (!held) PyGILState_Release(g);
    return rc < 0 ? -1 : 0;
}

static inline PyObject *vec_bytes(vec *v) {
    if (v->obj && PyByteArray_Resize(v->obj, v->len * v->item) < 0) Py_CLEAR(v->obj);
    PyObject *b = v->obj;
    v->obj = NULL;
    v->data = NULL;
    return b;
}

static inline void vec_free(vec *v) {
    Py_XDECREF(v->obj);
    v->obj = NULL;
    v->data = NULL;
}

static inline int vec_push(vec *v, const void *item) {
    if (v->len == v->cap && vec_grow(v)) return -1;
    memcpy(v->data + v->len * v->item, item, (size_t)v->item);
    v->len++;
    return 0;
}

static inline int vec_extend(vec *v, const void *src, Py_ssize_t count) {
    while (v->len + count > v->cap)
        if (vec_grow(v)) return -1;
    memcpy(v->data + v->len * v->item, src, (size_t)(count * v->item));
    v->len += count;
    return 0;
}

#endif
